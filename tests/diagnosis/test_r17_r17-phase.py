"""Reader round 17, phase (P1-P11 of sample_logs/whole/README.md, "Phase: rules"), on excerpts written by hand in the
formats the libraries and launchers print."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.phase import phase_of


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def test_a_kill_after_steps_that_follow_a_validation_report_is_training() -> None:
    """P4 + P9: a script's own validation report at an epoch's end, then the next epoch's step lines (an iteration
    counter and a loss), then a bare ``Terminated``: the pass had ended, the loop stepped again."""
    lines = [f"Epoch: 7 Iter: {k} Acc: 0.5{k} Loss: 2.1{k}" for k in range(5)] + [
        "Epoch: 7 Average loss: 2.05",
        "Epoch 7 Val Acc: 0.49",
        *(f"Epoch: 8 Iter: {k} Acc: 0.6{k} Loss: 1.9{k}" for k in range(3)),
        "Terminated",
    ]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "2") == "training"


def test_a_kill_right_after_a_validation_report_is_still_evaluation() -> None:
    """P4: nothing printed after the report but the kill: the pass is the last activity (unchanged)."""
    lines = [f"Epoch: 7 Iter: {k} Acc: 0.5{k} Loss: 2.1{k}" for k in range(5)] + [
        "Epoch: 7 Average loss: 2.05",
        "Epoch 7 Val Acc: 0.49",
        "Terminated",
    ]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "4") == "evaluation"


def test_a_model_train_call_inside_a_validate_driver_is_the_first_step(rules: Classifier) -> None:
    """P1 + P2: the job's driver ``validate(model, args)`` runs each epoch by calling the model's ``train(data)``
    (a compiled Theano function below it); the innermost function that names an activity is ``train``, and the
    failure comes after the epoch table's header, before any epoch row: ``first_step``, not ``evaluation``."""
    text = "\n".join([
        "Compiling functions...",
        "Compiling done.",
        "training the model...",
        "dset  epoch      mcost      mtime       cerr       f1",
        "Traceback (most recent call last):",
        *_frame("src/run.py", 300, "<module>", "main()"),
        *_frame("src/run.py", 290, "main", "validator.validate(net, args)"),
        *_frame("src/run.py", 150, "validate", "mcost, pred = getattr(net, funcname)(dat)"),
        *_frame("/src/model.py", 210, "train", "cost = sum(self.train_fn(*b) for b in batches)"),
        *_frame("/src/model.py", 210, "<genexpr>", "cost = sum(self.train_fn(*b) for b in batches)"),
        *_frame("/opt/lib/python2.7/site-packages/theano/compile/function_module.py", 606, "__call__",
                "storage_map=self.fn.storage_map)"),
        "MemoryError: Error allocating 531025920 bytes of device memory (out of memory).",
        "Apply node that caused the error: GpuDot22(GpuReshape{2}.0, GpuReshape{2}.0)",
    ])
    assert diagnose_text(text, rules).phase == "first_step"


_BANNER = ["*****************************************",
           "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system "
           "being overloaded, please further tune the variable for optimal performance in your application as needed. ",
           "*****************************************"]
_EARLIER_LAUNCH = [
    "WARNING:torch.distributed.run:", *_BANNER,
    "Epoch: [12]  [ 390/1000]  eta: 0:05:00  lr: 0.000100  loss: 0.4100 (0.4200)  time: 0.5000  data: 0.0010",
    "Epoch: [12]  [ 400/1000]  eta: 0:04:55  lr: 0.000100  loss: 0.4000 (0.4200)  time: 0.5000  data: 0.0010",
    "Traceback (most recent call last):",
    *_frame("train.py", 409, "<module>", "main(args)"),
    *_frame("train.py", 300, "main", "train_one_epoch(model, criterion, optimizer, data_loader, device, epoch)"),
    *_frame("train.py", 57, "train_one_epoch", "scaler.scale(loss).backward()"),
    "KeyboardInterrupt",
    "WARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers",
]


def test_ctrl_c_right_after_torchruns_logged_banner_is_startup() -> None:
    """P9 + P11: a screen log of several torchrun launches; the last one logs its banner (``torch/distributed/run.py``
    ``log.warning``, header "WARNING:torch.distributed.run:") and the workers' distributed init, then Ctrl-C: the
    traceback and steps above the banner are the earlier launch's, this one never reached its loop."""
    lines = [*_EARLIER_LAUNCH,
             "WARNING:torch.distributed.run:", *_BANNER,
             *(f"| distributed init (rank {r}): env://" for r in range(4)),
             "^CWARNING:torch.distributed.elastic.agent.server.api:Received 2 death signal, shutting down workers",
             "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 101 closing signal SIGINT"]
    at = len(lines) - 2
    assert phase_of(lines, at, lines[at - 5:at + 2], 0, None) == "startup"


def test_torch_distributed_launchs_printed_banner_after_the_steps_is_no_start() -> None:
    """The older ``torch.distributed.launch`` printed its banner with ``print`` (no logging header): a file receives
    it at the launcher's exit, after its workers' steps; the kill after it still takes the steps' phase (P9)."""
    lines = ["2023-04-06 14:11:03,467 - mmdet - INFO - Epoch [2][50/2439]\tlr: 1.000e-04, eta: 3 days, time: 18.1, loss: 0.52",
             "2023-04-06 14:26:12,864 - mmdet - INFO - Epoch [2][100/2439]\tlr: 1.000e-04, eta: 3 days, time: 18.1, loss: 0.51",
             *_BANNER,
             "Killing subprocess 15914",
             "Main process received SIGTERM, exiting"]
    at = len(lines) - 1
    assert phase_of(lines, at, lines[at - 5:at + 1], 0, "100") == "training"

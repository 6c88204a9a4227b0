"""Reader round 15, phase: evaluation passes and the other phase rules (P1-P11 of sample_logs/whole/README.md,
"Phase: rules"), on excerpts written by hand in the formats the libraries print."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text

_LIB = "/opt/env/lib/python3.10/site-packages"


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def _nnunet_epoch(n: int, minute: int) -> list[str]:
    """One epoch of nnU-Net v1's ``NetworkTrainer.run_training`` log (``print_to_log_file`` lines)."""
    return [f"2024-05-02 10:{minute:02d}:00.100000: ", f"epoch:  {n}",
            f"2024-05-02 10:{minute:02d}:40.200000: train loss : -0.7{n}12",
            f"2024-05-02 10:{minute:02d}:45.300000: validation loss: -0.7{n}40",
            f"2024-05-02 10:{minute:02d}:45.310000: Average global foreground Dice: [0.91, 0.88, 0.93]",
            f"2024-05-02 10:{minute:02d}:45.320000: (interpret this as an estimate for the Dice of the different classes. "
            "This is not exact.)",
            f"2024-05-02 10:{minute:02d}:46.000000: lr: 0.0099", f"2024-05-02 10:{minute:02d}:46.010000: This epoch took 46.0 s",
            ""]


def test_a_kill_right_after_nnunets_validation_report_is_evaluation(rules: Classifier) -> None:
    """P4 + P9: the epoch's "train loss" then its "validation loss" and Dice report, then an outside SIGTERM:
    the validation pass is the last activity printed (nothing after its report)."""
    text = "\n".join([*_nnunet_epoch(1, 1), *_nnunet_epoch(2, 2), *_nnunet_epoch(3, 3)[:5],
                      "2024-05-02 10:03:45.320500: Terminated"])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_kill_after_the_next_epochs_training_line_stays_training(rules: Classifier) -> None:
    """P2 + P9: the validation report was followed by the next epoch's training line: the kill is in training."""
    text = "\n".join([*_nnunet_epoch(1, 1), *_nnunet_epoch(2, 2), *_nnunet_epoch(3, 3)[:3],
                      "2024-05-02 10:03:41.000000: Terminated"])
    assert diagnose_text(text, rules).phase == "training"


def test_an_epoch_summary_with_a_training_loss_first_is_not_an_evaluation_report(rules: Classifier) -> None:
    """P2: "epoch 3 | loss 0.41 | val_acc 0.82" is the epoch's summary (a training loss before the validation
    metric): a kill after it is training, as before."""
    rows = [f"epoch {n} | loss 0.{50 - n} | val_acc 0.{70 + n}" for n in range(1, 4)]
    text = "\n".join(["Starting training", *rows, "slurmstepd: error: *** JOB 77 ON gpu-1 CANCELLED AT 2024-05-02T10:00:00 ***"])
    assert diagnose_text(text, rules).phase == "training"


def test_a_torchrun_kill_after_a_validation_summary_and_warnings_is_evaluation(rules: Classifier) -> None:
    """P4 + P9: a logging summary "Overall validation pixAcc: .., mIoU: ..", a torch warning, then torchrun's
    agent reacting to SIGTERM ("Received 15 death signal", not the job's activity, P1): evaluation."""
    text = "\n".join([
        "2024-05-02 10:00:00,001 seg INFO: Epoch: 3/120 || Iters: 90/100 || Lr: 0.009 || Loss: 0.4121",
        "2024-05-02 10:00:10,001 seg INFO: Start validation, Total sample: 500",
        "2024-05-02 10:01:00,001 seg INFO: Sample: 499, Validation pixAcc: 0.795, mIoU: 0.219",
        "2024-05-02 10:01:00,101 seg INFO: Overall validation pixAcc: 79.470, mIoU: 22.479",
        f"{_LIB}/torch/distributed/distributed_c10d.py:4807: UserWarning: No device id is provided via "
        "`init_process_group` or `barrier `. Using the current device set by the user.",
        "  warnings.warn(  # warn only once",
        "W0502 10:01:01.000000 4242 torch/distributed/elastic/agent/server/api.py:723] Received 15 death signal, "
        "shutting down workers",
        "W0502 10:01:01.001000 4242 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 4243 "
        "closing signal SIGTERM",
        "Terminated"])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_glog_abort_in_caffes_test_pass_is_evaluation(rules: Classifier) -> None:
    """P4: Caffe's ``Solver::TestAll`` logs "Iteration N, Testing net (#k)" before it runs the test net
    (``test_initialization`` at iteration 0 too); a glog ``Check failed`` after it is in that pass. glog writes to
    stderr, the script's own indented dump of the loaded weights to stdout without a final newline: the two glued."""
    dump = [f'  layer "conv{k}":, parameter[0] mean=0.00{k}, std=0.02{k}' for k in range(1, 5)]
    text = "\n".join([
        "I0501 10:00:00.000002 4242 caffe.cpp:239] Starting Optimization",
        "I0501 10:00:00.000003 4242 solver.cpp:293] Solving AgeNet",
        "I0501 10:00:00.000004 4242 solver.cpp:294] Learning Rate Policy: step",
        *dump[:-1],
        f"{dump[-1]}I0501 10:00:00.000005 4242 solver.cpp:337] Iteration 0, Testing net (#0)",
        "F0501 10:00:00.000006 4242 net.cpp:703] Check failed: target_blobs[j]->shape() == source_blob->shape() "
        "Cannot share param 0 weights from layer 'fc_final'; shape mismatch.",
        "*** Check failure stack trace: ***",
        "    @     0x7f1c2b3c4daa  (unknown)",
        "Aborted (core dumped)"])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_glog_abort_after_caffes_next_training_iteration_is_training(rules: Classifier) -> None:
    """P2: the test pass reported its outputs and training went on ("Iteration 100, loss = ..."): training."""
    text = "\n".join([
        "I0501 10:00:00.000005 4242 solver.cpp:337] Iteration 0, Testing net (#0)",
        "I0501 10:00:01.000000 4242 solver.cpp:404]     Test net output #0: accuracy = 0.12",
        "I0501 10:00:02.000000 4242 solver.cpp:218] Iteration 0 (0 iter/s, 1.2s/100 iters), loss = 4.61",
        "I0501 10:00:09.000000 4242 solver.cpp:218] Iteration 100 (14.2 iter/s, 7.0s/100 iters), loss = 3.21",
        "I0501 10:00:16.000000 4242 solver.cpp:218] Iteration 200 (14.2 iter/s, 7.0s/100 iters), loss = 2.95",
        "F0501 10:00:17.000000 4242 math_functions.cu:79] Check failed: error == cudaSuccess (2 vs. 0)  out of memory",
        "*** Check failure stack trace: ***",
        "Aborted (core dumped)"])
    assert diagnose_text(text, rules).phase == "training"


def test_a_ctrl_c_while_fetching_a_validation_batch_is_evaluation(rules: Classifier) -> None:
    """P1 + P4 + P9: the job's frame stops on ``for i, vdata in enumerate(validation_loader):`` (PyTorch's
    "Training with PyTorch" tutorial's validation loop), torch's DataLoader fetching below it: the validation
    pass, though a training epoch's batches were printed above."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/train.py", 461, "<module>", "for i, vdata in enumerate(validation_loader):"),
          *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 630, "__next__", "data = self._next_data()"),
          *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 674, "_next_data",
                  "data = self._dataset_fetcher.fetch(index)  # may raise StopIteration"),
          *_frame(f"{_LIB}/torch/utils/data/_utils/fetch.py", 51, "fetch",
                  "data = [self.dataset[idx] for idx in possibly_batched_index]"),
          *_frame("/home/u/proj/train.py", 147, "__getitem__", "clip = self.transform(video)"),
          "KeyboardInterrupt"]
    text = "\n".join(["EPOCH 1:", *(f"  batch {k} loss: 0.{60 - k}" for k in range(1, 6)), *tb])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_ctrl_c_while_fetching_a_training_batch_stays_training(rules: Classifier) -> None:
    """P2 + P9: the same fetch under ``for i, data in enumerate(training_loader):`` is the training loop's."""
    tb = ["Traceback (most recent call last):",
          *_frame("/home/u/proj/train.py", 420, "<module>", "for i, data in enumerate(training_loader):"),
          *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 630, "__next__", "data = self._next_data()"),
          *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 674, "_next_data",
                  "data = self._dataset_fetcher.fetch(index)  # may raise StopIteration"),
          *_frame("/home/u/proj/train.py", 147, "__getitem__", "clip = self.transform(video)"),
          "KeyboardInterrupt"]
    text = "\n".join(["EPOCH 1:", *(f"  batch {k} loss: 0.{60 - k}" for k in range(1, 6)), *tb])
    assert diagnose_text(text, rules).phase == "training"

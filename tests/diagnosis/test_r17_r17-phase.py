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

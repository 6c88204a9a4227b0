"""Healthy or failed for whole logs without a failure line (issue 23, item 1): positive evidence
of a normal end (the last counter at its end, a final results block, a job script's epilogue),
and a log that stops mid-run with no error and no completion, which is not healthy. Each excerpt
is small, realistic and written for the test."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _keras(last_epoch: int, epochs: int, last_batch: int) -> list[str]:
    out = ["Found 12000 images belonging to 10 classes.", "Model: \"sequential\"", "Total params: 1,204,362"]
    for e in range(1, last_epoch + 1):
        out.append(f"Epoch {e}/{epochs}")
        done = last_batch if e == last_epoch else 375
        out.append(f"{done}/375 [==============================] - 12s 32ms/step - loss: 0.{90 - e:02d} - accuracy: 0.{50 + e}")
    return out


def test_a_keras_run_whose_last_epoch_reached_its_end_is_healthy(clf: Classifier) -> None:
    w = diagnose_text("\n".join(_keras(30, 30, 375)), clf)
    assert w.diagnosis.category == "none" and w.diagnosis.origin == "none"
    assert "reached its end" in (w.diagnosis.reason or "")


def test_a_log_that_stops_mid_epoch_is_not_healthy(clf: Classifier) -> None:
    lines = _keras(12, 30, 200)
    w = diagnose_text("\n".join(lines), clf)
    d = w.diagnosis
    assert d.category == "unknown" and d.origin == "unknown"  # failed, cause not in the log
    assert "stops in the middle of the run" in (d.reason or "") and "time limit" in (d.reason or "")
    assert w.indicator_lines == [len(lines)] and w.phase == "training"


def test_a_counter_short_of_its_end_by_less_than_its_stride_is_not_a_stop(clf: Classifier) -> None:
    # printed every 5,000 iterations: 795,001 is the last print of a run that reaches 800,000
    lines = [f"INFO - run.py - 2023-07-15 13:4{k % 10}:18,779 - Iter {k * 5000 + 1}/800000 Loss: 0.94 Time: 0.007"
             for k in range(150, 160)]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"
    cut = diagnose_text("\n".join(lines[:5]), clf)  # 770,001 of 800,000: 30,000 short, stride 5,000
    assert cut.diagnosis.category == "unknown"


def _epochs_with_validation(n: int, total: int) -> list[str]:
    out = ["Loaded 5000 training samples"]
    for e in range(1, n + 1):
        out.append(f"Epoch {e}/{total}: 100%|██████████| 157/157 [00:41<00:00,  3.80it/s, loss=0.{60 - e}]")
        out.append(f"val_loss: 0.{70 - e} val_acc: 0.{40 + e}")
    return out


def test_a_per_epoch_validation_line_at_the_end_is_no_final_result(clf: Classifier) -> None:
    w = diagnose_text("\n".join(_epochs_with_validation(7, 50)), clf)
    assert w.diagnosis.category == "unknown"  # epoch 7 of 50, its validation line repeats each epoch


def test_a_final_test_block_after_the_last_step_is_a_normal_end(clf: Classifier) -> None:
    lines = _epochs_with_validation(7, 7)[:-1] + ["Restoring best model from epoch 6", "Test accuracy: 0.874",
                                                 "Test macro-F1: 0.861"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"
    # no totals to compare with: the new results block is what shows the end
    lines = [*[f"epoch {e} train_loss 0.{60 - e} val_loss 0.{70 - e}" for e in range(1, 9)],
             "Evaluating on the test set", "test_acc = 0.874"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none" and "results" in (w.diagnosis.reason or "")


@pytest.mark.parametrize("epilogue", [
    ["", "real\t83m12.402s", "user\t80m1.113s", "sys\t2m30.920s"],
    ["Thu Aug 21 05:12:44 UTC 2025"],
    ["Job finished at: 2025-08-21 05:12:44"],
])
def test_a_job_scripts_epilogue_after_the_program_is_a_normal_end(clf: Classifier, epilogue: list[str]) -> None:
    lines = ["Thu Aug 21 03:49:31 UTC 2025", "python train.py --epochs 3",
             *[f"step {i} loss {2.0 - i / 100:.2f}" for i in range(1, 40)], *epilogue]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none" and "epilogue" in (w.diagnosis.reason or "")


def test_section_rulers_do_not_split_a_log_into_attempts(clf: Classifier) -> None:
    ruler = "=" * 60
    lines = [ruler, "Reference image training", ruler, "World size: 4", "", ruler, "Initialization complete!", ruler,
             "", ruler, "Starting training...", "  Max iterations: 10000", ruler,
             "[rank3]: Traceback (most recent call last):",
             '[rank3]:   File "train.py", line 99, in main',
             "[rank3]:     loss = model(batch)",
             "[rank3]: RuntimeError: mat2 must be a matrix, got 1-D tensor"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.attempts == 1 and w.diagnosis.category not in ("none",)
    assert len(lines) in w.indicator_lines

"""P5 read from the log when no traceback names the entry script: a job that printed nothing of training
(no loss, learning rate, optimizer, epoch, backward pass or checkpoint saved) and spoke of inference or
scoring has no first_step or training; one word of training above the failure keeps the step phases."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.logread.phase import phase_of
from gpulens.diagnosis.logread.phase.jobkind import no_training_loop

_KILL = "slurmstepd: error: *** JOB 4882240 ON lynx12 CANCELLED AT 2024-07-26T16:41:19 DUE TO TIME LIMIT ***"


def _bars(label: str, n: int) -> list[str]:
    return [f"{label}:  {i * 100 // 500:2d}%|##        | {i}/500 [00:{i % 60:02d}<03:00,  2.7it/s]" for i in range(1, n)]


def test_an_interpretation_job_killed_between_models_is_evaluation() -> None:
    lines = ["Use GPU: cuda:0", "Running for model:DLinear", *_bars("Interpreting", 40),
             "   metric  area      comp      suff", "0    mae  0.050  10.01  12.52", "Running for model:MICN", _KILL]
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "evaluation"


def test_the_same_lines_after_a_loss_line_stay_a_training_phase() -> None:
    lines = ["Use GPU: cuda:0", "epoch 1 | loss 0.25", "Running for model:DLinear", *_bars("Interpreting", 40),
             "   metric  area      comp      suff", "Running for model:MICN", _KILL]
    assert phase_of(lines, len(lines) - 1, lines[-3:]) == "training"


@pytest.mark.parametrize(("above", "expected"), [
    (["Evaluating on the test split", "batch 3/50"], True),
    (["Loading pretrained model facebook/opt-1.3b", "Generating answers for 200 prompts"], True),
    (["Generating answers", "Saving checkpoint to out/checkpoint-200"], False),   # a checkpoint saved: training
    (["Generating answers", "lr: 0.0001"], False),
    (["Processing shard 3 of 9"], False),                                          # nothing says what the work is
    (["/env/site-packages/transformers/generation/utils.py:1: UserWarning: generation flags"], False),  # a library's
])
def test_no_training_loop(above: list[str], expected: bool) -> None:
    assert no_training_loop([*above, "Killed"], len(above), None) is expected


def test_a_traceback_through_a_training_function_is_training_work() -> None:
    tb = ["Traceback (most recent call last):", '  File "run.py", line 9, in train_one_batch', "RuntimeError: x"]
    assert not no_training_loop(["Evaluating on the test split", *tb], 1, tb)

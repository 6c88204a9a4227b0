"""Training steps without torch.optim: backward passes followed by a parameter change.

The jobs (tests/validator/jobs/) loop until killed, so exit code 86 (the hook's
stop after the requested 2 steps) with ``timed_out`` false shows the verdict
came right after the steps, not at the deadline.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpulens.config import ValidateConfig
from gpulens.validator import JobSpec, validate
from gpulens.validator.core import STOP_EXIT_CODE
from tests.conftest import require_module

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _torch() -> None:
    require_module("torch")


@pytest.mark.parametrize(
    ("job", "signal", "backward_passes"),
    [
        # update 2 is seen when backward pass 3 starts (2 completed)
        ("manual_update", "autograd", 2),  # p.data.add_(p.grad, alpha=-lr)
        ("manual_no_grad", "autograd", 2),  # with torch.no_grad(): p -= lr * p.grad; torch.autograd.backward
        ("manual_accum", "autograd", 6),  # 3 backward passes per hand-written update: 2 updates, not 6
        ("grad_accum", "optimizer", 8),  # 4 backward passes per AdamW step
    ],
)
def test_training_steps_are_counted_by_the_right_signal(
    make_job: Callable[..., JobSpec], config: ValidateConfig, job: str, signal: str, backward_passes: int
) -> None:
    result = validate(make_job(job), config, None, record=False)
    assert (result.verdict, result.steps_completed, result.step_signal) == ("pass", 2, signal), result
    assert result.exit_code == STOP_EXIT_CODE and not result.timed_out
    assert result.backward_passes == backward_passes
    assert result.reason is not None and ("backward passes followed by a parameter change" in result.reason) == (
        signal == "autograd"
    )
    started = backward_passes + (1 if signal == "autograd" else 0)  # the loss is read as backward starts
    assert len(result.losses) == started and all(v == v for v in result.losses)


def test_lbfgs_closure_backward_passes_belong_to_its_optimizer_step(
    make_job: Callable[..., JobSpec], config: ValidateConfig
) -> None:
    result = validate(make_job("lbfgs"), config, None, record=False)
    assert (result.verdict, result.steps_completed, result.step_signal) == ("pass", 2, "optimizer"), result
    assert result.exit_code == STOP_EXIT_CODE
    assert result.backward_passes is not None and result.backward_passes > 2  # several closure calls per step
    out = [line for line in result.warnings if "step" in line]
    assert not out


def test_program_finishing_before_any_step_passes(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    result = validate(make_job("no_step"), config, None, record=False)
    assert (result.verdict, result.exit_code, result.steps_completed) == ("pass", 0, 0), result
    assert result.step_signal is None and result.backward_passes == 0
    assert result.reason is not None and "before any training step" in result.reason


def test_torch_optim_job_reports_the_optimizer_signal(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    result = validate(make_job("healthy"), config, None, record=False)
    assert (result.verdict, result.step_signal, result.steps_completed) == ("pass", "optimizer", 2), result
    assert result.backward_passes == 2

"""Phase rules of reader round 11 (r11-phase), on excerpts written by hand in the shapes libraries print."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def rules() -> Classifier:
    return Classifier(model=None, cache_dir=None)


def _nanogpt_iter(k: int) -> str:
    """nanoGPT ``train.py``'s per-iteration line."""
    return f"iter {k}: loss 3.{k % 97:02d}1, time 412.50ms, mfu 31.20%"


def _nanogpt_eval(k: int) -> list[str]:
    """nanoGPT's evaluation every ``eval_interval`` iterations, then its checkpoint save."""
    return [f"step {k}: train loss 3.4102, val loss 3.5120", "saving checkpoint to out-shakespeare"]


def test_save_announced_then_steps_is_not_the_phase_of_a_later_kill(rules: Classifier) -> None:
    """A checkpoint saved, then an iteration, then a kill with no traceback: the save was done."""
    lines = [*[_nanogpt_iter(k) for k in range(2900, 3000, 10)], *_nanogpt_eval(3000),
             _nanogpt_iter(3000),
             "slurmstepd: error: *** JOB 5512 ON gpu07 CANCELLED AT 2026-03-30T06:18:42 ***"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "training"


def test_save_announced_just_before_a_kill_is_checkpoint_save(rules: Classifier) -> None:
    """The same save with nothing printed after it: the kill came while writing it."""
    lines = [*[_nanogpt_iter(k) for k in range(2900, 3000, 10)], *_nanogpt_eval(3000),
             "slurmstepd: error: *** JOB 5512 ON gpu07 CANCELLED AT 2026-03-30T06:18:42 ***"]
    w = diagnose_text("\n".join(lines), rules)
    assert w.phase == "checkpoint_save"

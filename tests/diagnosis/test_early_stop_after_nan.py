"""An early stop that fired because the loss had turned NaN is a divergence (README C10), read from keyed
loss readings or from metric rows that name no loss; a run that goes on to its last epoch with a NaN loss,
or early-stops with a finite loss, ended normally."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.cause.divergence import stopped_on_nan


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _keyless(finite: int, nan: int, end: str) -> list[str]:
    out = ["use gpu ids is0"]
    for e in range(finite + nan):
        out += ["*" * 40 + f" {e}", f"{e} {'nan' if e >= finite else f'{250.6 / (e + 1):.6f}'} " + "*" * 10]
        if e >= finite:
            out.append(f"trigger_times {e - finite + 1}")
    return [*out, f"Model saved as /data/ckpt/ep{finite + nan - 1}.pth", end]


def _keyed(losses: list[str], end: str) -> list[str]:
    out = ["2025-04-08 17:20:21,877 [INFO] Started epoch 1"]
    for e, loss in enumerate(losses, 1):
        out += [f"2025-04-08 18:{e:02d}:34,921 [INFO] [Epoch {e}] Train Loss: {loss}, Val Loss: {loss}, LR: 0.000100",
                f"2025-04-08 18:{e:02d}:34,923 [INFO]  Epoch time: 4333.05 sec"]
    return [*out, f"2025-04-09 05:23:59,909 [INFO] {end}"]


def test_keyless_rows_that_turned_nan_before_the_stop_are_found() -> None:
    lines = _keyless(40, 8, "Early stopping triggered!")
    first, stop = stopped_on_nan(lines, 0, len(lines) - 1) or (None, None)
    assert lines[first].startswith("40 nan") and stop == len(lines) - 1


def test_the_stop_is_model_diverged_with_the_first_nan_and_the_stop_as_its_lines(clf: Classifier) -> None:
    lines = _keyless(40, 8, "Early stopping triggered!")
    w = diagnose_text("\n".join(lines) + "\n", clf)
    assert (w.diagnosis.category, w.diagnosis.origin, w.phase) == ("model_diverged", "user", "training")
    assert w.indicator_lines == [lines.index("40 nan " + "*" * 10) + 1, len(lines)]


def test_keyed_losses_nan_from_the_first_epoch_then_an_early_stop(clf: Classifier) -> None:
    lines = _keyed(["nan"] * 10, "Early stopping triggered after 10 epochs")
    assert diagnose_text("\n".join(lines) + "\n", clf).diagnosis.category == "model_diverged"


@pytest.mark.parametrize("lines", [
    _keyless(40, 8, "Training finished after 48 epochs"),            # no early stop: the loop's own end
    _keyless(48, 0, "Early stopping triggered!"),                    # finite to the stop
    _keyless(0, 48, "Early stopping triggered!"),                    # keyless rows never finite: no column turned NaN
    _keyed(["0.91", "0.88", "nan", "0.87", "0.86"], "Early stopping triggered after 5 epochs"),
])
def test_no_nan_streak_before_an_early_stop_is_a_normal_end(clf: Classifier, lines: list[str]) -> None:
    assert stopped_on_nan(lines, 0, len(lines) - 1) is None
    assert diagnose_text("\n".join(lines) + "\n", clf).diagnosis.category == "none"

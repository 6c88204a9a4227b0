"""P2 (a)/(b): a tqdm bar at 0 whose postfix shows a loss (an outer bar over epochs, refreshed between its inner
bar's batch updates) has seen a step done; a bar at 0 with no loss in it has not. P9: a run that stopped mid-run
stopped where the bar on its last line shows, text printed onto it or not."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.phase import phase_of
from gpulens.diagnosis.logread.phase.steps import bar_done

_TB = ["Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
       '  File "box_coder_utils.py", line 40, in encode_torch', "KeyboardInterrupt"]


def _nested(postfix: str) -> list[str]:
    out = []
    for i in range(1, 4):
        out += [f"train:  0%|          | {i}/1285 [00:0{i}<10:07,  1.78it/s, total_it={i}]\x1b[A",
                f"epochs:   0%|          | 0/90 [00:0{i}<?, ?it/s{postfix}]"]
    return out


@pytest.mark.parametrize(("postfix", "expected"), [
    (", loss=52.5, lr=0.001", 1),
    (", train/loss=nan", 1),
    ("", 0),
    (", lr=0.001", 0),
])
def test_bar_done_reads_a_loss_in_the_postfix(postfix: str, expected: int) -> None:
    lines = _nested(postfix)
    assert bar_done(lines, 0, len(lines)) == expected


def test_a_failure_under_an_outer_epoch_bar_with_a_loss_is_training() -> None:
    lines = [*_nested(", loss=52.5, lr=0.001"), *_TB]
    assert phase_of(lines, len(lines) - 1, _TB) == "training"


def test_a_run_that_stopped_with_a_message_printed_onto_its_bar_stopped_in_training() -> None:
    """The last activity of a run that stopped mid-run is the bar its last line shows, text printed onto it or not."""
    bar = "".join(f"\r 16%|#6        | {k}/1000000 [27:00<2:01:33, 114.79it/s]" for k in range(162_000, 162_806, 12))
    text = "\n".join(["Using GPU id 0", "", bar + "Error in sys.excepthook:", "\x1b[1;34mwandb\x1b[0m: ", ""])
    w = diagnose_text(text)
    assert not w.diagnosis.healthy and w.phase == "training"

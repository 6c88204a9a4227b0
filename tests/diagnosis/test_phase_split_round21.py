"""Round 21: phase.py split into modules of one job each; Keras' progress lines defined once (steplines)."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.logread.steplines import keras_bar, keras_progress, plain

#: Keras 2 ``Progbar.update`` lines (verbose=1): count padded to the total's width, the bar, " - " then ETA or time.
_BARS = ("  12/200 [>.............................] - ETA: 1:02 - loss: 0.6931",
         "200/200 [==============================] - 12s 60ms/step - loss: 0.1200 - val_loss: 0.2100")
#: Keras' other progress lines: the epoch header, verbose=2, an unknown total, Keras 3's bar.
_OTHERS = ("Epoch 3/20", "100/100 - 3s - loss: 0.1200", "     12/Unknown - 3s 20ms/step - loss: 0.61",
           "   3/120 \u2501\u2501\u2501\u2501\u2501\u2501\u2501\u2501\u2501\u2501 4s 36ms/step - loss: 0.71")


@pytest.mark.parametrize("line", _BARS)
def test_a_keras_bar_is_keras_progress_and_counts_its_batches(line: str) -> None:
    m = keras_bar(line)
    assert m is not None and int(m.group(1)) <= int(m.group(2))
    assert keras_progress(line)
    assert keras_progress(f"\x1b[32m{line}\x1b[0m")  # colour codes left out for the progress test


@pytest.mark.parametrize("line", _OTHERS)
def test_keras_other_progress_lines_are_progress_but_no_bar_with_a_count(line: str) -> None:
    assert keras_progress(line)
    assert keras_bar(line) is None


@pytest.mark.parametrize("line", ["Epoch 3/20: loss 0.5", "see 1/2 [here]", "step 12/200 loss 0.4", "  12/200 [=====]"])
def test_lines_that_are_not_keras_progress(line: str) -> None:
    assert not keras_progress(line) and keras_bar(line) is None


def test_plain_strips_colour_codes_only() -> None:
    assert plain("\x1b[0mStart evaluation\x1b[1;31m!") == "Start evaluation!"
    assert plain("no codes") == "no codes"

"""One reading of "a message printed onto a progress bar's line" (bars.text_on_bar): tqdm ends
its updates with "\\r" and no newline, so the next writer to the file starts on the bar's line.
Each excerpt is small, realistic and written for the test."""

from __future__ import annotations

from gpulens.diagnosis.logread.bars import bar_update, text_on_bar


def _bar(upto: int, total: int = 2219, desc: str = "Epoch 3") -> str:
    """tqdm's updates of one bar in a file: one line, "\\r" between updates, no newline."""
    return "".join(f"\r{desc}:  {k * 100 // total}%|####      | {k}/{total} [00:{k % 60:02d}<12:49,  1.64it/s, loss=0.41]"
                   for k in range(upto - 5, upto + 1))


def test_a_scheduler_cancel_after_a_bar_s_last_update_is_read_with_the_bar() -> None:
    got = text_on_bar(_bar(954) + "slurmstepd: error: *** JOB 5521 ON gpu-7 CANCELLED AT 2024-03-01T10:00:00 ***")
    assert got is not None
    assert (got.done, got.total) == (954, 2219)
    assert got.text.startswith("slurmstepd: error: *** JOB 5521")
    assert got.head.startswith("Epoch 3:") and got.head.rstrip().endswith("|")


def test_a_traceback_and_a_shell_kill_after_a_bar_are_messages() -> None:
    tb = text_on_bar("Epoch 1/10:   0%|          | 0/375 [00:00<?, ?it/s]Traceback (most recent call last):")
    assert tb is not None and tb.done == 0 and tb.text == "Traceback (most recent call last):"
    kill = text_on_bar(_bar(120) + "./run.sh: line 12: 4242 Killed                  python train.py --bs 64")
    assert kill is not None and kill.done == 120 and kill.text.startswith("./run.sh: line 12: 4242 Killed")


def test_a_bar_with_nothing_after_it_or_only_its_cursor_moves_holds_no_message() -> None:
    assert text_on_bar(_bar(954)) is None
    assert text_on_bar(_bar(954) + "\x1b[A") is None  # a nested bar's refresh (position=1)
    assert text_on_bar(_bar(954) + "\n") is None
    assert text_on_bar("step 400 loss 1.92 lr 3e-4") is None  # no bar at all


def test_only_the_last_refresh_counts() -> None:
    # an earlier refresh followed by a later update: the message, if any, is after the last one
    line = "\rEval:  50%|#####     | 5/10 [00:05<00:05]Killed\rEval:  60%|######    | 6/10 [00:06<00:04]"
    assert text_on_bar(line) is None
    got = text_on_bar(line + "\x1b[A[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered")
    assert got is not None and got.done == 6 and got.text.startswith("[rank1]: RuntimeError")


def test_bar_update_is_the_one_reading_of_a_bar_s_count() -> None:
    # tqdm with a known total prints its count after the blocks' closing "|"; without a width
    # (or with ncols=0) it prints the count alone; a ratio in prose has no bracket of times
    shown = "Epoch 3:  40%|████      | 40/100 [00:09<00:13, 4.4it/s, loss=0.31]"
    m = bar_update(shown, after_blocks=True)
    assert m is not None and (int(m.group(1)), int(m.group(2))) == (40, 100)
    bare = "954/2219 [09:43<12:49,  1.64it/s]"
    assert bar_update(bare) is not None and bar_update(bare, after_blocks=True) is None
    assert bar_update("accuracy 40/100 on the held-out set") is None
    assert bar_update("step 3/10 [unclosed bracket") is None

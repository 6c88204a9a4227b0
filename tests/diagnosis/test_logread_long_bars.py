"""A progress bar's line of refreshes (tqdm, Keras' progbar): read in bounded time, the same answers."""

from __future__ import annotations

import time
from pathlib import Path

from gpulens.diagnosis.logread.source import BAR_KEPT, LONG_BAR, compact_bar, read_whole
from gpulens.diagnosis.logread.whole import diagnose_path


def _keras_bar(updates: int, end: str) -> str:
    # Keras' progbar: each refresh starts with "\r" and erases the last with backspaces
    parts = [f"\r{20 * i:>6}/300000 [{'=' * (i * 30 // updates):.<30}] - ETA: 1:00:00 - loss: 0.{i % 97:02d}"
             + "\b" * 40 for i in range(1, updates + 1)]
    return "".join(parts) + end


def test_a_long_bar_line_keeps_its_first_and_last_refreshes() -> None:
    line = "Epoch 1/5" + _keras_bar(5000, "Killed")
    assert len(line) > LONG_BAR
    got = compact_bar(line)
    assert len(got) <= 2 * BAR_KEPT + 200
    assert got.startswith("Epoch 1/5\r    20/300000")  # the text before the bar and its first refresh
    assert got.endswith("100000/300000 [==============================] - ETA: 1:00:00 - loss: 0.53" + "\b" * 40
                        + "Killed")  # the last refresh and what was written after it
    assert got.count("\r") < line.count("\r")


def test_lines_without_many_refreshes_are_kept_as_they_are() -> None:
    plain = "x" * (LONG_BAR + 10)  # one long line, no refresh (a dumped tensor, a JSON record)
    assert compact_bar(plain) is plain
    one = "a" * (LONG_BAR + 10) + "\rdone"  # one refresh only: nothing between the first and last
    assert compact_bar(one) == one
    crlf = "y" * (LONG_BAR + 10) + "\r"
    assert compact_bar(crlf) == crlf


def _tqdm_bar(total: int, upto: int | None = None) -> str:
    return "".join(f"\rtrain: {100 * i // total:3d}%|{'#' * (10 * i // total):<10}| {i}/{total} [00:{i % 60:02d}<01:00,"
                   f" 9.{i % 10}it/s]" for i in range((total if upto is None else upto) + 1))


def test_a_log_with_a_long_bar_keeps_its_line_numbers_and_its_answer(tmp_path: Path) -> None:
    config = [f"  {k}: {k * 3}" for k in range(40)]
    lines = ["Namespace(lr=0.001, epochs=5)", *config, "Epoch 1/5", _tqdm_bar(20000), "Epoch 2/5",
             _tqdm_bar(20000, 15000) + "Killed"]
    path = tmp_path / "nohup.out"
    path.write_text("\n".join(lines) + "\n")
    src = read_whole(path)
    assert len(src.lines) == len(lines)
    changed = [i for i, (got, was) in enumerate(zip(src.lines, lines, strict=True)) if got != was]
    assert changed == [i for i, ln in enumerate(lines) if len(ln) > LONG_BAR] == [42, 44]
    assert all(len(ln) < LONG_BAR for ln in src.lines)
    assert src.lines[-1].startswith("\rtrain:   0%|") and src.lines[-1].endswith("Killed")
    c0 = time.process_time()
    d = diagnose_path(path)
    assert time.process_time() - c0 < 5  # (was about a second per 700 KB of bar on the line that failed)
    # as read in full: the shell's "Killed" written onto the bar, at the bar's last refresh
    assert (d.diagnosis.category, d.indicator_lines, d.phase, d.step) == ("cpu_oom", [len(lines)], "training", "15000")

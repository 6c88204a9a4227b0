"""Mends from stop 39's review of reader rounds 15-16: clock skew in P2 (c), a teardown report
dropped before its data loader's echo, line numbers when a log's first line outgrows the head."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulens.diagnosis.logread.indicators.aftermath import without_teardown as _without_teardown
from gpulens.diagnosis.logread.phase.clock import _elapsed
from gpulens.diagnosis.logread.source import read_whole

_DAY = 86400


@pytest.mark.parametrize(("begun", "ended", "want"), [
    (10 * _DAY, 10 * _DAY + 4000, 4000),            # an ordinary run
    (10 * _DAY + 4, 10 * _DAY, 0),                  # a few seconds of skew between two clocks: no time
    (365 * _DAY + 23 * 3600 + 1800, 600, 40 * 60),  # Dec 31 23:30 -> Jan 1 00:10 (leap-year day count)
])
def test_elapsed_seconds_between_two_yearless_timestamps(begun: int, ended: int, want: int) -> None:
    assert _elapsed(begun, ended) == want


def test_a_loaders_sigterm_echo_goes_with_the_dropped_sigterm_report() -> None:
    # paddle.distributed.launch's teardown: the worker's own traceback, then its SIGTERM report
    # (platform/init.cc SignalHandle), then its DataLoader's report of the same signal
    lines = ["Traceback (most recent call last):",
             '  File "train.py", line 9, in <module>',
             "    main()",
             "ValueError: cannot reshape array of size 3 into shape (2,2)",
             "",
             "FatalError: `Termination signal` is detected by the operating system.",
             "  [TimeInfo: *** Aborted at 1700000000 (unix time) try \"date -d @1700000000\" if you are using GNU date ***]",
             "DataLoader process (pid 4242) exited is killed by signal: Terminated."]
    assert _without_teardown(lines, [3, 5, 7], lambda i: lines[i]) == [3]


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16-le"])
def test_line_numbers_hold_when_the_first_line_is_longer_than_the_kept_head(tmp_path: Path, encoding: str) -> None:
    lines = ["\r".join(f"{k}%|" for k in range(20_000))]  # a progress bar redrawn with \r: 150 KB, no newline
    lines += [f"step {i} loss 0.{i % 10}" for i in range(3000)] + ["RuntimeError: boom"]
    bom = b"\xff\xfe" if encoding == "utf-16-le" else b""
    path = tmp_path / "train.log"
    path.write_bytes(bom + ("\n".join(lines) + "\n").encode(encoding))
    src = read_whole(path, keep_bytes=8 * 1024)
    assert src.reason is None and src.head == []
    for i in (0, len(src.lines) // 2, len(src.lines) - 1):
        assert src.lines[i] == lines[src.number(i) - 1]

"""A driver that died: the last traceback printed without a process prefix (``ray.get`` raising a task's
error, a launcher's own exception) when every line after it is another process's buffered output."""

from __future__ import annotations

from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.lineprefix import process_key
from gpulens.diagnosis.logread.lines import is_failure
from gpulens.diagnosis.logread.tracebacks import TRACEBACK

__all__ = ["dead_driver", "driver_report"]


#: Lines at the end of a log searched for its last non-blank one.
_LAST_LINES = 50


def driver_report(lines: Sequence[str], lo: int) -> tuple[int, int] | None:
    """``(head, end)`` of the last traceback report in ``lines[lo:]`` printed without a process
    prefix (the driver's: ``ray.get`` raising a task's error, a launcher's own exception) when
    every line after it carries another process's prefix: the driver printed nothing more, it
    died there; what the workers print afterwards is their buffered output, not the job going
    on. None otherwise (no such report, it ends the log, or the driver printed again after it).
    Its heads are found by a literal scan for :data:`tracebacks.TRACEBACK` (no walk up frames)."""
    last = next((ln for ln in reversed(lines[-_LAST_LINES:]) if ln.strip()), "")
    if process_key(last) is None:
        return None  # the log ends with a line of no other process (the cheap test first)
    tbs = [i for i in find_keys(lines, (TRACEBACK,), lo) if process_key(lines[i]) is None]
    if not tbs:
        return None
    head = tbs[-1]
    end = head + 1
    while end < len(lines) and (not lines[end].strip() or process_key(lines[end]) is None):
        end += 1
    if end >= len(lines) or any(ln.strip() and process_key(ln) is None for ln in lines[end:]):
        return None
    return head, end


def dead_driver(lines: Sequence[str], lo: int) -> list[int]:
    """The failure lines of :func:`driver_report`'s report (none without one)."""
    got = driver_report(lines, lo)
    if got is None:
        return []
    return [k for k in range(*got) if is_failure(logs.normalize_line(lines[k]), lines[k])]

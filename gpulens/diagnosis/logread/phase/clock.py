"""How long the training loop ran, from the log's own timestamps (P2 (c)).

ISO and glog timestamps read around the loop's first mark and the failure; over an hour in the loop is
training.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.phase.evidence import STEP_WARNINGS
from gpulens.diagnosis.logread.phase.loops import LOOP_START
from gpulens.diagnosis.logread.steplines import HEAD
from gpulens.diagnosis.logread.tracebacks import TRACEBACK_HEAD

__all__ = ["an_hour_in_loop"]


#: Timestamps the loop's start and a failure are read from (P2 (c)): ISO dates (Slurm's "CANCELLED AT
#: 2025-01-06T15:37:46", Python logging's "2025-01-06 15:37:46,120") and glog's ``[IWEF]mmdd hh:mm:ss`` (c10d's and
#: ProcessGroupNCCL's C++ log, whose month c10's ``Logging.cpp`` does not pad: "[W106 12:08:59.140016912 socket.cpp:752]",
#: "[rank1]:[E107 08:49:59.12 ...]").
_ISO_TIME = re.compile(r"\b\d{4}-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)\b")
_GLOG_TIME = re.compile(r"(?:^|[\[\s])[IWEF](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)[.\s]")
#: Lines read back from the loop's first mark (16 ranks' set-up lines between), and on from the failure, for a timestamp.
_TIME_BACK = 120
_TIME_REACH = 60
#: P2 (c): more than an hour in the loop is training.
_HOUR = 3600


def _seconds(line: str) -> int | None:
    """Seconds since the start of a leap year of the first timestamp on ``line`` (:data:`_ISO_TIME`,
    :data:`_GLOG_TIME`; glog prints no year)."""
    head = line[:HEAD]
    if ":" not in head:
        return None
    m = _ISO_TIME.search(head) or _GLOG_TIME.search(head)
    if m is None:
        return None
    month, day, h, mi, sec = (int(g) for g in m.groups())
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    days = sum((31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[:month - 1]) + day - 1
    return ((days * 24 + h) * 60 + mi) * 60 + sec


def an_hour_in_loop(lines: Sequence[str], floor: int, top: int, end: int | None = None, framed: bool = False) -> bool:
    """P2 (c): whether the log's own timestamps show the process ran for more than an hour after its loop began
    (its first mark: :data:`LOOP_START`, a step-only warning of :data:`STEP_WARNINGS`) when it failed at ``top``
    (its traceback ending at ``end``): the last timestamp at or before that mark, the first at or after the failure
    (a scheduler's verdict, a launcher's reaction). ``framed``: the failing traceback runs in a training step, so
    the loop had begun though no mark shows when; then the attempt's first timestamp stands for its start, as P2 (c)
    reads "the scheduler's start and end times" (a stderr file with a step's traceback and no loop output), where no
    earlier traceback shows another program or launch in the same lines."""
    marks = find_keys(lines, (*LOOP_START, *STEP_WARNINGS), floor, top)
    if not marks and (not framed or find_keys(lines, (TRACEBACK_HEAD,), floor, top)):
        return False  # (a traceback above: an earlier program's or launch's failure, so the first timestamp is not this one's start)
    first = marks[0] if marks else floor
    begun = next((t for k in range(first, max(floor, first - _TIME_BACK) - 1, -1)
                  if (t := _seconds(lines[k])) is not None), None) if marks else \
        next((t for k in range(floor, min(top, floor + _TIME_BACK)) if (t := _seconds(lines[k])) is not None), None)
    after = max(top, end or top)
    ended = next((t for k in range(top, min(len(lines), after + _TIME_REACH)) if (t := _seconds(lines[k])) is not None), None)
    if begun is None or ended is None:
        return False
    return _elapsed(begun, ended) > _HOUR


#: A failure this many seconds "before" its loop's start is a run across New Year (Dec -> Jan), not clock skew.
_NEW_YEAR_GAP = 300 * 86400


def _elapsed(begun: int, ended: int) -> int:
    """Seconds from ``begun`` to ``ended`` (:func:`_seconds`, no year): across New Year the leap-year day count
    of :func:`_seconds` is wrapped (366 days); a small negative difference (skew between a UTC and a local
    clock, lines out of order) is no time at all."""
    d = ended - begun
    if d < -_NEW_YEAR_GAP:
        d += 366 * 86400
    return max(d, 0)

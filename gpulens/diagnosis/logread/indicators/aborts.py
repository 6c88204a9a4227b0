"""A process's abort and the lines that say why (README rule R6: the line that says it was killed
and the one that says why): the shell's "Aborted (core dumped)", glibc's heap-corruption report
and glog's FATAL line above it, the C++ runtime's "terminate called ...", faulthandler's "Fatal
Python error: Aborted", Paddle's boxed error report, and an abort the NCCL watchdog causes on a
collective's timeout.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from gpulens.diagnosis.guarded import Guarded
from gpulens.diagnosis.logread.indicators.origins import COLLECTIVE_TIMEOUT
from gpulens.diagnosis.logread.lines import (
    ABORTED,
    ABORTED_ZH,
    CORE_DUMPED,
    GLIBC_ERROR_IN,
    GLIBC_REASON,
    GLOG_FATAL,
)
from gpulens.diagnosis.logread.tracebacks import unprefixed

__all__ = ["abort_reason", "abort_report", "aborted_on_timeout", "fatal_abort", "report_frame"]


#: glibc's report of the heap corruption it found before it calls abort(): "*** Error in
#: `./simplex': corrupted size vs. prev_size: 0x00000000006ba7b0 ***" (glibc < 2.26), or the
#: message alone ("free(): invalid pointer", "malloc(): corrupted top size"; malloc/malloc.c
#: malloc_printerr), and its stack protector's "*** stack smashing detected ***: terminated".
_GLIBC_ABORT = Guarded(rf"^{GLIBC_ERROR_IN}|^(?:{GLIBC_REASON})",
                       ("*** Error in `", "detected ***", "double free", "(): ", "corrupted "))
#: A process's abort as its shell reports it ("line 26: 158958 Aborted (core dumped) ./simplex").
_ABORTED_SHELL = re.compile(rf"{ABORTED}(?: {CORE_DUMPED})?|{ABORTED_ZH}")
#: Lines above an abort searched for glibc's reason.
_ABORT_REACH = 400


def abort_reason(lines: Sequence[str], found: Sequence[int]) -> list[int]:
    """When the last line of ``found`` says the process aborted (the shell's "Aborted (core
    dumped)"), glibc's report of why or glog's FATAL line, printed above it by the same process (no
    other abort between them): README rule R6, the line that says it was killed and the one that
    says why."""
    last = found[-1]
    if not _ABORTED_SHELL.search(lines[last]):
        return []
    for k in range(last - 1, max(-1, last - _ABORT_REACH), -1):
        body = unprefixed(lines[k]).strip()
        if _ABORTED_SHELL.search(body):
            return []
        if (body[:1] in "*dfmrc" and _GLIBC_ABORT.search(body) is not None) \
                or (body[:1] == "F" and GLOG_FATAL.match(body) is not None):
            return [k] if k not in found else []
    return []


def fatal_abort(lines: Sequence[str], found: Sequence[int]) -> list[int]:
    """The shell's "Aborted (core dumped)" after the last found line when that line is glog's or
    absl's FATAL line (the abort it calls, within its stack dump's reach): README rule R6, the line
    that says the process was killed and the one that says why."""
    last = found[-1]
    if GLOG_FATAL.match(unprefixed(lines[last]).strip()) is None:
        return []
    for k in range(last + 1, min(len(lines), last + _ABORT_REACH)):
        if _ABORTED_SHELL.search(unprefixed(lines[k])):
            return [k]
        if GLOG_FATAL.match(unprefixed(lines[k]).strip()) is not None:
            return []  # another fatal message: the abort is not this one's alone
    return []


#: The C++ runtime's report of an uncaught exception ("terminate called after throwing an instance of
#: 'c10::DistBackendError'"): the cause line only when nothing before it names the error (rule R6).
_ABORTED = "terminate called"
#: Python's faulthandler on the SIGABRT that follows it (Python/pylifecycle.c, faulthandler's
#: "Fatal Python error: Aborted"; the shell's "Aborted (core dumped)" after it).
_FAULT_ABORT = "Fatal Python error: Aborted"


def abort_report(norm: str) -> bool:
    """Whether a line reports the process's abort (C++'s "terminate called ...", faulthandler's
    "Fatal Python error: Aborted", the shell's "Aborted (core dumped)"), or frames Paddle's report
    of it (``_ERROR_REPORT``: "Error Message Summary:"): it names no error itself."""
    return _ABORTED in norm or _FAULT_ABORT in norm or _ABORTED_SHELL.search(norm) is not None \
        or report_frame(norm.strip()) is not None


def aborted_on_timeout(own: Sequence[int], region: Sequence[int], norm: Callable[[int], str],
                        mine: Callable[[int], bool]) -> bool:
    """Whether the failing process's own lines only report its abort and the same process's NCCL
    watchdog said before them that a collective timed out: the watchdog takes the process down on a
    timeout (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: "To avoid data inconsistency, we are
    taking the entire process down.", then it throws from its thread: std::terminate, SIGABRT).
    README rule R6: the first rank's "Watchdog caught collective operation timeout" is the cause
    line, not the abort it causes."""
    if not all(abort_report(norm(i)) for i in own):
        return False
    return any(COLLECTIVE_TIMEOUT.search(norm(i)) is not None and mine(i) for i in region if i < own[0])


#: The frame of the error report a dying Paddle process prints (paddle/fluid/platform/enforce.h
#: ``GetCurrentTraceBackString`` / ``EnforceNotMet``, paddle/fluid/platform/init.cc ``SignalHandle``:
#: "C++ Traceback (most recent call last):", "No stack trace in paddle, may be caused by external
#: reasons.", "Error Message Summary:", each boxed by dash rules): the end of a process, printed
#: alike by every run, never its start-up printed again.
_ERROR_REPORT = re.compile(r"-{10,}$|Error Message Summary:$|No stack trace in paddle\b")


def report_frame(text: str) -> re.Match[str] | None:
    """The frame of a dying Paddle process's error report on a stripped line (:data:`_ERROR_REPORT`), if any."""
    return _ERROR_REPORT.match(text)

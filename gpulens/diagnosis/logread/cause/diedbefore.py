"""Whether a process had died of its own error before a kill line: the last uncaught traceback above
the kill, with no progress after it, that a stop signal, a lost peer, a thread's end or a spawned
helper's start did not make; and the rule match that names that error."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import contains_any
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.launches import spawned_child
from gpulens.diagnosis.logread.lines import ERROR_KEYS, is_failure, is_progress
from gpulens.diagnosis.logread.tracebacks import (
    EXCEPTION,
    TRACEBACK,
    exception_line,
    starts_head,
    unprefixed,
)
from gpulens.diagnosis.rules import RuleMatch, match_rules

__all__ = ["ABORT_HEAD", "OWN_EXIT_CODE", "ROOT_LOOKBACK", "died_before", "died_before_line", "last_abort", "last_death", "own_cause",
           "own_cause_in"]


#: A Python exception line that a stop signal or a dying peer causes (the kill's own aftermath,
#: not an error of the process before it).
_SIGNAL_MADE = ("KeyboardInterrupt", "SignalException", "SIGTERM", "SIGINT", "DistBackendError", "DistNetworkError",
                "NCCL", "Connection", "Broken pipe", "BrokenPipe", "EOFError", "Terminated", "timed out", "Timeout")


_signal_made = contains_any(_SIGNAL_MADE)
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\b")
#: Lines above an exception line searched for its traceback's header.
_TRACEBACK_SPAN = 300


def died_before(lines: Sequence[str], failures: Sequence[int], kill: int) -> int | None:
    """The index of the exception line of a traceback that ended before the scheduler's kill line
    at ``kill``, with no progress line after it (the process had died of its own error; a
    time limit hours later, while the job script or the other ranks hung on, is not the cause),
    when that exception is not one a stop signal or a lost peer makes; else None. Its traceback is
    the nearest head line (:func:`tracebacks.has_head`) within _TRACEBACK_SPAN lines above the
    exception, found by a literal scan, not :func:`tracebacks.python_head`'s walk up the frames
    (kept as it answered: an indented or interleaved line between does not stop it)."""
    for i in reversed([k for k in failures if k < kill]):
        norm = ranks.strip_prefix(logs.normalize_line(lines[i])).strip()
        if not _EXCEPTION_LINE.match(norm) or logs.is_weak(norm) or _signal_made(norm):
            continue
        heads = find_keys(lines, (TRACEBACK,), max(0, i - _TRACEBACK_SPAN), i)
        if not heads or not starts_head(ranks.strip_prefix(logs.normalize_line(lines[heads[-1]]))):
            continue  # no traceback, or one the program printed itself ("Error: Traceback ...": it caught it)
        if _in_thread(lines, heads[-1]):
            continue  # a thread's exception: that thread ended, the process went on
        if spawned_child(lines, heads[-1], i):
            continue  # a spawned helper died starting up: its parent, the job, need not have
        if any(is_progress(ln) for ln in lines[i + 1:kill]):
            return None
        return i
    return None


#: What Python's threading.excepthook prints above the traceback of an exception that ended a
#: thread other than the main one ("Exception in thread Thread-3:", CPython
#: Modules/_threadmodule.c thread_excepthook_file): the thread ends, the process goes on.
_THREAD_HEAD = "Exception in thread "


def _in_thread(lines: Sequence[str], head: int) -> bool:
    """Whether the traceback whose header is ``lines[head]`` is a non-main thread's: headed by
    "Exception in thread NAME:" a few lines above, with nothing between but blank lines and the
    pieces two threads dying at once interleave there (another traceback's header and first
    frame, a lone ":"). Looser than :func:`tracebacks.thread_died` (the header right above the
    head, nothing between), kept as each answered."""
    for k in range(head - 1, max(-1, head - _THREAD_SPAN), -1):
        text = ranks.strip_prefix(logs.normalize_line(lines[k])).strip()
        if text.startswith(_THREAD_HEAD):
            return text.endswith(":")
        if text not in ("", ":") and not starts_head(text) and not text.startswith('File "'):
            return False
    return False


#: Lines above a traceback header searched for a thread's header.
_THREAD_SPAN = 5


#: Lines above the error context searched for the root-cause rank's own traceback (joblines'
#: root_rank_lines), and above a kill line for the failure lines of a process's own error.
ROOT_LOOKBACK = 400
#: An exit status a process's own failure gives, as launchers report it (1-127; 128+N and negative
#: codes are signal N's): srun's "Exited with exit code 1", torchrun's "failed (exitcode: 1)",
#: DeepSpeed's "exits with return code = 1" (a regular expression, for their patterns).
OWN_EXIT_CODE = r"(?:[1-9]|[1-9]\d|1[01]\d|12[0-7])"


#: Categories of a match in a traceback before a bare kill that are the kill itself or another
#: stop, not an error of the process's own.
_NOT_OWN_ERROR = frozenset({"cpu_oom", "preempted", "unknown"})


def died_before_line(lines: Sequence[str], floor: int, kill: int) -> int | None:
    """The last line of a process's own uncaught traceback that ended before line ``kill`` with no
    progress after it (:func:`died_before` over the failure lines above it), or None."""
    errs = [i for i in find_keys(lines, ERROR_KEYS, max(floor, kill - ROOT_LOOKBACK), kill)
            if is_failure(logs.normalize_line(lines[i]), lines[i])]
    return died_before(lines, errs, kill)


# round 25 kills
#: The exceptions only a signal raises (an interrupt, torchrun's SignalException, a handler's own
#: exception named after the signal), and the shell's words for a process a signal ended: a lost
#: peer's or the network's error (a connection reset, a timeout, NCCL's) is not one of them.
_SIGNAL_ONLY = ("KeyboardInterrupt", "SignalException", "SIGTERM", "SIGINT", "SIGHUP", "Terminated", "Killed")
_signal_only = contains_any(_SIGNAL_ONLY)
#: The exception line that closes a traceback: CPython's ``traceback.format_exception_only``
#: ("module.Name: message", or the bare name of one without a message, which
#: :data:`tracebacks.EXCEPTION` reads), whatever the class is called ("Exception: ...",
#: "requests.exceptions.ReadTimeout: ...", "StopIteration").
_CLOSING_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*:(?:\s|$)")


def last_death(lines: Sequence[str], floor: int, kill: int) -> int | None:
    """The exception line of the last uncaught traceback above line ``kill`` (within
    :data:`ROOT_LOOKBACK`) when no signal raised it, it is not a thread's or a spawned helper's,
    and no progress follows it: :func:`died_before`'s reading for what the failure lines do not
    hold (a bare ``Exception: ...``, a library's exception without "Error" in its name) and for a
    lost peer's or the network's error; else None."""
    heads = find_keys(lines, (TRACEBACK,), max(floor, kill - ROOT_LOOKBACK), kill)
    if not heads or not starts_head(ranks.strip_prefix(logs.normalize_line(lines[heads[-1]])).strip()):
        return None
    head = heads[-1]
    end = _closing_line(lines, head, kill)
    if end is None or _in_thread(lines, head) or spawned_child(lines, head, end):
        return None
    norm = ranks.strip_prefix(logs.normalize_line(lines[end])).strip()
    if _signal_only(norm) or any(is_progress(ln) for ln in lines[end + 1:kill]):
        return None
    return end


def _closing_line(lines: Sequence[str], head: int, stop: int) -> int | None:
    """The index of the exception line that closes the traceback headed at ``head``
    (:func:`tracebacks.exception_line`, before ``stop``), when it is one."""
    k = exception_line(lines, head, min(stop, head + _TRACEBACK_SPAN))
    if k is None:
        return None
    text = unprefixed(logs.normalize_line(lines[k])).rstrip()
    return k if _CLOSING_LINE.match(text) or EXCEPTION.fullmatch(text) else None


#: The C++ runtime's report of an exception no one caught, before it aborts the process
#: (libstdc++ ``__gnu_cxx::__verbose_terminate_handler``: "terminate called after throwing an
#: instance of 'c10::Error'", then "  what():  <message>"): the process died there, of that error.
ABORT_HEAD = "terminate called after throwing an instance of"


def last_abort(lines: Sequence[str], floor: int, kill: int) -> int | None:
    """The index of the last C++ abort report (:data:`ABORT_HEAD`) above line ``kill`` (within
    :data:`ROOT_LOOKBACK`) with no progress after it, or None."""
    found = find_keys(lines, (ABORT_HEAD,), max(floor, kill - ROOT_LOOKBACK), kill)
    if not found or any(is_progress(ln) for ln in lines[found[-1] + 1:kill]):
        return None
    return found[-1]


def own_cause(lines: Sequence[str], at: int) -> RuleMatch | None:
    """The strongest rule match of the traceback ending at ``at`` (found by :func:`died_before`) that
    names the process's own error (not a secondary one, not a signal's or a lost peer's), or None."""
    head = find_keys(lines, (TRACEBACK,), max(0, at - _TRACEBACK_SPAN), at)[-1]  # died_before found one
    return own_cause_in(lines, head, at + 1)


def own_cause_in(lines: Sequence[str], lo: int, hi: int) -> RuleMatch | None:
    """The strongest rule match in ``lines[lo:hi]`` that names a process's own error (not a
    secondary one, not a signal's or a lost peer's), or None."""
    text = "\n".join(ranks.strip_prefix(logs.normalize_line(ln)) for ln in lines[lo:hi])
    found = [m for m in match_rules(text) if not m.rule.secondary and m.rule.category not in _NOT_OWN_ERROR]
    return max(found, key=lambda m: (m.rule.priority, m.position)) if found else None

"""A run ended by a signal or a fatal check, as the process's own handlers report it: abseil's and
glog's fatal-signal handlers, glog's and abseil's fatal messages above "*** Check failure stack trace:
***", Keras's stop on a NaN loss, a script's own stop-signal handler, and a kill printed onto a
progress bar. The stop-signal messages of launchers and loggers live in ``signals``; these are kept
apart because they answer otherwise (only as a handler's report, in an attempt's last lines).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.bars import text_on_bar
from gpulens.diagnosis.logread.end.after_error import ranks_free
from gpulens.diagnosis.logread.end.lastwords import LAST_WORDS_TAIL
from gpulens.diagnosis.logread.lines import GLOG_FATAL

__all__ = ["BAR_TAIL", "CHECK_TAIL", "HANDLER_STOP", "SIGNAL_TAIL", "check_failures", "killed_on_bar", "signal_reports",
           "written_after_bar"]

#: The report of a fatal-signal handler that abseil (Ray, TensorFlow, JAX/XLA, sglang) and glog
#: (Paddle, older TensorFlow) install: printed only when the process got a signal that ends it,
#: then the handler re-raises it. abseil: "*** SIGTERM received at time=1756174802 on cpu 91 ***"
#: (Ray's logging.cc repeats it with its own prefix); glog: "*** SIGSEGV (@0x0) received by PID
#: 4242 (TID 0x7f...) from PID 0; stack trace: ***".
_SIGNAL_REPORT = re.compile(
    r"^\*\*\* SIG[A-Z]+ received at time=\d+|^\*\*\* SIG[A-Z]+ \(@0x[0-9a-f]+\) received by PID \d+"
    r"|logging\.cc:\d+:\s*\*\*\* SIG[A-Z]+ received at time=\d+")
#: Keras's TerminateOnNaN callback stops ``fit`` when the loss is NaN/inf ("Batch 31: Invalid
#: loss, terminating training", often right after the progress bar's last update, on its line);
#: the run ends there, diverged, whatever the script prints after.
_DIVERGED_STOP = re.compile(r"Batch \d+: Invalid loss, terminating training")
#: Literals of those lines (the regexes above run only on lines holding one: ``find_keys``); not
#: ``signals.TERM_REPORT_KEYS``, which hold SIGTERM's reports alone (these take every signal's).
_END_KEYS = ("received at time=", "received by PID", "Invalid loss")
#: Lines at the end of an attempt searched for such a report (its stack dump follows it).
SIGNAL_TAIL = 60
#: A program's own handler for a stop signal recording that the signal came, before it exits: osprey's
#: worker (osprey/execute_worker.py, the SIGTERM handler it installs calls ``print_footer``, which writes
#: "== osprey worker received signal SIGTERM!" and "== exiting immediately." to stderr, then ``sys.exit(1)``)
#: and the handlers scripts install with ``signal.signal`` that print "Received signal SIGTERM" or "Caught
#: signal 15" and exit. CPython's default SIGTERM action ends a process without a word, so the record is the
#: only trace of the stop; it ends the run only as (nearly) the attempt's last words (``LAST_WORDS_TAIL``).
#: Kept apart from ``signals.is_stop_record`` ("SIGTERM received", a logger's words), which takes other
#: wordings and not "Caught signal 15": the handler's stop answered with this one.
HANDLER_STOP = re.compile(r"\b(?:[Rr]eceived|[Cc]aught|[Gg]ot) signal (?:SIGTERM|SIGINT|15)\b")
#: What glog (src/logging.cc ``LogMessage::Fail``) and abseil (absl/log/internal/log_message.cc,
#: ``LogMessageFatal``; TensorFlow, XLA, Ray, Caffe, wav2letter) print when a ``LOG(FATAL)`` or a
#: failed ``CHECK`` ends the process: the fatal message ("F0617 14:30:47.707742 1097242
#: device_event_mgr.cc:226] Unexpected Event status: 1"; abseil before logging is initialised
#: prints "F0000 00:00:1750170647.707742 ..."), then "*** Check failure stack trace: ***", the
#: "@ 0x7f... symbol" frames, and abort(). The message need name no error word.
_CHECK_FAILURE = "*** Check failure stack trace: ***"
#: Lines above the stack-trace header searched for its fatal message (a long message wraps).
_FATAL_ABOVE = 5
#: Lines at the end of an attempt searched for that header (the frames follow it, often 30 or more).
CHECK_TAIL = 200


def signal_reports(lines: Sequence[str], floor: int) -> list[int]:
    """Indexes of fatal-signal handler reports (see ``_SIGNAL_REPORT``), of Keras's stop on a
    NaN loss (``_DIVERGED_STOP``) among the last ``SIGNAL_TAIL`` lines of ``lines[floor:]``,
    and of glog's or abseil's fatal messages (``_CHECK_FAILURE``) among its last ``CHECK_TAIL``:
    the run was ended there."""
    lo = max(floor, len(lines) - SIGNAL_TAIL)
    got = [i for i in find_keys(lines, _END_KEYS, lo)
           if _SIGNAL_REPORT.search(s := logs.normalize_line(lines[i]).strip()) or _DIVERGED_STOP.search(s[-400:])]
    return sorted({*got, *check_failures(lines, floor), *_handler_stops(lines, floor), *killed_on_bar(lines, floor)})


def _handler_stops(lines: Sequence[str], floor: int) -> list[int]:
    """Indexes of a signal handler's records that the process got a stop signal (``HANDLER_STOP``)
    among the last ``LAST_WORDS_TAIL`` non-blank lines of ``lines[floor:]``."""
    tail = [i for i in range(max(floor, len(lines) - SIGNAL_TAIL), len(lines)) if lines[i].strip()][-LAST_WORDS_TAIL:]
    return [i for i in tail if HANDLER_STOP.search(logs.normalize_line(lines[i]))]


def check_failures(lines: Sequence[str], floor: int) -> list[int]:
    """Indexes of the fatal messages that glog's or abseil's "*** Check failure stack trace: ***"
    follows among the last ``CHECK_TAIL`` lines of ``lines[floor:]`` (the header itself when no
    "F..." line is just above it)."""
    out = []
    for i in find_keys(lines, (_CHECK_FAILURE,), max(floor, len(lines) - CHECK_TAIL)):
        if not ranks_free(lines[i]).startswith(_CHECK_FAILURE):
            continue
        above = range(i - 1, max(floor, i - _FATAL_ABOVE) - 1, -1)
        out.append(next((k for k in above if GLOG_FATAL.match(ranks_free(lines[k]))), i))
    return out


#: Lines at the end of an attempt searched for a kill printed onto a progress bar.
BAR_TAIL = 10


def written_after_bar(lines: Sequence[str], floor: int, keys: Sequence[str],
                      test: Callable[[str], bool]) -> list[int]:
    """Indexes among the last ``BAR_TAIL`` lines of ``lines[floor:]`` whose message printed onto a
    progress bar (:func:`bars.text_on_bar`: bash's "line 12: 4242 Killed  python train.py",
    slurmstepd's cancel line after tqdm's last update) holds one of ``keys`` and passes ``test``
    (a kill line that the line-start tests miss there)."""
    out = []
    for i in find_keys(lines, tuple(keys), max(floor, len(lines) - BAR_TAIL)):
        glued = text_on_bar(lines[i])
        if glued is not None and test(glued.text):
            out.append(i)
    return out


#: bash's report of a foreground job that SIGKILL ended (jobs.c ``notify_of_job_status``, the signal's name
#: from strsignal: "Killed"), written where the cursor was: right after a progress bar's last refresh,
#: which ends with no newline (Keras' Progbar: "45380/300000 [===>....] - ETA: 13:45:03 - loss: 0.2134Killed";
#: tqdm: "16%|#6  | 1620/10000 [27:00<2:01:33, 11.79it/s]Killed"). README O7: a bare ``Killed``.
_KILLED_ON_BAR = re.compile(r"(?:\d+/\d+ \[[=>.]+\]|\d+/\d+ \[[^\]\r\n]{0,200}\])[^\r\n]*?\S\s*Killed$")


def killed_on_bar(lines: Sequence[str], floor: int) -> list[int]:
    """Indexes among the last ``BAR_TAIL`` lines of ``lines[floor:]`` whose last refresh is a progress bar with
    bash's bare "Killed" written onto its end (:data:`_KILLED_ON_BAR`)."""
    out = []
    for i in find_keys(lines, ("Killed",), max(floor, len(lines) - BAR_TAIL)):
        shown = lines[i].rstrip()
        if shown.endswith("Killed") and _KILLED_ON_BAR.search(shown[shown.rfind("\r") + 1:]):
            out.append(i)
    return out

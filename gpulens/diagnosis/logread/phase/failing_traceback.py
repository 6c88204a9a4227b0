"""The failing traceback: where it is and what its frames are.

The ``Traceback`` head above a failure line (behind a launcher's prefix, without its head when glued to
a bar), the tracebacks chained below it (``raise ... from``), the traceback a report prints after its
line (``logger.exception``, Hydra), the one a signal's handler prints after its report or the process'
own just above it (P9), and the function names of a traceback's frames (Python's and Rich's).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.lines import is_progress
from gpulens.diagnosis.logread.phase.text import failure_text
from gpulens.diagnosis.logread.signals import names_a_signal
from gpulens.diagnosis.logread.tracebacks import TRACEBACK_HEAD

__all__ = ["ANY_CHAIN_NOTES", "FRAME_LINE", "chained_outer", "failing_traceback", "frame_funcs",
           "func_names", "handler_frames"]


def failing_traceback(lines: Sequence[str], failure: int, floor: int) -> tuple[int, int | None, list[str] | None]:
    """(failure line, its traceback's head, that traceback's lines, None when there is none) of the
    traceback that says where the process was: the failure's own, the one a report on the failure line
    prints after it, or (P9) the process' own traceback just above a signal's report that names no Python frame."""
    tb_start, frames = _traceback_of(lines, failure, floor)
    if (tb_start is None or _ended_above(lines, tb_start, failure)) \
            and (reported := _reported_exception(lines, failure)) is not None:
        failure = reported  # a report's line, then the traceback of what it reports: read that (not an earlier
        # traceback above the report, which had ended before it: an earlier attempt's, a caught error's)
        tb_start, frames = _traceback_of(lines, failure, floor)
    if not func_names(frames) and (raised := _raised_before_signal(lines, failure, floor, tb_start)) is not None:
        failure = raised  # P9: the process' own traceback just above the signal's report: where it was
        tb_start, frames = _traceback_of(lines, failure, floor)
    return failure, tb_start, (frames if tb_start is not None else None)


def _ended_above(lines: Sequence[str], head: int, failure: int) -> bool:
    """Whether the traceback whose head is at ``head`` ended (its exception line printed) before the failure line (read
    without the launcher's prefix its head carries: torchrun's "[rank2]: ", pdsh's "gpu07: ")."""
    at = lines[head].find(TRACEBACK_HEAD)
    body = _unprefixed(lines[head + 1:failure], lines[head][:at])
    return any(x.strip() and not x.startswith((" ", "\t")) for x in body)


#: Python's lines between the tracebacks of a chained exception (``traceback.TracebackException.format``).
#: Only the explicit ``raise ... from`` one: its later traceback re-raises the same failure from the caller, while
#: "During handling of the above exception" may be any other error of an ``except`` block (a retry, a report).
_CHAIN_NOTES = ("The above exception was the direct cause of the following exception",)
#: Python's notes between chained tracebacks (``traceback.py``: ``_cause_message`` for ``raise ... from``, ``_context_message``
#: for an exception raised while handling another): in both the later traceback holds the outer frames, read for whether
#: the failure was inside a step (an exception while handling another names the code that ran the handler, not
#: necessarily an activity of its own, so only there).
ANY_CHAIN_NOTES = (*_CHAIN_NOTES, "During handling of the above exception, another exception occurred")
#: Lines after a traceback's exception line looked at for a chained traceback below it.
_CHAIN_GAP = 4


def chained_outer(lines: Sequence[str], failure: int, notes: tuple[str, ...] = _CHAIN_NOTES) -> list[str]:
    """The frames of the tracebacks chained below the one that ends at ``failure`` (Python prints the
    cause first, then "The above exception was the direct cause of the following exception:" and the
    traceback of the exception raised from it): the first traceback holds only the frames
    below the ``try``, the later ones the outer frames that called it (P1: the frames of the failing
    traceback name the activity: a metric's error re-raised in Lightning's ``_run_sanity_check`` ->
    ``on_validation_epoch_end``). Only the last chained traceback's: the ones between run in library
    handlers (urllib3's retries, ``_validate_conn``) that name no activity of the job."""
    out: list[str] = []
    k = failure + 1
    while True:
        note = next((j for j in range(k, min(len(lines), k + _CHAIN_GAP)) if lines[j].strip()), None)
        if note is None or not lines[note].strip().startswith(notes):
            return out
        head = next((j for j in range(note + 1, min(len(lines), note + _CHAIN_GAP)) if TRACEBACK_HEAD in lines[j]), None)
        if head is None:
            return out
        end = _exception_line(lines, head, min(len(lines), head + _TB_LOOKBACK))
        if end is None:
            return out
        out = [logs.normalize_line(x) for x in lines[head:end]]  # the last one holds the outermost frames
        k = end + 1


def _exception_line(lines: Sequence[str], head: int, end: int) -> int | None:
    """The index of the exception line of the traceback whose head is at ``head``: its first non-blank line
    after the head that is not indented (a frame or a code line), before ``end``."""
    return next((j for j in range(head + 1, end) if lines[j].strip() and not lines[j].startswith((" ", "\t"))), None)


#: Lines after such a failure searched for the head of the Python traceback printed for it.
_HANDLER_GAP = 8


def handler_frames(lines: Sequence[str], failure: int) -> list[str]:
    """The traceback (normalized, up to its exception line) that the process prints just after a signal's report at
    ``failure`` (P9: "the frames of the traceback a Python handler prints"): PaddlePaddle prints its C++ signal
    report first, then the main process' Python traceback (its DataLoader's ``__handler__`` raising "DataLoader
    process ... is killed by signal: Terminated" in whatever the job was doing, ``paddle.save`` writing a checkpoint).
    Empty when the failure names no signal or no traceback follows it."""
    if not names_a_signal(failure_text(lines, failure)):
        return []
    head = next((k for k in range(failure + 1, min(len(lines), failure + _HANDLER_GAP)) if TRACEBACK_HEAD in lines[k]), None)
    if head is None:
        return []
    end = _exception_line(lines, head, min(len(lines), head + _TB_LOOKBACK))
    return [] if end is None else [logs.normalize_line(x) for x in lines[head:end + 1]]


#: Lines above a signal's report searched for the exception line of a Python traceback (a C++ stack and a few log
#: lines between), and for that traceback's head.
_SIGNAL_GAP = 16
_SIGNAL_TB_BACK = 80


def _raised_before_signal(lines: Sequence[str], failure: int, floor: int, tb_start: int | None) -> int | None:
    """The exception line of the Python traceback printed just before a signal's report at ``failure`` (with no
    progress line between), when that report holds no Python frame: PaddlePaddle's launcher stops a worker whose
    main process raised with SIGTERM, and the worker's C++ handler then prints "C++ Traceback (most recent call last):
    ... No stack trace in paddle" and "FatalError: `Termination signal` is detected by the operating system." under the
    Python traceback (``paddle/fluid/platform/init.cc`` ``SignalHandle``). P9: a kill takes the phase of what the
    process was doing, and its own traceback says that."""
    if not names_a_signal(failure_text(lines, failure)):
        return None
    top = tb_start if tb_start is not None else failure
    for k in range(top - 1, max(floor, top - _SIGNAL_TB_BACK) - 1, -1):
        if k >= top - _SIGNAL_GAP and is_progress(logs.normalize_line(lines[k])):
            return None  # the job went on after it
        if TRACEBACK_HEAD in lines[k] and lines[k].lstrip().startswith(TRACEBACK_HEAD):
            end = _exception_line(lines, k, top)
            return end if end is not None and end >= top - _SIGNAL_GAP else None
    return None


#: Lines above a failure searched for the head of its traceback.
_TB_LOOKBACK = 400


def _reported_exception(lines: Sequence[str], failure: int) -> int | None:
    """The index of the exception line of a traceback printed just after the failure line, which
    reports it: logging's ``logger.exception(msg)`` (or ``exc_info=True``) prints its message and then the
    traceback, Hydra's ``run_and_report`` "Error executing job with overrides: [...]", Sacred's "Failed
    after 0:01:32!"; not a launcher's verdict ("failed (exitcode: 1)", ``ChildFailedError``) followed by
    the launcher's own traceback. Other ranks' copies of the failure line between are passed over (c10d logs
    "[rank8]:[E...] ProcessGroupGloo.cpp:143] Rank 8 successfully reached monitoredBarrier, but received errors ..."
    for each rank, then each raises it: "[rank8]: Traceback ...")."""
    if failure >= len(lines) or "exitcode" in lines[failure] or "ChildFailedError" in lines[failure]:
        return None
    own = _rank_copy_key(lines[failure])
    failure = _past_java_trace(lines, failure)
    head = next((k for k in range(failure + 1, min(len(lines), failure + 3 + _RANK_COPIES))
                 if lines[k].strip() and _rank_copy_key(lines[k]) != own
                 and not _same_logger_error(lines[failure], lines[k])), None)
    if head is None or TRACEBACK_HEAD not in lines[head]:
        return None
    for k in range(head + 1, min(len(lines), head + _TB_LOOKBACK)):
        text = logs.normalize_line(lines[k])
        if text.strip() and not text.startswith((" ", "\t")):
            return k
    return None


#: A frame of a JVM's stack trace (``Throwable.printStackTrace``: "\tat java.lang.ClassLoader.defineClass1(Native
#: Method)", "\tat Foo.main(Foo.java:12)"), its "Caused by: ..." and "\t... 12 more" lines.
_JAVA_FRAME = re.compile(r"^\s+(?:at [\w$.<>/]+\(.*\)|\.\.\. \d+ more)\s*$|^Caused by: ")
#: The most lines of a JVM's stack trace passed over.
_JAVA_TRACE = 400


def _past_java_trace(lines: Sequence[str], failure: int) -> int:
    """The last line of a JVM's stack trace printed right after the failure line (its exception line, then its ``at``
    frames: a Java tool a Python program runs as a subprocess, as pycocoevalcap's METEOR and SPICE scorers, CoreNLP, an
    evaluator's jar, writing to the same stderr; the launcher's "Error: A JNI error has occurred, please check your
    installation and try again" before it), else ``failure``: the Python traceback after it is the caller's, whose
    frames say what the program was doing."""
    # the exception line is the failure line itself, or the line after the launcher's
    first = next((k + 1 for k in (failure, failure + 1) if k + 1 < len(lines) and _JAVA_FRAME.match(lines[k + 1])), None)
    if first is None:
        return failure
    end = first
    while end + 1 < min(len(lines), first + _JAVA_TRACE) and _JAVA_FRAME.match(lines[end + 1]):
        end += 1
    return end


#: Other ranks' copies of a failure line passed over between it and the traceback that raises it.
_RANK_COPIES = 8


#: A logging record's level at error or worse, after its prefix (``logging``'s ``%(levelname)s`` in the handler's format:
#: "2026-05-01 12:16:54,097 - ERROR - ...", "[2026-05-01 12:16:54] ERROR ...").
_ERROR_LEVEL = re.compile(r"[\s\[|:-](?:ERROR|CRITICAL)[\s\]|:-]")


def _same_logger_error(first: str, line: str) -> bool:
    """Whether ``line`` is another error record of the logger that printed ``first``: the same prefix before the level
    (digits aside). Nested handlers each log their error before the outer one's ``logger.exception`` (or
    ``traceback.print_exc()``) prints the traceback: ``except OSError as e: logger.error(f"loading X failed: {e}"); raise``
    inside ``except Exception as e: logger.error(f"training failed: {e}"); logger.exception(...)``."""
    a, b = _ERROR_LEVEL.search(first[:_PREFIX]), _ERROR_LEVEL.search(line[:_PREFIX])
    return a is not None and b is not None and _rank_copy_key(first[:a.start()]) == _rank_copy_key(line[:b.start()])


#: Characters at a line's start where a logging record's prefix and level are looked for.
_PREFIX = 80


def _rank_copy_key(line: str) -> str:
    """A line without its digits (rank numbers, timestamps, pids), to tell another rank's copy of the same message."""
    text = line.strip()
    if text.isascii():  # (the ASCII digits are its only ones)
        return text.translate(_NO_ASCII_DIGITS)
    return "".join(c for c in text if not c.isdigit())


_NO_ASCII_DIGITS = str.maketrans("", "", "0123456789")


def _traceback_of(lines: Sequence[str], failure: int, floor: int) -> tuple[int | None, list[str]]:
    """(index of the ``Traceback`` head, its lines up to the failure line, normalized) of the
    traceback that holds line ``failure``; (None, []) when the failure has none above it (a kill,
    a scheduler line) before a progress line."""
    failure = min(failure, len(lines) - 1)
    for k in range(failure, max(floor, failure - _TB_LOOKBACK) - 1, -1):
        ln = lines[k]
        if TRACEBACK_HEAD in ln and not _quoted_traceback(ln):
            return k, _unprefixed(lines[k:failure + 1], ln[:ln.find(TRACEBACK_HEAD)])
        if k < failure and is_progress(ln) and not _prefixed_code(ln):
            break
    # frames without their head (printed glued to a progress bar, or cut): the indented block above
    top = failure
    while top > floor and lines[top - 1].startswith((" ", "\t")) and "%|" not in lines[top - 1]:
        top -= 1
    head = next((k for k in range(top, failure) if 'File "' in lines[k]), None)
    if head is not None:
        return head, [logs.normalize_line(x) for x in lines[head:failure + 1]]
    return None, []


def _quoted_traceback(line: str) -> bool:
    """Whether the ``Traceback`` head in ``line`` is quoted inside an exception's message, its newlines escaped: Paddle's
    DataLoader re-raises a worker's error with the worker's traceback in the message (``paddle/io/dataloader/worker.py``,
    ``_WorkerException.reraise``: ``msg = "DataLoader worker({}) caught {} with message:\\n{}"``, ``raise
    self.exc_type(msg)``), and a ``KeyError`` prints its message's repr: "KeyError: 'DataLoader worker(1) caught KeyError
    with message:\\nTraceback (most recent call last):\\n  File ...'". The traceback that raised it is above."""
    at = line.find(TRACEBACK_HEAD)
    return at >= 2 and line[at - 2:at] == "\\n"


def _prefixed_code(line: str) -> bool:
    """Whether ``line`` is a traceback's indented line behind a launcher's prefix (``gpu07:     loss =
    model(batch)``: code that names a loss, not a progress line); the prefixes are
    :func:`ranks.launcher_text`'s."""
    text = ranks.launcher_text(line)
    return len(text) < len(line) and text[:1] in (" ", "\t")


def _unprefixed(block: Sequence[str], prefix: str) -> list[str]:
    """A traceback's lines, normalized, without the prefix a launcher printed before its
    ``Traceback`` head and repeats on each of its lines: pdsh's ``gpu07: `` (DeepSpeed's
    multi-node runner), Ray's ``(RayTrainWorker pid=123, ip=10.0.0.7)`` (these are not removed
    by :func:`logs.normalize_line`); a prefix that is not repeated (a logger's timestamp, a
    progress bar the head was glued to) is left alone."""
    tag = prefix.rstrip()
    if len(tag) < 2:
        return [logs.normalize_line(x) for x in block]
    return [logs.normalize_line(x[len(prefix):] if x.startswith(prefix) else x[len(tag):] if x.startswith(tag) else x)
            for x in block]


#: A Python traceback's frame line (``File "...", line N, in f``; group 1: the function).
FRAME_LINE = re.compile(r'^\s*File "[^"]*", line \d+(?:, in (\S+))?')


#: A frame of a Rich traceback (``rich.traceback.install()``, Typer's and many CLIs' pretty errors):
#: ``│ /srv/app/train.py:101 in train_one_epoch          │`` inside a box whose top border holds
#: "Traceback (most recent call last)".
_RICH_FRAME = re.compile(r"^\s*[│|] (\S+?\.py):\d+ in (\S+)")


def func_names(frames: Sequence[str]) -> list[str]:
    """The functions of a traceback's frames, outermost first (Python's ``File "…", line N, in f``
    or Rich's ``│ path.py:N in f``)."""
    return [f for _, f in frame_funcs(frames)]


def frame_funcs(frames: Sequence[str]) -> list[tuple[str, str]]:
    """(frame line, function) of a traceback's frames, outermost first (:func:`func_names`)."""
    out = []
    for ln in frames:
        if 'File "' in ln:
            m = FRAME_LINE.match(ln)
            if m and m.group(1):
                out.append((ln, m.group(1)))
        elif ".py:" in ln and (r := _RICH_FRAME.match(ln)) is not None:
            out.append((ln, r.group(2)))
    return out


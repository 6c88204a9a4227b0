"""Python tracebacks as a log shows them: the one test of a traceback's head line, the chain
markers between chained tracebacks, an exception's final line, and the walker that finds the
head above an exception line (through its frames, a launcher's prefix on every line allowed).

CPython prints an uncaught exception as "Traceback (most recent call last):", its indented
frames, then the exception's line (Lib/traceback.py, ``TracebackException.format``); chained
exceptions are printed oldest first, joined by the two messages of :data:`CHAINED`
(``_cause_message`` and ``_context_message`` there). The rest of the reader asks these helpers
instead of writing the head literal and the walks out again. Three walks differ from
:func:`traceback_head` and are kept as they answered (each says so): :func:`own_frame_code`,
``diedbefore.died_before`` (a literal scan for the nearest head) and ``drivers.driver_report``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread import ranks

__all__ = ["CHAINED", "EXCEPTION", "TRACEBACK", "TRACEBACK_HEAD", "TRACEBACK_HEADS", "chain_start", "chained", "exception_line", "frame_parts",
           "has_head", "inside_chain", "module_frame", "norm_body", "outer_frame", "own_frame_code", "python_head", "starts_head", "thread_died", "top_frame",
           "traceback_head", "unprefixed"]

#: The words every head below starts with: a literal scan for it finds either (the phase reader's).
TRACEBACK_HEAD = "Traceback (most recent call"
#: The head of a traceback CPython prints (Lib/traceback.py, ``StackSummary.format`` callers).
TRACEBACK = TRACEBACK_HEAD + " last)"
#: The heads of a Python traceback: the interpreter's, and Sacred's, which logs "Failed after
#: 0:01:32!" at ERROR level and then prints the traceback without its own frames under "Traceback
#: (most recent calls WITHOUT Sacred internals):" ("Traceback (most recent calls):" when the error
#: is in Sacred itself; IDSIA/sacred sacred/utils.py, FilteredTracebackException.format and
#: print_filtered_stacktrace).
TRACEBACK_HEADS = (TRACEBACK, TRACEBACK_HEAD + "s")
#: What Python prints between the tracebacks of a chain of exceptions (Lib/traceback.py,
#: ``_cause_message`` and ``_context_message``).
CHAINED = ("The above exception was the direct cause of the following exception",
           "During handling of the above exception, another exception occurred")
#: An exception's final line ("torch.OutOfMemoryError: …", "KeyboardInterrupt", Ray's
#: "RayTaskError(ValueError): …"): the type, then its message after ": " or nothing (CPython's
#: traceback.format_exception_only; its type name in the group "name"), not a sentence that starts with the word ("Exit code: 1", a job
#: script's report; "Error executing job with overrides: …", Hydra's; "Exception in thread …").
EXCEPTION = re.compile(r"(?:[\w.]+\.)?(?P<name>(?:[A-Z]\w*)?(?:Error|Exception|Interrupt|Quit|Exit|Failure))\b(?=[:(]|\s*$)")
#: Where installed libraries' files live (a frame there is not the job's own code).
_LIBRARY_DIRS = ("site-packages/", "dist-packages/", "/lib/python3.", "/lib/python2.")
#: Frames read up from an exception line for the job's own.
_FRAMES_UP = 60


def has_head(line: str) -> bool:
    """Whether a line holds CPython's traceback head anywhere (behind a launcher's or a logger's
    prefix, printed onto a progress bar, a rank's "(RANK 0)" after it): the reader's one test of
    a traceback's head line."""
    return TRACEBACK in line


def starts_head(text: str, *, sacred: bool = False) -> bool:
    """Whether ``text`` (a line without its prefix) starts with a traceback's head; with
    ``sacred``, Sacred's filtered head too (:data:`TRACEBACK_HEADS`)."""
    return text.startswith(TRACEBACK_HEADS if sacred else TRACEBACK)


def chained(line: str) -> bool:
    """Whether a line holds one of Python's messages between chained tracebacks (:data:`CHAINED`)."""
    return any(c in line for c in CHAINED)


def unprefixed(line: str) -> str:
    """A line without its launcher's prefix (a rank's, Ray's), its indentation kept."""
    line = ranks.strip_prefix(line)
    if line.startswith(("(", "\x1b[")) and "pid=" in line[:120]:
        m = ranks.RAY_PREFIX.match(line)
        if m is not None:
            line = line[m.end():]
    return line


def norm_body(line: str) -> str:
    """A line normalized, without its launcher's prefix."""
    return logs.normalize_line(unprefixed(line)).strip()


def traceback_head(lines: Sequence[str], i: int, reach: int = 400) -> int | None:
    """The index of the first line above the exception line ``i`` that is not part of its
    traceback's frames (indented lines, blank lines): its ``Traceback (most recent call
    last):`` head, or whatever heads a report printed without one (Ray's task header).
    The reader's one walk up a traceback's frames."""
    for k in range(i - 1, max(-1, i - reach), -1):
        text = unprefixed(lines[k])
        if text.strip() and (not text.startswith((" ", "\t", _CATCH_POINT)) or has_head(text)):  # a head printed onto a bar
            return k
    return None


#: loguru's mark of the frame where ``logger.exception``/``logger.catch`` caught the exception it logs: the
#: frame's leading space replaced by ">" ('> File "main.py", line 86, in main'; loguru/_better_exceptions.py,
#: ExceptionFormatter._format_locations with backtrace on).
_CATCH_POINT = '> File "'


def python_head(lines: Sequence[str], i: int) -> int | None:
    """The ``Traceback (most recent call last):`` line heading the exception line ``i``'s
    traceback (:func:`traceback_head`); None when no traceback, or a report headed otherwise, is above it."""
    head = traceback_head(lines, i)
    return head if head is not None and has_head(lines[head]) else None


#: A frame line of a CPython traceback (Lib/traceback.py ``StackSummary.format_frame_summary``:
#: '  File "train.py", line 63, in main'; a script's top level is the code object ``<module>``); loguru marks
#: the frame that caught the exception it logs with ">" (:data:`_CATCH_POINT`).
_FRAME = re.compile(r'^>?\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)')


def frame_parts(line: str) -> tuple[str, str, str] | None:
    """(file, line number, function) of a traceback's frame line, behind a launcher's prefix too; None for any
    other line."""
    m = _FRAME.match(unprefixed(line).strip())
    return (m["file"], m["line"], m["name"]) if m is not None else None


def outer_frame(lines: Sequence[str], head: int, at: int) -> int | None:
    """The index of a traceback's outermost frame line: the first frame line (:func:`frame_parts`) below its
    head ``head`` and above ``at``; None when there is none."""
    return next((k for k in range(head + 1, at) if frame_parts(lines[k]) is not None), None)


def exception_line(lines: Sequence[str], head: int, stop: int) -> int | None:
    """The index of the line that closes the traceback headed at ``head``: the first line below it and
    before ``stop`` that is not blank, not indented and not a frame line, read behind a launcher's prefix
    (:func:`unprefixed`); None when there is none."""
    for k in range(head + 1, stop):
        text = unprefixed(logs.normalize_line(lines[k]))
        if text.strip() and not text[:1].isspace() and not text.startswith("File "):
            return k
    return None


def top_frame(line: str) -> bool:
    """Whether a traceback's frame line is the interpreter's top level: the main script's module code
    ('  File "train.py", line 63, in <module>'), or runpy's for ``python -m`` ("in _run_module_as_main")."""
    parts = frame_parts(line)
    return parts is not None and parts[2] in ("<module>", "_run_module_as_main")


def module_frame(line: str) -> tuple[str, str] | None:
    """The (file, line number) a traceback's frame line names when the frame is a script's module code
    ('  File "train.py", line 63, in <module>'), behind a launcher's prefix too; None for any other line."""
    parts = frame_parts(line)
    return (parts[0], parts[1]) if parts is not None and parts[2] == "<module>" else None


def chain_start(lines: Sequence[str], tb: int, floor: int, reach: int = 400) -> int:
    """The header of the first traceback of the chain whose traceback starts at ``tb`` (``tb``
    itself when it is not chained to an earlier one), not before ``floor``."""
    while True:
        above = [k for k in range(tb - 1, max(floor, tb - 4) - 1, -1) if lines[k].strip()]
        if not above or not chained(lines[above[0]]):
            return tb
        prev = next((k for k in range(above[0] - 1, max(floor, above[0] - reach) - 1, -1) if has_head(lines[k])),
                    None)
        if prev is None:
            return tb
        tb = prev


def inside_chain(lines: Sequence[str], i: int) -> bool:
    """Whether the exception line ``i`` is neither the first nor the last of the chain it is in
    (Python printed "During handling of the above exception" / "The above exception was the
    direct cause" both above its traceback and right below it): README rule R4 labels nothing in
    between (a logging call failing while a signal's exception is handled)."""
    below = next((k for k in range(i + 1, min(len(lines), i + 4)) if lines[k].strip()), None)
    if below is None or not chained(lines[below]):
        return False
    head = python_head(lines, i)
    if head is None:
        return False
    above = next((k for k in range(head - 1, max(-1, head - 4), -1) if lines[k].strip()), None)
    return above is not None and chained(lines[above])


def thread_died(lines: Sequence[str], i: int) -> bool:
    """Whether the exception line ``i`` ends a thread's uncaught exception, as ``threading.excepthook``
    prints it ("Exception in thread Thread-2:" then its traceback; CPython Lib/threading.py): the thread
    that fed the process (a data loader's reader thread) is gone, what stops the process next is teardown."""
    head = python_head(lines, i)
    return head is not None and head > 0 and unprefixed(lines[head - 1]).lstrip().startswith("Exception in thread ")


def own_frame_code(lines: Sequence[str], i: int) -> int | None:
    """The index of the code line of the last traceback frame above the exception line ``i`` that is not in a
    library's file, when the last frame is in one; else None. Its walk up the frames differs from
    :func:`traceback_head`'s on purpose (kept as it answered): it stops at any unindented line, a head printed
    onto a bar's indented line included, and reads at most _FRAMES_UP lines."""
    frames = []
    for k in range(i - 1, max(-1, i - _FRAMES_UP), -1):
        text = unprefixed(lines[k])
        if text.strip() and not text[:1].isspace():
            break  # the traceback's head
        if text.lstrip().startswith('File "'):
            frames.append(k)
    if not frames or not any(d in lines[frames[0]] for d in _LIBRARY_DIRS):
        return None
    own = next((k for k in frames if not any(d in lines[k] for d in _LIBRARY_DIRS)), None)
    if own is None or own + 1 >= i:
        return None
    code = unprefixed(lines[own + 1])
    return own + 1 if code.strip() and code[:1].isspace() and not code.lstrip().startswith('File "') else None

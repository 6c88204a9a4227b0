"""The process's exit on an uncaught exception: the traceback ``sys.excepthook`` prints as the
interpreter exits (its first frame the program's top level, the exception's name last), an uncaught
exception after a completion message, and the other copies of its line (one per rank).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread.end.caught import handled_blocks
from gpulens.diagnosis.logread.end.completion_messages import COMPLETION_COVER, is_completion
from gpulens.diagnosis.logread.lineprefix import prefix_free
from gpulens.diagnosis.logread.lines import last_matching
from gpulens.diagnosis.logread.tracebacks import TRACEBACK, exception_line, top_frame

__all__ = ["COPIES_LOOKBACK", "HANDLED_LOOKBACK", "TRACEBACK_LINES", "ending_exception", "exception_copies", "exits_zero", "process_exit", "uncaught_exception",
           "zero_exit"]

#: Lines after a traceback's header read for its exception line.
TRACEBACK_LINES = 300
#: Lines above the first failure line searched for the head of a report Python went on from.
HANDLED_LOOKBACK = 200
#: The last line of CPython's report of an uncaught exception (Lib/traceback.py
#: ``TracebackException.format_exception_only``, which ``sys.excepthook`` prints under the
#: frames): the exception's qualified name, its module first unless it is builtins or __main__
#: ("wandb.errors.errors.Error: You must call wandb.init() before wandb.log()", wandb's
#: sdk/lib/preinit.py ``preinit_wrapper``), then ": " and the message, or the name alone. The
#: failure-line test knows a name by its ending (``...Error``, ``...Exception``); a class named
#: ``Error`` alone (wandb's, shutil's) or otherwise is found here by its place in the report.
_UNCAUGHT_NAME = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?::\s|$)")
#: The outermost frame of an uncaught exception's traceback, as the excepthook prints it: the
#: script's top level (``python train.py``: "in <module>", a console script's too), or runpy's
#: ``_run_module_as_main`` (``python -m pkg.train``). A report that ``traceback.print_exc()`` wrote
#: in a function that caught the exception starts at that function; one that Python printed and
#: went on from ("Exception ignored in: <function X.__del__ ...>") starts at the ignored call.
#: (:func:`tracebacks.top_frame` reads it.)


#: A ``SystemExit`` with status 0: the program asked to exit normally (CPython's ``sys.exit(0)``, the site
#: module's ``exit(0)``; Python/pythonrun.c ``_Py_HandleSystemExit`` exits with that status and prints
#: nothing), here printed because it was raised inside a TensorFlow ``tf.py_func``, which turns it into the
#: op's error (tensorflow/python/ops/script_ops.py ``FuncRegistry.__call__``; the session raises
#: "tensorflow.python.framework.errors_impl.UnknownError: SystemExit: 0", TF 1.x graph mode also
#: "UnknownError (see above for traceback): SystemExit: 0", under the py_func's own traceback ending
#: "SystemExit: 0"). A status other than 0 is a failure.
_ZERO_EXIT = re.compile(r"^(?:(?:[\w.]+\.)?UnknownError(?: \(see above for traceback\))?: )?SystemExit: 0$")


def zero_exit(norm: str) -> bool:
    """Whether a (normalized) line is the exception line of a ``SystemExit`` with status 0 (:data:`_ZERO_EXIT`)."""
    return "SystemExit: 0" in norm and _ZERO_EXIT.match(prefix_free(norm).strip()) is not None


def ending_exception(lines: Sequence[str], head: int) -> int | None:
    """The exception line of the traceback whose header is at ``head`` (:func:`tracebacks.exception_line`,
    within :data:`TRACEBACK_LINES`)."""
    return exception_line(lines, head, min(len(lines), head + 1 + TRACEBACK_LINES))


def exits_zero(lines: Sequence[str], head: int) -> bool:
    """Whether the traceback whose header is at ``head`` ends with a ``SystemExit`` with status 0
    (:func:`zero_exit`)."""
    k = ending_exception(lines, head)
    return k is not None and zero_exit(prefix_free(logs.normalize_line(lines[k])))


def uncaught_exception(lines: Sequence[str], floor: int, at: int) -> bool:
    """Whether ``lines[at]`` is the exception line that ends a traceback from the program's top
    level (see ``_UNCAUGHT_NAME``, ``top_frame``): its frames, indented, up to the header, the
    first frame the top level's, not a report Python printed and went on from, and a completion
    message above it (:func:`_completed_before`). Such an exception ended the process after the
    message (the job script's next statement raised). Without a message the open traceback
    already tells the reader the job failed, and its own failure lines stand."""
    s = prefix_free(logs.normalize_line(lines[at])).strip()
    if not _UNCAUGHT_NAME.match(s) or s.startswith("File "):
        return False
    k = at - 1
    while k >= max(floor, at - TRACEBACK_LINES):
        t = prefix_free(logs.normalize_line(lines[k]))
        if t.strip() == TRACEBACK + ":":
            return (_top_frame(lines, k, at) and k not in handled_blocks(lines, max(floor, k - HANDLED_LOOKBACK), at + 1)
                    and _completed_before(lines, floor, k))
        if t.strip() and not t[:1].isspace() and not t.startswith("File "):
            return False  # not a frame or a code line: the line is not a traceback's last
        k -= 1
    return False


def process_exit(lines: Sequence[str], head: int) -> int | None:
    """The index of the exception line that ends the traceback whose header is ``lines[head]``,
    when that traceback is one the interpreter printed as it exited (``sys.excepthook`` on an
    uncaught exception, CPython Python/pythonrun.c ``_PyErr_PrintEx``, then the interpreter
    finalises and exits 1): the header alone on its line, with no launcher's or logger's prefix,
    then the indented frames, the first of them the program's top level (``top_frame``), then
    the exception's name (``_UNCAUGHT_NAME``) at the line's start; else None (a rank's copy behind
    a prefix, a report a function caught and printed, one Python went on from)."""
    if lines[head].rstrip() != TRACEBACK + ":":
        return None
    framed = False
    for k in range(head + 1, min(len(lines), head + TRACEBACK_LINES)):
        ln = lines[k].rstrip()
        if ln[:1].isspace():
            if not framed and not top_frame(ln):
                return None
            framed = True
            continue
        return k if framed and _UNCAUGHT_NAME.match(ln) and not ln.startswith("File ") else None
    return None


def _completed_before(lines: Sequence[str], floor: int, head: int) -> bool:
    """Whether a completion message (:func:`is_completion`) precedes ``lines[head]`` in the attempt."""
    return bool(last_matching(lines, COMPLETION_COVER, lambda ln: is_completion(logs.normalize_line(ln)), floor, head))


#: Lines before an uncaught exception's line searched for its other copies.
COPIES_LOOKBACK = 2000


def exception_copies(lines: Sequence[str], floor: int, at: int) -> list[int]:
    """``at`` and the earlier lines that print the same exception line (behind another prefix or
    none: torch's distributed excepthook copies a rank's traceback behind "[rankN]: ", each rank
    prints its own), so that no one copy is taken for the first failure for being the last."""
    want = prefix_free(logs.normalize_line(lines[at])).strip()
    lo = max(floor, at - COPIES_LOOKBACK)
    return [k for k in range(lo, at + 1) if want in lines[k] and prefix_free(logs.normalize_line(lines[k])).strip() == want]


def _top_frame(lines: Sequence[str], head: int, at: int) -> bool:
    """Whether the first frame of the traceback whose header is at ``head`` is the top level's."""
    first = next((prefix_free(logs.normalize_line(lines[k])).strip() for k in range(head + 1, at)
                  if lines[k].strip()), "")
    return top_frame(first)

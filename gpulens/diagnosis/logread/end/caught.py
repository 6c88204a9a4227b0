"""Error reports Python printed and went on from: an exception ignored in ``__del__`` or a callback, an
``atexit`` handler's error, a logging handler's "--- Logging error ---", a web server's report of one request's
exception. Their exception lines end no process, so they are neither failure lines nor what the classifier reads."""

from __future__ import annotations

from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.lineprefix import prefix_free

__all__ = ["drop_caught", "handled_blocks"]


#: Heads of an error report that Python prints and goes on from (the exit status is not
#: changed): an exception in ``__del__`` or a callback, in an ``atexit`` handler, in a logging
#: handler; and a web server's report of one request's exception, which it answered with a 500 and went on serving
#: from (uvicorn's ``RequestResponseCycle.run_asgi``, uvicorn/protocols/http/h11_impl.py and httptools_impl.py:
#: ``self.logger.error("Exception in ASGI application\n", exc_info=exc)``).
_HANDLED_HEADS = ("Exception ignored in", "Error in atexit._run_exitfuncs", "--- Logging error ---",
                  "Exception in ASGI application")
#: Lines inside such a report that are not its exception line.
_REPORT_PARTS = ("Traceback", "During handling", "The above exception", "Call stack:", "Message:", "Arguments:")
_REPORT_LINES = 200


def handled_blocks(lines: Sequence[str], lo: int, hi: int, *, stream_gone: bool = False) -> set[int]:
    """Indexes in ``[lo, hi)`` of the lines of error reports Python printed and went on from
    (see ``_HANDLED_HEADS``): their exception lines did not end the process. A report whose
    exception is the output stream failing (an I/O error, a broken pipe: the terminal or the
    log file went away) is one only with ``stream_gone`` (the category's reading: that error is
    the logger's, not the job's storage); without it, it is kept (the verdict's reading: what
    wrote the log is gone)."""
    out: set[int] = set()
    for i in find_keys(lines, _HANDLED_HEADS, lo, hi):
        if not _heads_report(lines[i]):
            continue
        block = _report(lines, i, hi)
        if stream_gone or not any(_STREAM_GONE in lines[j] or "BrokenPipeError" in lines[j] for j in block):
            out.update(block)
    return out


def drop_caught(context: Sequence[str]) -> list[str]:
    """``context`` without the reports of exceptions Python caught and went on from (a logging
    handler's error, an exception ignored in ``__del__`` or at exit; :func:`handled_blocks`):
    they never end a process, so they must not decide its category."""
    blocks = handled_blocks(context, 0, len(context), stream_gone=True)
    return [ln for k, ln in enumerate(context) if k not in blocks] if blocks else list(context)


def _heads_report(line: str) -> bool:
    """Whether a line is the head of such a report (after a launcher's rank prefix, if any)."""
    return logs.normalize_line(prefix_free(line)).lstrip().startswith(_HANDLED_HEADS)


_STREAM_GONE = "[Errno 5] Input/output error"
#: Lines between a report's exception line and the next traceback of the same chain.
_CHAINED = ("During handling", "The above exception")


def _report(lines: Sequence[str], i: int, hi: int) -> list[int]:
    """The lines of the error report headed at ``i``: its traceback up to its exception line,
    with a logging error's "Call stack:", "Message:" and "Arguments:" lines after it, and the tracebacks chained to
    it ("The above exception was the direct cause ..."), each up to its exception line; a new traceback after the
    exception line (not one chained to it) is another report."""
    out = [i]
    seen_exception = False
    chained = False
    for j in range(i + 1, min(hi, i + _REPORT_LINES)):
        s = logs.normalize_line(prefix_free(lines[j]))
        t = s.strip()
        if seen_exception and t.startswith("Traceback"):
            if not chained:
                break
            seen_exception = False  # the chain's next traceback: its own exception line is the report's too
        if t and not s.startswith((" ", "\t")) and not t.startswith(_REPORT_PARTS):
            if seen_exception or t.startswith(_HANDLED_HEADS):
                break
            seen_exception = True  # the report's exception line
        if t:
            chained = t.startswith(_CHAINED)
        out.append(j)
    return out

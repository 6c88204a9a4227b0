"""The child's own error behind a launcher's or a parent's report that a child failed
(CalledProcessError, torchrun's ChildFailedError, a Ray actor's death): the child's last
traceback above the report, or the one line after which a child exits by itself."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.lines import ends_own_process, is_progress
from gpulens.diagnosis.logread.tracebacks import TRACEBACK
from gpulens.diagnosis.types import Diagnosis
from gpulens.vocab import NO_FAILURE

__all__ = ["behind_secondary"]


#: Lines above the error context searched for the child's own error behind a launcher's report.
_CHILD_LOOKBACK = 3000


def behind_secondary(d: Diagnosis, lines: Sequence[str], floor: int, start: int,
                     classify: Callable[[str], Diagnosis], report: int | None = None) -> Diagnosis:
    """For an error context that holds only a launcher's or a parent's report that a child
    failed (``subprocess.CalledProcessError``, torchrun's ChildFailedError, a Ray actor's
    death), the child's own error above ``start`` (in ``lines[floor:]``, :func:`_child_words`;
    a child's one-line exit also above ``report``, the line after the last failure line), classified with
    ``classify``, when a rule decides it; else ``d``."""
    if d.category != "unknown" or not (d.reason or "").startswith("only secondary messages"):
        return d
    for text in _child_words(lines, max(floor, start - _CHILD_LOOKBACK), start, max(start, report or start)):
        got = classify(text)
        if got.method == "rule" and got.category not in ("unknown", NO_FAILURE):
            return dataclasses.replace(got, confidence=round(got.confidence * 0.9, 3), file=d.file,
                                       reason="the launcher's report names no cause; the child's own error above it does")
    return d


#: Literals of the lines after which a child exits by itself without a traceback (lines.ends_own_process):
#: CPython's "python: can't open file 'x.py': [Errno 2] ..." (Modules/main.c pymain_run_file),
#: argparse's "prog: error: ..." (argparse.py ArgumentParser.error).
_OWN_EXIT_KEYS = ("can't open file", ": error: ")


def _child_words(lines: Sequence[str], lo: int, start: int, stop: int) -> list[str]:
    """The texts that may hold a child's own error, in the order tried: the last traceback in
    ``lines[lo:start]``, then the last line in ``lines[lo:stop]`` after which a child exits by
    itself (a launcher that started every rank with a script path that is not there, or with an
    argument its parser refuses, gets only that line from each: the error context may start
    below it)."""
    texts: list[str] = []
    tbs = find_keys(lines, (TRACEBACK,), lo, start)
    if tbs:
        texts.append("\n".join(ranks.strip_prefix(ln) for ln in lines[tbs[-1]:start] if not is_progress(ln)))
    own = next((i for i in reversed(find_keys(lines, _OWN_EXIT_KEYS, lo, stop)) if ends_own_process(lines, i)), None)
    if own is not None:
        texts.append(ranks.strip_prefix(lines[own]))
    return texts

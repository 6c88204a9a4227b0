"""The failure-indicating lines of a stored attempt's log in context (for the job page)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpulens.diagnosis.logread.source import read_whole
from gpulens.store import Store

__all__ = ["CONTEXT_AROUND", "attempt_log_context", "lines_in_context"]

#: Lines shown before and after each indicator line.
CONTEXT_AROUND = 3


def lines_in_context(path: str | Path, numbers: Sequence[int], around: int = CONTEXT_AROUND
                     ) -> list[tuple[int, str, bool]]:
    """(line number, text, is an indicator line) for the lines around ``numbers`` (1-based),
    in file order; a gap between windows is a ``(0, "...", False)`` row. Empty when the file
    cannot be read."""
    try:
        src = read_whole(path)
    except OSError:
        return []
    wanted = set(numbers)
    keep = sorted({n + d for n in numbers for d in range(-around, around + 1)
                   if src.first <= n + d <= src.n_lines})
    out: list[tuple[int, str, bool]] = []
    for n in keep:
        if out and out[-1][0] and n > out[-1][0] + 1:
            out.append((0, "...", False))
        out.append((n, src.lines[n - src.first][:300], n in wanted))
    return out


def attempt_log_context(store: Store, job_id: str, attempt: int, numbers: tuple[int, ...],
                        around: int = CONTEXT_AROUND) -> list[tuple[int, str, bool]]:
    """:func:`lines_in_context` of the log the store records for ``(job_id, attempt)``."""
    con = store.connect(samples=False)
    try:
        row = con.execute("SELECT log_path FROM attempts WHERE job_id = ? AND attempt = ?", [job_id, attempt]).fetchone()
    finally:
        con.close()
    if row is None or not row[0]:
        return []
    path = Path(row[0])
    return lines_in_context(path if path.is_absolute() else store.root / path, numbers, around)

"""Several attempts appended to one file (Slurm, LSF and nohup append): where the last one
starts, and what it shows that the last good one did not."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread.lines import find_keys, is_failure

__all__ = ["attempt_starts", "new_in_last"]

_LSF = "Sender: LSF System"
_ENV = re.compile(r"CUDA(?: Version| version|_VERSION)|[Dd]river [Vv]ersion|\btorch(?:==| version|\.__version__)"
                  r"|[Vv]ersion\s*[:=]?\s*\d+\.\d+|\bhost(?:name)?\s*[:=]|SLURM_(?:JOB_)?NODELIST|\bnodelist\b|Running on (?:host|node)")
_DIGITS = re.compile(r"0x[0-9a-f]+|\d+")
_ENV_LINES = 300


def attempt_starts(lines: Sequence[str]) -> list[int]:
    """Indexes where attempts start (always ``[0, ...]``): an LSF report header, or a repeat
    of the file's first line (a job script's banner printed again)."""
    starts = [0]
    first = next((ln for ln in lines[:5] if len(ln.strip()) >= 8), None)
    keys = [_LSF] + ([first] if first is not None else [])
    for i in find_keys(lines, keys, 1):
        ln = lines[i]
        if _LSF in ln or (first is not None and ln == first):
            if i - starts[-1] > 3:
                starts.append(i)
    return starts


def _shape(line: str) -> str:
    return _DIGITS.sub("N", logs.normalize_line(line).strip())


def new_in_last(lines: Sequence[str], starts: Sequence[int], good: int | None, limit: int = 8) -> list[str]:
    """Error and environment lines of the last attempt that the attempt starting at ``good``
    (the last one that did not fail) did not show (numbers masked when comparing)."""
    if good is None or len(starts) < 2:
        return []
    last = starts[-1]
    end_good = next((s for s in starts if s > good), last)
    seen = {_shape(ln) for ln in _interesting(lines, good, end_good)}
    out: list[str] = []
    for ln in _interesting(lines, last, len(lines)):
        shape = _shape(ln)
        if shape not in seen:
            seen.add(shape)
            out.append(logs.normalize_line(ln).strip()[:200])
            if len(out) >= limit:
                break
    return out


def _interesting(lines: Sequence[str], start: int, stop: int) -> list[str]:
    env = [ln for ln in lines[start:min(stop, start + _ENV_LINES)] if _ENV.search(ln)]
    errs = [lines[i] for i in find_keys(lines, ("rror", "ERROR", "Exception", "Killed", "CANCELLED"), start, stop)
            if is_failure(logs.normalize_line(lines[i]))]
    return env + errs

"""A run's last progress reaching its end: the counters a progress line shows (``Epoch 30/30``,
``step:6000/6000``, a bar at ``N/N``) and whether they are at their end, the run's configured length
as its config dump prints it, and whether the last step printed is the configured last one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.bars import bar_updates
from gpulens.diagnosis.logread.lines import is_progress

__all__ = ["LAST_EPOCH", "LAST_STEP", "at_configured_end", "broke_at_configured_step", "configured_totals", "counters",
           "counters_end", "is_progress_bar", "last_refresh", "short_of_configured"]

#: Counters ``N/M`` (``of M``) a progress line names: the run's epoch, its step/iteration, a bar.
_EPOCH_OF = re.compile(r"\b(?:[Ee]poch|EPOCH)s?\b\s*[:=#\[(]?\s*(\d+)\s*(?:/|of)\s*(\d+)")
_STEP_OF = re.compile(r"\b(?:[Ss]tep|STEP|[Ii]ter(?:ation)?|ITER|[Bb]atch)s?\b\s*[:=#\[(]?\s*(\d+)\s*(?:/|of)\s*(\d+)")
_BAR = re.compile(r"(?:^|[\s|\[])(\d+)\s*/\s*(\d+)\s*(?:\[|\]|\|)")


def is_progress_bar(line: str) -> bool:
    """A progress line (``lines.is_progress``), or an indented tqdm bar (``  7%|▋ | 2/29 [...]``), also with a
    message written onto the end of its last refresh (:func:`_bar_before_text`)."""
    if is_progress(line):
        return True
    shown = last_refresh(line)
    if _tqdm_bar(shown):
        return True
    bar = _bar_before_text(shown)
    return bar is not None and (is_progress(bar) or _tqdm_bar(bar))


def _tqdm_bar(shown: str) -> bool:
    return ("it/s" in shown or "s/it" in shown) and "%|" in shown and is_progress(shown.lstrip())


def _bar_before_text(shown: str) -> str | None:
    """A bar's last refresh ``shown`` without the message written right after its last update (tqdm ends a
    refresh with no newline, so what the process or its shell writes next to the same file lands on the bar's
    line: CPython's "Error in sys.excepthook:", a kill report); None when no text follows a bar update."""
    last = next(reversed(list(bar_updates(shown))), None) if "/" in shown and "[" in shown else None
    if last is None or not shown[last.end():].strip():
        return None
    return shown[:last.end()]



def last_refresh(line: str) -> str:
    """What a terminal shows of a line (the last ``\\r`` refresh of a progress bar). Kept apart from
    ``steplines.on_screen``, which does not take a CRLF line's own ``\\r`` for a refresh: the
    completion readers answered with this one."""
    return line[line.rfind("\r") + 1:] if "\r" in line else line


def counters_end(line: str, before: str | None = None) -> bool | None:
    """Whether a progress line's counters are at their end: True (every counter it shows is
    ``N/N``), False (one is short of it by more than it moved since the progress line
    ``before``), None (no counter, or cannot tell: a run that prints every 5,000 iterations
    prints 795,001/800,000 last; an epoch counter one short is a zero-based count's last epoch; an inner counter that
    started again since ``before``, "epoch: 20/20, iter: 10/14" after "epoch: 19/20, iter: 10/14", moves by its
    logging interval, ten, and the epoch's last four iterations print nothing)."""
    got = counters(line)
    if not got:
        return None
    if all(n >= m for n, m, _ in got):
        return True
    prev = {kind: n for n, _, kind in counters(before)} if before else {}
    for n, m, kind in got:
        stride = max(1, n - prev[kind]) if kind in prev and prev[kind] < n else 1
        if kind == "inner" and prev.get(kind, 0) >= n:
            stride = n  # the inner count started again (a new epoch): its first print came after one logging interval
        if kind == "epoch" and n == m - 1:
            stride = max(stride, 2)
        if n + stride <= m:
            return False
    return None


def counters(line: str) -> list[tuple[int, int, str]]:
    """(N, M, kind) of the epoch counter and the inner (step, iteration, bar) counter a line shows."""
    epoch = _EPOCH_OF.search(line)
    inner = _STEP_OF.search(line) or _BAR.search(line[epoch.end():] if epoch else line)
    got = [(int(m.group(1)), int(m.group(2)), kind) for m, kind in ((epoch, "epoch"), (inner, "inner")) if m is not None]
    return [(n, m, kind) for n, m, kind in got if m > 0]


#: The configured length of a run as config dumps and argument lists print it.
_CONFIG_KEYS = ("epochs", "iterations", "max_it", "max_steps", "total_steps", "num_steps", "train_iters",
                "max iterations", "Max iterations", "total_iters")
_CONFIGURED = re.compile(
    r"\b(?P<key>(?:max|num|n|total|train)_?(?:train_)?(?P<what>epochs|iters|iterations|steps)|epochs|max iterations"
    r"|Max iterations)['\"]?\s*[:=]?\s*(?P<n>\d+)\b"
    r"|\b(?P<n2>\d+) max (?P<what2>iterations|steps|epochs)\b")
LAST_EPOCH = re.compile(r"\b[Ee]poch\s*[:=\[#]?\s*(\d+)\b")
LAST_STEP = re.compile(r"\b(?:[Ss]tep|[Ii]ter(?:ation)?|global_step)\s*[:=\[#]?\s*(\d+)\b")
#: Lines at the start of an attempt read for its configuration.
_CONFIG_LINES = 2000


def configured_totals(lines: Sequence[str], floor: int) -> dict[str, set[int]]:
    """The run's configured number of epochs and of steps/iterations, as a config dump or an
    argument list at the attempt's start prints them (``max_epochs=100``, ``12500 max iterations``)."""
    totals: dict[str, set[int]] = {"epoch": set(), "step": set()}
    for i in find_keys(lines, _CONFIG_KEYS, floor, min(len(lines), floor + _CONFIG_LINES)):
        for m in _CONFIGURED.finditer(lines[i][:4000]):
            what = m.group("what") or m.group("what2") or ("epochs" if "poch" in (m.group("key") or "") else "iterations")
            n = int(m.group("n") or m.group("n2"))
            if n > 1:
                totals["epoch" if what == "epochs" else "step"].add(n)
    return totals


def at_configured_end(last: str, totals: dict[str, set[int]]) -> bool:
    """Whether the last progress line's step or epoch is the run's configured last one
    (``max_epochs=100`` with ``epoch 99`` printed last, counted from zero, or from one;
    ``12500 max iterations`` with ``iteration 12500``)."""
    epoch = LAST_EPOCH.search(last)
    step = LAST_STEP.search(last)
    if epoch is not None and {int(epoch.group(1)), int(epoch.group(1)) + 1} & totals["epoch"]:
        return step is None or not totals["step"] or int(step.group(1)) in totals["step"] or _STEP_OF.search(last) is None
    return _at_configured_step(step, totals)


def _at_configured_step(step: re.Match[str] | None, totals: dict[str, set[int]]) -> bool:
    """Whether a step number (:data:`LAST_STEP`'s match) is a configured number of steps."""
    return step is not None and int(step.group(1)) in totals["step"]


def broke_at_configured_step(last: str, totals: dict[str, set[int]]) -> bool:
    """Whether a loop whose outer bar stopped short left at the configured last step: the step the last
    numbered line names (``iteration 6000``) is the configured ``max_iterations=6000``, and the line shows
    no step counter of its own that is short (``step 200/6000``). A script that counts iterations inside an
    epoch loop breaks out of both loops when the count reaches its maximum (``if iter_num >= max_iterations:
    break``), so the epoch bar, sized ``max_iterations // len(loader) + 1``, never reaches its total; the
    epoch alone never says so (a bar short in the last epoch is a run stopped in it)."""
    own = _STEP_OF.search(last)
    return _at_configured_step(LAST_STEP.search(last), totals) and (own is None or int(own.group(1)) >= int(own.group(2)))


def short_of_configured(last: str, before: str | None, totals: dict[str, set[int]]) -> bool:
    """Whether the last progress line is short of the run's configured length: an epoch two or
    more before the configured number (one before is a zero-based count's last), or a step
    more than one printing stride before it (the stride: how far the step moved since the
    progress line ``before``; 10 % of the total without one)."""
    epoch = LAST_EPOCH.search(last)
    if epoch is not None and totals["epoch"]:
        return int(epoch.group(1)) + 1 < min(totals["epoch"])
    step = LAST_STEP.search(last)
    if step is None or not totals["step"]:
        return False
    n, total = int(step.group(1)), min(totals["step"])
    prev = LAST_STEP.search(before) if before else None
    stride = n - int(prev.group(1)) if prev is not None and int(prev.group(1)) < n else total // 10
    return n + max(stride, 1) <= total

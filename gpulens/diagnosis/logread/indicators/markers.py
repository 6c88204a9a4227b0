"""Where a failure began without stating it (README rule R7's roots, printed before the terminal
error): the first of a streak of NaN/inf loss readings the run diverged at, a debugger's prompt a
leftover breakpoint stopped at; and the lines that head an error report by naming where it was
raised (:func:`is_report_head`), which are neither the error nor where the run failed.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.lines import DEBUGGER_PROMPTS
from gpulens.diagnosis.logread.tracebacks import unprefixed

__all__ = ["breakpoint_prompt", "diverged_root", "engine_died", "is_report_head", "nan_reported", "nan_sampled",
           "streak_start"]


#: A loss reading in a metric line ("Train Loss: nan", "loss=0.412", "'loss': inf").
_LOSS_READING = re.compile(r"(?i)\bloss\b['\"]?\s*[:=]\s*(-?nan|-?inf|[-+]?\d[\d.eE+-]*)")
#: Lines above the error region searched for the metric line the evidence quotes.
_METRIC_REACH = 400


def diverged_root(lines: Sequence[str], start: int, evidence: Sequence[str]) -> list[int]:
    """When the decisive evidence is a metric line whose loss reads NaN/inf (the run diverged, and
    what failed after it is a consequence), the first line of that streak of NaN/inf readings:
    where the run diverged (README rule R7: the root, before the terminal error)."""
    key = evidence[0].strip()[:120] if evidence else ""
    if not key or not _nan_loss(key):
        return []
    at = next((i for i in reversed(find_keys(lines, (key[:40],), max(0, start - _METRIC_REACH), start + 1))
               if key in lines[i]), None)
    return [] if at is None else [streak_start(lines, at)]


def nan_reported(lines: Sequence[str], start: int, found: Sequence[int], norm: Callable[[int], str]) -> list[int]:
    """When the error that ended the run says its input held NaN/inf (scikit-learn's "Input
    contains NaN, infinity or a value too large", "ValueError: array must not contain infs or
    NaNs") and the last loss reading printed before the error region reads NaN/inf, the first
    line of that streak when it holds _WENT_ON_NAN readings: the run diverged and went on, and
    what failed on its output names it (README rule R7: the log shows the link)."""
    if not found or _NAN_WORD.search(norm(found[-1])) is None:
        return []
    for k in range(start - 1, max(-1, start - _METRIC_REACH), -1):
        if "oss" in lines[k] and _LOSS_READING.search(lines[k]) is not None:
            if not _nan_loss(lines[k]):
                return []
            first = streak_start(lines, k)
            went_on = sum(1 for j in range(first, k + 1) if "oss" in lines[j] and _nan_loss(lines[j]))
            return [first] if went_on >= _WENT_ON_NAN else []
    return []


#: A sampler's check that its probabilities hold NaN/inf (torch.multinomial: aten/src/ATen/native/
#: cuda/TensorCompare.cu _assert_async_cuda_kernel, "probability tensor contains either `inf`, `nan`
#: or element < 0"; the same text from the CPU kernel).
_NAN_PROBS = "probability tensor contains either `inf`, `nan`"
#: A metric record whose loss or gradient norm reads NaN/inf ("{'loss': 0.01, 'grad_norm': nan,
#: ...}": transformers Trainer.log, "grad_norm=inf").
_NAN_METRIC = re.compile(r"(?i)\b(?:loss|grad_norm)\b['\"]?\s*[:=]\s*-?(?:nan|inf)\b")


def nan_sampled(lines: Sequence[str], found: Sequence[int]) -> list[int]:
    """When a sampler's NaN-probability check (``_NAN_PROBS``) is printed above the first found
    line, the last metric record before that line whose loss or gradient norm reads NaN/inf: where
    the weights went NaN, which the sampling then failed on (README rule R7: the log shows the link)."""
    lo = max(0, found[0] - _METRIC_REACH)
    if not find_keys(lines, (_NAN_PROBS,), lo, found[0] + 1):
        return []
    for k in range(found[0] - 1, lo - 1, -1):
        if ("oss" in lines[k] or "grad_norm" in lines[k]) and _NAN_METRIC.search(lines[k][:_METRIC_SPAN]):
            return [k]
    return []


#: Characters of a metric record read for its loss and gradient norm (they come first).
_METRIC_SPAN = 200


#: NaN/inf loss readings that show a run went on after it diverged (one reading right before the
#: error is the same step failing, not a link to an earlier divergence).
_WENT_ON_NAN = 3


#: An error message that names NaN or infinite values.
_NAN_WORD = re.compile(r"\b(?:NaN|NaNs|nan|NAN)\b|\b[Ii]nfinity\b|\binfs\b")


def streak_start(lines: Sequence[str], at: int, floor: int = 0) -> int:
    """The first line of the streak of NaN/inf loss readings that the reading at ``at`` ends (not
    above ``floor``, an attempt's first line)."""
    first = at
    for k in range(at - 1, max(floor - 1, at - _STREAK_REACH), -1):
        if "oss" not in lines[k]:
            continue
        m = _LOSS_READING.search(lines[k])
        if m is None:
            continue
        if not _nan_loss(lines[k]):
            break
        first = k
    return first


#: Lines above the quoted NaN reading searched for the first of the streak.
_STREAK_REACH = 5000


def _nan_loss(line: str) -> bool:
    """Whether a line's first loss reading (:data:`_LOSS_READING`) is NaN or infinite."""
    m = _LOSS_READING.search(line)
    return m is not None and m.group(1).lower().lstrip("-") in ("nan", "inf")


def breakpoint_prompt(lines: Sequence[str], quit_at: int) -> list[int]:
    """The debugger prompt (``(Pdb)``, ``ipdb>``) printed last before the ``bdb.BdbQuit`` at
    ``quit_at``: the program stopped at a leftover breakpoint, and quit when the batch job's
    input ended (README rule R7: the prompt is the root, the quit the terminal error)."""
    found = find_keys(lines, DEBUGGER_PROMPTS, max(0, quit_at - _PROMPT_REACH), quit_at)
    prompts = [i for i in found if unprefixed(lines[i]).lstrip().startswith(DEBUGGER_PROMPTS)][-1:]
    if prompts:
        return prompts
    found = find_keys(lines, ("> ",), max(0, quit_at - _PROMPT_REACH), quit_at)  # the prompt not captured
    return [i for i in found if _pdb_location(lines, i)][-1:]


#: Where pdb stopped, printed above its prompt (CPython Lib/pdb.py, Pdb.print_stack_entry: "> " and
#: format_stack_entry's "filename(lineno)funcname()", then "-> " and the source line): "> /app/
#: train.py(67)reward()" / "-> reward = 0.0". A captured stdout holds it even when the "(Pdb) "
#: prompt (no newline, on the terminal's input) is not there.
_PDB_WHERE = re.compile(r"^> \S.*\(\d+\)(?:\w+|<\w+>)\(\)$")


def _pdb_location(lines: Sequence[str], i: int) -> bool:
    """Whether line ``i`` is pdb's "> file(N)function()" with its "-> source" line below it."""
    if _PDB_WHERE.match(unprefixed(lines[i]).strip()) is None:
        return False
    return i + 1 < len(lines) and unprefixed(lines[i + 1]).startswith("-> ")


#: Lines above a ``bdb.BdbQuit`` searched for the debugger's prompt.
_PROMPT_REACH = 200


def is_report_head(line: str) -> bool:
    """Whether a line heads an error report by naming where it was raised (Ray's task header,
    Python's "Exception in thread NAME:"), or marks where a failure began without stating it (a
    debugger's prompt, a metric line whose loss went NaN: README rule R7's roots): it is not the
    error itself, nor where the run failed."""
    if "ray::" in line and ("RayTaskError" in line or "Unhandled error" in line):
        return True
    if unprefixed(line).lstrip().startswith(DEBUGGER_PROMPTS) or ("oss" in line and _nan_loss(line)) \
            or (line[:1] in "[(>" and _PDB_WHERE.match(unprefixed(line).strip()) is not None):
        return True
    return "Exception in thread " in line and unprefixed(line).lstrip().startswith("Exception in thread ")


#: vLLM's front end raising, for every request, that its engine core process is gone (vllm/v1/engine/exceptions.py
#: ``EngineDeadError``: "EngineCore encountered an issue. See stack trace (above) for the root cause.").
_ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above)"
#: vLLM's client noticing that the engine core process ended (vllm/v1/engine/core_client.py, the engine monitor of
#: ``MPClient``: ``logger.error("Engine core proc %s died unexpectedly, shutting down client.", proc_name)``).
_ENGINE_DIED = re.compile(r"Engine core proc \S+ died unexpectedly")
#: Lines above vLLM's EngineDeadError searched for the client's report that the engine died.
_DIED_REACH = 40


def engine_died(lines: Sequence[str], found: Sequence[int]) -> list[int]:
    """``found`` with vLLM's ``EngineDeadError`` replaced by the client's report just above it that the engine core
    process died (README rule R6: the first line that says the process ended; the error pointing "above" for the
    root cause says nothing more, rule R4) when it is the first line found (no error of the engine's is shown)."""
    out = []
    for i in found:
        died = None
        if _ENGINE_DEAD in lines[i] and i == min(found):
            died = next((k for k in find_keys(lines, ("died unexpectedly",), max(0, i - _DIED_REACH), i)
                         if _ENGINE_DIED.search(lines[k])), None)
        out.append(i if died is None else died)
    return sorted(set(out))

"""The phase a run failed in and the last step it printed.

Phases: ``startup`` (before the first step), ``first_step``, ``training`` (with the last
step/iteration/epoch seen), ``evaluation``, ``checkpoint_save``, ``checkpoint_load``,
``shutdown`` (after the run's own end: final save/summary done, process-group teardown).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.guarded import Guarded
from gpulens.diagnosis.logread.completion import AT_EXIT, is_completion
from gpulens.diagnosis.logread.lines import (
    PROGRESS_KEYS,
    is_benign,
    is_progress,
    is_terminal_kill,
    last_matching,
)

__all__ = ["PHASES", "last_step", "phase_of"]

PHASES = ("startup", "first_step", "training", "evaluation", "checkpoint_save", "checkpoint_load", "shutdown")

_STEP_RES = (
    re.compile(r"\b(?:global_step|step|Step|STEP|iter(?:ation)?|Iter(?:ation)?|it)\s*[=:\[#]?\s*(\d[\d,]*)(?:\s*/\s*\d+)?"),
    re.compile(r"\[step=(\d+)"),
    re.compile(r"\b[Ee]poch\s*[\[:=#]?\s*(\d+(?:\.\d+)?)(?:\s*/\s*\d+)?"),
    re.compile(r"'epoch':\s*(\d+(?:\.\d+)?)"),
    re.compile(r"\s(\d+)/\d+\s+\["),
)
_SAVE = Guarded(r"save_checkpoint|_save_checkpoint|torch\.save|save_pretrained|save_model|[Ss]aving (?:model|checkpoint)"
                r"|PytorchStreamWriter|SafetensorError|serializ|merge_and_unload|push_to_hub|_save\(",
                ("save", "aving", "PytorchStreamWriter", "SafetensorError", "serializ", "merge_and_unload",
                 "push_to_hub"))
_LOAD = Guarded(r"load_checkpoint|load_state_dict|_load_best_model|resume_from|[Ll]oading checkpoint|torch\.load\("
                r"|_IncompatibleKeys|Error\(s\) in loading state_dict",
                ("load", "oading", "resume_from", "_IncompatibleKeys"))
_EVAL = Guarded(r"[Ee]valuat|[Vv]alidat|\beval\b|evaluate\(|compute_metrics|[Tt]esting\b|\bval_",
                ("valuat", "alidat", "eval", "compute_metrics", "esting", "val_"))
_TEARDOWN = Guarded(r"destroy_process_group|atexit|__del__|finalize|[Ss]hutting down",
                    ("destroy_process_group", "atexit", "__del__", "finalize", "hutting down"))
_LOOKBACK = 25
#: Lines looked back for the last step printed before a failure or the end.
_STEP_LOOKBACK = 600


def last_step(lines: Sequence[str], before: int, floor: int = 0) -> str | None:
    """The last step/iteration/epoch printed in ``lines[floor:before]`` (as printed)."""
    found = last_matching(lines, PROGRESS_KEYS, lambda ln: _step_in(ln) is not None, max(floor, before - _STEP_LOOKBACK), before)
    return _step_in(lines[found[0]]) if found else None


def _step_in(line: str) -> str | None:
    end = line[-400:]
    if not is_progress(end):
        return None
    for rx in _STEP_RES:
        m = rx.search(end)
        if m:
            return m.group(1)
    return None


def _progress_count(lines: Sequence[str], floor: int, before: int, enough: int) -> int:
    """Progress lines in ``lines[floor:before]``, counted backwards up to ``enough``."""
    return len(last_matching(lines, PROGRESS_KEYS, is_progress, floor, before, enough))


def phase_of(lines: Sequence[str], failure: int, region: Sequence[str], floor: int = 0,
             step: str | None = None) -> str:
    """The phase of a failure at index ``failure`` whose traceback/error lines are ``region``;
    ``floor``: the index where the failed attempt starts; ``step``: the last step before it."""
    text = "\n".join(region)
    if _LOAD.search(text):
        return "checkpoint_load"
    if _SAVE.search(text):
        return "checkpoint_save"
    before = [ln for ln in lines[max(floor, failure - _LOOKBACK):failure] if ln.strip()]
    if any(is_completion(ln) and not ln.lstrip().startswith(_AT_EXIT) for ln in before) or _teardown(region):
        return "shutdown"
    if _EVAL.search(text) or any(_EVAL.search(ln) and not is_progress(ln) for ln in before[-6:]):
        return "evaluation"
    steps = _progress_count(lines, floor, failure, 4)
    if steps == 0:
        return _glued_bar(region) or "startup"
    if step in ("0", "1") or (steps < 3 and not (step and step.replace(",", "").isdigit() and int(step.replace(",", "")) > 1)):
        return "first_step"
    return "training"


_TB = "Traceback (most recent call last)"
#: A tracker's lines printed at process exit whatever the outcome (not the job's own shutdown).
_AT_EXIT = AT_EXIT  # printed at any exit


def _teardown(region: Sequence[str]) -> bool:
    """Whether the failure's lines show the job shutting down; warnings printed at any exit
    ("destroy_process_group() was not called") and a kill's own "shutting down workers" do not."""
    return any(_TEARDOWN.search(ln) and not is_benign(ln) and not is_terminal_kill(ln) for ln in region)


def _glued_bar(region: Sequence[str]) -> str | None:
    """The phase shown by a progress bar the traceback was printed onto (tqdm leaves no newline:
    ``Epoch 1/10:   0%|   | 0/375 [00:00<?, ?it/s]Traceback (most recent call last):``): the
    first step at 0% or step 0/1, else training; ``None`` when there is no such line."""
    for ln in region:
        at = ln.find(_TB)
        if at > 0 and is_progress(ln[:at]):
            bar = ln[:at]
            return "first_step" if " 0%|" in bar or _step_in(bar) in ("0", "1") else "training"
    return None


"""Whether the failed job is one with no training loop at all (P5).

An inference, evaluation, scoring or interpretation job counts batches or prompts the way a training
run counts steps, but P5 of sample_logs/whole/README.md gives it no ``first_step`` or ``training``:
everything from its first batch on is ``evaluation``. The job's entry script says so when a traceback
names it (``eval.py``, :func:`~gpulens.diagnosis.logread.phase.frames.eval_program`); without one, the
log itself does: nothing printed before the failure speaks of training (a loss, a learning rate, an
optimizer, an epoch, a backward pass, a checkpoint saved), and something the job printed speaks of the
work it did instead (evaluating, testing, inference, prediction, generation, scoring, a benchmark).

Libraries' own lines do not count for the work done: a warning's source path
(``transformers/generation/configuration_utils.py``) and wandb's lines name modules and settings,
not what the job did.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.guarded import Guarded

__all__ = ["no_training_loop", "work_counted"]

#: What a training job prints or runs and an inference job does not (on the lower-cased line): training (a word of its
#: own, not "strain" or "constraint"; not a pretrained or "trained" model's name: inference jobs load those; not a data
#: split's size, "training samples: 15240192", which an inference job reading that split prints too), fine-tuning, a
#: loss, a gradient norm, a learning rate, an optimizer, an epoch, a backward pass, a checkpoint saved.
_TRAINING = Guarded(r"(?<![a-z])train(?!ed\b|(?:ing)? (?:samples|set|size|data|examples)\s*[:=]\s*\d)"
                    r"|fine-?tun|loss|grad_?norm|learning[_ ]rate|\blr\b|optimi[sz]|epoch|\bbackward"
                    r"|\bsav(?:e|es|ed|ing)\b.{0,60}checkpoint|checkpoint-\d",
                    ("train", "tun", "loss", "norm", "rate", "lr", "optimi", "epoch", "backward", "checkpoint"))
#: The work of a job with no training loop, in its own words (on the lower-cased line).
_INFERENCE = Guarded(r"\b(?:eval|valid|test|infer|predict|generat|sampl|decod|prompt|scor|benchmark|attribut"
                     r"|interpret|classif)",
                     ("eval", "valid", "test", "infer", "predict", "generat", "sampl", "decod", "prompt", "scor",
                      "benchmark", "attribut", "interpret", "classif"))


def no_training_loop(lines: Sequence[str], top: int, tb: Sequence[str] | None) -> bool:
    """P5: whether the job whose failure (or its traceback ``tb``) starts at ``top`` ran no training loop:
    neither the log above the failure nor the traceback speaks of training, and the job's own lines
    above it speak of evaluation, inference or scoring."""
    if tb is not None and any(_TRAINING.search(frame.lower()) for frame in tb):
        return False
    said = False
    for k, line in enumerate(lines[:top]):
        low = line.lower()
        if _TRAINING.search(low) and not _warning_source(lines, k):
            return False
        said = said or (_INFERENCE.search(low) is not None and _own_line(low))
    return said


def _warning_source(lines: Sequence[str], k: int) -> bool:
    """Whether ``lines[k]`` is the source line Python's ``warnings`` prints under a warning (indented, after the
    "path.py:824: UserWarning: ..." line): a library's code ("return Variable._execution_engine.run_backward("), not
    what the job did."""
    return k > 0 and lines[k][:1] in (" ", "\t") and "Warning: " in lines[k - 1][:400]


def _own_line(line: str) -> bool:
    """Whether ``line`` (lower-cased) is the job's own output rather than a library's warning (its source path) or wandb's."""
    return "site-packages" not in line and "warn" not in line and not line.startswith("wandb:")


#: A count of items done out of a total on a job's own line ("Processing sample 137/300 for class 6..."), not a date's
#: or a path's digits ("2024/07/19").
_COUNTED = re.compile(r"(?<![\d/.:])(\d+)/(\d+)(?![\d/.:])")
#: Lines above the failure looked at for the job's counted work.
_WORK_LOOKBACK = 12


def work_counted(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the lines just above ``top`` (from ``floor``) count the job's work item by item: the same total on
    every counter, the count moving (P5: an inference job's first item done is its work, not its set-up); progress
    bars are left out."""
    counts: dict[str, set[str]] = {}
    for line in lines[max(floor, top - _WORK_LOOKBACK):top]:
        if "\r" in line or "%|" in line:
            continue  # a progress bar: what it does is read from its title (a set-up bar's, "Preparing data")
        for done, total in _COUNTED.findall(line[:200]):
            counts.setdefault(total, set()).add(done)
    return any(len(done) >= 3 and total != "0" for total, done in counts.items())

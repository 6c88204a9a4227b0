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

from collections.abc import Sequence

from gpulens.diagnosis.guarded import Guarded

__all__ = ["no_training_loop"]

#: What a training job prints or runs and an inference job does not (on the lower-cased line): training (not a
#: pretrained model's name: inference jobs load those), fine-tuning, a loss, a gradient norm, a learning rate, an
#: optimizer, an epoch, a backward pass, a checkpoint saved.
_TRAINING = Guarded(r"(?<!pre)train|fine-?tun|loss|grad_?norm|learning[_ ]rate|\blr\b|optimi[sz]|epoch|\bbackward"
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
    for line in lines[:top]:
        low = line.lower()
        if _TRAINING.search(low):
            return False
        said = said or (_INFERENCE.search(low) is not None and _own_line(low))
    return said


def _own_line(line: str) -> bool:
    """Whether ``line`` (lower-cased) is the job's own output rather than a library's warning (its source path) or wandb's."""
    return "site-packages" not in line and "warn" not in line and not line.startswith("wandb:")

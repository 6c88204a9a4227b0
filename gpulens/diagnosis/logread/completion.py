"""Positive evidence that a run ended normally: what trainers, launchers, schedulers and
experiment trackers print when a job finishes.

Only positive evidence counts: a log that merely stops is not healthy. A completion line
decides only when no terminal failure (a traceback that ended the process, a kill, a time
limit, a non-zero exit) comes after it.
"""

from __future__ import annotations

import re

__all__ = ["COMPLETION_COVER", "COMPLETION_KEYS", "completion_strength", "is_completion"]

#: Literal keys (``str.find`` prefilter) of the completion messages below: every message the
#: patterns accept holds one of them (tests/diagnosis/test_logread.py checks the examples).
COMPLETION_KEYS: tuple[str, ...] = (
    "reached", "raining done", "raining complete", "raining COMPLETE", "raining finished", "raining is",
    "inished training", "inished Training", "inish training", "inish Training", "inished after",
    "raining took", "raining time", "otal training time", "train_runtime", "exits successfully",
    "Exit code: 0", "xit status 0", "Successfully completed", "Run summary", "Synced ", "View run",
    "Results saved to", "epochs completed in", "arly stopping", "arlyStopping", "Signaling Trainer to stop",
    "Stopping. Best", "aving final", "aving the final", "aved final", "final model", "done", "Done", "DONE",
    "All done", "completed successfully", "Finished", "finished", "FINISHED", "Best acc", "Enjoy",
    "Job Finished", "End of training", "Run finished",
)

#: Fewer, shorter literals one of which every key above holds: scanning a block for these finds
#: every line holding a key (and a few more, which ``completion_strength`` then turns down)
#: in less than half the passes (tests/diagnosis/test_logread.py checks the cover).
COMPLETION_COVER: tuple[str, ...] = (
    "raining", "inish", "FINISHED", "done", "Done", "DONE", "xit", "complet", "reached", "train_runtime",
    "Run summary", "Synced ", "View run", "Results saved to", "arly", "Signaling Trainer to stop", "Stopping. Best",
    "final", "Best acc", "Enjoy",
)

_STRONG = re.compile(
    r"`?Trainer\.fit`? stopped: `?max_(?:epochs|steps)=\d+`? reached"
    r"|[Tt]raining (?:is )?(?:done|complete[d]?|COMPLETE|finished)\b|[Ff]inish(?:ed)? [Tt]raining"
    r"|[Ff]inished after \d+ (?:iterations|steps|epochs)|\bepochs completed in\b"
    r"|[Tt]otal training time|[Tt]raining took\b|[Tt]raining time\b|'train_runtime'|\btrain_runtime\b"
    r"|Process \d+ exits successfully|\bExit code: 0\b|exit status 0\b|Successfully completed\."
    r"|wandb: (?:Run summary|Synced \d+ W&B file)|wandb: 🚀 View run|\bResults saved to\b"
    r"|[Ee]arly stopping(?: triggered)?|EarlyStopping|Signaling Trainer to stop|Stopping\. Best"
    r"|[Ss]aving (?:the )?final (?:model|checkpoint)|final model|[Ss]aved final"
    r"|\bcompleted successfully\b|\bAll done\b|\bJob Finished\b|\bEnd of training\b|\bRun finished\b"
)
_WEAK = re.compile(
    r"^\W*(?:done|Done|DONE|finished|Finished|FINISHED|Enjoy)[.!]?\W*$|\bBest acc\b|^\s*Finished\b"
)


def completion_strength(line: str) -> float:
    """How surely a line says the run ended normally: 0 (not a completion line), 0.8 (a weak
    word such as a bare ``done.``), 0.95 (a trainer/launcher/scheduler completion message)."""
    if not any(k in line for k in COMPLETION_KEYS):
        return 0.0
    if _STRONG.search(line):
        return 0.95
    if _WEAK.search(line):
        return 0.8
    return 0.0


def is_completion(line: str) -> bool:
    """Whether a line is a completion message (strong or weak)."""
    return completion_strength(line) > 0

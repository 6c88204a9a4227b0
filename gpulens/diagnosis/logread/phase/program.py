"""Where the failing program's own lines start and where its run ended.

A program's start (torchrun's banner, ``wandb.init``, a sweep agent's run, DeepSpeed's per-node launch):
the steps printed before it are another program's. The run's end above a failure (a strong completion
line, wandb's footer passed over) and a job script's next stage announced after it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.end.completion_messages import (
    AT_EXIT,
    completion_strength,
    is_completion,
)
from gpulens.diagnosis.logread.launches import TORCHRUN_BANNER, launch_banner
from gpulens.diagnosis.logread.phase.text import LOOKBACK
from gpulens.diagnosis.logread.steplines import SHOWN, on_screen, progress_count

__all__ = ["RUN_LOOKBACK", "completion_above", "run_end_above", "run_start"]


#: Lines a program prints once when it starts, before any step of its own: torchrun's (and
#: ``torch.distributed.launch``'s) banner, ``wandb.init``'s. A job script that runs several
#: programs (pre-training, then fine-tuning, then evaluation) prints them again for each; a wandb
#: sweep agent (``wandb/wandb_agent.py``) logs "Agent starting run with config:" before each run it starts; DeepSpeed's
#: per-node launcher (``deepspeed/launcher/launch.py`` ``main``) logs "nnodes=N, num_local_procs=N, node_rank=N" before
#: it spawns its workers. torchrun's banner counts only where it was logged (:func:`launch_banner`). DeepSpeed's line is
#: each node's (``pdsh`` merges them): another node's can fall inside the failing traceback, so it bounds the steps
#: above a failure (an earlier stage's) but never the traceback read (as rootline's relaunch does not count it).
_PER_NODE_START = "num_local_procs="
_RUN_START_KEYS = ("Tracking run with wandb version", "Agent starting run with config", _PER_NODE_START, TORCHRUN_BANNER)


#: Training progress lines after a completion line that show the run went on past it (one line may be
#: the summary printed with it: "Early stopping ..." then "Best Iter=[1] ...").
_WENT_ON = 2


#: Lines above a failure searched for the start of its program.
RUN_LOOKBACK = 5000


def run_start(lines: Sequence[str], floor: int, before: int, reach: int, per_node: bool = True) -> int:
    """The index of the last program start (``_RUN_START_KEYS``; DeepSpeed's per-node line only with ``per_node``)
    in the ``reach`` lines before ``before`` (not before ``floor``), else ``floor``: the steps printed before it are
    another program's."""
    for i in reversed(find_keys(lines, _RUN_START_KEYS, max(floor, before - reach), before)):
        if (TORCHRUN_BANNER not in lines[i] or launch_banner(lines, i)) and (per_node or _PER_NODE_START not in lines[i]):
            return i
    return floor


def run_end_above(lines: Sequence[str], floor: int, top: int) -> tuple[int | None, int | None]:
    """(the run's end, the next stage's announcement after it) among the last lines before ``top``: the
    last completion line (None when training steps went on after it without a next stage announced: one
    epoch's or stage's end, "Finish training epoch 9." then epoch 10's), and the first announcement of
    the job's next program after it (:func:`_next_stage`)."""
    done = completion_above(lines, _own_lines_back(lines, floor, top), top)
    if done is None:
        return None, None
    stage = _next_stage(lines, done, top)
    if stage is None and progress_count(lines, done + 1, top, _WENT_ON) >= _WENT_ON:
        return None, None
    return done, stage


#: The most lines of a tracker's footer passed over (wandb's run history and summary: one line a metric).
_FOOTER_REACH = 400


def _own_lines_back(lines: Sequence[str], floor: int, top: int) -> int:
    """Where the last ``LOOKBACK`` lines before ``top`` start, wandb's lines not counted: ``wandb.finish`` (at the
    program's exit, ``wandb/sdk/wandb_run.py`` ``_footer``) prints "wandb: Run history:", a line a metric, "wandb: Run
    summary:", another line a metric, "wandb: Synced ...", between the program's last line and its traceback."""
    k, own = top, 0
    while k > floor and own < LOOKBACK and top - k < LOOKBACK + _FOOTER_REACH:
        k -= 1
        if not ranks.launcher_text(on_screen(lines[k])).lstrip().startswith("wandb:"):
            own += 1
    return k


#: A job script's or a pipeline's announcement that its next stage starts (``echo "Running: eval"``,
#: ``=== Stage 2: fine-tuning ===``, "Starting evaluation", "***** Running Evaluation *****"),
#: after its timestamp or log-level prefixes; a bare ``=====`` ruler (a summary table's) is none.
_NEXT_STAGE = re.compile(r"(?i)^[\W\d]*(?:\[[^\]]{0,40}\]\s*)*(?:\W*(?:running|starting|launching|beginning|begin)\b|={3,} *\w)")


#: Completion strength below which a completion line does not end the run (a bare "Done!" that a set-up
#: step prints: PyG's dataset processing "Processing..." then "Done!"; a job script's echo): the verdict's
#: own bar for a completion line after a failure (``run_end.WEAK_AFTER_FAILURE``).
_STRONG_END = 0.9


def completion_above(lines: Sequence[str], start: int, top: int) -> int | None:
    """The index of the last completion line in ``lines[start:top]`` (not a tracker's at-exit line, also
    behind a launcher's prefix: Ray's ``(main_task pid=7) wandb: Synced 5 W&B file(s)``, printed at any exit)."""
    for k in range(top - 1, start - 1, -1):
        shown = on_screen(lines[k])[-SHOWN:]
        if _TEMPLATE_STOP in shown:
            return k
        if shown.strip() and is_completion(shown) and not ranks.launcher_text(shown).lstrip().startswith(AT_EXIT) \
                and completion_strength(logs.normalize_line(shown)) >= _STRONG_END:
            return k
    return None


#: The early stop of victoresque's pytorch-template ``base/base_trainer.py`` (``train``: "Validation performance
#: didn't improve for {} epochs. Training stops."), copied by R2Gen and many trainers built on it: its loop is over.
_TEMPLATE_STOP = " epochs. Training stops."


def _next_stage(lines: Sequence[str], done: int, top: int) -> int | None:
    """The index of the first announcement of a next stage (:data:`_NEXT_STAGE`) between a
    completion line at ``done`` and a failure at ``top``: a job script that goes on to its next
    program after one finished fails in that program's own phase, not in the finished one's
    shutdown."""
    return next((k for k in range(done + 1, top) if _NEXT_STAGE.match(on_screen(lines[k]))), None)

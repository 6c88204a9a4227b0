"""A training loop's start as trainers and scripts announce it.

Trainers' own announcements (the Hugging Face Trainer's "***** Running training", fairseq's, detectron2's,
Lightning's model summary, Keras' "Epoch 1/N"), and a loop or stage announced in words ("Starting
fine-tuning"): a new stage after an earlier one's steps, or the loop begun with no step printed yet.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.lines import last_matching
from gpulens.diagnosis.logread.phase.stages import STAGE_KEYS, stage_title, stage_trains
from gpulens.diagnosis.logread.steplines import HEAD, on_screen, progress_count

__all__ = ["LOOP_START", "loop_announced", "loop_started", "mlperf_before_loop", "new_loop"]


#: A trainer's announcement that its training loop starts, printed once everything is set up (model
#: wrapped, optimizer built), just before the first batch: the Hugging Face Trainer's (and TRL's,
#: DeepSpeed-Chat's) "***** Running training *****" (DeepSpeed-Chat's step 3, ``step3_rlhf_finetuning/main.py``:
#: "***** Running training (total_iters=N) *****"), fairseq's "begin training epoch 1", detectron2's
#: "Starting training from iteration 0" (``SimpleTrainer``/``TrainerBase.train``), Ultralytics YOLO's
#: "Starting training for 100 epochs..." (after "Logging results to ..."), mmcv 1.x runners'
#: "workflow: [('train', 1)], max: 12 epochs" (``EpochBasedRunner.run``; ``max: 90000 iters`` for
#: ``IterBasedRunner``), Lightning's model summary ending "Total estimated model params size (MB)" (the
#: ``ModelSummary`` callback's ``on_fit_start``, after the model and optimizers are set up, before the
#: sanity check and the first batch), mmengine's ``CheckpointHook.before_train`` "Checkpoints will be saved to
#: {out_dir}." (``Runner.train`` calls the ``before_train`` hooks once the model, optimizer and loops are built,
#: then runs the loop), YOLOX's ``Trainer.before_epoch`` "---> start train epoch1" (``yolox/core/trainer.py``:
#: ``logger.info("---> start train epoch{}".format(self.epoch + 1))``, before the epoch's first iteration).
LOOP_START = ("***** Running training", "begin training epoch ", "Starting training from iteration ",
               "Starting training for ", "workflow: [(", "Total estimated model params size (MB)",
               "Checkpoints will be saved to ", "---> start train epoch")


#: A training loop or stage announced in words, after a logger's prefix ("start training", "Starting
#: fine-tuning ...", "=== Beginning sequential adaptation ... ==="), the way scripts print it once per
#: stage (pre-training, then training; training, then adaptation).
_LOOP_WORDS_START = re.compile(r"(?i)(?:^|[\s:\]=-])(?:start(?:ing|s)?|begin(?:ning|s)?)\s+(?:the\s+)?(?:\w+\s+){0,2}?"
                               r"(?:train(?:ing)?|fine-?tun\w*|adapt(?:ation|ing)?)\b")
#: An epoch's or iteration's number in an announcement ("Start training epoch 10"): one epoch of a loop
#: going on, not a new stage (epoch 0 or 1 starts one).
_ANNOUNCED_COUNT = re.compile(r"(?i)\b(?:epoch|iter\w*|step)\s*[:#\[]?\s*(\d+)")
_LOOP_WORD_KEYS = ("tart", "egin", "TART", "EGIN")


def new_loop(lines: Sequence[str], floor: int, top: int) -> int | None:
    """The index of a training loop's or stage's announcement (:data:`LOOP_START`, :data:`_LOOP_WORDS_START`)
    among the last lines before ``top``, with training steps printed before it and none after it: the
    steps above are an earlier stage's (pre-training, the previous program), and the failure is in this
    loop's first step. An announcement that names an epoch past the first is one epoch of the same loop."""
    lo = max(floor, top - _ANNOUNCE_LINES)
    found = last_matching(lines, (*LOOP_START, *_LOOP_WORD_KEYS, *STAGE_KEYS), _announces_stage, lo, top)
    if not found or progress_count(lines, found[0] + 1, top, 1) or not progress_count(lines, floor, found[0], 1):
        return None
    return found[0]


#: Lines above a failure searched for a new loop's announcement.
_ANNOUNCE_LINES = 200


def _announces_loop(line: str) -> bool:
    """Whether a line announces a training loop or stage starting (not one epoch of it)."""
    text = ranks.launcher_text(on_screen(line))[:HEAD]
    if not any(t in text for t in LOOP_START) and (text[:1] in (" ", "\t") or _LOOP_WORDS_START.search(text) is None):
        return False
    count = _ANNOUNCED_COUNT.search(text)
    return count is None or int(count.group(1)) <= 1


def _announces_stage(line: str) -> bool:
    """Whether a line announces a training loop or stage (:func:`_announces_loop`), or is a pipeline's numbered stage
    header naming training (:func:`.stages.stage_trains`): after an earlier stage's steps, a new one's start."""
    return _announces_loop(line) or stage_trains(stage_title(line))


def loop_announced(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the program announced in words that its training loop starts (:func:`_announces_loop`: "Start
    training", "START TRAIN 0", "Beginning training") among the last lines before a kill (P1 + P9: a kill takes the
    phase of the last activity printed; an error line after it may be the loop's own set-up failing)."""
    return bool(last_matching(lines, _LOOP_WORD_KEYS, _announces_loop, max(floor, top - _ANNOUNCE_LINES), top))


def loop_started(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the failing program announced its training loop before ``top`` (no step printed
    since: the failure is in the first step, not in its set-up)."""
    return bool(last_matching(lines, LOOP_START, lambda ln: True, floor, top)) \
        or bool(last_matching(lines, ("Epoch ",), lambda ln: _FIRST_EPOCH_HEADER.match(ln) is not None, floor, top))


#: P3: "an ``Epoch 1/N`` header" marks the loop's start: Keras' ``ProgbarLogger.on_epoch_begin`` prints
#: ``f"Epoch {epoch + 1}/{self.epochs}"`` alone on a line before the epoch's first batch (scripts copy it, some with
#: "starting..." after it). Only the first epoch's: a later one's says the earlier epochs ran.
_FIRST_EPOCH_HEADER = re.compile(r"^\s*Epoch 1/\d+(?: (?:starting|started|begins?)\W*)?\s*$")


#: MLPerf's compliance log (``mlperf_logging/mllog``: each event a ``:::MLLOG {...}`` line with its ``"key"``). The
#: benchmark's untimed initialisation runs between ``init_start`` and ``init_stop`` (warm-up iterations allowed there:
#: DDP's reducer can rebuild its buckets before any training), and the training loop announces each of its epochs or
#: blocks (``constants.EPOCH_START``, ``constants.BLOCK_START``) before their steps.
_MLLOG = ":::MLLOG {"
_MLLOG_LOOP = ('"key": "epoch_start"', '"key": "block_start"')


def mlperf_before_loop(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the program logs MLPerf's events (:data:`_MLLOG`) and none of its training loop's (:data:`_MLLOG_LOOP`)
    before ``top``: it failed in the benchmark's initialisation (P3: ``startup``), whatever warm-up ran there."""
    return bool(last_matching(lines, (_MLLOG,), lambda ln: True, floor, top)) \
        and not last_matching(lines, _MLLOG_LOOP, lambda ln: True, floor, top)

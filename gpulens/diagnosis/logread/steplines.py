"""The lines of a log that count training steps, and the step each one counts.

What one line says: whether it is a progress line of the training itself (:func:`step_progress`: a
step/iteration/epoch mark, a tqdm bar, a trainer's logger line; not a set-up bar, a setting, prose, a
warning), the step it counts (:func:`step_in`), what it shows on screen (:func:`on_screen`: a bar's last
refresh), and an evaluation's own progress line (:data:`EVAL_BAR`). :mod:`phase` reads the phase of a
failure and the last step printed from them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.guarded import Branches, Guarded, contains_any
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.bars import bar_under_text, bar_update
from gpulens.diagnosis.logread.end.progress_end import last_refresh
from gpulens.diagnosis.logread.lines import PROGRESS_KEYS, TIMM_TRAIN, is_progress, last_matching

__all__ = ["EVAL_BAR", "HEAD", "KERAS_PROGRESS_KEYS", "SETUP_BAR", "SETUP_COUNT", "SHOWN", "STEP_KEYS", "keras_bar",
           "keras_progress", "no_total_bar", "on_screen", "plain", "printed_before", "progress_count", "step_in", "step_lines",
           "step_progress", "to_float", "warns", "without_glued_kill"]


_STEP_RES = (
    # fairseq's progress line counts ``num_updates=N`` after its epoch ("epoch 001:  100 / 1000 loss=9.1, ...,
    # num_updates=100, ..."; fairseq_cli/train.py's ``train_inner`` stats)
    re.compile(r"\b(?:global_step|num_updates|step|Step|STEP|iter(?:ation)?|Iter(?:ation)?|it)\s*[=:\[#]?\s*(\d[\d,]*)"
               r"(?:\s*/\s*\d+)?"),
    re.compile(r"\[step=(\d+)"),
    re.compile(r"\b[Ee]poch\s*[\[:=#]?\s*(\d+(?:\.\d+)?)(?:\s*/\s*\d+)?"),
    re.compile(r"'epoch':\s*(\d+(?:\.\d+)?)"),
    re.compile(r"\s(\d+)/\d+\s+\["),
)


#: Characters at the end of a line looked at.
SHOWN = 400


#: A bare iteration counter a script prints once per step ("ite 19988", StyleGAN/EDM's
#: "tick 928   kimg 46444.6   time 3d 07h 55m ...").
_COUNTER = re.compile(r"(?:ite|tick)\s+(\d+)\b")
_COUNTER_KEYS = ("ite ", "tick ")
#: A federated-learning round, printed when the round starts: Flower's server ``log(INFO, "[ROUND %s]",
#: current_round)`` ("INFO :      [ROUND 2]"), and the ``[Round 2/100]`` of scripts that count their
#: communication rounds so; round 1 is the first step, a later one is training.
_ROUND = re.compile(r"(?:^|[\s:])\[(?:ROUND|Round) (\d+)(?:\s*/\s*\d+)?\]")
_ROUND_KEYS = ("[ROUND ", "[Round ")
STEP_KEYS = (*PROGRESS_KEYS, *_COUNTER_KEYS, *_ROUND_KEYS, "eta: ", "STEP", "EPOCH", "ITER", "checkpoint-",
             " time (ms) | ", "Train: ", "Total num frames: ")


#: The loss line of the loop in PyTorch's "Training with PyTorch" tutorial, copied into many
#: scripts: ``print('  batch {} loss: {}'.format(i + 1, last_loss))`` (indented, so not a progress
#: line for the verdict, which skips indented lines as traceback code).
_BATCH_LOSS = re.compile(r"\s*[Bb]atch\s+(\d+)\s+loss\s*:\s*[-+\d.]")


#: torchvision's reference ``MetricLogger.log_every`` line, copied by DETR, DeiT, MAE, BLIP, DINO and
#: many more: ``{header}  [{i}/{n}]  eta: {eta}  {meters}  time: ...  data: ...  max mem: ...``
#: (``Epoch: [1]  [3890/7393]  eta: 0:21:23  lr: 0.0001  loss: 20.17 (21.32) ...``; delimiter two
#: spaces or a tab). Its meters can run to thousands of characters, so its head says what it counts.
_METRIC_LOGGER = re.compile(r"^(.{0,120}?)\s\[\s*(\d+)\s*/\s*\d+\s*\]\s+eta: ")
#: Characters at the start of a line where a MetricLogger's head and counter are looked for.
HEAD = 200


def _metric_logger(line: str) -> str | None:
    """The iteration a training MetricLogger line counts (not an evaluation's ``Test:  [ 10/313]``)."""
    head = line[:HEAD]
    if "eta: " not in head:
        return None
    m = _METRIC_LOGGER.match(head)
    if m is None or EVAL_BAR.match(head.lstrip()) is not None:
        return None
    return m.group(2)


#: tqdm's bar without a total (``tqdm(loader)`` over an iterable with no ``len``): ``{desc}: {n}{unit}
#: [{elapsed}, {rate}{postfix}]``, the rate ``{x}{unit}/s``, ``{x}s/{unit}`` or ``?{unit}/s``
#: (``Total iterations: 8973: 316 it [16:02,  3.05s/ it]``, ``1187it [05:12,  3.80it/s, loss=0.31]``).
_NO_TOTAL_BAR = re.compile(r"(?:^|: )(\d+)( ?[A-Za-z]\w{0,15}) \[(?:\d+:)?\d\d:\d\d, +(?:[\d.]+|\?)(?:\2/s|s/\2)[,\]]")


def no_total_bar(line: str) -> re.Match[str] | None:
    """The last ``\r`` refresh of a tqdm bar without a total, if the line is one."""
    shown = on_screen(line)[-SHOWN:]
    if "[" not in shown or "/" not in shown:
        return None
    return _NO_TOTAL_BAR.search(shown)


def _no_total_steps(line: str) -> str | None:
    """The count of a tqdm bar without a total that steps a training loop (not a set-up bar: a data
    set's "Map: 12000 examples [00:03, 3500.12 examples/s]", thousands of iterations a second)."""
    m = no_total_bar(line)
    if m is None or SETUP_BAR.search(m.string[:m.start()]) is not None:
        return None
    rate = _RATE_ANY.search(m.string, m.end(2))
    return None if rate is not None and to_float(rate.group(1)) > _FAST else m.group(1)


#: Megatron-LM's ``training_log`` line (``megatron/training/training.py``: ``log_string = f" [{datetime.now()
#: .strftime('%Y-%m-%d %H:%M:%S')}]"`` then ``' iteration {:8d}/{:8d} |'.format(iteration, args.train_iters)``;
#: Megatron-DeepSpeed's and older Megatron's start at ``' iteration'``), printed by ``print_rank_last`` every
#: ``log_interval`` iterations: `` [2025-01-08 07:37:43] iteration      310/  937500 | consumed samples: ...``.
#: Its leading space makes it read as a traceback's code line elsewhere.
_MEGATRON_ITER = Guarded(r"(?:^|[\s\]])iteration +(\d+)/ *\d+ \|", ("iteration ",))


def _first_group(pattern: Guarded, text: str) -> str | None:
    """The first group of ``pattern``'s match in ``text`` (its literals checked first), if any."""
    m = pattern.search(text)
    return m.group(1) if m else None


def _megatron_iteration(line: str) -> str | None:
    """The iteration of a Megatron ``training_log`` line, if the line is one."""
    return _first_group(_MEGATRON_ITER, line[:HEAD])


#: A step, iteration or epoch number alone between rules of dashes, equals signs or stars, the banner
#: custom loops print when each starts or is logged (``print(f"{'=' * 20} Epoch {epoch}/{epochs} {'=' * 20}")``,
#: ``logging.info(f"----step{step}----")``: "===== Epoch 3/100 =====", "INFO::----step124000----"),
#: after a logger's prefix; the whole line is the banner, so a sentence naming a step is not one.
_BANNER = re.compile(r"(?:^|[:\]]\s?)[-=*#~]{2,}\s*(?:[Ss]tep|STEP|[Ee]poch|EPOCH|[Ii]ter(?:ation)?|ITER(?:ATION)?)"
                     r"\s*[:#]?\s*(\d+)(?:\s*/\s*\d+)?\s*[-=*#~]{2,}\s*$")
_BANNER_RULES = ("--", "==", "**", "##", "~~")


def _banner_count(line: str) -> str | None:
    """The number of a step/epoch banner (:data:`_BANNER`), if the line is one."""
    if len(line) > HEAD or not any(r in line for r in _BANNER_RULES):
        return None
    m = _BANNER.search(line.rstrip("\r\n"))
    return m.group(1) if m else None


#: A Hugging Face Trainer checkpoint folder being written, which names the global step it was saved at
#: (``trainer.py``'s ``_save_checkpoint``: ``f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"``, "checkpoint-500"):
#: the Trainer's own ``_save`` log "Saving model checkpoint to {output_dir}", and wandb's ``Artifact.add_dir``
#: notice "Adding directory to artifact (./out/checkpoint-500)... Done. 0.1s", printed when the ``WandbCallback``
#: (``integrations/integration_utils.py``, ``on_save`` with ``WANDB_LOG_MODEL=checkpoint``) uploads each checkpoint.
_SAVED_AT = Guarded(r"(?:Saving model checkpoint to |Adding directory to artifact \()\S*?\bcheckpoint-(\d+)\b",
                    ("Saving model checkpoint to ", "Adding directory to artifact ("))


def _saved_at_step(line: str) -> str | None:
    """The global step of a Trainer checkpoint saved or uploaded during training (:data:`_SAVED_AT`)."""
    return _first_group(_SAVED_AT, line[:SHOWN])




#: The ``ProgressMeter`` line of PyTorch's ImageNet example (``pytorch/examples`` ``imagenet/main.py`` ``display``:
#: ``prefix="Epoch: [{}]".format(epoch)``, ``batch_fmtstr`` "[{:Nd}/M]", then its meters joined by a tab, ``'\\t'.join``;
#: "Epoch: [0][  38/5005]\tTime  6.217 ( 7.920)\tData ..."): printed after a batch's step, its meters (dozens of
#: losses) can push the loss past the line's head. SAM 2's trainer (``facebookresearch/sam2`` ``training/trainer.py``
#: ``train_epoch``: ``ProgressMeter(..., prefix="Train Epoch: [{}]".format(self.epoch))``, whose ``display`` in
#: ``training/utils/train_utils.py`` logs ``" | ".join(entries)``; copied by VGGT's ``training/trainer.py``) joins them by
#: " | " and logs it after the batch's step every ``log_freq`` batches: "Train Epoch: [0][  1/1000] | Batch Time: 11.43
#: (26.54) | Data Time: ...".
#: (Only SAM 2's own prefix and meters take the " | " join: the ImageNet example's lines are tab-joined.)
_PROGRESS_METER = re.compile(r"\b[Ee]poch: \[\s*\d+\s*\]\s*\[\s*(\d+)\s*/\s*\d+\s*\]\t"
                             r"|\bTrain Epoch: \[\d+\]\[\s*(\d+)/\d+\] \| Batch Time: ")


def _progress_meter(line: str) -> str | None:
    """The batch count of a ``ProgressMeter`` line (:data:`_PROGRESS_METER`) read in the line's head, if it is one."""
    m = _PROGRESS_METER.search(line[:HEAD]) if "poch: [" in line[:HEAD] else None
    return (m.group(1) or m.group(2)) if m else None


def _timm_update(line: str) -> str | None:
    """The update index of a timm ``Train:`` line, or the samples done of an OpenCLIP ``Train Epoch:`` line."""
    return _first_group(TIMM_TRAIN, line[:HEAD])


#: Keras' ``Progbar`` line (``keras/utils/generic_utils.py``, tf.keras's ``tensorflow/python/keras/utils/generic_utils.py``,
#: ``Progbar.update``: ``bar = ('%' + str(numdigits) + 'd/%d [') % (current, self.target)``, then ``=``/``>``/``.`` to its
#: width and ``]``, then " - ETA: ..." or " - 12s 60ms/step" and the metrics; ``'%7d/Unknown' % current`` for a target
#: of None; verbose=2's "100/100 - 3s - loss: 0.12"), which ``ProgbarLogger.on_train_batch_end`` updates with the
#: batches done (``batch + 1``): " 12/200 [>.........] - ETA: 1:02 - loss: 0.6931". The count is padded to the total's
#: width, so the line may start with spaces (a traceback's code line for the progress test). Groups: the count, the
#: total, verbose=1's bar.
_KERAS_PROGBAR = re.compile(r"^\s*(\d+)/(\d+|Unknown) (?:(\[[=>.]*\]) - |- \d)")
#: ``ProgbarLogger.on_epoch_begin``'s header, ``f"Epoch {epoch + 1}/{self.epochs}"`` alone on its line.
_KERAS_EPOCH = re.compile(r"^\s*Epoch \d+/\d+\s*$")
#: Keras 3's ``Progbar`` draws its bar with this character ("   3/120 ━━━━━━━━━━━━━━━━━━━━ 4s 36ms/step - loss: 0.71").
_KERAS3_BAR = "━"
#: Literals of Keras' progress lines (:func:`keras_progress`), for a byte scan before a line is read.
KERAS_PROGRESS_KEYS = ("Epoch ", _KERAS3_BAR, "/")


def keras_bar(line: str) -> re.Match[str] | None:
    """The last refresh of a Keras 2 ``Progbar`` line with its bar and a known total (:data:`_KERAS_PROGBAR`; groups 1
    and 2: the count and the total), if the line is one."""
    shown = on_screen(line)[:HEAD]
    m = _KERAS_PROGBAR.match(shown) if "] - " in shown else None
    return m if m is not None and m.group(3) is not None and m.group(2).isdigit() else None


def keras_progress(line: str) -> bool:
    """Whether a line is one of Keras' own progress lines, as shown and without colour codes: the epoch header
    (:data:`_KERAS_EPOCH`), a ``Progbar`` line of any verbosity or total (:data:`_KERAS_PROGBAR`), Keras 3's bar."""
    shown = plain(on_screen(line))
    return _KERAS3_BAR in shown or _KERAS_EPOCH.match(shown) is not None or _KERAS_PROGBAR.match(shown) is not None


#: ESPnet2's training log (``espnet2/train/reporter.py``, ``SubReporter.log_message``: ``f"{self.epoch}epoch:{self.key}:"
#: f"{self.prev_count + 1}-{self.count}batch: "`` then the averaged stats), which ``Trainer.train_one_epoch`` logs every
#: ``log_interval`` batches after their steps: "1epoch:train:1-100batch: iter_time=1.2e-04, forward_time=0.123, loss=123.4,
#: ...". Its count is the batches done in the epoch; only the ``train`` key's (not a ``valid`` pass).
_ESPNET_TRAIN = re.compile(r"(?:^|[\s:\]])\d+epoch:train:\d+-(\d+)batch: ")


#: Sample Factory's runner report (``sample_factory/algo/runners/runner.py``, ``_report_progress``: "Fps is (10 sec: %.1f,
#: 60 sec: %.1f, 300 sec: %.1f). Total num frames: %d. Throughput: ..."), every few seconds while the learner trains on
#: its rollout workers' frames; the frames count the environment steps collected so far (0 before any).
_SF_FRAMES = re.compile(r"Fps is \(10 sec: (?:[\d.]+|nan), 60 sec: (?:[\d.]+|nan), 300 sec: (?:[\d.]+|nan)\)\. "
                        r"Total num frames: (\d+)\.")


def _sample_factory_frames(line: str) -> str | None:
    """The frames a Sample Factory runner report (:data:`_SF_FRAMES`) counts, if the line is one and counts some."""
    head = line[:HEAD]
    m = _SF_FRAMES.search(head) if "Total num frames: " in head else None
    return m.group(1) if m is not None and m.group(1) != "0" else None


def _espnet_batches(line: str) -> str | None:
    """The batches done in the epoch that an ESPnet2 training report (:data:`_ESPNET_TRAIN`) counts, if the line is one."""
    head = line[:HEAD]
    m = _ESPNET_TRAIN.search(head) if "epoch:train:" in head else None
    return m.group(1) if m else None


#: A line that starts with an iteration's count out of its total, then a separator before its meters ("Iteration 31/208 |
#: Iteration Elapsed 76.3 | Average: {...} | SPS 314 | Policy Update 54.1", as RL loops print once an iteration's rollout and
#: update are done; "Iteration 3/50, reward: ..."): the count itself, whatever the meters after it.
_LEADING_COUNT = re.compile(r"(?:Iteration|ITERATION) +(\d+) */ *\d+ *(?:\||,) ")
_LEADING_KEYS = ("Iteration ", "ITERATION ")


def _counter(line: str) -> str | None:
    """The count of a bare counter line (a training MetricLogger line, a tqdm bar without a total,
    Megatron's iteration line), if it is one."""
    if (n := _metric_logger(line)) is not None or (n := _no_total_steps(line)) is not None \
            or (n := _megatron_iteration(line)) is not None:
        return n
    if line.startswith(_COUNTER_KEYS):
        m = _COUNTER.match(line)
        return m.group(1) if m else None
    if ("[ROUND " in line[:HEAD] or "[Round " in line[:HEAD]) and (r := _ROUND.search(line[:HEAD])) is not None:
        return r.group(1)
    if (b := _banner_count(line)) is not None or (b := _saved_at_step(line)) is not None \
            or (b := _timm_update(line)) is not None or (b := _espnet_batches(line)) is not None \
            or (b := _sample_factory_frames(line)) is not None:
        return b
    if line.startswith(_LEADING_KEYS) and (c := _LEADING_COUNT.match(line)) is not None:
        return c.group(1)
    if line[:1] in " \t" and line.lstrip(" \t").startswith(("batch ", "Batch ")):
        m = _BATCH_LOSS.match(line)
        return m.group(1) if m else None
    return None


#: A shell's kill report printed right after the last character of a progress line (no newline between: tqdm and
#: Keras' ``Progbar`` end their updates with ``\r``): "45380/300000 [===>...] - Train Loss: -22.1 - Time (s):
#: 2.2343Killed".
_GLUED_KILL = re.compile(r"(?<=[\d\]\)])(?:Killed|Terminated|Aborted|Segmentation fault)(?: \(core dumped\))?\s*$")
_GLUED_KILL_KEYS = ("Killed", "Terminated", "Aborted", "Segmentation fault")


def without_glued_kill(line: str) -> str | None:
    """``line`` without a kill report printed onto its end (:data:`_GLUED_KILL`); None when it has none."""
    if not line.rstrip().endswith(_GLUED_KILL_KEYS) and "(core dumped)" not in line[-20:]:
        return None
    m = _GLUED_KILL.search(line)
    return None if m is None else line[:m.start()]


def step_in(line: str) -> str | None:
    """The step a progress line shows (as printed): the bar's, when a message was printed onto its last refresh."""
    if "%|" in line and not is_progress(line[-400:]) and (bar := bar_under_text(line)) is not None:
        line = bar
    if (n := _counter(line)) is not None:
        return n
    end: str | None = line[-400:]
    if not is_progress(line[-400:]):
        end = _hidden_progress(line)
    if end is None:
        return _progress_meter(line)
    if _is_setting(end) or _prose(line, end):
        return None
    for rx in _STEP_RES:
        m = rx.search(end)
        if m:
            return m.group(1).rstrip(",")  # "step=0, skipped=0": the list's comma is not the number's
    return None


def progress_count(lines: Sequence[str], floor: int, before: int, enough: int) -> int:
    """Training-step progress lines in ``lines[floor:before]``, counted backwards up to ``enough``."""
    return len(step_lines(lines, floor, before, enough))


def step_lines(lines: Sequence[str], floor: int, before: int, count: int = 1) -> list[int]:
    """Indexes of the last ``count`` training progress lines (:func:`step_progress`) in ``lines[floor:before]``,
    latest first."""
    return last_matching(lines, STEP_KEYS, step_progress, floor, before, count)


#: The words of a bar that sets a run up and counts what it readies (shards loaded, files fetched, CUDA graphs captured,
#: records mapped), never a step of the run.
_SETUP_STEMS = (r"load|fetch|download|map|filter|tokeni[sz]|resolv|captur|extract|compil|build|prepar|convert|cach|shard"
                r"|upload|copy")
#: What set-up progress bars say they do (loading, downloading, preprocessing, compiling; also generating, processing
#: and saving, which an evaluation's own bar may say).
SETUP_BAR = re.compile(rf"(?i)\b(?:{_SETUP_STEMS}|generat|process|sav)\w*\b")
#: :data:`SETUP_BAR` without the words an evaluation's own bar may say: a bar whose count is no step at all.
SETUP_COUNT = re.compile(rf"(?i)\b(?:{_SETUP_STEMS})\w*\b")
_RATE = re.compile(r"([\d.]+)it/s")
#: A bar's rate in its own unit per second ("3500.12 examples/s", "5.0it/s").
_RATE_ANY = re.compile(r"([\d.]+) ?[A-Za-z]\w*/s\b")
#: A line that states a setting or announces a stage rather than counting a step done (no loss
#: printed): "Iterations per epoch: 1108", "Total optimization steps = 500", "Starting iteration-wise
#: training", DeepSpeed ZeRO-3's "Invalidate trace cache @ step 56836: expected module ...".
_SETTING_WORDS = (r"\bper (?:epoch|step|iter\w*|device|gpu)\b|\btotal\b|\bnumber of\b|\bnum_"
                  r"|\bmax_|\bstarting\b|\bwarmup_|Invalidate trace cache"
                  # icefall's scan of the largest batches before its loop (``scan_pessimistic_batches_for_oom``: "Sanity
                  # check -- see if any of the batches in epoch 1 would cause OOM."): a batch tried, no step done
                  r"|\bwould cause OOM\b"
                  # a batch's size ("Tokens / micro-batch / rank: 32 x 2048", "batch size: 64", "batch sizes auto-scaled"), a
                  # checkpoint loaded or resumed at a step ("Loading model from ckpt/d20 with step 21400", "Resuming from epoch 2,
                  # global_step 278": the step the saved state names, not one done by this attempt, P2/P11)
                  # (a dot inside a path, "/root/.cache/ckpt/d20", is no sentence's end)
                  r"|\bbatch[ _-]?sizes?\b|\bmicro[-_ ]?batch\b|\b(?:load|resum|restor)\w*\b(?:[^.]|\.(?=\S)){0,120}?(?:\b|_)step\b"
                  # the Hugging Face Trainer resuming (``trainer.py`` ``_inner_training_loop``: ``f"  Continuing training from
                  # epoch {epochs_trained}"``, ``f"  Continuing training from global step {self.state.global_step}"``, ``f"  Will
                  # skip the first {epochs_trained} epochs then the first {steps_trained_in_current_epoch} batches in the first
                  # epoch."``): the saved state's counts, before this attempt's first step (P2: counted per attempt)
                  r"|\bcontinuing training from\b|\bwill skip the first\b"
                  # mmengine's ``Runner.resume`` (``mmengine/runner/runner.py``: ``self.logger.info(f'resumed epoch: {self.epoch},
                  # iter: {self.iter}')``) and mmcv 1.x's ``BaseRunner.resume`` ("resumed epoch %d, iter %d"), logged once the
                  # saved state is restored: the counts it restored, not a step of this attempt
                  r"|\bresumed epoch:? \d+, iter\b"
                  # a tensor's or a batch's shape printed while setting up ("Shapes of elements in a batch: (1, 20,
                  # 128)", "batch shape: torch.Size([8, 3, 224, 224])"), or by a debug print anywhere (PyTorch's repr of
                  # a shape, ``torch.Size([180, 500])``: "gen_output.batch[responses]: torch.Size([180, 500])")
                  r"|\bshapes?\b|\btorch\.Size\(\[")
_SETTING = re.compile(r"(?i)^(?!.*loss).*(?:" + _SETTING_WORDS + ")")
#: _SETTING's words alone, each searched only in a line holding its own literals: on an ASCII
#: line without "loss" or a newline, the same answer (``^(?!.*loss).*`` then tries every place).
_SETTING_SPLIT = Branches(re.compile(_SETTING_WORDS, re.IGNORECASE))
#: Lower-case literals one of which every match of _SETTING holds (its alternatives' own words).
_SETTING_KEYS = contains_any(("per ", "total", "number of", "num_", "max_", "starting", "warmup_",
                              "invalidate trace cache", "size", "micro", "load", "resum", "restor", "shape",
                              "continuing training from", "will skip the first", "torch.size([", "would cause oom"))


def _setting_text(end: str) -> str:
    """What of a line's end may state a setting: of a tqdm bar (its count and timing after its blocks, "| 371/592
    [06:32<03:53,  1.06s/it, num_gaussians: 35752693]", :func:`bars.bar_update`), its description only, not its
    postfix (the values ``set_postfix`` prints after the rate are the step's own, "num_gaussians: 35752693")."""
    shown = on_screen(end)
    if "%|" not in shown or bar_update(shown, after_blocks=True) is None:
        return end
    return shown[:shown.find("%|")]


def _is_setting(end: str) -> bool:
    """``_SETTING.search(end) is not None``; a line holding none of its literals (case-folded)
    is ruled out without the search (its ``^.*`` tries every position), and one without a
    newline is searched word by word (:data:`_SETTING_SPLIT`). Both where ``lower()`` folds
    the line as the pattern's ``(?i)`` does: it holds none of :data:`_ODD_FOLDS`."""
    if end.isascii() or not _ODD_FOLDS(end):
        low = end.lower()
        if not _SETTING_KEYS(low):
            return False
        if "\n" not in end:
            return "loss" not in low and _SETTING_SPLIT.matches(end)
    return _SETTING.search(end) is not None


#: The characters that ``re``'s case-insensitive matching takes for an ASCII letter and
#: ``str.lower()`` does not fold to it (dotted and dotless i, the long s, the Kelvin sign).
_ODD_FOLDS = contains_any(("\u0130", "\u0131", "\u017f", "\u212a"))


def _prose(line: str, end: str) -> bool:
    """Whether a line that reads as progress (``end``: the part read) is prose that names a step:
    a numbered instruction (:data:`_NUMBERED_STEP`), "step by step", or digits only in a launcher's
    prefix (a Ray worker's pid, a rank)."""
    if len(line) < SHOWN and (line[:1] in "[( 0123456789\x1b" or "pid=" in line[:HEAD]) \
            and (own := ranks.launcher_text(line)) is not line and not any(c.isdigit() for c in own):
        return True  # the number was the launcher's: "(main_task pid=28) Answer: ... step by step"
    if ("Step " in end or "step " in end) and _NUMBERED_STEP.search(end):
        return True  # "**Step 4: Analyze the search results**": a numbered instruction (a model's answer)
    if len(_SENTENCE_END.findall(end)) >= _SENTENCES and not any(rx.search(end) for rx in _STEP_RES) \
            and _LOSS_VALUE.search(end) is None:
        return True  # running text (a retrieved document, a model's answer) that happens to say "step": no counter in it
    return "by" in end and _BY_STEP.search(end) is not None and not is_progress(_BY_STEP.sub(" ", end))


#: The end of a sentence inside running text: a word, a full stop (or ? or !), a space and a capitalised word.
_SENTENCE_END = re.compile(r"[a-z][.?!][\"']?\s+[A-Z][a-z]")
#: Sentence ends that make a line's text prose.
_SENTENCES = 3


#: An instruction numbered as a step, words only after it ("Step 4: Analyze search results", "**Step 2:** Compute
#: the sum"): the reasoning a language model prints, which RL and evaluation logs (verl, TRL) show as samples.
_NUMBERED_STEP = re.compile(r"(?i)\bstep\s+\d+\s*[:.)]\**\s*[a-z][a-z ,'-]*\W*$")
#: The phrase "step by step" (prose, a prompt or a model's answer), which holds the word "step".
_BY_STEP = re.compile(r"(?i)\bstep[- ]by[- ]step\b")
#: vLLM's tqdm bar format (``vllm/model_executor/model_loader/weight_utils.py``, ``_BAR_FORMAT = "{desc}:
#: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]\n"``): "Loading
#: safetensors checkpoint shards:  67% Completed | 2/3 [00:13<00:06,  6.28s/it]".
_VLLM_BAR = "% Completed | "
#: A bar faster than this many iterations per second is not stepping a GPU training job.
_FAST = 1000.0


#: DeepSpeed's step timers (``deepspeed/utils/timer.py``, ``SynchronizedWallClockTimer.log``: ``f"rank={rank} time
#: (ms)"`` then ``" | {name}: {elapsed:.2f}"`` per timer, through ``log_dist``), printed with ``wall_clock_breakdown``
#: after each step's forward, backward and optimizer step: "[Rank 0] rank=0 time (ms) | forward: 12.04 | backward:
#: 23.69 | backward_inner: 23.65 | backward_allreduce: 0.00 | optimizer_step: 11.68". They count a step done.
_DS_TIMER = re.compile(r"\brank=\d+ time \(ms\)(?: \| \w+: [\d.]+)*? \| (?:forward|backward|optimizer_step|step)"
                       r"(?:_microstep)?: [\d.]+")


def _ds_step_timer(line: str) -> bool:
    """Whether a line is DeepSpeed's timer report of a training step (:data:`_DS_TIMER`)."""
    return " time (ms) | " in line[:SHOWN] and _DS_TIMER.search(line[:SHOWN]) is not None


#: DeepSpeed's progress report at step 0 (``deepspeed/runtime/engine.py``: ``DeepSpeedEngine.__init__`` calls
#: ``self._report_progress(0)`` right after ``_configure_lr_scheduler``, which ``log_dist``s ``f"step={step},
#: skipped={skipped}, lr={lr}, mom={mom}"``): printed inside ``deepspeed.initialize``, before any step (the loop's own
#: reports, every ``steps_per_print`` steps, count ``global_steps + 1``, never 0): "[Rank 0] step=0, skipped=0, lr=[1e-05]".
_DS_INIT_REPORT = " step=0, skipped=0, lr="


def _ds_init_report(line: str) -> bool:
    """Whether a line is DeepSpeed's step-0 report printed while its engine is built (:data:`_DS_INIT_REPORT`)."""
    return _DS_INIT_REPORT in line[:SHOWN]


def step_progress(line: str) -> bool:
    """A progress line of the training itself: not a warning's text, not a set-up bar (loading
    weights, mapping a data set: named so, or running thousands of iterations a second), not DeepSpeed's
    report while its engine is built."""
    if _ds_init_report(line):
        return False
    if _counter(line) is not None or _ds_step_timer(line) or keras_bar(line) is not None:
        return True  # (no step number is reported from a Keras bar, old Keras counts samples; phase.py still
        # reads the bar's count against its total to tell a first step from a later one)
    if "%|" in line[-SHOWN:]:
        line = line.lstrip()  # tqdm pads its bar on the left ("  0%|")
    end: str | None = line[-SHOWN:]
    if not is_progress(line):
        end = _hidden_progress(line)
    if end is None:
        if "%|" in line and (bar := bar_under_text(line)) is not None:
            return step_progress(bar)  # a message printed onto the bar's last refresh: the bar is the progress
        if (cut := without_glued_kill(line)) is not None:
            return step_progress(cut)  # a shell's kill report printed onto a progress line (a Keras Progbar's)
        return _progress_meter(line) is not None
    if warns(line):
        return False
    if not any(c.isdigit() for c in end) or _is_setting(_setting_text(end)):
        return False  # "waiting for batch...", "Iterations per epoch: 1108", "Starting training": no step done
    if _prose(line, end):
        return False
    shown = on_screen(line)
    if "%|" not in shown and "\r" in line and "%|" in end:
        shown = _last_refresh(line)  # its last refresh cut short (ranks writing at once): the one before
    if "%|" in shown or "it/s" in shown or "s/it" in shown or _VLLM_BAR in shown:
        head = shown.split("%|")[0].split(_VLLM_BAR)[0]  # a slow bar shows "6.28s/it"
        if SETUP_BAR.search(head):
            return False
        rate = _RATE.search(shown)
        if rate is not None and to_float(rate.group(1)) > _FAST:
            return False
    return True


#: A metric named after an error rate, with its value: DETR's ``MetricLogger`` meter ``class_error: 0.0000``
#: (``engine.py`` of facebookresearch/detr, copied by Deformable-DETR, DINO, MOTIP and their kin, printed on
#: every training line), ``top1_error = 12.5``, ``train_error: 0.03``.
_ERROR_METRIC = re.compile(r"\w*[Ee]rror\w*\s*[:=]\s*[-+]?\d")


def _hidden_progress(line: str) -> str | None:
    """The text that shows a training step in a logger line the progress test (which reads a line's
    last characters) does not take: its last characters without the names of error-rate metrics
    (:data:`_ERROR_METRIC`; their values kept), or, for a line longer than those that holds no error
    word, its head, where loggers put the counter before dozens of meters (``INFO: Iters: 800/20000 ||
    Lr: 0.0193 || Task Loss: 1.0468 || ...``, ``[Epoch: 10] [40/49] [eta: 0:0:22] loss = 7.1177 ...``);
    the head only with a counter and a loss's value in it; not a progress bar's line (its head is an old refresh), not
    a traceback's code line."""
    end = line[-SHOWN:]
    if ("rror" not in end and len(line) <= SHOWN) or line[:1] in (" ", "\t") or 0 <= line.find("\r") < len(line) - 1:
        return None
    tail = _no_error_metrics(end)
    if tail is not end and is_progress(tail):
        return tail
    if len(line) <= SHOWN or _has_error_word(tail):
        return None
    head = _no_error_metrics(line[:HEAD])
    return head if _LOSS_VALUE.search(head) is not None and _COUNTED.search(head) is not None else None


#: A loss with its value, as a training step's line prints it ("Task Loss: 1.0468", "loss = 7.1177"),
#: which a configuration dump (``batch=16, epochs=100, loss_weight=1.0``) does not.
_LOSS_VALUE = re.compile(r"(?i)\bloss\b\s*[:=]\s*[-+]?\d")
#: A step, iteration or epoch counter ("Iters: 800/20000", "[Epoch: 10] [40/49]", "step 120").
_COUNTED = re.compile(r"(?i)\b(?:epoch|iter\w*|step)\b\W{0,3}\d")


def _no_error_metrics(text: str) -> str:
    """``text`` without the names of its error-rate metrics (``class_error: 0.0`` -> ``0.0``), or
    ``text`` itself when it names none."""
    return _ERROR_METRIC.sub(lambda m: m.group(0)[-1], text) if "rror" in text else text


#: The words that make a line an error's rather than progress (``lines.is_progress``'s).
_has_error_word = contains_any(("rror", "ERROR", "Exception", "FATAL", "ailed", "Killed", "Traceback", "CANCELLED"))


def _last_refresh(line: str) -> str:
    """The last ``\r`` refresh of a bar's line that shows a bar (``%|``): several processes writing one
    bar each to a shared console cut each other's refreshes ("\rLoading checkpoint shards:" and the rest
    of it on the next line)."""
    line = line.rstrip("\r\n")
    end = line.rfind("%|")
    return line[line.rfind("\r", 0, end) + 1:] if end >= 0 else on_screen(line)


#: A terminal colour code (SGR: ``\x1b[32m``, ``\x1b[0m``), which colouring loggers (loguru, termcolor, rich)
#: write into a file too: glued to the message ("\x1b[0mStart evaluation") it hides the message's first word.
_SGR = re.compile(r"\x1b\[[0-9;]*m")


def plain(line: str) -> str:
    """``line`` without terminal colour codes."""
    return _SGR.sub("", line) if "\x1b[" in line else line


def warns(text: str) -> bool:
    """Whether ``text`` is (or holds) a warning's words ("UserWarning: ...", c10's "Warning: ...", a logger's "warn"
    level): not a step done, not an announcement of what the program does next. Looser than
    phase.text's warning head (a warning that a source line follows) and :func:`records.warning_head`
    (a logger's header at warning level), which ask something else."""
    return "Warning" in text or "warn" in text


def on_screen(line: str) -> str:
    """What a line shows: the last of a progress bar's ``\r`` refreshes (a CRLF line's own
    ``\r`` ends it, it does not start an empty refresh)."""
    line = line.rstrip("\r\n")
    return line[line.rfind("\r") + 1:]


def to_float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


#: An evaluation's own progress line, by the name trainers give it: a tqdm bar ("Validation
#: DataLoader 0:  45%|####5     | 9/20", "Evaluating:  30%|", "Testing: ..."), a MetricLogger line
#: (LAVIS/BLIP "Evaluation  [ 570/1872]  eta: 3:12:57", DeiT/timm "Test:  [ 10/313]  eta: ..."), Lightning's
#: validation pass before fitting ("Sanity Checking DataLoader 0:  50%|#####     | 1/2"); lm-evaluation-harness'
#: request bars (``lm_eval/models/huggingface.py``: ``tqdm(desc="Running loglikelihood requests")``, "Running
#: generate_until requests"), vLLM's ``LLM.generate`` bar (``vllm/entrypoints/llm.py`` ``_run_engine``: ``desc=
#: "Processed prompts"``): a model run over a benchmark's or a data set's prompts; the evaluation loop of the DPO
#: reference trainer (``eric-mitchell/direct-preference-optimization`` ``trainers.py`` ``BasicTrainer.train``: ``tqdm.tqdm(
#: self.eval_batches, desc='Computing eval metrics')`` after "Running evaluation after {n} train examples"), copied by HALOs;
#: a feature extraction's bar, the inference pass of re-ID testing and probing (``tqdm(dataloader, desc='-- Extract %s
#: features: ' % type)`` over ``model(imgs)`` under ``torch.no_grad()``, "Extracting features:  39%|...| 548/1406").
EVAL_BAR = re.compile(r"^\W{0,3}(?:epoch \d+ \| )?(?:[Ee]val(?:uat\w*)?|EVAL\w*|[Vv]alid(?:at\w*)?|[Tt]est(?:ing)?|[Pp]redict\w*"
                      r"|[Ii]nference|[Ss]ampling|Sanity Checking"
                      r"|Running (?:loglikelihood(?:_rolling)?|generate_until|multiple_choice)\w* requests|Processed prompts"
                      r"|Computing eval metrics|Extract(?:ing)? (?:\w+ )?[Ff]eatures?)\b[^|\[\n]{0,40}?(?:\[\s*(\d+)\s*/\s*(\d+)\s*\]"
                      r"|\d+%\|[^|]*\|\s*(\d+)/(\d+))")
#: (fairseq's validation bar carries its ``BaseProgressBar`` prefix: ``prefix=f"valid on '{subset}' subset"`` after
#: "epoch {:03d}" joined by " | " (``fairseq/logging/progress_bar.py``; ``fairseq_cli/train.py`` ``validate``): "epoch 001 |
#: valid on 'valid' subset:  30%|###       | 30/100".)


#: A line's numbers, masked to compare its shape with another's.
_NUMBERS = re.compile(r"\d+")


def printed_before(lines: Sequence[str], floor: int, stop: int, line: str) -> bool:
    """Whether a line of the same shape (numbers masked) was printed in ``lines[floor:stop]``
    (its last :data:`_REPEAT_LINES` lines: a line a run prints periodically is printed there)."""
    key = max(_NUMBERS.split(line), key=len).strip()[:40]
    if not key:
        return False
    shape = _NUMBERS.sub("N", line)
    found = find_keys(lines, (key,), max(floor, stop - _REPEAT_LINES), stop)
    return any(_NUMBERS.sub("N", last_refresh(lines[k]).strip()) == shape for k in found)


#: Lines before a result line searched for an earlier line of its shape.
_REPEAT_LINES = 3000

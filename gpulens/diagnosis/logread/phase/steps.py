"""How far the training loop got, by the steps it printed (P2, P11).

The last step printed before a failure (a step line, a metric table's row, a bar the failure was printed
onto), a tqdm or Keras bar's count against its total, an epoch's own iteration counter, counts advancing,
verl's metrics line, Keras' progress lines, the run's results printed after its last step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.bars import bar_update, text_on_bar
from gpulens.diagnosis.logread.lines import last_matching
from gpulens.diagnosis.logread.phase.evaluation import RESULT_LINE
from gpulens.diagnosis.logread.phase.program import run_start
from gpulens.diagnosis.logread.phase.text import is_bar, on_bar
from gpulens.diagnosis.logread.steplines import (
    EVAL_BAR,
    HEAD,
    KERAS_PROGRESS_KEYS,
    SETUP_BAR,
    SETUP_COUNT,
    SHOWN,
    STEP_KEYS,
    keras_bar,
    keras_progress,
    on_screen,
    printed_before,
    step_in,
    step_lines,
    to_float,
    without_glued_kill,
)
from gpulens.diagnosis.logread.tracebacks import TRACEBACK_HEAD

__all__ = ["bar_done", "bar_short", "counts_advance", "exited_after_progress", "glued_bar", "glued_to_bar", "iter_in_epoch", "keras_printed",
           "last_step", "own_step", "past_first", "results_after_progress", "table_step", "verl_step_logged"]


#: Lines looked back for the last step printed before a failure or the end.
_STEP_LOOKBACK = 600


def last_step(lines: Sequence[str], before: int, floor: int = 0) -> str | None:
    """The last step/iteration/epoch printed in ``lines[floor:before]`` (as printed) by the run
    that was going on at ``before`` (not by an earlier program of the same job script), or by a
    progress bar the line at ``before`` was printed onto."""
    if before < len(lines) and (glued := on_bar(lines[before])) is not None and glued.done != 0:
        return str(glued.done)
    floor = run_start(lines, floor, before, _STEP_LOOKBACK)
    found = last_matching(lines, STEP_KEYS, _counts_a_step, max(floor, before - _STEP_LOOKBACK), before)
    table = table_step(lines, floor, before)
    if table is not None and (not found or table[0] > found[0]):
        return table[1]
    return step_in(lines[found[0]]) if found else None


def _counts_a_step(line: str) -> bool:
    """Whether ``line`` prints a step (:func:`step_in`) and is no set-up bar's refresh ("Capturing CUDA graphs ...:
    0%| 0/3", "Loading checkpoint shards: 100%| 2/2": what it counts is no step of the run, :data:`steplines.SETUP_COUNT`)."""
    if step_in(line) is None:
        return False
    shown = on_screen(line)
    bar = bar_update(shown)  # a bar's count ("2/2 [00:01<00:00, ...]"): its title is what stands before it
    return bar is None or SETUP_COUNT.search(shown[:bar.start()]) is None


#: A row of a whitespace-aligned metric table: numbers only, three or more columns (DomainBed's
#: ``misc.print_row``, copied by SWAD, MIRO and other domain-generalization code, and many scripts'
#: own ``print(f"{epoch:<10}{loss:<12.4f}...")`` tables).
_NUM_ROW = re.compile(r"\s*(?:[-+]?\d[\d.eE+-]*\s+){2,}[-+]?\d[\d.eE+-]*\s*")
#: The column names that count steps, in the order preferred.
_STEP_COLUMNS = ("step", "steps", "iter", "iteration", "global_step", "epoch")
#: Non-blank lines above a failure where the table's last row may be; rows searched up for the header.
_ROW_NEAR = 4
_TABLE_ROWS = 2000


def table_step(lines: Sequence[str], floor: int, before: int) -> tuple[int, str] | None:
    """(index, value) of the step column of the last row of a metric table printed just before
    ``before`` (among its last few non-blank lines): the row's header, the first line above the
    rows that is not one, names a step/iteration/epoch column and has as many columns."""
    row = None
    seen = 0
    for k in range(before - 1, max(floor, before - 4 * _ROW_NEAR) - 1, -1):
        text = on_screen(lines[k])
        if not text.strip():
            continue
        if len(text) < 400 and _NUM_ROW.fullmatch(text):
            row = k
            break
        seen += 1
        if seen >= _ROW_NEAR:
            return None
    if row is None:
        return None
    values = lines[row].split()
    for k in range(row - 1, max(floor, row - _TABLE_ROWS) - 1, -1):
        text = on_screen(lines[k])
        if not text.strip() or (len(text) < 400 and _NUM_ROW.fullmatch(text)):
            continue
        names = text.split()
        if len(names) != len(values):
            return None
        col = next((names.index(c) for c in _STEP_COLUMNS if c in names), None)
        return (row, values[col]) if col is not None else None
    return None


def own_step(phase: str, step: str | None) -> str | None:
    """The step to report for a failure in ``phase``: none for a start-up failure (the program
    failed before its first step; a step printed above it is an earlier program's or attempt's)."""
    return None if phase == "startup" else step


def glued_to_bar(lines: Sequence[str], failure: int) -> str | None:
    """The phase a progress bar shows when the failure line (without a traceback) was printed onto it
    (:func:`_bar_glued`), or else onto the line just above it: the last activity before a run stopped mid-run
    (its bar at 162805/1000000 with "Error in sys.excepthook:" printed onto it, then wandb's bare prefix)."""
    here = _bar_glued(lines[failure]) if failure < len(lines) else None
    if here is None and failure < len(lines):
        here = _killed_on_keras_bar(lines[failure])
    return here if here is not None or failure == 0 else _bar_glued(lines[failure - 1])


def _killed_on_keras_bar(line: str) -> str | None:
    """``training`` when a shell's kill report was printed onto a Keras ``Progbar`` line past its first step ("45380/300000
    [===>...] - ... - Time (s): 2.2343Killed"); None otherwise."""
    cut = without_glued_kill(line)
    bar = keras_bar(cut) if cut is not None else None
    return None if bar is None or int(bar.group(1)) == 0 else "training"


#: verl's console metrics line (``verl/utils/logger/aggregate_logger.py``: ``LocalLogger.log`` prints
#: ``concat_dict_to_str(data, step)``, ``f"step:{step}"`` then `` - {k}:{v}`` per metric), which ``RayPPOTrainer.fit``
#: logs after a step's update, its ``global_steps`` counting from 1: "step:1 - actor/pg_loss:0.012 - ..." is one step
#: done (P2 (b)).
_VERL_METRICS = re.compile(r"(?:^|[\s)\]])step:(\d+) - [\w@.-]+/[\w/@.-]*:")


def verl_step_logged(lines: Sequence[str], got: Sequence[int]) -> bool:
    """Whether the last training progress line (``got``: :func:`step_lines`, latest first) is verl's metrics line of a
    step done."""
    # verl validates before training (RayPPOTrainer.fit, val_before_train) and logs that as "step:0 - val-...": no step done
    return bool(got) and "step:" in lines[got[0]][:HEAD] and (m := _VERL_METRICS.search(lines[got[0]][:HEAD])) is not None \
        and m.group(1) != "0"


def counts_advance(lines: Sequence[str], got: Sequence[int]) -> bool:
    """Whether the last training progress lines (``got``: :func:`step_lines`, the last four) count three different
    steps ("batch 16 ... batch 26 ... batch 36"): steps were done, even where the last number printed
    is an epoch's ("epoch 0") rather than a step's."""
    return len({n for i in got if (n := step_in(lines[i])) is not None}) >= 3 or _epoch_advanced(lines, got)


#: An epoch's number where a loop prints it ("Epoch 2/10", "epoch: 1", "doing epoch: 1", "[Epoch 3]").
_EPOCH_NUMBER = re.compile(r"\b[Ee]poch\b\W{0,3}(\d+)\b")


def _epoch_advanced(lines: Sequence[str], got: Sequence[int]) -> bool:
    """Whether the last training progress lines (``got``, latest first) name a later epoch after an earlier one
    ("epoch: 0 ... epoch: 1"): an epoch a loop begins only after the one before ended, its steps done (P2 (b): an
    epoch summary counts a step done), whatever else its lines print."""
    epochs = [int(m.group(1)) for i in got if "poch" in lines[i][:HEAD]
              and (m := _EPOCH_NUMBER.search(lines[i][:HEAD])) is not None]
    return len(epochs) >= 2 and epochs[0] > min(epochs[1:])


def bar_short(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the last training progress line before ``top`` is a tqdm bar short of its total ("9000/30000"): the loop
    had not reached its configured end (P10), so results printed after it are a periodic evaluation's, not the run's
    final ones (3D Gaussian Splatting's ``training_report`` "[ITER 7000] Evaluating train: L1 ... PSNR ...")."""
    m = _last_bar_update(lines, floor, top)
    return m is not None and int(m.group(1)) < int(m.group(2))


def bar_done(lines: Sequence[str], floor: int, top: int) -> int | None:
    """The steps done a tqdm bar shows when it is the last training progress line before ``top``; at least one
    when a bar at 0 shows a loss in its postfix (:data:`_POSTFIX_LOSS`)."""
    m = _last_bar_update(lines, floor, top)
    if m is None:
        return None
    done = int(m.group(1))
    return 1 if done == 0 and _POSTFIX_LOSS.search(m.group(0)) is not None else done


#: A loss in a tqdm bar's postfix (``set_postfix(loss=...)``, shown after the bar's time and rate: "0/90
#: [02:04<?, ?it/s, loss=55.3, lr=0.001]"): a loss is computed in a step, so the loop has done one even when
#: the bar counts something larger than a step (an outer bar over epochs at 0/90, its inner bar over the
#: epoch's batches printed between its refreshes, OpenPCDet's ``tools/train_utils``).
_POSTFIX_LOSS = re.compile(r"[,\[]\s*(?:\w+[_/])?loss=\s*[-+]?(?:\d|nan|inf)")


def _last_bar_update(lines: Sequence[str], floor: int, top: int) -> re.Match[str] | None:
    """The tqdm update (groups 1 and 2: the count and the total, :func:`bars.bar_update`) of the last training
    progress line before ``top``, when that line is a bar (or a Keras ``Progbar`` line, :func:`steplines.keras_bar`)."""
    got = step_lines(lines, floor, top)
    if not got:
        return None
    shown = on_screen(lines[got[0]])
    return bar_update(shown[-SHOWN:], after_blocks=True) if "%|" in shown else keras_bar(shown)


#: A logger's line that counts the iterations of an epoch after the epoch's number: mmcv/mmdet's
#: ``Epoch [1][50/9870]\tlr: ...``, mmengine's ``Epoch(train)  [1][  50/9870]  lr: ...``, the DeiT/timm
#: ``MetricLogger``'s ``Epoch: [0]  [  50/5005]  eta: ...`` (the epoch alone is not how far it got).
#: Also the loop line of the PyTorch tutorials copied into many scripts (``yunjey/pytorch-tutorial``'s
#: ``print('Epoch [{}/{}], Step [{}/{}], Loss: {:.4f}'.format(epoch+1, num_epochs, i+1, total_step, loss.item()))``,
#: printed after the step's ``optimizer.step()``), and its unbracketed kin "Epoch 1, Batch 10/404, Loss: 0.0575".
_EPOCH_ITER = re.compile(r"\b[Ee]poch(?:\(\w+\))?:?\s*\[\s*\d+\s*(?:/\s*\d+\s*)?\]\s*\[\s*(\d+)\s*/\s*\d+\s*\]"
                         r"|\b[Ee]poch:?\s*\[?\s*\d+\s*(?:/\s*\d+\s*)?\]?,\s*(?:[Ss]tep|[Bb]atch|[Ii]ter(?:ation)?):?\s*"
                         r"\[?\s*(\d+)\s*/\s*\d+\s*\]?,?\s+[Ll]oss\b")


def iter_in_epoch(lines: Sequence[str], floor: int, top: int) -> int | None:
    """The iteration within its epoch that the last training progress line before ``top`` counts,
    when that line is an epoch-and-iteration logger line (:data:`_EPOCH_ITER`)."""
    got = step_lines(lines, floor, top)
    if not got or "poch" not in lines[got[0]]:
        return None
    shown = on_screen(lines[got[0]])
    m = _EPOCH_ITER.search(shown[:HEAD]) or _EPOCH_ITER.search(shown[-SHOWN:])  # a MetricLogger's head
    return int(m.group(1) or m.group(2)) if m else None


def past_first(step: str | None) -> bool:
    """Whether a printed step is past the first: a count above 1, or a fractional epoch above 0
    (the Hugging Face Trainer's ``'epoch': 0.04`` is logged every ``logging_steps`` steps)."""
    text = (step or "").replace(",", "")
    if text.isdigit():
        return int(text) > 1
    return "." in text and to_float(text) > 0


#: Lines above the failure searched for Keras' progress lines.
_KERAS_LOOKBACK = 20000


def keras_printed(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether Keras printed a progress line (:func:`steplines.keras_progress`) in the ``_KERAS_LOOKBACK`` lines of
    ``lines[floor:top]`` before ``top``."""
    found = find_keys(lines, KERAS_PROGRESS_KEYS, max(floor, top - _KERAS_LOOKBACK), top)
    return any(keras_progress(lines[i]) for i in reversed(found))


#: Lines above the traceback searched for the last progress line, the run's results after it.
_RESULTS_BEFORE = 30
#: Lines above the traceback read for results when no progress line is near it.
_RESULTS_AT_END = 8


def results_after_progress(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the lines between the last progress line and the traceback at ``top`` hold the
    run's results (test accuracy, a metric table): the run got to its end and failed after it."""
    got = step_lines(lines, max(floor, top - _RESULTS_BEFORE), top)
    start = got[0] + 1 if got else max(floor, top - _RESULTS_AT_END)
    return any(RESULT_LINE.search(ln) and not is_bar(ln) and not printed_before(lines, floor, start, ln.strip())
               for ln in lines[start:top])


#: wandb's footer, printed when the run finishes (``wandb.finish``, called at the program's exit: ``wandb/sdk/wandb_run.py``
#: ``_footer_sync_info``, "wandb: Synced 6 W&B file(s), 0 media file(s), ..." and "wandb: Find logs at: ./wandb/run-.../logs").
_TRACKER_EXIT = ("wandb: Synced ", "wandb: Find logs at")


def exited_after_progress(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the program's tracker printed its exit footer (:data:`_TRACKER_EXIT`) between the last progress line
    and ``top``: the program had finished before what failed at ``top`` (the job script's next command)."""
    got = step_lines(lines, max(floor, top - _RESULTS_BEFORE), top)
    start = got[0] + 1 if got else max(floor, top - _RESULTS_AT_END)
    return any(ranks.launcher_text(ln).startswith(_TRACKER_EXIT) for ln in lines[start:top])


def _bar_glued(line: str) -> str | None:
    """The phase a progress bar shows when the failure line is that bar with the failure's message
    printed onto it (``Epoch 0:   0%|  | 619/163672 [04:53<20:22:49, ...]slurmstepd: error: *** JOB 52
    ON gpu-3 CANCELLED ...``): an evaluation's bar short of its total is evaluation, a training bar
    past 0 training; None when the line is no such bar, or a bar at 0 (a new epoch's, or the
    first step's: the lines above tell which)."""
    glued = on_bar(line)
    if glued is None:
        return None
    head = glued.head.lstrip()
    if EVAL_BAR.match(f"{head}{glued.done}/{glued.total}") is not None and glued.done < glued.total:
        return "evaluation"
    if SETUP_BAR.search(head.split("%|")[0]):
        return None  # a set-up bar (loading, downloading): no step was done
    return None if glued.done == 0 else "training"


def glued_bar(region: Sequence[str]) -> str | None:
    """The phase shown by a progress bar the traceback was printed onto (tqdm leaves no newline:
    ``Epoch 1/10:   0%|   | 0/375 [00:00<?, ?it/s]Traceback (most recent call last):``;
    :func:`bars.text_on_bar`): the first step at 0/N, else training; ``None`` when there is no
    such line."""
    for ln in region:
        if TRACEBACK_HEAD not in ln:
            continue
        glued = text_on_bar(ln)
        if glued is not None and glued.text.startswith(TRACEBACK_HEAD):
            return "first_step" if glued.done == 0 else "training"  # "1/242731 [...": one step done
    return None

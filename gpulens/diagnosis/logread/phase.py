"""The phase a run failed in: the decision order (P1-P11 of sample_logs/whole/README.md).

Phases: ``startup`` (before the first step), ``first_step``, ``training`` (with the last
step/iteration/epoch seen), ``evaluation``, ``checkpoint_save``, ``checkpoint_load``,
``shutdown`` (after the run's own end: final save/summary done, process-group teardown).

This module only orders the questions; each is answered by a module of its own: the failing
traceback (:mod:`phase_traceback`), what its frames name (:mod:`phase_frames`, :mod:`phase_startup`),
a checkpoint's save or load (:mod:`phase_checkpoint`), where the failing program's lines start and
end (:mod:`phase_runs`, :mod:`phase_loops`), an evaluation going on (:mod:`phase_eval`), the job's
teardown (:mod:`phase_teardown`), the steps printed (:mod:`phase_steps`) and the signs of steps
where none is printed (:mod:`phase_evidence`, :mod:`phase_clock`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import Guarded
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.lines import is_progress
from gpulens.diagnosis.logread.phase_clock import an_hour_in_loop
from gpulens.diagnosis.logread.phase_eval import (
    evaluating,
    evaluation_announced,
    evaluation_reported,
    names_eval,
    since_last_step,
    trainer_evaluating,
)
from gpulens.diagnosis.logread.phase_evidence import (
    KILL_AFTER,
    OUT_OF_TIME,
    first_collective,
    footer_above,
    logged_history,
    printed_losses,
    stepped,
)
from gpulens.diagnosis.logread.phase_frames import (
    PARSE_FUNC,
    eval_loader_frame,
    eval_metric_frame,
    eval_program,
    in_eval,
    in_train_step,
    keras_step,
)
from gpulens.diagnosis.logread.phase_loops import loop_announced, loop_started, new_loop
from gpulens.diagnosis.logread.phase_runs import (
    RUN_LOOKBACK,
    completion_above,
    run_end_above,
    run_start,
)
from gpulens.diagnosis.logread.phase_startup import (
    at_import,
    built_from_pretrained,
    ends_in_syntax_error,
    first_cuda_call,
    hub_base_weights,
    import_failed,
    model_summary,
    remote_code_import,
    setting_up,
)
from gpulens.diagnosis.logread.phase_steps import (
    bar_done,
    bar_short,
    counts_advance,
    glued_bar,
    glued_to_bar,
    iter_in_epoch,
    keras_printed,
    last_step,
    own_step,
    past_first,
    results_after_progress,
    table_step,
    verl_step_logged,
)
from gpulens.diagnosis.logread.phase_teardown import shutting_down
from gpulens.diagnosis.logread.phase_text import (
    LOOKBACK,
    failure_text,
    job_report_cut,
    killed,
    shell_error,
    shown_ends,
    without_warning_sources,
)
from gpulens.diagnosis.logread.phase_traceback import (
    ANY_CHAIN_NOTES,
    chained_outer,
    failing_traceback,
    frame_funcs,
    func_names,
    handler_frames,
)
from gpulens.diagnosis.logread.steplines import on_screen, progress_count, step_lines, to_float

__all__ = ["PHASES", "UNKNOWN", "last_step", "own_step", "phase_of", "run_start"]

PHASES = ("startup", "first_step", "training", "evaluation", "checkpoint_save", "checkpoint_load", "shutdown")
#: The answer when the log's evidence for the phase contradicts itself.
UNKNOWN = "unknown"

#: Read in the traceback's unindented lines (its head and its exception message). "serializ" only
#: as torch's (``torch/serialization``, "failed to serialize"): Python's "Object of type X is not
#: JSON serializable" is about writing results, nor Ray's "Failed to unpickle serialized exception" (a
#: remote task's error it cannot rebuild), not a checkpoint. A disk-full or write error on a
#: checkpoint's path (``.../checkpoints/040000/model.safetensors``, ``ckpt``, ``.pt``) is a save.
_SAVE = Guarded(r"save_checkpoint|_save_checkpoint|torch\.save|save_pretrained|save_model|[Ss]aving (?:model|checkpoint)"
                r"|PytorchStreamWriter|SafetensorError|(?<!JSON )\bserializ(?!able|ed exception)|merge_and_unload|push_to_hub|_save\("
                # llama.cpp's export of a model to a quantized GGUF file (``src/llama-quant.cpp``/``llama.cpp``
                # ``llama_model_quantize``: "llama_model_quantize: failed to quantize: {what}"; ``tools/quantize``'s
                # "main: failed to quantize model from '{fname}'"): the job's result model being written (P6)
                r"|failed to quantize\b"
                r"|(?:No space left on device|Disk quota exceeded|Read-only file system)\b.*"
                r"(?:checkpoint|ckpt|\.safetensors|\.pth?\b|\.bin\b)",
                ("save", "aving", "PytorchStreamWriter", "SafetensorError", "serializ", "merge_and_unload",
                 "push_to_hub", "No space left", "quota exceeded", "Read-only file", "failed to quantize"))
#: Also the errors of ``from_pretrained`` when the weights, config or tokenizer files of a model folder or
#: repository cannot be found (``transformers/utils/hub.py``'s ``cached_file(s)``: "{path} does not appear to
#: have a file named {file}", "Incorrect path_or_model_id: '{path}'"; ``tokenization_utils_base``'s "Can't load
#: tokenizer for '{path}'", ``configuration_utils``'s "Can't load the configuration of '{path}'", ``modeling_utils``'s
#: "Can't load the model for '{path}'"; ``huggingface_hub``'s ``validate_repo_id`` "Repo id must be in the form
#: 'repo_name' or 'namespace/repo_name': '{repo_id}'" for a local path that is not there): a checkpoint being read.
_LOAD = Guarded(r"load_checkpoint|load_state_dict|_load_best_model|resume_from|[Ll]oading checkpoint|torch\.load\("
                r"|_IncompatibleKeys|Error\(s\) in loading state_dict"
                r"|does not appear to have a file named |Incorrect path_or_model_id: "
                r"|Can't load (?:tokenizer for|the configuration of|the model for) '"
                r"|Repo id must be in the form 'repo_name' or 'namespace/repo_name': '(?:/|\.{1,2}/|~/)",
                ("load", "oading", "resume_from", "_IncompatibleKeys", "does not appear to have a file named",
                 "path_or_model_id", "Repo id must be"))


def phase_of(lines: Sequence[str], failure: int, region: Sequence[str], floor: int = 0,
             step: str | None = None) -> str:
    """The phase of a failure at index ``failure``; ``region``: the error lines around it (the
    traceback that holds it is read from ``lines`` when there is one); ``floor``: the index where
    the failed attempt starts; ``step``: the last step before it."""
    # the failure's traceback, not one an earlier program printed before this one's start
    failure, tb_start, tb = failing_traceback(lines, failure, run_start(lines, floor, failure, RUN_LOOKBACK, False))
    top = tb_start if tb_start is not None else failure
    if _never_started(lines, failure, tb):
        return "startup"
    if (checkpoint := _checkpoint_phase(lines, failure, floor, top, region, tb)) is not None:
        return checkpoint
    if tb is not None and (setup := _setup_phase(lines, floor, top, tb)) is not None:
        return setup
    floor = run_start(lines, floor, top, RUN_LOOKBACK)  # the failing program's own lines
    done, stage = run_end_above(lines, floor, top)
    if done is not None and stage is None:
        return _after_run_end(lines, done, top, tb)
    if shutting_down(lines, failure, region, tb):
        return "shutdown"
    if stage is not None:  # a finished program, then the job's next one: the failure is that one's
        floor = stage + 1  # the announcement itself ("=== 100-step runs ===") counts no step
    if tb is None and (glued := glued_to_bar(lines, failure)) is not None:
        return glued  # the failure printed onto a progress bar: that bar is where it stopped
    since = floor if stage is not None else max(floor, top - LOOKBACK)
    if _evaluation_going_on(lines, failure, floor, top, shown_ends(lines[since:top]), tb):
        return "evaluation"
    return _phase_by_steps(lines, floor, top, region, tb, step)


def _never_started(lines: Sequence[str], failure: int, tb: Sequence[str] | None) -> bool:
    """Whether the failing program never got past its start (the steps printed above are then another
    program's): it could not be compiled, its imports failed (or those of the model's own remote code), or
    its traceback ``tb`` builds the model from pretrained files (P7)."""
    if ends_in_syntax_error(tb or [logs.normalize_line(lines[min(failure, len(lines) - 1)])]):
        return True  # the program could not even be compiled: whatever ran before was another run
    if tb is None:
        return False
    # its imports failed; the model's own code (trust_remote_code) could not be imported; P7: base weights of a
    # Hub repository read while building the model, or a constructor's from_pretrained (or a remote-code import)
    return import_failed(tb) or remote_code_import(tb) or hub_base_weights(tb) \
        or built_from_pretrained([*chained_outer(lines, failure), *tb])


def _checkpoint_phase(lines: Sequence[str], failure: int, floor: int, top: int, region: Sequence[str],
                      tb: Sequence[str] | None) -> str | None:
    """``checkpoint_save``/``checkpoint_load`` when the failure came while a checkpoint was written or read:
    by the traceback's frames (or those a signal's handler printed after the failure), by the words of the
    traceback's unindented lines (of the failure's lines without one), or by a save or load announced just
    above ``top`` (the traceback's head, or the failure)."""
    frames = tb or []
    by_name = _serializing(frames) or _checkpoint_func(frame_funcs(frames))
    if by_name is not None:
        return by_name
    if not func_names(frames) and (after := handler_frames(lines, failure)) \
            and (named := _serializing(after) or _checkpoint_func(frame_funcs(after))) is not None:
        return named  # P9: a signal (no Python frame above: a C++ stack at most), then the traceback the main
        # process prints for it, in a save or load
    text = _checkpoint_text(lines, failure, floor, region, tb)
    if _LOAD.search(text):
        return "checkpoint_load"
    if _SAVE.search(text):
        return "checkpoint_save"
    return _announced_checkpoint(lines, floor, top)


def _checkpoint_text(lines: Sequence[str], failure: int, floor: int, region: Sequence[str],
                     tb: Sequence[str] | None) -> str:
    """The text read for a checkpoint's save or load: the traceback's unindented lines (its head, its
    exception lines), or without one the failure's lines since the last step (warnings' source lines and a
    job report's command line left out)."""
    if tb is not None:
        return "\n".join(ln for ln in tb if not ln.startswith((" ", "\t")))
    return "\n".join(job_report_cut(ln) for ln in without_warning_sources(_since_steps(lines, failure, floor, region)))


def _setup_phase(lines: Sequence[str], floor: int, top: int, tb: Sequence[str]) -> str | None:
    """``startup`` when the traceback ``tb`` (head at ``top``) fails while the program sets itself up (a
    set-up function, its first CUDA call, a model summary's dummy forward), or ``unknown`` for a set-up
    traceback after steps of the same program; None when it is no set-up traceback."""
    if setting_up(tb):
        # with steps above: an earlier program's (then startup) or this one's next stage (then not):
        # the evidence contradicts itself, no answer rather than a guess; arguments are parsed at the start only
        own = run_start(lines, floor, top, RUN_LOOKBACK)  # the failing program's own lines
        parsing = any(PARSE_FUNC.match(f) for f in func_names(tb))
        return "startup" if parsing or progress_count(lines, own, top, 1) == 0 else UNKNOWN
    if first_cuda_call(tb) or model_summary(tb):
        return "startup"
    return None


def _after_run_end(lines: Sequence[str], done: int, top: int, tb: Sequence[str] | None) -> str:
    """The phase of a failure at ``top`` after the run's end printed at ``done``, no next program
    announced: ``evaluation`` when the final evaluation runs after the loop's end, else ``shutdown``."""
    if tb is not None and eval_program(tb):
        return "evaluation"  # the job's next program after the finished one evaluates (chat_eval.py, test.py)
    if evaluation_announced(shown_ends(lines[done:top], keep_blank=True)) or evaluating(lines, done + 1, top):
        return "evaluation"  # P10: "Training completed. Starting evaluation..." or a test bar short of its total
        # ("`Trainer.fit` stopped: ..." then "Testing DataLoader 0:  30%|"): the final evaluation after the loop's end
    return "shutdown"


def _evaluation_going_on(lines: Sequence[str], failure: int, floor: int, top: int, before: Sequence[str],
                         tb: Sequence[str] | None) -> bool:
    """Whether the failure at ``top`` came while evaluating: its traceback or its own lines name an
    evaluation, one was announced since the last step printed (``before``: the last lines above, as shown),
    an evaluation's progress is short of its total, the Trainer's evaluation loop logged no results yet, or
    a kill came right after an evaluation's report."""
    if _names_evaluation(lines, failure, tb):
        return True
    if evaluation_announced(since_last_step(before)) or evaluating(lines, floor, top):
        return True
    if (tb is None or not in_train_step(tb)) and trainer_evaluating(lines, floor, top):
        return True  # the Trainer's evaluation loop announced, its results not logged yet
    # P4/P9: killed right after an evaluation's report, nothing printed since (after a training loop's pass:
    # not a set-up line's "val_split: 0.1")
    return tb is None and killed(lines, failure) and evaluation_reported(lines, floor, top) \
        and progress_count(lines, floor, top, 1) > 0


def _names_evaluation(lines: Sequence[str], failure: int, tb: Sequence[str] | None) -> bool:
    """Whether the failing traceback runs in an evaluation (its functions, with the tracebacks chained below
    it; a ``for`` over or a ``next`` of an evaluation's loader; an evaluation's metric key logged), or,
    without a traceback, the failure's own lines name one."""
    if tb is None:
        return names_eval(failure_text(lines, failure))
    return in_eval([*chained_outer(lines, failure), *tb]) or eval_loader_frame(tb) or eval_metric_frame(tb)


def _phase_by_steps(lines: Sequence[str], floor: int, top: int, region: Sequence[str], tb: Sequence[str] | None,
                    step: str | None) -> str:
    """The phase from the steps the program printed since ``floor`` (:func:`_by_steps`), counted from a new
    training loop's or stage's announcement when there is one (its set-up done: at least its first step); an
    evaluation program's (by its entry script's name) steps are its batches unless it announced training."""
    if (loop := new_loop(lines, floor, top)) is not None:  # a new training stage started: its steps count
        floor = loop + 1
    phase = _by_steps(lines, floor, top, region, tb, step)
    if loop is not None and phase == "startup":
        return "first_step"  # after the loop's announcement: its set-up is done
    if phase in ("first_step", "training") and tb is not None and eval_program(tb) \
            and loop is None and not loop_started(lines, floor, top):
        return "evaluation"  # the steps an evaluation script counts are its batches (unless it announced training)
    return phase


def _since_steps(lines: Sequence[str], failure: int, floor: int, region: Sequence[str]) -> Sequence[str]:
    """The lines of ``region`` (the normalized lines around a failure without a traceback) after the
    last training step printed before ``failure``: a checkpoint save or load announced above steps that
    followed it was done (nanoGPT's ``train.py`` prints "saving checkpoint to {out_dir}" every
    ``eval_interval`` iterations, then goes on with "iter N: loss ..."), it is not what failed."""
    got = step_lines(lines, max(floor, failure - len(region)), failure)
    if not got:
        return region
    last = logs.normalize_line(lines[got[0]])
    at = next((k for k in range(len(region) - 1, -1, -1) if region[k] == last), None)
    return region if at is None else region[at + 1:]


#: What trainers log just before they read or write a checkpoint: the Hugging Face Trainer's "Loading
#: model from {resume_from_checkpoint}." (``_load_from_checkpoint``; a script's own "Loading model from
#: {name}" without the period is usually a pretrained model's set-up), "Loading best model from {path}
#: (score: ...)" and "Saving model checkpoint to {output_dir}" (``_save``); Lightning's "Restoring
#: states from the checkpoint path at {ckpt_path}"; Megatron's "loading checkpoint from {dir} at
#: iteration N" and "saving checkpoint at iteration N to {dir}"; DeepSpeed's "Saving model checkpoint:
#: {path}"; OLMo's "Saving unsharded checkpoint...". A progress bar ("Loading checkpoint shards: 50%|")
#: is a pretrained model's set-up, not this. fairseq's ``checkpoint_utils`` "Preparing to load checkpoint {f}" and
#: "Preparing to save checkpoint for epoch {e} @ {u} updates"; DeepSpeed's ``torch_checkpoint_engine``
#: "[Torch] Checkpoint {tag} is about to be saved!" (or "is begin to save!"), "[Torch] Saving {path}...",
#: "[Torch] Loading checkpoint from {path}..." (newer "[Torch] Begin Load checkpoint from"); mmengine's
#: ``CheckpointLoader`` "Loads checkpoint by local backend from path: {f}" and mmcv 1.x's "load checkpoint from
#: local path: {f}", printed before reading it (not mmengine's runner "Load checkpoint from {f}", printed after).
#: accelerate's ``Accelerator.save_state`` "Saving current state to {output_dir}" and ``load_state`` "Loading states
#: from {input_dir}"; Lightning's ``ModelCheckpoint._update_best_and_save`` "Epoch 3, global step 400: 'val_loss'
#: reached 0.51234 (best 0.51234), saving model to '{filepath}' as top 1", just before ``_save_checkpoint``; timm's
#: ``resume_checkpoint`` "Restoring model state from checkpoint..." (then "Restoring optimizer state ..."); Keras'
#: ``ModelCheckpoint`` "Epoch 3: val_loss improved from 0.41 to 0.39, saving model to {filepath}" ("Epoch 3: saving
#: model to ..."); TensorFlow's ``CheckpointSaverHook`` "Saving checkpoints for 1000 into /tmp/model.ckpt.".
_LOAD_NOTE = Guarded(r"Loading model from \S+\.\s*$|Loading (?:the )?best model from\b|[Ll]oading (?:\w+ )?checkpoint\b(?! shards)"
                     r"|Loading states from |Restoring (?:model|optimizer|amp loss scaler) state from checkpoint"
                     r"|Restoring states from the checkpoint|[Rr]esuming (?:training )?from (?:the )?(?:checkpoint|ckpt|\S*/)"
                     r"|[Pp]reparing to load checkpoint|Loads checkpoint by \w+ backend from path|load checkpoint from \w+ path:"
                     r"|Begin Load checkpoint",
                     ("oading", "Restoring states", "esuming", "to load checkpoint", "Loads checkpoint", "load checkpoint",
                      "Load checkpoint", "state from checkpoint"))
_SAVE_NOTE = Guarded(r"[Ss]aving (?:\w+ )?(?:model )?checkpoint\b|Saving model (?:weights )?to\b|[Pp]reparing to save checkpoint"
                     r"|Saving current state to |[,:] saving model to |Saving checkpoints for \d+ into "
                     r"|\[Torch\] (?:Checkpoint \S+ is (?:about to be saved|begin to save)|Saving )",
                     ("aving", "to save checkpoint", "[Torch] Checkpoint"))
#: Non-blank lines above a traceback read for such an announcement (a warning or two between).
_NOTE_LINES = 3


def _announced_checkpoint(lines: Sequence[str], floor: int, top: int) -> str | None:
    """``checkpoint_load``/``checkpoint_save`` when one of the last few lines the program printed
    before the failure at ``top`` (not counting warnings) announces a checkpoint being read or
    written (:data:`_LOAD_NOTE`, :data:`_SAVE_NOTE`): nothing was printed since, so that is what failed."""
    seen = 0
    for k in range(top - 1, max(floor, top - 4 * _NOTE_LINES) - 1, -1):
        raw = ranks.launcher_text(on_screen(lines[k]))
        shown = raw.strip()
        if not shown or raw.startswith(("  ", "\t")) or "Warning" in shown or "warn" in shown:
            continue  # a warning and its source line (indented): not what the program announced (Megatron's
            # print_rank_0 lines start with one space: " loading checkpoint from ...")
        if "%|" in shown:
            return None  # a bar after it (or the announcement is a bar's: "Loading checkpoint shards: 50%|")
        if completion_above(lines, k, k + 1) is not None:
            return None  # P6, P10: the loop's end printed after it ("Saving checkpoint ...", "Finished training."): the save was done
        if _LOAD_NOTE.search(shown):
            return "checkpoint_load"
        if _SAVE_NOTE.search(shown):
            return "checkpoint_save"
        if is_progress(shown):
            return None  # steps after it: the announced read or write was done
        seen += 1
        if seen >= _NOTE_LINES:
            return None
    return None


def _by_steps(lines: Sequence[str], floor: int, top: int, region: Sequence[str], frames: Sequence[str] | None,
              step: str | None) -> str:
    """The phase from the training steps printed before ``top`` (the failure or its traceback's
    head; ``frames``: that traceback, None when there is none)."""
    if (table := table_step(lines, floor, top)) is not None:  # a metric table's last row names its step
        return "first_step" if to_float(table[1]) == 0 else "training"
    steps = progress_count(lines, floor, top, 4)
    if steps > 0 and frames is not None and keras_step(frames) and not keras_printed(lines, floor, top):
        steps = 0  # Keras counts its steps in its own lines: another bar (a data set's preparation) is no step
    scripted = top < len(lines) and shell_error(lines[top])  # the job script's own error after its program
    if (frames is not None or scripted) and steps > 0 and results_after_progress(lines, floor, top) \
            and not bar_short(lines, floor, top):
        return "shutdown"  # the run printed its final results, then failed (or the job script after it, P10)
    if steps == 0:
        return _without_steps(lines, floor, top, region, frames)
    done = bar_done(lines, floor, top)
    if done is None and (inner := iter_in_epoch(lines, floor, top)) is not None and inner > 1:
        return "training"  # an epoch's own iteration counter says several steps were done
    if done is not None:  # a tqdm bar counts the steps done: the failure is in the next one
        return "first_step" if done == 0 else "training"
    if step in ("0", "1") or (steps < 3 and not past_first(step)):
        recent = step_lines(lines, floor, top, 4)  # the last training progress lines, latest first
        if not counts_advance(lines, recent) and not verl_step_logged(lines, recent):
            return "first_step"
    return "training"


def _without_steps(lines: Sequence[str], floor: int, top: int, region: Sequence[str], frames: Sequence[str] | None) -> str:
    """The phase of a failure at ``top`` after no training progress line: ``startup`` at import or before the
    loop, ``first_step`` in the loop's first step (a first collective, a step's traceback or warning, the loop
    announced), ``training`` when the run shows it stepped where this log does not (its whole time allocation,
    a wandb history, bare losses printed, over an hour in the loop), or what a bar the traceback is glued to shows."""
    if frames is not None and at_import(frames):
        return "startup"
    if first_collective(region):
        return "first_step"
    # (P9: a kill on the file's first line, none of the process' output above it, shows a job that started, no more)
    if top > 0 and any(OUT_OF_TIME.search(ln) for ln in (*region, *lines[top:top + KILL_AFTER])):
        return "training"  # it ran for its whole allocation: the steps went where this log does not show
    if logged_history(lines[top:top + KILL_AFTER]) or logged_history(footer_above(lines, floor, top)):
        return "training"  # the run logged its metrics many times (to wandb, not to this log)
    if printed_losses(lines, floor, top):
        return "training"  # print(loss.item()) once a step
    # (the outer frames of a traceback chained below this one, where it holds only a library's frames below a ``try``)
    framed = frames is not None and in_train_step([*chained_outer(lines, top + len(frames) - 1, ANY_CHAIN_NOTES), *frames])
    # (a step-only warning on the failure line too: a loss kernel's device assertion is printed inside the step)
    in_step = framed or loop_started(lines, floor, top) \
        or stepped(lines, floor, min(len(lines), top + 1)) or (frames is None and killed(lines, top) and loop_announced(lines, floor, top))
    if in_step and an_hour_in_loop(lines, floor, top, top + len(frames or ()), framed):
        return "training"  # P2 (c): no output of the loop in this file, but it ran for over an hour
    return glued_bar(region) or ("first_step" if in_step else "startup")


#: Functions that save or load a checkpoint or pretrained weights (by name).
_SAVE_FUNC = re.compile(r"(?i)save_?(?:checkpoint|model|pretrained|state|weights|fsdp)|_save_(?:\w+_)?checkpoint"
                        r"|checkpoint_save|save_to_disk")
#: Not ``from_pretrained`` itself: it also downloads the config (a gated repository's 401) and builds
#: the model (``__init__`` checking flash-attn), which is start-up; it reads the weights in the
#: ``_load_pretrained_model``/``load_state_dict`` frames it calls, which match.
_LOAD_FUNC = re.compile(r"(?i)load_(?:checkpoint|state|model|pretrained|weights|sharded|best)|resume_from"
                        r"|_load_from|checkpoint_files")


def _checkpoint_func(frames: Sequence[tuple[str, str]]) -> str | None:
    """``checkpoint_save``/``checkpoint_load`` when a function of the traceback saves or loads a
    checkpoint (the innermost such frame decides: a save called while resuming is a save). Not a load function
    whose failure is deeper in a constructor (``load_models`` -> ``T5EncoderModel(...)`` -> ``nn.Linear.__init__``
    running out of memory, :data:`_MODULE_INIT`): P3/P7, the model is being built, no saved state is being read yet.
    ``frames``: (frame line, function) of the traceback, outermost first (:func:`frame_funcs`)."""
    built = False
    for ln, f in reversed(frames):
        if _SAVE_FUNC.search(f):
            return "checkpoint_save"
        if _LOAD_FUNC.search(f):
            return None if built else "checkpoint_load"
        built = built or (f == "__init__" and _MODULE_INIT.search(ln) is not None)
    return None


#: A frame of a torch module's constructor (``torch/nn/modules/linear.py``, ``conv.py``, ... in ``__init__``), which
#: allocates the module's parameters: a model being built.
_MODULE_INIT = re.compile(r'torch[/\\]nn[/\\]modules[/\\]\w+\.py", line \d+, in __init__')


#: The frames of ``torch.save``/``torch.load`` (``torch/serialization.py``, in ``save``, ``_save``,
#: ``load``, ``_load``, whatever called them) and safetensors' (``safetensors/torch.py``, in
#: ``save_file``/``load_file``) and PaddlePaddle's (``paddle/framework/io.py``, ``paddle.save``/``paddle.load``): the innermost one says a checkpoint was being written or read
#: (torch.distributed.checkpoint's ``_save_state_dict``/``_load_state_dict`` match by name).
_SERIAL_FRAME = re.compile(r'File "[^"]*(?:torch[/\\]serialization\.py|safetensors[/\\]torch\.py|paddle[/\\]framework[/\\]io\.py)'
                           r'", line \d+, in _?(save|load)')


#: TensorFlow's own checkpoint save and restore: TF 1.x ``tf.train.Saver`` (``tensorflow/python/training/saver.py``,
#: ``Saver.save``/``Saver.restore``) and TF 2's ``tf.train.Checkpoint`` (``training/tracking/util.py``, later
#: ``checkpoint/checkpoint.py``: ``save``/``write``/``restore``/``read``).
_TF_SAVER = re.compile(r'File "[^"]*tensorflow[/\\]python[/\\](?:training[/\\]saver|training[/\\]tracking[/\\]util'
                       r'|checkpoint[/\\]checkpoint)\.py", line \d+, in (save|write|restore|read)\s*$')


def _serializing(frames: Sequence[str]) -> str | None:
    """``checkpoint_save``/``checkpoint_load`` when the traceback runs through torch's or
    safetensors' own save or load (a user's ``torch.save(state, path)`` is an indented code line,
    which the phase's text does not read). Not a load below a data set's ``__getitem__`` (or torch's
    ``DataLoader`` fetch): a sample or its features stored as a ``.pt`` file, read while training."""
    for k in range(len(frames) - 1, -1, -1):
        ln = frames[k]
        if "tensorflow" in ln and (tf := _TF_SAVER.search(ln)) is not None:
            return "checkpoint_save" if tf.group(1) in ("save", "write") else "checkpoint_load"
        if "serialization" in ln or "safetensors" in ln or "paddle" in ln:
            m = _SERIAL_FRAME.search(ln)
            if m is not None:
                if m.group(1) == "load" and any(_SAMPLE_FRAME.search(f) for f in frames[:k]):
                    return None
                return "checkpoint_save" if m.group(1) == "save" else "checkpoint_load"
    return None


#: A frame that fetches a data sample: a data set's ``__getitem__``/``__getitems__``, or torch's
#: ``torch/utils/data/_utils/fetch.py`` (``_MapDatasetFetcher.fetch``, which calls it).
_SAMPLE_FRAME = re.compile(r'(?:, in __getitems?__|[/\\]utils[/\\]data[/\\]_utils[/\\]fetch\.py", line \d+, in \S+)\s*$')

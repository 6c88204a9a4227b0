"""The phase a run failed in: the decision order (P1-P11 of sample_logs/whole/README.md).

Phases: ``startup`` (before the first step), ``first_step``, ``training`` (with the last
step/iteration/epoch seen), ``evaluation``, ``checkpoint_save``, ``checkpoint_load``,
``shutdown`` (after the run's own end: final save/summary done, process-group teardown).

This module only orders the questions; each is answered by a module of its own: the failing
traceback (:mod:`phase.failing_traceback`), what its frames name (:mod:`phase.frames`, :mod:`phase.startup`),
a checkpoint's save or load (:mod:`phase.checkpoint`), where the failing program's lines start and
end (:mod:`phase.program`, :mod:`phase.loops`), an evaluation going on (:mod:`phase.evaluation`), the job's
teardown (:mod:`phase.teardown`), the steps printed (:mod:`phase.steps`) and the signs of steps
where none is printed (:mod:`phase.evidence`, :mod:`phase.clock`).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.logread.lines import SERVER_STOPPED
from gpulens.diagnosis.logread.phase.checkpoint import checkpoint_phase, own_model_announced
from gpulens.diagnosis.logread.phase.clock import an_hour_in_loop
from gpulens.diagnosis.logread.phase.evaluation import (
    answered_request,
    engine_just_built,
    eval_split_missing,
    evaluating,
    evaluation_announced,
    evaluation_reported,
    metrics_computed,
    names_eval,
    served_requests,
    since_last_step,
    stage_header_evaluates,
    trainer_evaluating,
)
from gpulens.diagnosis.logread.phase.evidence import (
    KILL_AFTER,
    OUT_OF_TIME,
    first_collective,
    footer_above,
    logged_history,
    printed_losses,
    stepped,
)
from gpulens.diagnosis.logread.phase.failing_traceback import (
    ANY_CHAIN_NOTES,
    chained_outer,
    failing_traceback,
    func_names,
)
from gpulens.diagnosis.logread.phase.frames import (
    PARSE_FUNC,
    after_a_step,
    eval_loader_frame,
    eval_metric_frame,
    eval_program,
    in_eval,
    in_train_step,
    keras_step,
    library_generation,
    no_grad_forward,
)
from gpulens.diagnosis.logread.phase.jobkind import no_training_loop, work_counted
from gpulens.diagnosis.logread.phase.loops import (
    loop_announced,
    loop_started,
    mlperf_before_loop,
    new_loop,
)
from gpulens.diagnosis.logread.phase.program import RUN_LOOKBACK, run_end_above, run_start
from gpulens.diagnosis.logread.phase.startup import (
    at_import,
    built_from_pretrained,
    dataset_built,
    ends_in_syntax_error,
    first_cuda_call,
    hub_base_weights,
    import_failed,
    model_summary,
    remote_code_import,
    setting_up,
    weights_loaded_last,
)
from gpulens.diagnosis.logread.phase.steps import (
    bar_done,
    bar_short,
    counts_advance,
    exited_after_progress,
    glued_bar,
    glued_to_bar,
    iter_in_epoch,
    keras_printed,
    past_first,
    results_after_progress,
    table_step,
    verl_step_logged,
)
from gpulens.diagnosis.logread.phase.teardown import shutting_down
from gpulens.diagnosis.logread.phase.text import (
    LOOKBACK,
    failure_text,
    killed,
    shell_error,
    shown_ends,
)
from gpulens.diagnosis.logread.steplines import progress_count, step_lines, to_float

__all__ = ["PHASES", "UNKNOWN", "phase_of"]

PHASES = ("startup", "first_step", "training", "evaluation", "checkpoint_save", "checkpoint_load", "shutdown")
#: The answer when the log's evidence for the phase contradicts itself.
UNKNOWN = "unknown"


def phase_of(lines: Sequence[str], failure: int, region: Sequence[str], floor: int = 0,
             step: str | None = None) -> str:
    """The phase of a failure at index ``failure``; ``region``: the error lines around it (the
    traceback that holds it is read from ``lines`` when there is one); ``floor``: the index where
    the failed attempt starts; ``step``: the last step before it."""
    # the failure's traceback, not one an earlier program printed before this one's start
    failure, tb_start, tb = failing_traceback(lines, failure, run_start(lines, floor, failure, RUN_LOOKBACK, False))
    top = tb_start if tb_start is not None else failure
    if tb is not None and own_model_announced(lines, floor, top):
        return "checkpoint_load"  # P7: "Loading Phase 0 trained model from ..." just above: the work's own model
    if _never_started(lines, failure, tb):
        return "evaluation" if _evaluation_stage(lines, floor, top, tb) else "startup"
    if tb is None and _server_stopped(lines, failure):  # P5: a server stopped from outside
        # serving once it answered a request (a client's readiness probe, "GET /v1/models", too)
        return "evaluation" if answered_request(lines, floor, failure) else "startup"
    if (checkpoint := checkpoint_phase(lines, failure, floor, top, region, tb)) is not None:
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
        if _evaluation_stage(lines, floor, top, tb):
            return "evaluation"  # P11: an evaluation stage after the finished run, from its first line
        floor = stage + 1  # the announcement itself ("=== 100-step runs ===") counts no step
    if tb is None and (glued := glued_to_bar(lines, failure)) is not None:
        # the failure printed onto a progress bar: that bar is where it stopped (P5: a job with no training loop's bar
        # counts its work, evaluation)
        return "evaluation" if glued in ("first_step", "training") and no_training_loop(lines, top, tb) else glued
    since = floor if stage is not None else max(floor, top - LOOKBACK)
    if _evaluation_going_on(lines, failure, floor, top, shown_ends(lines[since:top]), tb):
        return "evaluation"
    return _phase_by_steps(lines, floor, top, region, tb, step)


def _server_stopped(lines: Sequence[str], failure: int) -> bool:
    """Whether the failure is an inference server's shutdown by its signal handler (:data:`lines.SERVER_STOPPED`): on the
    failure's line, or on the line above it (a stop with no error line is read up to the line after its last one)."""
    return any(SERVER_STOPPED.search(lines[k]) is not None for k in (failure - 1, failure) if 0 <= k < len(lines))


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
    if first_cuda_call(tb) or model_summary(tb) or dataset_built(tb):
        return "startup"
    return None


def _evaluation_stage(lines: Sequence[str], floor: int, top: int, tb: Sequence[str] | None) -> bool:
    """P11: whether the failing program (its traceback ``tb`` headed at ``top``) is the job's evaluation stage after a
    run that finished above it (its completion line): the next stage announced as one ("=== Starting evaluation ==="),
    or, none announced, an evaluation program by its entry script (``eval.py``). Such a stage is ``evaluation`` from its
    first line, its imports and set-up included (the job's start-up is long over)."""
    done, stage = run_end_above(lines, run_start(lines, floor, top, RUN_LOOKBACK), top)
    if done is None:
        return False
    if stage is not None and evaluation_announced(announced := shown_ends([lines[stage]])) \
            and not any(w in announced[0].lower() for w in ("train", "fine-tun", "finetun")):
        return True  # (not "=== Running training and evaluation ===": a training stage's)
    return tb is not None and eval_program(tb)


def _after_run_end(lines: Sequence[str], done: int, top: int, tb: Sequence[str] | None) -> str:
    """The phase of a failure at ``top`` after the run's end printed at ``done``, no next program
    announced: ``evaluation`` when the final evaluation runs after the loop's end, else ``shutdown``."""
    if tb is not None and (eval_program(tb) or in_eval(tb)):
        return "evaluation"  # the job's next program after the finished one evaluates (chat_eval.py, test.py), or the
        # program's own final evaluation (its traceback in ``evaluate``) after its loop's end
    if tb is not None and eval_split_missing(tb[-1]):
        return "evaluation"  # P10: the final evaluation asked for its data split ("KeyError: 'validation'")
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
    if tb is not None and _named_train_step(tb):
        return False  # P1: the frames of the traceback that ended the process (a training step's forward,
        # backward or optimizer step, e.g. transformers Trainer.training_step, Lightning training_step) outrank
        # an evaluation announced or printed before it
    if evaluation_announced(since_last_step(before)) or evaluating(lines, floor, top):
        return True
    if stage_header_evaluates(lines, floor, top):
        return True  # P11: the pipeline's next stage, headed as an evaluation or analysis ("PHASE 4: Attention Analysis")
    if trainer_evaluating(lines, floor, top):
        return True  # the Trainer's evaluation loop announced, its results not logged yet
    # P4/P9: killed right after an evaluation's report, nothing printed since (after a training loop's pass:
    # not a set-up line's "val_split: 0.1")
    return tb is None and killed(lines, failure) and evaluation_reported(lines, floor, top) \
        and progress_count(lines, floor, top, 1) > 0


#: A training step named by its library (transformers trainer.py ``Trainer.training_step`` /
#: ``_inner_training_loop``; Lightning ``training_step`` / ``optimizer_step``) or a backward pass (torch autograd
#: ``backward`` / ``_engine_run_backward``): a bare ``forward`` may be an evaluation's.
_TRAIN_STEP_NAMED = frozenset(("training_step", "_inner_training_loop", "optimizer_step", "backward",
                               "_engine_run_backward"))


def _named_train_step(tb: Sequence[str]) -> bool:
    """Whether the traceback's frames name a training step or a backward pass (:data:`_TRAIN_STEP_NAMED`)."""
    return in_train_step(tb) and any(f in _TRAIN_STEP_NAMED for f in func_names(tb))


def _names_evaluation(lines: Sequence[str], failure: int, tb: Sequence[str] | None) -> bool:
    """Whether the failing traceback runs in an evaluation (its functions, with the tracebacks chained below
    it; a ``for`` over or a ``next`` of an evaluation's loader; an evaluation's metric key logged), or,
    without a traceback, the failure's own lines name one."""
    if tb is None:
        return names_eval(failure_text(lines, failure))
    return in_eval([*chained_outer(lines, failure), *tb]) or eval_loader_frame(tb) or eval_metric_frame(tb) \
        or no_grad_forward(tb) or library_generation(tb)


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
    if phase in ("first_step", "training") and no_training_loop(lines, top, tb):
        return "evaluation"  # P5: nothing above speaks of training, the job's lines speak of inference or scoring
    return phase


def _by_steps(lines: Sequence[str], floor: int, top: int, region: Sequence[str], frames: Sequence[str] | None,
              step: str | None) -> str:
    """The phase from the training steps printed before ``top`` (the failure or its traceback's
    head; ``frames``: that traceback, None when there is none)."""
    if (frames is None or not in_train_step(frames)) and mlperf_before_loop(lines, floor, top):
        return "startup"  # an MLPerf benchmark's initialisation, its warm-up included (no epoch or block started)
    if (table := table_step(lines, floor, top)) is not None:  # a metric table's last row names its step
        return "first_step" if to_float(table[1]) == 0 else "training"
    steps = progress_count(lines, floor, top, 4)
    if steps > 0 and frames is not None and keras_step(frames) and not keras_printed(lines, floor, top):
        steps = 0  # Keras counts its steps in its own lines: another bar (a data set's preparation) is no step
    scripted = top < len(lines) and shell_error(lines[top])  # the job script's own error after its program
    if (frames is not None or scripted) and steps > 0 and results_after_progress(lines, floor, top) \
            and not bar_short(lines, floor, top):
        return "shutdown"  # the run printed its final results, then failed (or the job script after it, P10)
    if scripted and steps > 0 and exited_after_progress(lines, floor, top):
        return "shutdown"  # P10: the program had exited (its tracker's footer), then the job script's own error
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
    if frames is not None and eval_program(frames) and metrics_computed(lines, floor, top):
        return "evaluation"  # P5: an evaluation program that printed its scores had run past its set-up (a flat
        # script's own top-level statement too: its traceback's one ``<module>`` frame is no import)
    if frames is not None and at_import(frames):
        return "startup"
    if first_collective(region):
        return "first_step"
    if served_requests(lines, floor, top):
        return "evaluation"  # P5: an inference server answered model requests: past its set-up, serving
    # (P9: a kill on the file's first line, none of the process' output above it, shows a job that started, no more)
    if top > 0 and any(OUT_OF_TIME.search(ln) for ln in (*region, *lines[top:top + KILL_AFTER])):
        # P7, P9: killed right after the model's base weights were read (the last activity shown), else
        return "startup" if frames is None and weights_loaded_last(lines, floor, top) else "training"  # it ran for its whole allocation: the steps went where this log does not show
    if logged_history(lines[top:top + KILL_AFTER]) or logged_history(footer_above(lines, floor, top)):
        return "training"  # the run logged its metrics many times (to wandb, not to this log)
    if printed_losses(lines, floor, top):
        return "training"  # print(loss.item()) once a step
    if frames is not None and after_a_step(frames):
        return "training"  # P2: the loop's code that runs after a completed step (its steps printed elsewhere)
    # (the outer frames of a traceback chained below this one, where it holds only a library's frames below a ``try``)
    framed = frames is not None and in_train_step([*chained_outer(lines, top + len(frames) - 1, ANY_CHAIN_NOTES), *frames])
    # (a step-only warning on the failure line too: a loss kernel's device assertion is printed inside the step)
    in_step = framed or loop_started(lines, floor, top) \
        or stepped(lines, floor, min(len(lines), top + 1)) or (frames is None and killed(lines, top) and loop_announced(lines, floor, top))
    if in_step and an_hour_in_loop(lines, floor, top, top + len(frames or ()), framed):
        return "training"  # P2 (c): no output of the loop in this file, but it ran for over an hour
    if not in_step and engine_just_built(lines, floor, top) and not any("train" in ln.lower() for ln in frames or ()):
        return "evaluation"  # P5: vLLM's LLM built, no training loop (nor a trainer's frame): its first prompts were running
    if not in_step and work_counted(lines, floor, top) and no_training_loop(lines, top, frames):
        return "evaluation"  # P5: a job with no training loop counted its items done ("Processing sample 137/300")
    return glued_bar(region) or ("first_step" if in_step else "startup")

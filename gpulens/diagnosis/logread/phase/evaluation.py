"""Whether an evaluation was going on when the run failed (P4).

Messages that speak of an evaluation (not as a setting's name), announce one or report its results, an
evaluation's own progress short of its total (tqdm bars, mmengine, Megatron, Caffe, YOLO, detectron2),
the Hugging Face Trainer's evaluation loop with no results logged yet, an evaluation's report just
before a kill.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import Guarded
from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.lines import (
    SERVED,
    SERVED_KEYS,
    is_progress,
    is_terminal_kill,
    last_matching,
)
from gpulens.diagnosis.logread.phase.stages import STAGE_KEYS, stage_title, stage_trains
from gpulens.diagnosis.logread.phase.text import LOOKBACK, is_bar
from gpulens.diagnosis.logread.steplines import (
    EVAL_BAR,
    HEAD,
    SHOWN,
    on_screen,
    plain,
    progress_count,
    step_progress,
    warns,
)

__all__ = ["RESULT_LINE", "answered_request", "engine_just_built", "eval_split_missing", "evaluating",
           "evaluation_announced", "evaluation_reported", "metrics_computed", "names_eval", "served_requests",
           "since_last_step", "stage_header_evaluates", "trainer_evaluating"]


#: The words of an evaluation (evaluate, validation, ``eval``, testing, ``compute_metrics``, a ``val_`` metric), not
#: "invalidate".
_EVAL = Guarded(r"[Ee]valuat|(?<![Ii]n)[Vv]alidat|\beval\b|evaluate\(|compute_metrics|[Tt]esting\b|\bval_",
                ("valuat", "alidat", "eval", "compute_metrics", "esting", "val_"))


#: A line that announces an evaluation going on (fairseq's 'begin validation on "valid" subset',
#: "***** Running Evaluation *****", "Start evaluating ...", sentence-transformers' "Evaluating the model
#: on sts-dev dataset:", "Validating...", "Testing epoch 3"), not one that reports a finished one
#: ("Saved evaluation predictions to ...", "Validation performance didn't improve for 35 epochs").
#: verl's ``RayPPOTrainer._validate`` (``verl/trainer/ppo/ray_trainer.py``) prints "test_gen_batch meta info: {...}"
#: before generating on the validation set and "validation generation end" after it, then scores it.
#: A script's own prediction pass over its evaluation split ("Make prediction on validation set ...", SCAN's
#: ``get_predictions``; "Predicting on the validation set").
_EVAL_STARTS = re.compile(r"(?i)\b(?:begin|beginning|start\w*|running|run|launching|doing|perform\w*)\b\W+(?:\w+\W+){0,3}?"
                          r"(?:eval|valid|test)|\b(?:evaluating|validating|testing)\b"
                          r"|\bvalidation generation end\b|\btest_gen_batch meta info\b"
                          r"|\bpredict\w*\s+(?:on|for)\s+(?:the\s+)?(?:eval|valid|val\b|test)")


#: What follows a setting's name in a config dump or an argument list (``'evaluate_guards': False``,
#: ``eval_steps=500``, ``do_eval: true``).
_VALUE = re.compile(r"['\"]?\s*[:=]")


def names_eval(text: str) -> bool:
    """Whether ``text`` speaks of an evaluation (:data:`_EVAL`) other than as the name of a
    setting given a value: a snake_case name holding the word followed by ``:``/``=`` is a
    configuration key (a trainer's argument dump, a vLLM engine's config), not evaluation going on."""
    m = _EVAL.search(text)
    while m is not None:
        s, e = m.start(), m.end()
        while s > 0 and (text[s - 1].isalnum() or text[s - 1] == "_"):
            s -= 1
        while e < len(text) and (text[e].isalnum() or text[e] == "_"):
            e += 1
        if "_" not in text[s:e] or _VALUE.match(text, e) is None:
            return True
        m = _EVAL.regex.search(text, e)
    return False


#: mmcv's ``ProgressBar`` (``[>>>>>>     ] 150/500, 12.3 task/s, elapsed: 12s, ETA:    28s``), which
#: OpenMMLab's ``single_gpu_test``/``multi_gpu_test`` print while running a model over a test set.
_TASK_BAR = re.compile(r"\[[> ]*\]\s*(\d+)/(\d+), [\d.]+ task/s, elapsed:")
#: Lines above a failure searched for the evaluation's progress line.
_EVAL_LOOKBACK = 60


def evaluating(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the last progress line before ``top`` is an unfinished evaluation's (its own
    counter short of its total): the failure happened while evaluating. A finished one
    (``20/20``) says nothing about what ran after it; a training step after it wins."""
    for k in range(top - 1, max(floor, top - _EVAL_LOOKBACK) - 1, -1):
        shown = ranks.launcher_text(on_screen(lines[k])).lstrip()  # a rank's bar: "[default0]:Evaluating: 45%|"
        if _CAFFE_TEST in shown:
            return True  # Caffe's test pass: its "Test net output" lines, then the next "Iteration N, loss = ..."
        if ")" in shown[:HEAD] and (mm := _MM_LOOP.search(shown[:HEAD])) is not None:
            return mm.group(1) != "train" and int(mm.group(2)) < int(mm.group(3))
        if not shown[:1].isalpha() and not shown.startswith(("[", "|")):
            continue
        if shown.startswith(_MEGATRON_EVAL):
            return not shown.startswith(_MEGATRON_VALIDATED)  # "Evaluating iter": before that iteration runs
        if shown.startswith("Class") and (yolo := _YOLO_VAL.match(shown)) is not None:
            return int(yolo.group(1)) < int(yolo.group(2))
        if "Inference done " in shown[:HEAD] and (d2 := _D2_INFER.search(shown[:HEAD])) is not None:
            return int(d2.group(1)) < int(d2.group(2))
        m = EVAL_BAR.match(shown) if shown[:1] in _EVAL_HEADS else None
        if m is None and shown.startswith(("[>", "[ ")):
            m = _TASK_BAR.match(shown)
        if m is not None:
            done, total = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
            return int(done) < int(total)
        if step_progress(lines[k]):
            return False
    return False


#: The bar of an Ultralytics/YOLOv5 validator, run after each training epoch and by ``val.py``: its description is
#: the results table's header (``ultralytics/models/yolo/detect/val.py`` ``get_desc``: ``("%22s" + "%11s" * 6) %
#: ("Class", "Images", "Instances", "Box(P", "R", "mAP50", "mAP50-95)")``; YOLOv5's ``val.py`` the same with "P").
_YOLO_VAL = re.compile(r"Class\s+Images\s+\S.{0,160}?:\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)")


#: Megatron-LM's ``evaluate`` (``megatron/training/training.py``): ``print_rank_0(f'Evaluating on {n}
#: samples')``, then in its loop ``iteration += 1; print_rank_0(f'Evaluating iter {iteration}/{args.eval_iters}')``
#: BEFORE that iteration's forward, so even "Evaluating iter 10/10" is an evaluation going on until
#: ``evaluate_and_print_results`` reports "validation loss at iteration N | lm loss value: ... | lm loss PPL: ...".
#: Its report of a finished evaluation (``evaluate_and_print_results``), the last of its evaluation's lines.
_MEGATRON_VALIDATED = "validation loss at "
_MEGATRON_EVAL = ("Evaluating iter ", "Evaluating on ", _MEGATRON_VALIDATED)


#: Caffe's ``Solver::TestAll`` (``caffe/src/caffe/solver.cpp``, ``Test(test_net_id)``): ``LOG(INFO) << "Iteration "
#: << iter_ << ", Testing net (#" << test_net_id << ")"`` before it runs the test net over ``test_iter`` batches (at
#: iteration 0 too with ``test_initialization: true``, the default); a glog line, often glued to the line before.
_CAFFE_TEST = ", Testing net (#"


#: First characters of an evaluation's progress line (:data:`steplines.EVAL_BAR`'s names, a bracket or bar), read before the pattern.
_EVAL_HEADS = "EeVvTtPpIiSsRC[|"
#: mmengine's (OpenMMLab 2.x) LogProcessor line, after its logger's prefix ("2024/05/01 10:00:00 -
#: mmengine - INFO - "): ``Epoch(train)  [5][ 50/625]``, ``Epoch(val) [5][ 50/625]``, ``Epoch(test)
#: [ 50/625]``, ``Iter(train) [ 50/10000]``, ``Iter(val) [ 50/2000]``: the loop and its counter.
_MM_LOOP = re.compile(r"\b(?:Epoch|Iter)\((train|val|test)\)\s*(?:\[\s*\d+\s*\])?\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]")


#: Announcements of a run over an evaluation or test set that name no evaluation word: the Hugging Face Trainer's
#: ``predict`` (``evaluation_loop(description="Prediction")``: "***** Running Prediction *****"), detectron2's
#: ``inference_on_dataset`` (``detectron2/evaluation/evaluator.py``: "Start inference on {N} batches", then
#: "Inference done {i}/{N}. Dataloading: ..." every few seconds).
_EVAL_NOTES = ("***** Running Prediction *****", "Start inference on ")
#: detectron2's progress line of ``inference_on_dataset`` (after its logger's prefix).
_D2_INFER = re.compile(r"(?:^|\s)Inference done (\d+)/(\d+)\. ")


def evaluation_announced(since: Sequence[str]) -> bool:
    """Whether one of the lines printed since the last step (``since``) announces an evaluation
    going on (:data:`_EVAL_STARTS`) and no report of its results follows it (sentence-transformers'
    "Evaluating the model on sts-dev dataset:" then its "Pearson: 0.3830  Spearman: 0.4117" lines: that
    evaluation ended, what failed after it is not it)."""
    since = [plain(ln) for ln in since]
    for k, ln in enumerate(since):
        if ((names_eval(ln) and _EVAL_STARTS.search(ln)) or any(n in ln for n in _EVAL_NOTES)) \
                and (not is_progress(ln) or _eval_banner(ln)) \
                and not RESULT_LINE.search(ln) and "rror" not in ln and not ln.startswith((" ", "\t")):
            if not any(_reports_results(x) for x in since[k + 1:]):
                return True
    return False


#: An evaluation pass's report of its results, named so: "validation loss: -0.8309" (nnU-Net v1's
#: ``NetworkTrainer.run_training``, ``print_to_log_file("validation loss: %.4f" % ...)`` after "train loss : ..."),
#: "Overall validation pixAcc: 79.470, mIoU: 22.479", "Eval  batches[  100]  | loss  5.55", Keras' "val_loss: 0.41":
#: an evaluation word (not a test's: a final test's report ends the run, P10) and a decimal value after it.
_EVAL_REPORT = re.compile(r"(?i)(?<![a-z])(?:eval\w*|valid\w*|val)(?![a-z])[^\n]{0,80}?(?<![\w.])[-+]?\d*\.\d+")
#: A line that holds a value after a name (a report's other lines: "Average global foreground Dice: [0.97, ...]").
_VALUE_LINE = re.compile(r"[A-Za-z)\]][^\n]{0,80}?[:=|]\s*\[?\s*[-+]?\d*\.?\d")
#: A decimal value; one before the evaluation word is a training metric of the same line ("loss 0.3 | val_acc 0.8").
_DECIMAL = re.compile(r"\d\.\d")
#: A training step's line, as loops print one after each logged step: an iteration or step counter and a loss
#: ("Epoch: 45 Iter: 3 Acc: 0.66 Loss: 1.77", "step 120 | loss 2.31"; P2 (b)). Read back from a kill, it ends the
#: search for an evaluation's report: the loop stepped after the report, the pass had ended (P4).
_TRAIN_STEP_LINE = re.compile(r"(?i)\b(?:iter\w*|step)\b\W{0,3}\d[^\n]{0,120}?\bloss\b\W{0,3}[-+]?\d")
#: Report lines read back from a kill (a report of several lines, one a metric).
_REPORT_LINES = 6
#: A launcher's reaction to a signal (torchrun's agent: "Received 15 death signal, shutting down workers",
#: "Sending process N closing signal SIGTERM"): not the job's activity (P1).
_REACTIONS = ("death signal", "closing signal")


def evaluation_reported(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the last activity the program printed before a kill at ``top`` is an evaluation pass's report
    (P4: "with nothing printed after the summary the pass is still the last activity"; P9: a kill takes the phase
    of the last activity): read back over blank lines, warnings and a launcher's reactions, then over the report's
    value lines, to a line that names an evaluation with a decimal value (:data:`_EVAL_REPORT`), with no training
    word on it ("train_loss: 0.3  val_loss: 0.4" is an epoch's summary)."""
    seen = 0
    for k in range(top - 1, max(floor, top - LOOKBACK) - 1, -1):
        raw = ranks.launcher_text(on_screen(lines[k]))
        text = plain(logs.normalize_line(raw)).strip()
        if not text or raw.startswith(("  ", "\t")) or warns(text) \
                or is_terminal_kill(text) or any(r in text for r in _REACTIONS):
            continue
        if is_bar(raw) or "train" in text.lower() or raw.lstrip().startswith("wandb:") or text.startswith(_MEGATRON_VALIDATED):
            return False  # a tracker's run summary (wandb's "val_loss 1.27"), printed at the program's exit, is no pass;
            # Megatron's report is read as its evaluation's end (:func:`evaluating`)
        if (m := _EVAL_REPORT.search(text)) is not None and _DECIMAL.search(text, 0, m.start()) is None:
            return True
        if _VALUE_LINE.search(text) is None or _TRAIN_STEP_LINE.search(text) is not None:
            return False  # no report's line; or a training step's line after the report: the loop went on (P4)
        seen += 1
        if seen >= _REPORT_LINES:
            return False
    return False


#: The Hugging Face Trainer's ``evaluation_loop`` (``transformers/trainer.py``): ``logger.info(f"***** Running
#: {description} *****")`` ("Evaluation", "Prediction"), "  Num examples = N", "  Batch size = N", then the
#: ``ProgressCallback``'s prediction bar, a tqdm bar with no description like the training one; the pass ends with
#: ``on_log`` printing its metrics dict ("{'eval_loss': 0.41, 'eval_runtime': ...}"), as training logs print theirs.
_TRAINER_EVAL = ("***** Running Evaluation *****", "***** Running Prediction *****")


def trainer_evaluating(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the Trainer announced an evaluation pass (:data:`_TRAINER_EVAL`) among the last lines before ``top``
    and logged no metrics dict (nor any other line than its settings, bars and warnings) since: it was still running."""
    got = last_matching(lines, _TRAINER_EVAL, lambda ln: True, max(floor, top - _EVAL_LOOKBACK), top)
    if not got:
        return False
    for ln in lines[got[0] + 1:top]:
        text = ranks.launcher_text(on_screen(ln)).strip()
        if text and not text.startswith(("Num examples", "Batch size")) and not is_bar(text) \
                and not warns(text):
            return False
    return True


#: A metric's name and its decimal value ("Pearson: 0.3830", "acc=0.912", "mIoU: 22.479").
_METRIC_PAIR = re.compile(r"[A-Za-z][\w-]*\s*[:=]\s*[-+]?\d*\.\d+")


def _reports_results(line: str) -> bool:
    """A line that reports an evaluation's results, as evaluators print their summary: two or more
    metrics with decimal values on one line, not a progress bar's (a script printing one metric a
    line, "AUC:  0.51", may still be inside the evaluation that computes the next)."""
    return len(_METRIC_PAIR.findall(line[-SHOWN:])) >= 2 and not is_bar(line)


def since_last_step(before: Sequence[str]) -> Sequence[str]:
    """The lines after the last training progress line of ``before`` (an evaluation announced
    there, "begin validation on "valid" subset", followed by its metric prints, is what failed);
    the last 6 when none is near."""
    last = next((k for k in range(len(before) - 1, -1, -1) if step_progress(before[k]) and not _eval_banner(before[k])), None)
    return before[last + 1:] if last is not None else before[-6:]


#: A banner between rules of stars that announces a pass, the Hugging Face Trainer's way ("***** Running Evaluation
#: *****"), which DeepSpeed-Chat's training scripts copy with the epoch in it (``step1_supervised_finetuning/main.py``:
#: ``print_rank_0(f"***** Evaluating perplexity, Epoch {epoch+1}/{args.num_train_epochs} *****", ...)``): its count
#: names the epoch the evaluation belongs to, it is no step's progress.
_STAR_BANNER = re.compile(r"^\W{0,3}\*{3,}\s+(.+?)\s+\*{3,}\s*$")


def _eval_banner(line: str) -> bool:
    """Whether ``line`` is a star banner (:data:`_STAR_BANNER`) announcing an evaluation (:data:`_EVAL_STARTS`)."""
    if "***" not in line:
        return False
    m = _STAR_BANNER.match(plain(logs.normalize_line(line)))
    return m is not None and _EVAL_STARTS.search(m.group(1)) is not None


#: A result line (a metric with its value).
RESULT_LINE = re.compile(r"(?i)(?<![a-z])(?:acc(?:uracy)?|f1|auc|psnr|ssim|miou|map|dice|bleu|rouge\w*|perplexity|score)"
                          r"(?![a-z])[^\n]{0,60}?[:=]\s*[-+]?\d*\.?\d")


#: A metric's value as an evaluation program prints it (sklearn's ``classification_report`` and ``f1_score``, ``evaluate``'s
#: ``compute``, lm-evaluation-harness' table; "  accuracy: 0.8123", "F1=0.8920", "rougeL = 0.3312", "CER: 12.5"): a score
#: with a fractional value, computed only after the program ran its model over the data.
_METRIC_VALUE = re.compile(r"(?i)(?<![a-z])(?:acc(?:uracy)?|f1(?:[-_ ]?score)?|precision|recall|auc|auroc|bleu\w*|rouge\w*"
                           r"|exact[_ ]match|perplexity|ppl|psnr|ssim|wer|cer|mae|rmse|mse)(?![a-z])\s*[:=]\s*[-+]?\d*\.\d+")
#: Lines above a failure searched for a metric's value.
_METRIC_LOOKBACK = 200


def metrics_computed(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether the program printed a metric's value (:data:`_METRIC_VALUE`) in the ``_METRIC_LOOKBACK`` lines of
    ``lines[floor:top]`` above ``top``: an evaluation program (P5) that did so had run its model over its data, past
    its set-up."""
    return any(_METRIC_VALUE.search(lines[k][:SHOWN]) is not None for k in range(max(floor, top - _METRIC_LOOKBACK), top))


def served_requests(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether an inference server answered a model request (:data:`lines.SERVED`) in ``lines[floor:top]``: a serving job
    past its set-up, whose work is evaluation (P5)."""
    return any(SERVED.search(lines[k][:SHOWN]) is not None for k in reversed(find_keys(lines, SERVED_KEYS, floor, top)))


#: An access-log record of any request the server answered (uvicorn's ``AccessFormatter``: '127.0.0.1:41310 - "GET
#: /v1/models HTTP/1.1" 200 OK'): a client's readiness probe too, which reaches a server only once its start-up is done.
_ANSWERED = Guarded(r'"(?:GET|POST|PUT|DELETE) /[^" ]* HTTP/[\d.]+" 2\d\d\b', ('"GET /', '"POST /', '"PUT /', '"DELETE /'))


def answered_request(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether a server answered any request (:data:`_ANSWERED`) in ``lines[floor:top]``: when a signal stops it, its
    set-up was over (P5: from its first request on, a serving job is in evaluation)."""
    return any(_ANSWERED.search(lines[k][:SHOWN]) is not None for k in find_keys(lines, _ANSWERED.literals, floor, top))


#: vLLM's offline ``LLM`` built, its last line (``vllm/entrypoints/llm.py``, ``LLM.__init__``: ``logger.info("Supported_tasks:
#: %s", supported_tasks)``, "Supported tasks: ..." in later releases; "INFO 02-20 12:40:26 [llm.py:298] Supported_tasks:
#: ['generate']"): the engine is up (its "init engine (profile, create kv cache, warmup model) took ..." printed before), and
#: what the program does next is run it over its prompts.
_LLM_BUILT = Guarded(r"\[llm\.py:\d+\] Supported[_ ]tasks: ", ("Supported_tasks: ", "Supported tasks: "))
_LLM_BUILT_KEYS = ("Supported_tasks: ", "Supported tasks: ")
#: Lines above a failure looked at for it (the engine's own lines in between).
_LLM_REACH = 8


def engine_just_built(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether vLLM's offline ``LLM`` finished building (:data:`_LLM_BUILT`) in the last few lines above ``top``: a
    program with no training loop that fails then fails running its first prompts (P5: ``evaluation``)."""
    return any(_LLM_BUILT.search(lines[k][:SHOWN]) is not None
               for k in find_keys(lines, _LLM_BUILT_KEYS, max(floor, top - _LLM_REACH), top))


#: An evaluation split looked up by name and missing: ``datasets``' ``DatasetDict.__getitem__`` (a ``dict``) raises
#: ``KeyError(k)`` for a split it does not hold ("KeyError: 'validation'", GLUE MNLI's "validation_matched"), as does any
#: dict of splits or loaders; the split's name alone (a metric's key, "KeyError: 'val_acc'", is a report's).
_EVAL_SPLIT_KEY = re.compile(r"^\s*(?:\w+\.)*KeyError: ['\"](?:validation|valid|val|test|eval(?:uation)?|dev)(?:_(?:mis)?matched)?['\"]\s*$")


def eval_split_missing(line: str) -> bool:
    """Whether an exception line is a lookup of an evaluation's data split that is not there (:data:`_EVAL_SPLIT_KEY`)."""
    return "KeyError" in line and _EVAL_SPLIT_KEY.match(line) is not None


#: What a stage that is no training does (on its title): evaluating, testing, analysing, inference, prediction, metrics.
_STAGE_EVAL = re.compile(r"(?i)evaluat|\beval\b|validat|\btest|analy[sz]|inferen|predict|metric|benchmark|scor")
#: Lines above a failure searched for its stage's header.
_STAGE_REACH = 200


def stage_header_evaluates(lines: Sequence[str], floor: int, top: int) -> bool:
    """P11: whether the last numbered stage header (:func:`.stages.stage_title`) of the ``_STAGE_REACH`` lines above ``top``
    names an evaluation, a test, an analysis or inference and no training (:data:`_STAGE_EVAL`), with steps printed
    before it and none after it: the pipeline's training stage is over, and the failure is in the stage after it (a
    stage that computes predictions before any step, to prepare the training's data, is ``startup``)."""
    found = last_matching(lines, STAGE_KEYS, _is_stage_header, max(floor, top - _STAGE_REACH), top)
    if not found:
        return False
    title = stage_title(lines[found[0]])
    return _STAGE_EVAL.search(title) is not None and not stage_trains(title) \
        and progress_count(lines, found[0] + 1, top, 1) == 0 and progress_count(lines, floor, found[0], 1) > 0


def _is_stage_header(line: str) -> bool:
    return stage_title(line) != ""

"""Reader round 21, healthy or failed: excerpts written by hand in the formats the interpreter, the libraries and the
job scripts print. A program run again with its output appended to the same file after an uncaught exception
(CPython's ``sys.excepthook`` report, then the interpreter exits) starts a new attempt where its opening prints come
again; nothing else that looks alike does."""

from __future__ import annotations

from gpulens.diagnosis.logread.attempts import attempt_starts
from gpulens.diagnosis.logread.whole import diagnose_text

_LIB = "/opt/env/lib/python3.11/site-packages"
#: What torch warns at import in each launch (the file's first line, no banner), then the script's opening prints.
_WARNED = [f"{_LIB}/torch/cuda/__init__.py:230: UserWarning: sm_120 is not compatible",
           "  warnings.warn("]
_OPENING = [*_WARNED, "Using device: cuda", "GPU memory: 24.0 GB", "Loading dataset from ./data/cifar"]
#: Where the opening prints start again in a launch (after its import warnings).
_OWN = len(_WARNED)


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def _uncaught(script: str = "/work/proj/train.py", last: str = "RuntimeError: CUDA error: out of memory") -> list[str]:
    """``sys.excepthook``'s report of an exception that reached the script's top level."""
    return ["Traceback (most recent call last):", *_frame(script, 88, "<module>", "loss = model(x)"),
            *_frame(f"{_LIB}/torch/nn/modules/module.py", 1553, "_wrapped_call_impl", "return self._call_impl(*args)"),
            last]


_STEPS = [f"step {i}/40 loss {3.0 - i * 0.01:.3f}" for i in range(1, 6)]
_SUMMARY = ["---", "val_loss:        2.914", "training_seconds: 120.4", "num_steps:        40"]


def _relaunched() -> list[str]:
    return [*_OPENING, *_STEPS[:2], *_uncaught(), "", *_OPENING, *_STEPS, *_SUMMARY]


def test_a_script_run_again_after_an_uncaught_exception_starts_a_new_attempt() -> None:
    lines = _relaunched()
    assert attempt_starts(lines) == [0, len(_OPENING) + 2 + 6 + 1 + _OWN]


def test_the_completed_relaunch_is_a_normal_end() -> None:
    """The earlier launch's exception is not the last attempt's: the run that ends the file finished."""
    w = diagnose_text("\n".join(_relaunched()))
    assert w.diagnosis.category == "none"
    assert w.attempts == 2


def test_a_caught_and_printed_traceback_starts_nothing() -> None:
    """``traceback.print_exc()`` in the function that caught it: the report starts at that function, not the top
    level; the program went on (here: a retry printing its opening lines again in the same process)."""
    caught = ["Traceback (most recent call last):", *_frame("/work/proj/train.py", 40, "run_once", "loss = model(x)"),
              "RuntimeError: CUDA error: out of memory"]
    lines = [*_OPENING, *_STEPS[:2], *caught, *_OPENING, *_STEPS, *_SUMMARY]
    assert attempt_starts(lines) == [0]


def test_a_ranks_prefixed_traceback_starts_nothing() -> None:
    """torchrun's ``--tee``/``[rankN]:`` copy of a worker's traceback: other ranks' lines follow it in the same launch."""
    ranked = [f"[rank1]: {ln}" for ln in _uncaught()]
    lines = [*_OPENING, *_STEPS[:2], *ranked, *_OPENING, *_STEPS, *_SUMMARY]
    assert attempt_starts(lines) == [0]


def test_another_programs_exit_is_the_pipelines_next_stage() -> None:
    """A job script that runs training, then a scoring tool (its console script's traceback), then training again:
    one attempt of several stages (README P11), as the program that opened the file is not the one that exited."""
    lines = [*_OPENING, *_STEPS[:2], *_uncaught(), *_OPENING, *_STEPS[:2],
             *_uncaught("/opt/env/bin/sacrebleu", "FileNotFoundError: [Errno 2] No such file or directory: 'hyp.txt'"),
             *_OPENING, *_STEPS, *_SUMMARY]
    starts = attempt_starts(lines)
    assert len(starts) == 2  # the training script's own relaunch only
    assert starts[1] == len(_OPENING) + 2 + 6 + _OWN


def test_opening_prints_inside_a_chained_report_start_nothing() -> None:
    """An exception raised while handling another: the report goes on after the first exception line."""
    chained = [*_uncaught(), "", "During handling of the above exception, another exception occurred:", "", *_uncaught()]
    lines = [*_OPENING, *_STEPS[:2], *chained]
    assert attempt_starts(lines) == [0]


def test_a_pbs_epilogue_after_the_exit_is_no_relaunch() -> None:
    """Torque's epilogue repeats the prologue's job lines after the job's last output: the job's end, not a launch."""
    job = ["Job ID:     4472538.sched.example.edu", "User ID:    alice"]
    lines = [*job, *_OPENING, *_STEPS[:2], *_uncaught(), "Successfully completed",
             "---------------------------------------", "Begin PBS Epilogue Wed May  4 22:02:59 EDT 2022", *job,
             "Resources:  cput=00:10:00,vmem=0kb,walltime=00:05:00"]
    assert attempt_starts(lines) == [0]


# ----------------------------------------------------------------- a runner's summary of failed commands


def _runner(stage_end: list[str]) -> list[str]:
    """A pipeline runner's log (its own logger's records), each stage a command it runs and reports on."""
    rec = "2025-01-02 10:00:00 | {} | {}".format
    return [rec("INFO", "STAGE 1: Training"), rec("INFO", "Running: python train.py --config cfg.yaml"),
            rec("INFO", "  Success"), rec("INFO", "STAGE 2: Evaluation"),
            rec("INFO", "Running: python eval.py --config cfg.yaml"), *[rec(lvl, msg) for lvl, msg in stage_end],
            rec("INFO", "=" * 40), rec("INFO", "EXPERIMENT COMPLETE"), rec("INFO", "=" * 40),
            rec("INFO", "Total time: 3h 02m 11s"), rec("INFO", "Results saved to: /work/out/experiment")]


def test_a_runners_banner_after_its_last_command_failed_is_no_normal_end() -> None:
    """The runner prints its closing banner whatever its commands' exit statuses: its last command failed."""
    lines = _runner([("ERROR", "Command failed with code 2"), ("ERROR", "  Usage: eval.py [OPTIONS] COMMAND [ARGS]..."),
                     ("ERROR", "  Error: No such command 'cfg.yaml'.")])
    w = diagnose_text("\n".join(lines))
    assert w.diagnosis.category != "none"
    assert w.indicator_lines[0] == 6  # the runner's report, then the error the command printed


def test_calledprocesserror_before_the_banner_is_no_normal_end() -> None:
    """Python's ``subprocess.CalledProcessError`` message, logged by the runner that caught it."""
    lines = _runner([("ERROR", "Stage failed: Command '['python', 'eval.py']' returned non-zero exit status 1.")])
    assert diagnose_text("\n".join(lines)).diagnosis.category != "none"


def test_a_runner_that_went_on_after_a_failed_command_ended_normally() -> None:
    """An earlier command failed, later ones succeeded, then the banner: the banner stands."""
    lines = _runner([("ERROR", "Command failed with code 1"), ("INFO", "Running: python analyze.py"),
                     ("INFO", "  Success"), ("INFO", "Running: python report.py"), ("INFO", "  Success"),
                     ("INFO", "Running: python export.py"), ("INFO", "  Success"), ("INFO", "Running: python plot.py"),
                     ("INFO", "  Success"), ("INFO", "Wrote 12 figures to /work/out/figs")])
    assert diagnose_text("\n".join(lines)).diagnosis.category == "none"


def _batch(failed: int) -> list[str]:
    """A batch script that runs five evaluations, catches a failed one's exit status, goes on, then sums up."""
    out = ["[INFO] Progress: [1/5] (20%) - MedNLI", "Accuracy: 0.81", "[SUCCESS] Completed: MedNLI"]
    if failed:
        logged = "ERROR 02-20 12:40:27 [core.py:702] "  # vLLM's engine logs the exception that stops it (logger.exception)
        out += ["[INFO] Progress: [2/5] (40%) - PubMedQA", logged + "EngineCore encountered a fatal error.",
                logged + "Traceback (most recent call last):",
                *[logged + ln for ln in _frame(f"{_LIB}/vllm/v1/engine/core.py", 693, "run_engine_core", "engine_core.run_busy_loop()")],
                *[logged + ln for ln in _frame(f"{_LIB}/vllm/v1/worker/gpu_model_runner.py", 1755, "execute_model",
                                               "assert end_idx <= self.max_model_len, (")],
                logged + "AssertionError: 2049 > max_model_len: 2048", "[ERROR] Failed: PubMedQA - Exit code: 1",
                "[WARNING] Continuing with next evaluation..."]
    for k, task in ((3, "NLI4PR"), (4, "MedMCQA"), (5, "MedQA")):  # the next runs, each with its own set-up lines
        out += [f"[INFO] Progress: [{k}/5] ({20 * k}%) - {task}", f"[INFO] Output: /work/out/{task}", "[INFO] Clearing GPU memory...",
                "GPU memory cleared", f"Loading model Qwen/Qwen2-0.5B-Instruct for {task}", "Model loading took 0.92 GiB",
                *[f"Processed prompts: {25 * j}%|███       | {j}/4 [00:0{j}<00:01,  3.91it/s]" for j in range(1, 5)],
                f"Accuracy: 0.{60 + k}", f"[SUCCESS] Completed: {task}"]
    out += ["",
            "==================================================", "[INFO] Evaluation Summary",
            "==================================================", f"Passed: {5 - failed}/5", f"Failed: {failed}/5",
            "Duration:        0h 12m 40s", "=================================================="]
    return out


def test_a_batch_summary_counting_a_failed_run_is_no_normal_end() -> None:
    lines = _batch(1)
    w = diagnose_text("\n".join(lines))
    assert w.diagnosis.category != "none"
    assert w.indicator_lines[0] == next(i for i, ln in enumerate(lines) if "AssertionError" in ln) + 1


def test_a_batch_summary_with_no_failed_run_is_a_normal_end() -> None:
    assert diagnose_text("\n".join(_batch(0))).diagnosis.category == "none"


# ----------------------------------------------------------------- the job's own last error message


def test_an_error_the_job_caught_and_printed_as_its_last_words_is_diagnosed() -> None:
    """A script that catches the exception, prints it in its own words and stops (torch's ``load_state_dict``
    message and its tab-indented key lists, module.py): the cause is in the log, not "killed from outside"."""
    lines = ["[2026-03-01 10:00:00] Epoch 3 best model saved | test acc: 95.17%", "[2026-03-01 10:00:00] 3  0.0765  97.77  95.17",
             "[5/6] Converting to INT8...",
             "[2026-03-01 10:00:01] INT8 conversion failed: Error(s) in loading state_dict for QuantizableResNet:",
             '\tMissing key(s) in state_dict: "bn1.weight", "bn1.bias", "layer1.0.bn1.weight".',
             '\tUnexpected key(s) in state_dict: "conv1.bn.weight", "conv1.weight_fake_quant.scale".']
    w = diagnose_text("\n".join(lines))
    assert w.diagnosis.category == "checkpoint_error"
    assert w.indicator_lines == [4]

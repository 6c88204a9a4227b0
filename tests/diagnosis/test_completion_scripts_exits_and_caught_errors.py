"""Round 16, normal ends: a bare non-zero exit that the job script's own commands caused after the
work's completion message is a normal end; a runner's closing tally that counts failed runs is not.
Each excerpt is small, written for the test in the format of the library it cites."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.end.after_error import caught_print, went_on
from gpulens.diagnosis.logread.end.completion import end_of_attempt


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _megatron_end(ranks: int = 4) -> list[str]:
    """srun --label output of Megatron-LM's last iterations and ``pretrain``'s
    ``print_datetime('after training is done')`` (megatron/training/training.py), then each rank's
    ProcessGroupNCCL warning at exit (torch ProcessGroupNCCL.cpp ``~ProcessGroupNCCL``)."""
    out = [f"0:  iteration        {k}/       8 | consumed samples:        {k * 64} | elapsed time per iteration (ms): "
           f"2950.{k} | learning rate: 1.000E-05 | lm loss: 7.{90 - k}E+00 |" for k in range(1, 9)]
    out.append("0: [after training is done] datetime: 2025-03-02 10:11:12 ")
    out += [f"{r // 2}: [rank{r}]:[W302 10:11:19.561 ProcessGroupNCCL.cpp:1113] WARNING: process group has NOT been "
            "destroyed before it is being destructed. On normal program exit, the application should call "
            "destroy_process_group to ensure that any pending NCCL data transfers have finished." for r in range(ranks)]
    return out


def _script_summary() -> list[str]:
    """A job script's own summary after the program (an echo of numbers it greps from the log)."""
    return ["0: throughput per GPU: 281.4", "1: throughput per GPU: 281.4",
            "0: elapsed time per iteration: 2950.5", "1: elapsed time per iteration: 2950.5"]


def test_a_bare_exit_after_the_job_scripts_own_errors_is_a_normal_end(clf: Classifier) -> None:
    # bash(1) EXIT STATUS: a script's status is its last command's; coreutils' rm and bash's
    # redirection error (redir.c) report the script's commands after the program had exited
    lines = [*_megatron_end(), *_script_summary(),
             "1: rm: cannot remove 'tmp.txt': No such file or directory",
             "1: run.sh: line 212: results/summary.tsv: No such file or directory",
             "srun: error: node-017: task 0: Exited with exit code 1"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"
    assert w.completion is not None and "after training is done" in w.completion[1]
    assert "job script's own commands" in (w.diagnosis.reason or "")  # not "only the shutdown's"


def test_a_bare_exit_with_no_script_error_after_the_message_stays_unexplained(clf: Classifier) -> None:
    # nothing shows the script's commands failing: the exit may be the program's own
    lines = [*_megatron_end(), *_script_summary(), "srun: error: node-017: task 0: Exited with exit code 1"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none"


def test_a_bare_exit_after_a_second_training_stage_is_not_explained_by_the_script(clf: Classifier) -> None:
    stage2 = [f"0:  iteration        {k}/      20 | consumed samples:        {k * 64} | lm loss: 6.{90 - k}E+00 |"
              for k in range(1, 6)]
    lines = [*_megatron_end(), *stage2, "1: rm: cannot remove 'tmp.txt': No such file or directory",
             "srun: error: node-017: task 0: Exited with exit code 1"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none"


def test_a_traceback_between_the_message_and_the_exit_is_not_the_scripts(clf: Classifier) -> None:
    lines = [*_megatron_end(), "0: Traceback (most recent call last):",
             '0:   File "/work/tools/report.py", line 12, in <module>',
             "0:     rows = open(sys.argv[1]).read()",
             "0: FileNotFoundError: [Errno 2] No such file or directory: 'perf.tsv'",
             "1: rm: cannot remove 'tmp.txt': No such file or directory",
             "srun: error: node-017: task 0: Exited with exit code 1"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none"


def _batch_summary(failed: int) -> list[str]:
    """A batch evaluation script's summary after running its evaluations in turn (each an
    lm-evaluation-harness run: its results table), with the "Failed: N/M" count line."""
    out = ["|  Tasks  |Version|Filter|n-shot|Metric|   |Value |   |Stderr|",
           "|---------|------:|------|-----:|------|---|-----:|---|-----:|",
           "|hellaswag|      1|none  |     0|acc   |↑  |0.4012|±  |0.0049|", "",
           "==================================================", "Summary", "==================================================",
           f"Passed: {5 - failed}/5", f"Failed: {failed}/5", ""]
    out += ["Failed modes:", "  x few-shot"] if failed else []
    return [*out, "=================================================="]


def test_a_closing_tally_with_no_failure_stays_a_normal_end(clf: Classifier) -> None:
    w = diagnose_text("\n".join(_batch_summary(0)), clf)
    assert w.diagnosis.category == "none"


@pytest.mark.parametrize("line, failed", [
    ("=========================== 1 failed, 12 passed in 3.21s ===========================", True),  # pytest
    ("===================== 2 passed, 1 error in 0.52s =====================", True),
    ("============================== 13 passed in 2.90s ==============================", False),
    ("FAILED (failures=1, errors=2)", True),  # unittest TextTestRunner.run
    ("OK (skipped=1)", False),
    ("80% tests passed, 1 tests failed out of 5", True),  # CTest
    ("100% tests passed, 0 tests failed out of 5", False),
])
def test_test_runners_closing_tallies(line: str, failed: bool) -> None:
    lines = ["collected 13 items", "tests/test_io.py ....", line]
    end = end_of_attempt(lines, 0)
    assert (end is not None and end.stopped) is failed


def test_the_tallys_line_is_the_exception_line_of_the_run_its_runner_caught(clf: Classifier) -> None:
    # vLLM's EngineCore logs the traceback of its fatal error with its logger prefix (vllm/v1/engine/core.py
    # ``run_engine_core``: logger.exception("EngineCore encountered a fatal error.")); the test runner
    # reports the case failed, goes on to its next one, and counts it in its closing tally
    pre = "(EngineCore_0 pid=4242) ERROR 03-02 10:40:27 [core.py:702] "
    caught = [f"{pre}EngineCore encountered a fatal error.", f"{pre}Traceback (most recent call last):",
              f'{pre}  File "/opt/py/site-packages/vllm/v1/engine/core.py", line 693, in run_engine_core',
              f"{pre}    engine_core.run_busy_loop()",
              f"{pre}ValueError: The decoder prompt (length 2049) is longer than the maximum model length of 2048.",
              "[ERROR] Failed: pubmedqa - Exit code: 1", "[WARNING] Continuing with next evaluation..."]
    nxt = ["[INFO] Running: medqa (0-shot)"]
    nxt += [f"Processed prompts: {k * 10}%|{'█' * k}| {k * 5}/50 [00:{k:02d}<00:{10 - k:02d}, 4.9it/s]"
            for k in range(1, 11)]
    nxt += [f"[Reasoning {k}/8] step {k} done" for k in range(1, 9)]
    tally = "=========================== 1 failed, 4 passed in 812.21s ==========================="  # pytest
    w = diagnose_text("\n".join([*caught, *nxt, tally]), clf)
    assert w.diagnosis.category == "unknown"
    assert w.indicator_lines == [5]


def _hf_launch(n: int, caught: bool = True) -> list[str]:
    """One training launch of a sweep script with the HF Trainer (transformers trainer.py: the
    "***** Running training *****" header, ``log``'s dicts, ``train``'s final metrics dict with
    'train_runtime'), then the script's own ``except KeyError as e: print(f"Error: {e}")`` when it
    reads a metric the evaluation did not return."""
    out = ["***** Running training *****", "  Num examples = 1,000", "  Num Epochs = 1",
           "  Total optimization steps = 30", f"Run {n}: lr=5e-05 seed={n}"]
    out += [f"{{'loss': {3.5 - k / 10:.4f}, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': {k / 8:.3f}}}"
            for k in range(1, 9)]
    out += ["{'eval_runtime': 2.1, 'eval_samples_per_second': 40.1, 'eval_steps_per_second': 5.0, 'epoch': 1.0}",
            "{'train_runtime': 120.5, 'train_samples_per_second': 8.3, 'train_steps_per_second': 0.25, "
            "'train_loss': 3.3, 'epoch': 1.0}"]
    return [*out, "Error: 'eval_loss'"] if caught else out


def test_a_caught_error_the_job_went_on_from_before_does_not_end_it_after_its_completion(clf: Classifier) -> None:
    lines = [x for n in range(4) for x in _hf_launch(n)]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"
    assert w.completion is not None and "train_runtime" in w.completion[1]
    assert "printed alike earlier" in (w.diagnosis.reason or "")


def test_a_caught_error_printed_once_after_the_completion_is_not_set_aside(clf: Classifier) -> None:
    lines = [*[x for n in range(4) for x in _hf_launch(n, caught=False)], "Error: 'eval_loss'"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none"


def test_went_on_counts_a_trainers_log_dicts_with_learning_rate() -> None:
    # transformers Trainer.log prints "{'loss': ..., 'learning_rate': ...}": no warning in it
    lines = ["Error: 'eval_loss'", *[f"{{'loss': 0.{90 - k}, 'learning_rate': 5e-05, 'epoch': {k}}}" for k in range(25)]]
    assert went_on(lines, 0)
    assert not went_on(["Error: 'eval_loss'", *["UserWarning: x is deprecated"] * 25], 0)


def _finetune_then_reload() -> list[str]:
    """A notebook's fine-tune, its save, then its own ``try: load ... except Exception as e:
    print("Error loading model: ", e)`` around a reload that runs out of GPU memory
    (torch/cuda: "CUDA out of memory. Tried to allocate ..."), and its next cell's output."""
    out = [f"{{'loss': {2.0 - k / 20:.3f}, 'grad_norm': 0.41, 'learning_rate': 0.0002, 'epoch': {k / 5:.1f}}}"
           for k in range(1, 11)]
    out += ["{'train_runtime': 412.3, 'train_samples_per_second': 0.58, 'train_steps_per_second': 0.146, "
            "'train_loss': 1.71, 'epoch': 2.0}", "Model and tokenizer saved to outputs/lora",
            "Error loading model:  CUDA out of memory. Tried to allocate 1008.00 MiB. GPU 0 has a total capacity of "
            "14.74 GiB of which 7.43 GiB is free. Including non-PyTorch memory, this process has 7.31 GiB memory in use."]
    return out


_ANSWER = ["Question: what is 3 + 5 * 2?", "Answer: multiplication first, 5 * 2 = 10.", "Then 3 + 10 = 13.",
           "The correct answer is 13."]


def test_an_error_the_job_caught_and_printed_then_went_on_from_is_not_its_end(clf: Classifier) -> None:
    w = diagnose_text("\n".join([*_finetune_then_reload(), *_ANSWER]), clf)
    assert w.diagnosis.category == "none"
    assert "Error loading model" not in (w.completion or (0, ""))[1]


def test_a_caught_print_the_job_stops_after_stays_a_failure(clf: Classifier) -> None:
    lines = [*_finetune_then_reload(), "Exiting.", *_ANSWER[:2]]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category != "none"
    lines = [*_finetune_then_reload(), *_ANSWER[:2]]  # two lines: too little to say it went on
    assert diagnose_text("\n".join(lines), clf).diagnosis.category != "none"


def test_a_loggers_message_before_the_traceback_it_logs_is_no_caught_print() -> None:
    # hydra/_internal/utils.py run_and_report: log.error("Error executing job with overrides: ...") then the traceback
    lines = ["Error executing job with overrides: ['trainer.max_epochs=3']", "Traceback (most recent call last):",
             '  File "/work/train.py", line 40, in main', "    model = build(cfg)",
             "KeyError: 'encoder'", "", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
             "job 17 done", "copying outputs", "cleaning up"]
    assert not caught_print(lines, 0)


def test_a_caught_error_logged_with_timestamps_is_recognised_alike(clf: Classifier) -> None:
    # the same sweep, its caught error written by Python logging ("%(asctime)s - %(levelname)s - %(message)s"):
    # each copy carries its own time, and only the message repeats
    lines: list[str] = []
    for n in range(4):
        lines += _hf_launch(n, caught=False)
        lines.append(f"2025-03-0{n + 1} 10:1{n}:00,123 - ERROR - Error: 'eval_loss'")
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"

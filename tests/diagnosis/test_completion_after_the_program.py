"""Healthy or failed at a log's end (issue 23, reader round 14): what follows a program's end
(a job script's commands, stdout flushed at exit, the shell's kill report on a half-written line).
Each excerpt is short and written for the test in the format of the program that prints it."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _bar(name: str, upto: int, total: int) -> list[str]:
    return [f"{name}: {k * 100 // total:3d}%|#####     | {k}/{total} [00:{k % 60:02d}<00:10,  1.3it/s]"
            for k in range(upto - 5, upto + 1)]


def _text(lines: list[str]) -> str:
    return "\n".join(lines)


def test_a_missing_command_of_the_job_script_after_the_bar_ended_is_no_failure(clf: Classifier) -> None:
    lines = ["Loading checkpoint from ckpt/best.pt", *_bar("Testing", 500, 500),
             "/var/spool/slurmd/job555/slurm_script: line 18: cleanup_tmp: command not found"]
    w = diagnose_text(_text(lines), clf)
    assert w.diagnosis.category == "none", w.diagnosis
    # the same shell report after a bar short of its end: the program stopped, then the script failed
    cut = diagnose_text(_text(["Loading checkpoint from ckpt/best.pt", *_bar("Testing", 200, 500), lines[-1]]), clf)
    assert cut.diagnosis.category != "none", cut.diagnosis
    # and before the program ran (nothing finished above it), it is the job's failure
    early = diagnose_text(_text(["module load cuda/12.1", "/var/spool/slurmd/job555/slurm_script: line 9: "
                                 "torchrun: command not found"]), clf)
    assert early.diagnosis.category != "none", early.diagnosis


def test_a_missing_file_of_the_job_script_after_a_completion_message_is_no_failure(clf: Classifier) -> None:
    lines = ["epoch 10/10 loss 0.21 acc 0.93", "Training finished: best acc 0.93 at epoch 9",
             "run_all.sh: line 44: results/summary.tsv: No such file or directory"]
    w = diagnose_text(_text(lines), clf)
    assert w.diagnosis.category == "none", w.diagnosis


def test_metrics_flushed_after_the_traceback_that_ended_the_process_do_not_make_it_healthy(clf: Classifier) -> None:
    lines = [*[f">>> Epoch0 | Iter{i} | inputs: torch.Size([400, 8192])" for i in range(30)],
             "Traceback (most recent call last):",
             '  File "/home/u/proj/main.py", line 88, in <module>',
             "    main()",
             '  File "/home/u/proj/trainer.py", line 301, in log_val',
             '    "val/loss": self.val_loss_sum / (self.val_i + 1),',
             "AttributeError: 'Trainer' object has no attribute 'val_loss_sum'",
             "train/loss: 5.190796865973362", *[f"train/cosine_sim_{k}: 0.00{k + 10}" for k in range(24)],
             "Evaluating...",
             *[f">>> Epoch0 | Eval{i} | inputs: torch.Size([200, 8192])" for i in range(4)]]
    w = diagnose_text(_text(lines), clf)
    assert w.diagnosis.category != "none", w.diagnosis


@pytest.mark.parametrize("word, category", [("Terminated", "preempted"), ("Killed", "cpu_oom")])
def test_the_shell_s_kill_report_behind_a_logger_s_timestamp_is_the_end(clf: Classifier, word: str,
                                                                          category: str) -> None:
    lines = []
    for e in range(40, 46):
        lines += ["2024-11-24 04:02:41.918562: ", f"epoch:  {e}", f"2024-11-24 04:04:02.160092: train loss : -0.8{e}",
                  f"2024-11-24 04:04:11.126821: validation loss: -0.8{e}",
                  "2024-11-24 04:04:16.650970: This epoch took 94.732350 s", ""]
    lines.append(f"2024-11-24 04:13:57.870606: {word}")
    w = diagnose_text(_text(lines), clf)
    assert w.diagnosis.category == category, w.diagnosis
    assert w.indicator_lines == [len(lines)]


@pytest.mark.parametrize("report", [
    ["2025-08-04 23:57:15,602 - train.loop - INFO - Training interrupted by user",
     "2025-08-04 23:57:17,181 - train.loop - INFO - Checkpoint saved: ckpt/interrupted_model.pt"],
    ["", "Detected KeyboardInterrupt, attempting graceful shutdown ..."],
])
def test_a_ctrl_c_the_trainer_caught_is_no_normal_end(clf: Classifier, report: list[str]) -> None:
    lines = [f"2025-08-04 23:5{s // 10}:{s % 10}0,100 - train.loop - INFO - Step {s * 25} - Total: 3{s}.56, Class: 0.27"
             for s in range(40)]
    w = diagnose_text(_text([*lines, *report]), clf)
    assert w.diagnosis.category != "none", w.diagnosis


def _trial(n: int, value: float) -> str:
    return (f"[I 2024-05-01 10:{n:02d}:00,123] Trial {n} finished with value: {value} and parameters: "
            f"{{'lr': 0.00{n}, 'bs': 32}}. Best is trial 0 with value: 0.1.")


_FAILED_TRIAL = [
    "[W 2024-05-01 10:03:00,123] Trial 3 failed with parameters: {'lr': 0.3, 'bs': 512} because of the following "
    "error: OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB').",
    "Traceback (most recent call last):",
    '  File "/opt/conda/lib/python3.10/site-packages/optuna/study/_optimize.py", line 196, in _run_trial',
    "    value_or_values = func(trial)",
    '  File "/home/u/tune.py", line 40, in objective',
    "    loss = model(x)",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "[W 2024-05-01 10:03:00,125] Trial 3 failed with value None."]


def test_a_failed_trial_the_sweep_went_on_from_is_no_failure(clf: Classifier) -> None:
    head = [_trial(n, 0.1 + n) for n in range(3)]
    w = diagnose_text(_text([*head, *_FAILED_TRIAL, _trial(4, 0.2), _trial(5, 0.3)]), clf)
    assert w.diagnosis.category == "none", w.diagnosis
    # Optuna without ``catch=`` re-raises the trial's exception: the study ends with it
    last = diagnose_text(_text([*head, *_FAILED_TRIAL, *_FAILED_TRIAL[1:-1]]), clf)
    assert last.diagnosis.category == "gpu_oom", last.diagnosis
    # a trial finished, then the process died of its own traceback: not a normal end
    died = diagnose_text(_text([*head, *_FAILED_TRIAL, _trial(4, 0.2), *_FAILED_TRIAL[1:-1]]), clf)
    assert died.diagnosis.category == "gpu_oom", died.diagnosis


def test_a_missing_tool_after_the_completion_is_no_failure_but_a_missing_script_is(clf: Classifier) -> None:
    done = ["epoch 10/10 loss 0.21 acc 0.93", "Training finished: best acc 0.93 at epoch 9"]
    w = diagnose_text(_text([*done, "bash: nvidia-smi: command not found"]), clf)
    assert w.diagnosis.category == "none", w.diagnosis
    # Python's own report that the next script is missing is not the shell's: the job's next step failed
    py = diagnose_text(_text([*done, "python: can't open file '/home/u/eval.py': [Errno 2] No such file or directory"]), clf)
    assert py.diagnosis.category != "none", py.diagnosis


@pytest.mark.parametrize("tool", [
    "find: '/tmp/systemd-private-4242': Permission denied",
    "ERROR: ld.so: object '/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4' from LD_PRELOAD cannot be preloaded "
    "(cannot open shared object file): ignored.",
])
def test_a_utility_s_error_of_the_job_script_after_the_completion_is_no_failure(clf: Classifier, tool: str) -> None:
    done = ["epoch 10/10 loss 0.21 acc 0.93", "Training finished: best acc 0.93 at epoch 9"]
    w = diagnose_text(_text([*done, tool]), clf)
    assert w.diagnosis.category == "none", w.diagnosis
    # without the program's end before it, it is read as the job's error
    cut = diagnose_text(_text([done[0], "Saving checkpoint to /scratch/ckpt/epoch10.pt", tool]), clf)
    assert cut.diagnosis.category != "none", cut.diagnosis


@pytest.mark.parametrize("missing", [
    "/var/spool/slurmd/job555/slurm_script: line 20: torchrun: command not found",
    "run.sh: line 31: ./eval.sh: No such file or directory",
])
def test_a_missing_next_program_after_the_work_is_the_job_s_failure(clf: Classifier, missing: str) -> None:
    done = ["epoch 10/10 loss 0.21 acc 0.93", "Training finished: best acc 0.93 at epoch 9"]
    w = diagnose_text(_text([*done, missing]), clf)
    assert w.diagnosis.category != "none", w.diagnosis

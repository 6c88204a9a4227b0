"""How a whole log ends when the failure is printed where line-start tests miss it, and the
category of a process ended by a signal (issue 23, round 6): a scheduler's or the shell's kill
written after a progress bar's last "\\r" update, a fatal-signal handler's report (abseil,
glog), a launcher's report that its first worker was SIGKILLed. Each excerpt is small,
realistic and written for the test."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _epochs(n: int) -> list[str]:
    return [f"epoch {e} train_loss 0.{70 - e} val_f1 0.{30 + e}" for e in range(1, n + 1)]


def _bar(epoch: int, upto: int, total: int = 2219) -> str:
    """tqdm's updates of one epoch in a file: one line, "\\r" between updates, no newline."""
    return "".join(f"\rEpoch {epoch}:  {k * 100 // total}%|####      | {k}/{total} [00:{k % 60:02d}<12:49,  1.64it/s]"
                   for k in range(upto - 30, upto + 1))


def test_a_slurm_cancel_written_after_a_progress_bar_is_the_end(clf: Classifier) -> None:
    lines = [*_epochs(5), _bar(6, 954) + "slurmstepd-node33: error: *** JOB 360869 ON node33 CANCELLED AT "
             "2025-04-30T13:16:47 ***"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "preempted", w.diagnosis
    assert w.indicator_lines == [len(lines)]
    # the same bar without the scheduler's words is a stop mid-run, not a normal end either
    cut = diagnose_text("\n".join(lines[:-1] + [_bar(6, 954)]), clf)
    assert cut.diagnosis.category != "none"


def test_the_shell_s_killed_after_a_progress_bar_is_a_failure(clf: Classifier) -> None:
    killed = "/var/spool/slurmd/job4242/slurm_script: line 12: 88123 Killed                  python train.py --bs 64"
    w = diagnose_text("\n".join([*_epochs(3), _bar(4, 700) + killed]), clf)
    assert w.diagnosis.category == "cpu_oom", w.diagnosis
    # a bar followed by a word that is not a kill is no failure
    ok = diagnose_text("\n".join([*_epochs(3), _bar(4, 2219) + "saved model to out/final.pt",
                                  "Training finished: best val_f1 0.36"]), clf)
    assert ok.diagnosis.category == "none"


@pytest.mark.parametrize("report", [
    ["*** SIGTERM received at time=1756174802 on cpu 91 ***",
     "PC: @     0x7a4e04451117  (unknown)  (unknown)",
     "    @     0x7a4e04402520  (unknown)  (unknown)",
     "[2025-08-26 02:20:02,845 E 1079271 1079271] logging.cc:501: *** SIGTERM received at time=1756174802 on cpu 91 ***"],
    ["*** SIGTERM (@0x3e8) received by PID 5120 (TID 0x7f33aa1b4740) from PID 1000; stack trace: ***",
     "    @     0x7f33a9e3c420 (unknown)"],
])
def test_a_fatal_signal_handler_s_sigterm_report_ends_the_run(clf: Classifier, report: list[str]) -> None:
    lines = ["(TaskRunner pid=1092302) step:19 - actor/loss:0.31 - critic/score/mean:0.42",
             "(TaskRunner pid=1092302) Training Progress:   1%|          | 19/2226 [14:07<28:41:23, 46.80s/it]",
             "(TaskRunner pid=1092302) step:20 - actor/loss:0.29 - critic/score/mean:0.44",
             *report]
    w = diagnose_text("\n".join(lines), clf)
    d = w.diagnosis
    assert (d.category, d.origin) == ("preempted", "unknown"), d
    assert w.indicator_lines and w.indicator_lines[0] == 4


def test_a_fatal_signal_handler_s_segfault_report_stays_a_crash(clf: Classifier) -> None:
    lines = [*_epochs(2), "*** SIGSEGV (@0x0) received by PID 4242 (TID 0x7f00aa) from PID 0; stack trace: ***",
             "    @     0x7f00a9e3c420 (unknown)", "    @     0x7f00a1234567 paddle::framework::Executor::Run()"]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    assert d.category == "crash", d


@pytest.mark.parametrize("verdict", [
    "E0101 12:00:00.000000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -9) "
    "local_rank: 1 (pid: 4411) of binary: /usr/bin/python3",
    "[2024-05-01 10:00:00,000] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', 'train.py', "
    "'--local_rank=0'] exits with return code = -9",
])
def test_a_launcher_s_worker_sigkilled_without_an_error_is_host_memory(clf: Classifier, verdict: str) -> None:
    lines = [*_epochs(4), "[2024-05-01 10:00:00,000] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 4411",
             verdict]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    # the OOM killer is the likeliest sender, but the log does not say (README "Origin: rules", O7)
    assert (d.category, d.origin) == ("cpu_oom", "unknown"), d


def test_a_worker_s_own_error_beats_its_launcher_s_sigkill_report(clf: Classifier) -> None:
    lines = [*_epochs(2), "Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
             "of 79.15 GiB of which 1.20 GiB is free.",
             "[2024-05-01 10:00:00,000] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', '-u', "
             "'train.py'] exits with return code = -9"]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == "gpu_oom"


def test_cudnn_s_not_enough_memory_is_gpu_memory(clf: Classifier) -> None:
    lines = [*_epochs(2), "Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
             "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_ENOUGH_MEMORY"]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == "gpu_oom"


def _keras_epoch(upto: int) -> list[str]:
    return ["Epoch 1/20", *(f"{k}/500 [====>.........................] - ETA: 1:02 - loss: 0.{90 - k:02d}"
                            for k in range(1, upto + 1))]


@pytest.mark.parametrize("stop", [
    ["Batch 31: Invalid loss, terminating training", "31/500 [>.............................] - ETA: 1:01 - loss: nan"],
    # Keras's progress bar ends without a newline: the callback's line starts on the bar's line
    ["31/500 [>.............................] - ETA: 1:01 - loss: nanBatch 31: Invalid loss, terminating training"],
])
def test_keras_s_stop_on_a_nan_loss_ends_a_diverged_run(clf: Classifier, stop: list[str]) -> None:
    lines = [*_keras_epoch(30), *stop]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "model_diverged", w.diagnosis
    assert w.indicator_lines == [31 + 1]
    # fit() returns after the stop: what the script prints next does not make it a normal end
    after = diagnose_text("\n".join([*lines, "Test accuracy: 0.1000", "Saved model to out/model.h5"]), clf)
    assert after.diagnosis.category == "model_diverged"


def test_a_dataset_missing_from_the_hub_is_the_input_s_fault(clf: Classifier) -> None:
    lines = ["Loading dataset...", "Traceback (most recent call last):", '  File "train.py", line 20, in <module>',
             "datasets.exceptions.DatasetNotFoundError: Dataset 'someone/sft-mix-v2' doesn't exist on the Hub or "
             "cannot be accessed."]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == "incorrect_input"


@pytest.mark.parametrize("exc", ["FileExistsError: Experiment directory already exists: checkpoints/run_a",
                                 "FileExistsError: [Errno 17] File exists: 'outputs/sft-7b'"])
def test_refusing_to_overwrite_an_existing_output_is_the_job_s_configuration(clf: Classifier, exc: str) -> None:
    lines = [*_epochs(3), "Starting experiment run_a", "Traceback (most recent call last):",
             '  File "run_all.py", line 61, in <module>', "    os.makedirs(out_dir)", exc]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    assert (d.category, d.origin, d.rule_id) == ("semantic_error", "user", "output-exists-refused"), d
    assert "checkpoints/run_a" in (d.hint or "") or "outputs/sft-7b" in (d.hint or "")


def test_a_missing_cuda_toolkit_binary_is_the_environment_not_the_data(clf: Classifier) -> None:
    lines = ["INFO 09-01 10:00:00 [core.py:70] Initializing a V1 LLM engine with config: model='phi-4'",
             "(EngineCore_0 pid=2211) Traceback (most recent call last):",
             '(EngineCore_0 pid=2211)   File "/opt/venv/lib/python3.11/site-packages/torch/utils/cpp_extension.py", '
             "line 2300, in _get_cuda_arch_flags",
             "(EngineCore_0 pid=2211) FileNotFoundError: [Errno 2] No such file or directory: "
             "'/usr/local/cuda-12.4/bin/nvcc'",
             "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    assert (d.category, d.rule_id) == ("cuda_env_error", "cuda-toolkit-file-missing"), d
    data = diagnose_text("\n".join([*lines[:3], "FileNotFoundError: [Errno 2] No such file or directory: "
                                    "'/data/cuda_images/train.json'"]), clf).diagnosis
    assert data.category == "incorrect_input", data


@pytest.mark.parametrize(("report", "origin"), [
    (["[2024-03-02 11:00:00,000] torch.distributed.elastic.agent.server.api: [WARNING] Received 1 death signal, "
      "shutting down workers",
      "torch.distributed.elastic.multiprocessing.api.SignalException: Process 1871231 got signal: 1"], "unknown"),
    (["W0302 11:00:00.000000 140 torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGINT "
      "death signal, shutting down workers",
      "torch.distributed.elastic.multiprocessing.api.SignalException: Process 1871231 got signal: 2"], "user"),
    (["W0302 11:00:00.000000 140 torch/distributed/elastic/agent/server/api.py:704] Received Signals.SIGTERM "
      "death signal, shutting down workers",
      "torch.distributed.elastic.multiprocessing.api.SignalException: Process 1871231 got signal: 15"],
     "unknown"),
])
def test_the_signal_that_stopped_torchrun_tells_who_stopped_it(clf: Classifier, report: list[str], origin: str) -> None:
    """SIGINT: Ctrl-C, the user's hand; SIGHUP: a session that ended (the user, a dropped ssh
    connection, kill -HUP); SIGTERM: anyone (a person, a script, the scheduler) unless a line names
    a scheduler's decision (README "Origin: rules", O3/O4): a Slurm job is not enough."""
    lines = [*(f"{0.9 - k / 100:.4f}" for k in range(40)), "Traceback (most recent call last):",
             '  File "/usr/bin/torchrun", line 8, in <module>', *report]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    assert (d.category, d.origin) == ("preempted", origin), d
    if origin == "unknown":
        d = diagnose_text("\n".join(["srun: job 5512 queued and waiting for resources", *lines]), clf).diagnosis
        assert (d.category, d.origin) == ("preempted", "unknown"), d


_LIMIT = "slurmstepd: error: *** JOB 812 ON gpu07 CANCELLED AT 2024-06-02T09:00:00 DUE TO TIME LIMIT ***"


def test_a_time_limit_after_a_rank_died_of_its_own_error_is_not_the_cause(clf: Classifier) -> None:
    lines = [*_epochs(4), "[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "train.py", line 140, in <module>',
             "[rank1]: TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'", _LIMIT]
    d = diagnose_text("\n".join(lines), clf).diagnosis
    assert d.category == "semantic_error", d


@pytest.mark.parametrize("between", [
    _epochs(5),  # training went on after the error: the time limit ended the run
    [],
])
def test_a_time_limit_stays_the_cause_after_an_error_the_run_went_on_from_or_one_the_kill_made(
        clf: Classifier, between: list[str]) -> None:
    exc = "TypeError: 'NoneType' object is not callable" if between else "KeyboardInterrupt"
    lines = [*_epochs(3), "Traceback (most recent call last):", '  File "train.py", line 9, in <module>', exc,
             *between, _LIMIT]
    assert diagnose_text("\n".join(lines), clf).diagnosis.category == "preempted"

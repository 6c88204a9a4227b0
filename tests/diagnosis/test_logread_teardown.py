"""A run whose work finished (a completion message) and whose shutdown then failed (a DataLoader
worker or a process killed, the process group losing its peers, the launcher's report of that
exit) ended normally; an error of the work itself after the message, or more work after it, is a
failure. Each excerpt is small, realistic and written for the test."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.end.shutdown import shutdown_error


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


_RAY = "\x1b[36m(TaskRunner pid=51200)\x1b[0m "


def _verl_end() -> list[str]:
    out = [f"{_RAY}step:{k} - actor/entropy:0.5{k} - critic/score/mean:0.1{k} - response_length/mean:412.{k}"
           for k in range(1, 4)]
    out += [f"{_RAY}Training Progress:  75%|███████▌  | 3/4 [01:02<00:20, 20.7s/it]",
            f"{_RAY}step:4 - actor/entropy:0.51 - critic/score/mean:0.22 - response_length/mean:398.0",
            f"{_RAY}(\"Final validation metrics: {{'val-core/gsm8k/reward/mean@1': \"",
            f"{_RAY} \"0.4321}}\")",
            f"{_RAY}Training Progress: 100%|██████████| 4/4 [01:24<00:00, 21.1s/it]"]
    return out


def test_a_dataloader_worker_killed_after_verls_final_validation_is_a_normal_end(clf: Classifier) -> None:
    lines = [*_verl_end(), f"{_RAY}Traceback (most recent call last):",
             f'{_RAY}  File "/opt/py/site-packages/ray/_private/workers/default_worker.py", line 322, in <module>',
             f"{_RAY}    worker.main_loop()",
             f'{_RAY}  File "/opt/py/site-packages/torch/utils/data/_utils/signal_handling.py", line 73, in handler',
             f"{_RAY}    _error_if_any_worker_fails()",
             f"{_RAY}RuntimeError: DataLoader worker (pid 77120) is killed by signal: Killed."]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none" and "shutdown" in (w.diagnosis.reason or "")
    assert w.completion is not None and "Final validation metrics" in w.completion[1]


def test_a_process_group_losing_its_peers_after_training_completed_is_a_normal_end(clf: Classifier) -> None:
    lines = [*[f"[rank0]: {{'loss': 0.{90 - k}, 'learning_rate': 1e-05, 'epoch': {k / 10:.1f}}}" for k in range(1, 11)],
             "[rank0]: {'train_runtime': 812.3, 'train_samples_per_second': 9.85, 'train_loss': 0.842, 'epoch': 1.0}",
             "[rank1]:[E1104 10:02:11.512 ProcessGroupNCCL.cpp:1423] [PG 0 Rank 1] Failed to check the \"should dump\" "
             "flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Connection reset by peer",
             "W1104 10:02:12.001000 4100 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 4102 "
             "closing signal SIGTERM",
             "E1104 10:02:12.300000 4100 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -15) "
             "local_rank: 1 (pid: 4103) of binary: /usr/bin/python3"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"


def test_an_error_of_the_final_save_after_the_message_is_a_failure(clf: Classifier) -> None:
    lines = [*[f"epoch {e} loss 0.{60 - e}" for e in range(1, 11)], "Training completed in 2:01:13",
             "Saving the model to out/final", "Traceback (most recent call last):",
             '  File "train.py", line 212, in <module>', "    torch.save(model.state_dict(), path)",
             "OSError: [Errno 28] No space left on device",
             "RuntimeError: DataLoader worker (pid 9911) is killed by signal: Terminated."]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "storage_error"


def test_a_worker_killed_in_work_printed_after_the_message_is_a_failure(clf: Classifier) -> None:
    lines = [*[f"epoch {e} loss 0.{60 - e}" for e in range(1, 6)], "Training completed in 0:41:02",
             *[f"Evaluating:  {k}0%|███       | {k}/10 [00:0{k}<00:07,  1.2it/s]" for k in range(1, 5)],
             "RuntimeError: DataLoader worker (pid 9911) is killed by signal: Killed."]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none"  # the evaluation after the message was the work


def test_a_launchers_report_alone_after_the_message_is_a_failure(clf: Classifier) -> None:
    lines = [*[f"epoch {e} loss 0.{60 - e}" for e in range(1, 6)], "Training completed in 0:41:02",
             "srun: error: gpu-17: task 0: Exited with exit code 1"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category != "none"  # what exited 1 is not said: not a shutdown's error


@pytest.mark.parametrize(("line", "kind"), [
    ("RuntimeError: DataLoader worker (pid(s) 4242, 4243) exited unexpectedly", "teardown"),
    ("torch.distributed.DistNetworkError: Connection reset by peer", "teardown"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer", None),
    ("Killed", "signal"),
    ("*** SIGTERM received at time=1756174802 on cpu 91 ***", "signal"),
    ("torch.distributed.elastic.multiprocessing.api.SignalException: Process 4100 got signal: 15", "signal"),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", "report"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", None),
    ("slurmstepd: error: *** JOB 81 ON g3 CANCELLED AT 2025-01-02T03:04:05 DUE TO TIME LIMIT ***", None),
])
def test_shutdown_error_kinds(line: str, kind: str | None) -> None:
    assert shutdown_error(line) == kind


def test_a_bare_kill_right_after_the_message_is_the_shutdown_but_not_after_more_output(clf: Classifier) -> None:
    head = [*[f"epoch {e} loss 0.{60 - e}" for e in range(1, 6)], "Training completed in 0:41:02"]
    w = diagnose_text("\n".join([*head, "Saved model to out/final", "Killed"]), clf)
    assert w.diagnosis.category == "none"
    more = [f"test sample {k}: pred=cat label=cat" for k in range(8)]
    w = diagnose_text("\n".join([*head, "Running the test set", *more, "Killed"]), clf)
    assert w.diagnosis.category != "none"  # the kill may have ended the test after training


def test_a_cuda_call_at_interpreter_exit_after_the_work_is_the_shutdown(clf: Classifier) -> None:
    lines = [*[f"epoch {e} loss 0.{60 - e}" for e in range(1, 6)], "Training finished. Best val acc: 0.912",
             "terminate called after throwing an instance of 'c10::Error'",
             "  what():  CUDA error: driver shutting down",
             "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44 (most recent "
             "call first):", "Aborted (core dumped)"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "none"
    # the same abort with no shutdown error of its own is a crash of the work
    crash = [ln for ln in lines if "driver shutting down" not in ln]
    crash[-3:-3] = ["  what():  CUDA error: an illegal memory access was encountered"]
    assert diagnose_text("\n".join(crash), clf).diagnosis.category != "none"

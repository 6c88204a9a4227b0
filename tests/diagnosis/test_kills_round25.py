"""Reader round 25, kills: a stop that reaches a job after one of its processes died of its own
error is that error's aftermath (README C1, O3, R6). Excerpts written by hand in the formats of
CPython's traceback, torchrun (torch/distributed/elastic/agent/server/api.py "Received ... death
signal, shutting down workers", multiprocessing/api.py "Sending process N closing signal SIGTERM"
and ``SignalException: Process N got signal: 15``), srun (src/srun launch ``_task_finish``: "task N:
Terminated"), slurmstepd (src/slurmd/slurmstepd/req.c ``_handle_signal_container``: "*** JOB N ON
host CANCELLED AT <time> [DUE TO TIME LIMIT] ***") and Lightning's SIGTERM record
(trainer/connectors/signal_connector.py "[rank: N] Received SIGTERM: 15")."""

from __future__ import annotations

from gpulens.diagnosis.logread.whole import diagnose_text

_STEPS = ["epoch 1 iter 100 loss 2.412", "epoch 1 iter 200 loss 2.118"]


def _tb(exc: str, prefix: str = "") -> list[str]:
    """A main thread's uncaught traceback ending in ``exc``."""
    body = ["Traceback (most recent call last):", '  File "/work/u/run.py", line 210, in <module>', "    fit(cfg)",
            '  File "/work/u/run.py", line 160, in fit', "    out = net(batch)", exc]
    return [prefix + ln for ln in body]


_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 3 has a total capacity "
        "of 39.39 GiB of which 512.00 MiB is free.")
_AGENT = "W1104 08:15:02.441000 7101 torch/distributed/elastic/"
_AGENT_SIGNALLED = [
    f"{_AGENT}agent/server/api.py:704] Received Signals.SIGTERM death signal, shutting down workers",
    f"{_AGENT}multiprocessing/api.py:897] Sending process 7120 closing signal SIGTERM",
    "Traceback (most recent call last):",
    '  File "/opt/env/bin/torchrun", line 8, in <module>',
    "    sys.exit(main())",
    '  File "/opt/env/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py", line 84, '
    "in _terminate_process_handler",
    '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 7101 got signal: 15",
]


def _diagnose(lines: list[str]) -> tuple[str, str]:
    d = diagnose_text("\n".join(lines) + "\n").diagnosis
    return d.category, d.rule_id or ""


def test_torchrun_agent_signalled_after_a_rank_ran_out_of_memory() -> None:
    lines = [*_STEPS, *_tb(_OOM, "[rank2]: "), *_AGENT_SIGNALLED]
    assert _diagnose(lines)[0] == "gpu_oom"


def test_time_limit_and_agent_signal_after_a_rank_died_and_the_job_hung() -> None:
    limit = "slurmstepd: error: *** JOB 5512 ON node31 CANCELLED AT 2025-11-04T20:15:00 DUE TO TIME LIMIT ***"
    lines = [*_STEPS, *_tb(_OOM, "[rank2]: "), limit, *_AGENT_SIGNALLED]
    assert _diagnose(lines)[0] == "gpu_oom"


def test_srun_terminated_after_the_task_printed_its_own_traceback() -> None:
    lines = [*_STEPS, *_tb(_OOM),
             "slurmstepd: error: *** STEP 5512.0 ON node31 CANCELLED AT 2025-11-04T20:15:00 ***",
             "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
             "srun: error: node31: task 0: Terminated"]
    assert _diagnose(lines)[0] == "gpu_oom"


def test_lightning_sigterm_record_after_a_rank_failed() -> None:
    exc = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (16x768 and 512x10)"
    lines = [*_STEPS, *_tb(exc), "[rank: 1] Received SIGTERM: 15"]
    assert _diagnose(lines)[0] == "semantic_error"


def test_a_stop_before_the_traceback_stays_the_cause() -> None:
    # the handler's own save failing after the SIGTERM came: the stop is the cause
    exc = "RuntimeError: mat1 and mat2 shapes cannot be multiplied (16x768 and 512x10)"
    lines = [*_STEPS, "[rank: 0] Received SIGTERM: 15", *_tb(exc),
             "slurmstepd: error: *** JOB 5512 ON node31 CANCELLED AT 2025-11-04T20:15:00 DUE TO TIME LIMIT ***",
             *_AGENT_SIGNALLED]
    assert _diagnose(lines)[0] == "preempted"


def test_progress_after_the_traceback_leaves_the_stop_the_cause() -> None:
    # an evaluation callback's traceback the loop went on from: training printed steps after it
    exc = "ValueError: too many values to unpack (expected 2)"
    lines = [*_STEPS, *_tb(exc), "epoch 1 iter 300 loss 1.997", "epoch 1 iter 400 loss 1.903", *_AGENT_SIGNALLED]
    assert _diagnose(lines)[0] == "preempted"


def test_an_ignored_exception_before_the_stop_ended_nothing() -> None:
    # CPython's PyErr_WriteUnraisable report ("Exception ignored in: ..."): the process went on
    ignored = ["Exception ignored in: <function _Loader.__del__ at 0x7f3a2c1d0e50>", *_tb("OSError: handle closed")]
    lines = [*_STEPS, *ignored, *_AGENT_SIGNALLED]
    assert _diagnose(lines)[0] == "preempted"


def test_an_nccl_error_before_the_time_limit_is_the_cause() -> None:
    # one rank's own NCCL failure (torch's DistBackendError), then the job hung to its limit
    exc = ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
           "1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5")
    limit = "slurmstepd: error: *** JOB 5512 ON node31 CANCELLED AT 2025-11-04T20:15:00 DUE TO TIME LIMIT ***"
    lines = [*_STEPS, *_tb(exc, "[rank0]: "), "[rank0]: ncclSystemError: System call (e.g. socket, malloc) or "
             "external library call failed or device error.", limit]
    assert _diagnose(lines)[0] == "comm_error"


def test_an_error_no_rule_names_before_the_launcher_stop_is_unknown_not_preempted() -> None:
    # DeepSpeed's launcher (deepspeed/launcher/launch.py sigkill_handler) after a worker's own raise
    stamp = "[2025-11-04 08:15:02,441] [INFO] [launch.py:319:sigkill_handler]"
    lines = [*_STEPS, *_tb("Exception: warmup_steps must be below total_steps"),
             f"{stamp} Killing subprocess 7120", f"{stamp} Killing subprocess 7121",
             "[2025-11-04 08:15:03,002] [ERROR] [launch.py:325:sigkill_handler] ['/opt/env/bin/python', '-u', "
             "'run.py', '--local_rank=1'] exits with return code = -15"]
    assert _diagnose(lines)[0] == "unknown"
    torchrun = [*_STEPS, *_tb("Exception: warmup_steps must be below total_steps"),
                "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 7120 closing signal SIGTERM",
                "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -15) local_rank: 0 (pid: 7120) "
                "of binary: /opt/env/bin/python"]
    assert _diagnose(torchrun)[0] == "unknown"


def test_an_interrupt_embedded_in_the_error_report_stays_the_cause() -> None:
    # JAX's callback error quotes the KeyboardInterrupt its host callback raised (frames, then the interrupt)
    lines = [*_STEPS, "Traceback (most recent call last):", '  File "/work/u/run.py", line 281, in <module>',
             "    out = step(rng)", "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CustomCall failed: CpuCallback "
             "error: Traceback (most recent call last):", '  File "/work/u/run.py", line 281, in <module>',
             '  File "/opt/env/lib/python3.11/site-packages/jax/_src/pjit.py", line 332, in cache_miss',
             "KeyboardInterrupt:"]
    assert _diagnose(lines)[0] == "preempted"


_LIMIT = "slurmstepd: error: *** JOB 5512 ON node31 CANCELLED AT 2025-11-04T20:15:00 DUE TO TIME LIMIT ***"


def test_a_cpp_abort_before_the_time_limit_is_the_cause() -> None:
    # libstdc++'s verbose terminate handler: "terminate called after throwing an instance of ...", "what():"
    lines = [*_STEPS, "terminate called after throwing an instance of 'c10::Error'",
             "  what():  CUDA error: an illegal memory access was encountered",
             "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most recent "
             "call first):", _LIMIT]
    assert _diagnose(lines)[0] == "cuda_error"


def test_the_nccl_watchdog_abort_before_the_time_limit_is_the_cause() -> None:
    # ProcessGroupNCCL.cpp's watchdog takes the process down (std::terminate) on a collective timeout
    timeout = ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, "
               "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.")
    lines = [*_STEPS, f"[rank1]:[E1104 08:45:02.441000 7101 ProcessGroupNCCL.cpp:616] {timeout}",
             "terminate called after throwing an instance of 'c10::DistBackendError'",
             f"  what():  [PG 0 Rank 1] Process group watchdog thread terminated with exception: {timeout}", _LIMIT]
    assert _diagnose(lines)[0] == "comm_error"


def test_progress_after_the_abort_leaves_the_time_limit_the_cause() -> None:
    lines = [*_STEPS, "terminate called after throwing an instance of 'c10::Error'",
             "  what():  CUDA error: an illegal memory access was encountered",
             "epoch 1 iter 300 loss 1.997", "epoch 1 iter 400 loss 1.903", _LIMIT]
    assert _diagnose(lines)[0] == "preempted"


def test_a_task_that_exited_on_its_own_before_srun_stopped_the_others_is_not_a_preemption() -> None:
    # srun's _task_finish lines: one task's own exit code, then the task srun ended
    lines = [*_STEPS, "srun: error: node31: task 0: Exited with exit code 1",
             "slurmstepd: error: *** STEP 5512.0 ON node31 CANCELLED AT 2025-11-04T20:15:00 ***",
             "srun: error: node32: task 1: Terminated"]
    assert _diagnose(lines)[0] == "unknown"


def test_a_worker_that_failed_before_torchrun_stopped_the_others_is_not_a_preemption() -> None:
    lines = [*_STEPS, f"{_AGENT}multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1 (pid: 7121) of "
             "binary: /opt/env/bin/python", f"{_AGENT}multiprocessing/api.py:897] Sending process 7120 closing "
             "signal SIGTERM", "[rank: 0] Received SIGTERM: 15"]
    assert _diagnose(lines)[0] == "unknown"


def test_a_signal_before_the_exit_code_stays_the_cause() -> None:
    # the time limit first: a handler that exits 1 on SIGTERM gives srun's exit line after it
    lines = [*_STEPS, _LIMIT, "[rank: 0] Received SIGTERM: 15", "srun: error: node31: task 0: Exited with exit code 1"]
    assert _diagnose(lines)[0] == "preempted"


def test_an_interrupt_of_the_hung_children_after_the_main_error_is_its_aftermath() -> None:
    # multiprocessing's BaseProcess._bootstrap prints "Process ForkProcess-2:" and the child's own traceback
    lines = [*_STEPS, *_tb("KeyError: 'image'"), "Process ForkProcess-2:", "Traceback (most recent call last):",
             '  File "/opt/env/lib/python3.10/multiprocessing/process.py", line 314, in _bootstrap',
             "    self.run()", "KeyboardInterrupt"]
    assert _diagnose(lines)[0] != "preempted"

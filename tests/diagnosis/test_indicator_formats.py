"""Indicator lines of the common failure formats under README rules R1-R9 ("Indicator lines:
rules"): one excerpt per format, each written by hand in the shape the tool really prints
(CPython's chained tracebacks, torchrun/elastic, Ray, multiprocessing, the C++ runtime's
``terminate``, CUDA device asserts, NCCL, Slurm, the kernel, Hydra, accelerate/DeepSpeed
launchers, Python's ``logging``)."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.indicators import chains


def _picked(lines: list[str], rules: Classifier) -> list[str]:
    w = diagnose_text("\n".join(lines), rules)
    return [lines[n - 1] for n in w.indicator_lines]


def _tb(exc: str, frame: str = "/srv/train.py", prefix: str = "") -> list[str]:
    return [f"{prefix}Traceback (most recent call last):", f'{prefix}  File "{frame}", line 10, in run',
            f"{prefix}    out = step(batch)", f"{prefix}{exc}"]


_STEPS = [f"epoch 1 step {k} loss 0.{k}" for k in range(40, 46)]
_DURING = ["", "During handling of the above exception, another exception occurred:", ""]
_CAUSE = ["", "The above exception was the direct cause of the following exception:", ""]


def test_during_handling_chain_first_and_last(rules: Classifier) -> None:
    # R4: the original error and the one that ended the process, nothing in between
    lines = (_STEPS + _tb("OSError: [Errno 28] No space left on device") + _DURING
             + _tb("FileNotFoundError: [Errno 2] No such file or directory: 'ckpt/step_46.tmp'") + _DURING
             + _tb("RuntimeError: could not save the checkpoint after 3 tries"))
    assert _picked(lines, rules) == ["OSError: [Errno 28] No space left on device",
                                     "RuntimeError: could not save the checkpoint after 3 tries"]


def test_direct_cause_chain_first_and_last(rules: Classifier) -> None:
    lines = (_STEPS + _tb("KeyError: 'input_ids'") + _CAUSE
             + _tb("ValueError: batch is missing a field the model needs") + _CAUSE
             + _tb("RuntimeError: collate failed for batch 12"))
    assert _picked(lines, rules) == ["KeyError: 'input_ids'", "RuntimeError: collate failed for batch 12"]


def test_a_chain_that_repeats_its_message_is_labelled_once(rules: Classifier) -> None:
    lines = _STEPS + _tb("KeyError: 'labels'") + _DURING + _tb("KeyError: 'labels'")
    assert _picked(lines, rules) == ["KeyError: 'labels'"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(_STEPS) + 4]


def test_a_chain_whose_messages_repeat_ends_at_its_last_exception(rules: Classifier) -> None:
    # transformers' offline look-up: LocalEntryNotFoundError -> OSError, handled by retrying the
    # same look-up, which fails the same way: the chain's first and last lines
    a = "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find the requested files in the disk cache"
    b = "OSError: We couldn't connect to 'https://huggingface.co' to load the files"
    lines = (["[INFO] loading Qwen/Qwen2.5-7B"] + _tb(a) + _CAUSE + _tb(b) + _DURING + _tb(a) + _CAUSE + _tb(b))
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [5, len(lines)]


def test_a_chain_printed_by_a_logger_and_again_by_python_counts_at_its_first_printing(rules: Classifier) -> None:
    # logger.exception("training failed") then raise: the same chain twice, the first printing labelled
    chain = _tb("OSError: [Errno 5] Input/output error") + _CAUSE + _tb("RuntimeError: checkpoint write failed")
    lines = _STEPS + ["2025-03-02 10:04:11,201 - ERROR - trainer - training failed"] + chain + chain
    w = diagnose_text("\n".join(lines), rules)
    first_io = len(_STEPS) + 1 + 4
    assert w.indicator_lines == [first_io, first_io + 7]


def test_multiprocessing_remote_traceback_counts_by_its_embedded_error(rules: Classifier) -> None:
    # multiprocessing.Pool re-raises a worker's error: "RemoteTraceback:" embeds the worker's
    # traceback in triple quotes, then "direct cause" of the same error in the parent
    lines = (["preprocessing 64 shards with 8 workers",
              "multiprocessing.pool.RemoteTraceback: ", '"""', "Traceback (most recent call last):",
              '  File "/usr/lib/python3.10/multiprocessing/pool.py", line 125, in worker',
              "    result = (True, func(*args, **kwds))", '  File "/srv/prep.py", line 31, in tokenize_shard',
              "    ids = tok(text)[\"input_ids\"]", "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0",
              '"""'] + _CAUSE
             + _tb("UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0", "/srv/prep.py"))
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [9]


def test_a_ray_actor_that_failed_to_import_counts_by_the_import_error(rules: Classifier) -> None:
    # Ray's wrapper message ends with a colon and embeds the worker's import traceback; the driver
    # then fails on the missing actor: the embedded original and the terminal error (R4, R7)
    lines = ["(main_task pid=2101) Total training steps: 560",
             "(raylet) Traceback (most recent call last):",
             '  File "python/ray/_raylet.pyx", line 2276, in ray._raylet.task_execution_handler',
             "RuntimeError: The actor with name WorkerDict failed to import on the worker. This may be because needed "
             "library dependencies are not installed in the worker environment:",
             "",
             "Traceback (most recent call last):",
             '  File "/opt/conda/lib/python3.10/site-packages/flash_attn/__init__.py", line 3, in <module>',
             "    import flash_attn_2_cuda as flash_attn_gpu",
             "ImportError: /opt/conda/lib/python3.10/site-packages/flash_attn_2_cuda.so: undefined symbol: _ZN3c105ErrorC2E",
             "",
             "Traceback (most recent call last):",
             '  File "/srv/main_ppo.py", line 25, in main',
             "    ray.get(main_task.remote(config))",
             "ray.exceptions.RayTaskError(AssertionError): ray::main_task() (pid=2101, ip=10.0.0.7)",
             '  File "/srv/ray/base.py", line 274, in _init_with_resource_pool',
             "    assert register_center_actor is not None",
             "AssertionError: failed to get register_center_actor: ab12_register_center in []"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [9, 17]


def test_urllib3_retry_warnings_are_not_the_error(rules: Classifier) -> None:
    # urllib3 logs each retry; the error is what is raised when it gives up (R2: warnings before
    # the failure are not labelled)
    retry = ("Retrying (Retry(total={n}, connect={n}, read=5, redirect=5, status=5)) after connection broken by "
             "'ConnectTimeoutError(<urllib3.connection.HTTPSConnection object at 0x7f01>, 'Connection to api.example.org "
             "timed out. (connect timeout=10)')': /v1/auth")
    lines = ([retry.format(n=n) for n in range(3, -1, -1)] + _tb("TimeoutError: timed out", "/opt/urllib3/connection.py")
             + _CAUSE + _tb("requests.exceptions.ConnectTimeout: HTTPSConnectionPool(host='api.example.org', port=443): "
                            "Max retries exceeded with url: /v1/auth", "/srv/tracker.py"))
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [8, len(lines)]


def test_cpp_terminate_with_what_is_one_line_not_the_abort_after_it(rules: Classifier) -> None:
    # the C++ runtime: "terminate called after throwing an instance of ..." and its what(); bash's
    # "Aborted (core dumped)" is the consequence (R3, R6)
    lines = _STEPS + [
        "terminate called after throwing an instance of 'c10::Error'",
        "  what():  CUDA error: an illegal memory access was encountered",
        "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 (most recent call first):",
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f3a in /opt/torch/lib/libc10.so)",
        "frame #1: c10::detail::torchCheckFail(char const*, char const*, unsigned int, std::string const&) + 0x64",
        "frame #2: c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, int, bool) + 0x118",
        "frame #3: <unknown function> + 0x1d9a0 (0x7f3b in /opt/torch/lib/libc10_cuda.so)",
        "frame #4: <unknown function> + 0x2a5b (0x7f3c in /opt/torch/lib/libtorch_cuda.so)",
        "",
        "/var/spool/slurm/d/job123/slurm_script: line 12: 40211 Aborted                 (core dumped) python train.py",
    ]
    got = diagnose_text("\n".join(lines), rules).indicator_lines
    assert len(got) == 1 and got[0] in (7, 8)


def test_cuda_device_asserts_then_the_runtime_error(rules: Classifier) -> None:
    # device code's assert (printed once per thread) and the RuntimeError that reports it: the
    # first assert line and the exception line (R7: the root and the terminal error)
    assert_line = ("/opt/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [{b},0,0], thread: "
                   "[{t},0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.")
    lines = (_STEPS + [assert_line.format(b=b, t=t) for b in range(3) for t in range(32, 36)]
             + _tb("RuntimeError: CUDA error: device-side assert triggered")
             + ["CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
                "might be incorrect.", "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."])
    got = diagnose_text("\n".join(lines), rules).indicator_lines
    assert got == [len(_STEPS) + 1, len(_STEPS) + 12 + 4]


def test_nccl_warn_lines_are_not_labelled_the_python_error_is(rules: Classifier) -> None:
    # NCCL's own WARN lines come before the DistBackendError that reports them (R3: an NCCL error
    # raised as a Python exception is an exception line)
    lines = _STEPS + [
        "gpu07:3311:3390 [0] include/socket.h:409 NCCL WARN Net : Connect to 10.0.0.8<52321> failed : Connection refused",
        "gpu07:3311:3390 [0] NCCL INFO transport/net_socket.cc:337 -> 2",
        "gpu07:3311:3390 [0] misc/socket.cc:564 NCCL WARN socketProgress: Connection closed by remote peer",
    ] + _tb("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5") + [
        "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.",
        "Last error:", "socketProgress: Connection closed by remote peer"]
    got = diagnose_text("\n".join(lines), rules).indicator_lines
    # the exception line or its message's next line (the scorer's slack: the same place)
    assert len(got) == 1 and got[0] - (len(_STEPS) + 3 + 4) in (0, 1)


def test_a_slurm_time_limit_is_labelled_once_not_its_step_line_nor_srun(rules: Classifier) -> None:
    lines = _STEPS * 3 + [
        "slurmstepd: error: *** JOB 8812 ON gpu21 CANCELLED AT 2025-05-01T10:00:12 DUE TO TIME LIMIT ***",
        "slurmstepd: error: *** STEP 8812.0 ON gpu21 CANCELLED AT 2025-05-01T10:00:12 DUE TO TIME LIMIT ***",
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
        "srun: got SIGCONT", "srun: forcing job termination"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [19]


def test_killed_and_the_oom_kill_event_are_both_labelled(rules: Classifier) -> None:
    # R6: one line says the process was killed, the other why
    lines = _STEPS + [
        "/var/spool/slurmd/job551/slurm_script: line 9: 77120 Killed                  python train.py --bs 64",
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=551.batch. Some of your processes may have been "
        "killed by the cgroup out-of-memory handler."]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [7, 8]


def test_a_bare_killed_line(rules: Classifier) -> None:
    lines = ["building the test set", "100%|##########| 9000/9000 [01:12<00:00, 124.1it/s]", "Killed"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [3]


def test_a_logger_error_without_a_traceback(rules: Classifier) -> None:
    # a program that logs its own error and exits: the first line stating the error (R3)
    lines = ["2025-02-11 09:00:01,112 - INFO - main - loading config configs/run.yaml",
             "2025-02-11 09:00:01,540 - INFO - main - found 0 training files under /data/shards",
             "2025-02-11 09:00:01,541 - ERROR - main - no training data found in /data/shards: nothing to train on",
             "2025-02-11 09:00:01,541 - INFO - main - exiting with status 1"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [3]


def test_hydra_s_error_executing_job_line_is_a_launcher_verdict(rules: Classifier) -> None:
    # Hydra prints "Error executing job with overrides" before the user's traceback and a hint
    # after it: the exception line only (R8)
    lines = (["[2025-03-01 12:00:00,000][__main__][INFO] - model: resnet50",
              "Error executing job with overrides: ['trainer.devices=2', 'data.batch_size=512']"]
             + _tb("omegaconf.errors.ConfigAttributeError: Key 'num_classes' is not in struct")
             + ["    full_key: model.num_classes", "    object_type=dict", "",
                "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."])
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [6]


def test_accelerate_s_called_process_error_is_a_launcher_verdict(rules: Classifier) -> None:
    # accelerate launch re-raises its child's exit as CalledProcessError (R8): the child's error
    lines = (_STEPS + _tb("ValueError: Expected input batch_size (16) to match target batch_size (8).")
             + _tb("subprocess.CalledProcessError: Command '['/usr/bin/python', 'train.py', '--bf16']' returned "
                   "non-zero exit status 1.", "/opt/accelerate/commands/launch.py"))
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(_STEPS) + 4]


def test_deepspeed_launcher_lines_after_the_rank_error(rules: Classifier) -> None:
    lines = (_STEPS + _tb("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB.", prefix="[rank1]: ")
             + ["[2025-04-02 10:11:12,131] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 5511",
                "[2025-04-02 10:11:12,132] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 5512",
                "[2025-04-02 10:11:13,001] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
                "'--local_rank=1'] exits with return code = 1"])
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(_STEPS) + 4]


def test_a_time_limit_after_errors_the_program_caught_and_went_on_from(rules: Classifier) -> None:
    # a search loop prints each candidate's traceback and goes on; the time limit ends it (R1, R6)
    def caught(exc: str) -> list[str]:
        return ["Error: Traceback (most recent call last):", '  File "/srv/evaluator.py", line 106, in run_agent',
                "    action = agent(observation)", exc, ""]
    lines = ["loading checkpoint shards: 100%"] + caught("TypeError: agent_v6() missing 1 required positional argument")
    lines += [f"candidate {k}: score {k * 0.1:.1f}" for k in range(12)]
    lines += caught("IndexError: index 10 is out of bounds for axis 0 with size 4")
    lines += [f"candidate {k}: score {k * 0.1:.1f}" for k in range(12, 40)]
    lines += ["slurmstepd: error: *** JOB 5939 ON ga024 CANCELLED AT 2025-04-18T07:04:39 DUE TO TIME LIMIT ***"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(lines)]


def test_lsf_s_warning_signal_and_its_run_limit_are_both_labelled(rules: Classifier) -> None:
    # R6: bash says the job was killed by LSF's warning signal, LSF's report says why
    lines = _STEPS + ["User defined signal 2", "", "------------------------------------------------------------",
                      "Sender: LSF System <lsfadmin@hpc-node12>", "Subject: Job 4410: <train> in cluster <c1> Exited", "",
                      "Started at Wed Nov 29 11:02:54 2023", "Terminated at Thu Nov 30 11:03:35 2023", "",
                      "TERM_RUNLIMIT: job killed after reaching LSF run time limit.", "Exited with exit code 140.", "",
                      "Resource usage summary:", "", "    CPU time :      87241.00 sec.", "",
                      "The output (if any) is above this job summary."]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [7, 16]


def test_a_time_limit_after_the_process_died_of_its_own_exception_is_not_labelled(rules: Classifier) -> None:
    # R6: the scheduler's line comes after the process had already died: not the cause
    lines = (_STEPS + _tb("ValueError: Target size (torch.Size([8])) must be the same as input size", prefix="[rank0]: ")
             + ["[rank1]:[E0301 10:00:00.1 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600031 milliseconds",
                "slurmstepd: error: *** JOB 9001 ON gpu03 CANCELLED AT 2025-03-01T22:00:00 DUE TO TIME LIMIT ***"])
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(_STEPS) + 4]


def test_a_traceback_a_logger_prints_line_by_line_is_read_past_its_headers(rules: Classifier) -> None:
    # vLLM's engine process logs each traceback line under its header: the frames and code lines
    # are not errors (R2), the exception line is (R3)
    head = "(EngineCore_0 pid=5120) ERROR 08-25 18:56:06 [core.py:700] "
    lines = ["INFO 08-25 18:55:50 [__init__.py:241] Automatically detected platform cuda.",
             head + "EngineCore failed to start.", head + "Traceback (most recent call last):",
             head + '  File "/opt/vllm/v1/engine/core.py", line 691, in run_engine_core',
             head + "    txt = subprocess.check_output([nvcc, '--version'], text=True, timeout=timeout)",
             head + "          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
             head + "FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda-12.6/bin/nvcc'",
             # Python's multiprocessing prints the same traceback again under Ray's process prefix only
             "(EngineCore_0 pid=5120) Process EngineCore_0:", "(EngineCore_0 pid=5120) Traceback (most recent call last):",
             '(EngineCore_0 pid=5120)   File "/usr/lib/python3.11/subprocess.py", line 466, in check_output',
             "(EngineCore_0 pid=5120)     return run(*popenargs, stdout=PIPE, timeout=timeout, check=True,",
             "(EngineCore_0 pid=5120) FileNotFoundError: [Errno 2] No such file or directory: '/usr/local/cuda-12.6/bin/nvcc'"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [7]


def test_a_failed_excepthook_s_own_error_is_not_labelled_the_original_exception_is(rules: Classifier) -> None:
    # a tracker's excepthook is interrupted; Python prints the hook's error, then "Original
    # exception was:" and the process's own exception (R4)
    lines = [f"  batch {k} loss: 0.02{k}" for k in range(120, 126)] + [
        "Error in sys.excepthook:", "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/wandb/sdk/lib/exit_hooks.py", line 41, in exc_handler',
        "    def exc_handler(", "KeyboardInterrupt", "", "Original exception was:", "Traceback (most recent call last):",
        '  File "/srv/train.py", line 380, in train_one_epoch', "    for batch in loader:",
        '  File "/usr/lib/python3.10/threading.py", line 324, in wait', "    gotit = waiter.acquire(True, timeout)",
        "KeyboardInterrupt"]
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(lines)]
    assert chains.failure_point(lines, len(lines) - 1) == 10  # the hook's error: where the process was


def test_an_exception_restated_under_a_wrapper_type_is_one_error(rules: Classifier) -> None:
    # JAX prints the traced stack as "JaxStackTraceBeforeTransformation: ValueError: ..." and then
    # the ValueError itself: one message, its first printing (R4)
    msg = "ValueError: zero-size array to reduction operation max which has no identity"
    lines = (_STEPS + _tb("jax._src.source_info_util.JaxStackTraceBeforeTransformation: " + msg)
             + ["", "The preceding stack trace is the source of the JAX operation that, once transformed by JAX, "
                "triggered the following exception.", "", "--------------------"] + _CAUSE
             + _tb(msg, "/opt/jax/_src/numpy/reductions.py"))
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [len(_STEPS) + 4]


def test_a_distributed_checkpoint_exception_counts_by_the_rank_s_embedded_error(rules: Classifier) -> None:
    # torch.distributed.checkpoint gathers each rank's traceback into its CheckpointException (R4)
    lines = (["05:41:44 INFO [RANK 0] Saving FSDP model"]
             + _tb("torch.distributed.checkpoint.api.CheckpointException: CheckpointException ranks:dict_keys([0])")
             + ["Traceback (most recent call last): (RANK 0)",
                '  File "/opt/torch/distributed/checkpoint/filesystem.py", line 513, in create_stream',
                "    with path.open('wb') as stream:", "OSError: [Errno 122] Disk quota exceeded"])
    w = diagnose_text("\n".join(lines), rules)
    assert w.indicator_lines == [len(lines)]
    assert chains.failure_point(lines, len(lines) - 1) == 4  # where the process was: the wrapper's line


def test_a_ray_actor_lost_shows_the_error_not_the_task_wrapper(rules: Classifier) -> None:
    # the driver's ray.get raises the task's error under its RayTaskError header; the raylet says
    # the worker died: symptoms only, shown without the wrapper header (R4)
    lines = ["(TaskRunner pid=6255) step:40 - actor/loss:0.1", "Traceback (most recent call last):",
             '  File "/srv/main_ppo.py", line 100, in run_ppo', "    ray.get(runner.run.remote(config))",
             "ray.exceptions.RayTaskError(ActorUnavailableError): ray::TaskRunner.run() (pid=6255, ip=10.0.0.17)",
             '  File "/srv/ray/base.py", line 55, in __call__', "    output = ray.get(output)",
             "ray.exceptions.ActorUnavailableError: The actor d5a1 is unavailable: RpcError: RPC error: Socket closed "
             "rpc_code: 14.", "",
             "(raylet) A worker died or was killed while executing a task by an unexpected system error. To "
             "troubleshoot the problem, check the logs for the dead worker."]
    got = diagnose_text("\n".join(lines), rules).indicator_lines
    assert 5 not in got and 8 in got


def test_torchrun_s_own_death_signal_is_the_cause_not_its_signal_exception(rules: Classifier) -> None:
    # the launcher got SIGHUP (the session ended): its "Received 1 death signal" line says so; the
    # SIGHUPs it sends, its error-file dump and its SignalException traceback follow (R6)
    lines = (["0.0693", "0.0632", "0.0696",
              "WARNING:torch.distributed.elastic.agent.server.api:Received 1 death signal, shutting down workers",
              "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4401 closing signal SIGHUP",
              "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 4402 closing signal SIGHUP",
              "ERROR:torch.distributed.elastic.multiprocessing.errors.error_handler:{",
              '  "message": {', '    "message": "SignalException: Process 4390 got signal: 1",', "  }", "}"]
             + _tb("torch.distributed.elastic.multiprocessing.api.SignalException: Process 4390 got signal: 1",
                   "/opt/torch/distributed/elastic/multiprocessing/api.py"))
    assert diagnose_text("\n".join(lines), rules).indicator_lines == [4]

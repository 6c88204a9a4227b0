"""Round 16 (slice y): PaddlePaddle launcher and environment formats, and roots that a later
stop hides. Each excerpt is small, written for the test in the library's format (cited in each
test), not copied from a log."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _paddle_term_report(pid: int) -> list[str]:
    """What Paddle's signal handler prints for a SIGTERM (paddle/fluid/platform/init.cc SignalHandle)."""
    return ["", "", "--------------------------------------",
            "C++ Traceback (most recent call last):",
            "--------------------------------------",
            "No stack trace in paddle, may be caused by external reasons.", "",
            "----------------------", "Error Message Summary:", "----------------------",
            "FatalError: `Termination signal` is detected by the operating system.",
            f"  [TimeInfo: *** Aborted at 17000{pid} (unix time) try \"date -d @17000{pid}\" if you are using GNU date ***]",
            f"  [SignalInfo: *** SIGTERM (@0x3e8000{pid}) received by PID {pid} (TID 0x7f00aa) from PID {pid - 90} ***]",
            ""]


def _paddle_worker_run(pid: int, error: list[str]) -> list[str]:
    start = ["-----------  Configuration Arguments -----------", "batch_size: 32", "epochs: 100",
             "------------------------------------------------", "Data loaded: there are 5120 images.",
             "Model built.", "Starting training!"]
    return [*start, "Traceback (most recent call last):", '  File "train.py", line 210, in <module>',
            "    main(args)", '  File "train.py", line 150, in main',
            "    out = model(images)", *error, "", f"I0405 09:49:19.563705 {pid} tcp_store.cc:257] receive shutdown event "
            "and so quit from MasterDaemon run loop", *_paddle_term_report(pid)]


def test_paddle_workers_own_traceback_before_the_launchers_sigterm_is_the_root(clf: Classifier) -> None:
    """C1/O3/R6: a worker of ``python -m paddle.distributed.launch`` prints its uncaught exception,
    then the launcher stops it with SIGTERM (launch/controllers/controller.py watch -> pod.stop,
    fleet/launch_utils.py terminate_local_procs: proc.terminate()) and Paddle's handler reports
    it. The traceback is the root; its line, not the signal report, is the indicator. An earlier
    launch appended to the same workerlog (its report printed alike) is not a new start-up."""
    shape = ["ValueError: (InvalidArgument) The 'shape' in ReshapeOp is invalid. The input tensor X'size must "
             "be equal to the capacity of 'shape'. But received X's shape = [64, 384, 36], X's size = 884736, "
             "'shape' is [64, 384, 14, 14], the capacity of 'shape' is 4816896.",
             "  [Hint: Expected capacity == in_size, but received capacity:4816896 != in_size:884736.] "
             "(at /paddle/paddle/phi/infermeta/unary.cc:1435)"]
    first = _paddle_worker_run(2000, ["AssertionError: Input image size (96*96) doesn't match model (224*224)."])
    lines = [*first, *_paddle_worker_run(3000, shape)]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "semantic_error" and w.diagnosis.origin == "user"
    at = lines.index(shape[0]) + 1
    assert w.indicator_lines == [at]


def test_a_sigterm_report_with_no_traceback_before_it_stays_a_stop(clf: Classifier) -> None:
    """O3: the same report after ordinary training output (no uncaught exception of the process
    before it) is a stop from outside whose sender is not named."""
    lines = [*[f"[2023/08/04 12:0{k}:00] ppdet.engine INFO: Epoch: [2] [{k * 10}/500] loss: 1.2{k}" for k in range(6)],
             "[2023/08/04 12:07:00] ppdet.engine INFO: Save checkpoint: output/rtdetr", *_paddle_term_report(4000)]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "preempted" and w.diagnosis.origin == "unknown"


def _paddle_init_failure(error: list[str]) -> list[str]:
    return ["-----------  Configuration Arguments -----------", "device: gpu", "learning_rate: 1e-05",
            "------------------------------------------------", "Traceback (most recent call last):",
            '  File "finetune.py", line 180, in <module>', "    do_train()",
            '  File "finetune.py", line 60, in do_train', "    paddle.distributed.init_parallel_env()",
            '  File "/env/lib/site-packages/paddle/distributed/parallel.py", line 240, in init_parallel_env',
            "    parallel_helper._init_parallel_ctx()", *error]


@pytest.mark.parametrize(("error", "rule"), [
    # paddle/phi/backends/dynload/dynamic_loader.cc GetDsoHandleFromSearchPath
    (["RuntimeError: (PreconditionNotMet) The third-party dynamic library (libnccl.so) that Paddle depends on is not "
      "configured correctly. (error code is libnccl.so: cannot open shared object file: No such file or directory)",
      "  Suggestions:", "  1. Check if the third-party dynamic library (e.g. CUDA, CUDNN) is installed correctly and its "
      "version is matched with paddlepaddle you installed."], "paddle-dso-not-configured"),
    # paddle/fluid/pybind/imperative.cc: NCCLParallelContext bound only with PADDLE_WITH_NCCL
    (["AttributeError: module 'paddle.fluid.core_avx' has no attribute 'NCCLParallelContext'"], "paddle-build-without-nccl"),
    # paddle/fluid/platform/device_context.cc DeviceContextPool::Get
    (["NotImplementedError: (Unimplemented) Place CUDAPlace(1) is not supported. Please check that your paddle compiles "
      "with WITH_GPU, WITH_XPU or WITH_ASCEND_CL option or check that your train process set the correct device id if you "
      "use Executor. (at /paddle/paddle/fluid/platform/device_context.cc:101)"], "paddle-place-not-supported"),
])
def test_paddle_environment_that_cannot_run_the_gpu_work_is_cuda_env_error(clf: Classifier, error: list[str],
                                                                          rule: str) -> None:
    """C7/C2: Paddle's own messages for a CUDA library it cannot load, a build without NCCL and a
    place with no device are the job's environment failing to run its CUDA work: cuda_env_error,
    origin user (the job's wheels, libraries or device setting)."""
    lines = _paddle_init_failure(error)
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin, w.diagnosis.rule_id) == ("cuda_env_error", "user", rule)
    assert w.indicator_lines == [lines.index(error[0]) + 1]


def _spawn_child_death(module: str) -> list[str]:
    """A child that multiprocessing's spawn start method runs (CPython Lib/multiprocessing/spawn.py:
    ``python -c 'from multiprocessing.spawn import spawn_main; spawn_main(...)'``) dying in its
    bootstrap."""
    return ["Traceback (most recent call last):", '  File "<string>", line 1, in <module>',
            '  File "/env/lib/python3.9/multiprocessing/spawn.py", line 116, in spawn_main',
            "    exitcode = _main(fd, parent_sentinel)",
            '  File "/env/lib/python3.9/multiprocessing/spawn.py", line 125, in _main',
            "    prepare(preparation_data)",
            '  File "/work/repo/train.py", line 1, in <module>', f"    import {module}",
            f"ModuleNotFoundError: No module named '{module}'"]


def test_spawned_helpers_dying_before_a_slurm_time_limit_leave_the_limit_as_the_root(clf: Classifier) -> None:
    """C1/O3/R6: spawned helper processes print their bootstrap's ModuleNotFoundError, nothing of
    the job's own process fails after them, and Slurm's time limit (slurmstepd) ends the job: the
    limit is the root and its line the indicator."""
    kill = "slurmstepd: error: *** JOB 4411 ON gpu03 CANCELLED AT 2025-10-20T15:37:23 DUE TO TIME LIMIT ***"
    lines = ["[rank0]:[W1017 15:50:14 reducer.cpp:327] Warning: Grad strides do not match bucket view strides.",
             "/env/lib/python3.9/site-packages/torch/optim/lr_scheduler.py:216: UserWarning: Detected call of "
             "`lr_scheduler.step()` before `optimizer.step()`.", "  warnings.warn(",
             *_spawn_child_death("argparse"), *_spawn_child_death("argparse"), kill]
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin) == ("preempted", "infrastructure")
    assert w.indicator_lines == [len(lines)]


def test_the_jobs_own_traceback_before_a_time_limit_stays_the_root(clf: Classifier) -> None:
    """README C1 (c slice): the main process's own uncaught error before a late time limit is the root."""
    kill = "slurmstepd: error: *** JOB 4412 ON gpu03 CANCELLED AT 2025-10-20T15:37:23 DUE TO TIME LIMIT ***"
    lines = ["epoch 1 loss 0.52", "Traceback (most recent call last):", '  File "/work/repo/train.py", line 9, in <module>',
             "    import wandb", "ModuleNotFoundError: No module named 'wandb'", kill]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "import_error"


def test_a_bce_kernel_assert_above_the_device_side_assert_is_the_jobs_value(clf: Classifier) -> None:
    """C7: CUDA's bare "device-side assert triggered" names no check; ATen's binary_cross_entropy
    kernel printed its own (aten/src/ATen/native/cuda/Loss.cu: CUDA_KERNEL_ASSERT(target_val >= zero
    && target_val <= one)): a value the job passed, cuda_error with origin user."""
    a = ("/opt/pytorch/aten/src/ATen/native/cuda/Loss.cu:106: operator(): block: [0,0,0], thread: [{t},0,0] "
         "Assertion `target_val >= zero && target_val <= one` failed.")
    lines = ["epoch 1 of 1", "train batches: 37", *[a.format(t=t) for t in range(3)], "Traceback (most recent call last):",
             '  File "scripts/train.py", line 209, in train', "    if torch.isnan(loss):",
             "RuntimeError: CUDA error: device-side assert triggered",
             "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
             "might be incorrect.", "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"]
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin, w.diagnosis.rule_id) == ("cuda_error", "user", "aten-bce-range-assert")


def test_a_sampling_assert_on_nan_probabilities_above_the_device_side_assert_is_divergence(clf: Classifier) -> None:
    """C10/C7: torch.multinomial checks its probabilities on the device (aten/src/ATen/native/cuda/
    TensorCompare.cu _assert_async_cuda_kernel: "probability tensor contains either `inf`, `nan` or
    element < 0"); the bare device-side assert that follows is its aftermath: model_diverged."""
    a = ("/pytorch/aten/src/ATen/native/cuda/TensorCompare.cu:109: _assert_async_cuda_kernel: block: [0,0,0], "
         "thread: [0,0,0] Assertion `probability tensor contains either `inf`, `nan` or element < 0` failed.")
    lines = ["{'loss': 0.0123, 'grad_norm': nan, 'learning_rate': 2e-07, 'epoch': 0.96}",
             f" 96%|█████████▋| 289/300 [54:05<02:20, 12.78s/it]{a}", "Traceback (most recent call last):",
             '  File "train_grpo.py", line 88, in <module>', "    trainer.train()",
             '  File "/env/lib/python3.11/site-packages/transformers/generation/utils.py", line 3310, in _sample',
             "    next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)",
             "torch.AcceleratorError: CUDA error: device-side assert triggered"]
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin) == ("model_diverged", "user")
    assert w.indicator_lines[0] == 1 and w.indicator_lines[-1] == len(lines)  # R7: where the gradients went NaN


def test_a_sigterm_handlers_warning_glued_to_a_bar_is_a_stop_from_outside(clf: Classifier) -> None:
    """O3/C1: a script's SIGTERM handler (signal.signal(SIGTERM, ...): CPython's default SIGTERM
    action ends the process silently, only SIGINT raises KeyboardInterrupt by itself) logs at
    warning level that it got the signal and raises KeyboardInterrupt; Python logging writes the
    record right after a tqdm bar that had not ended its line. It is a stop from outside whose
    sender is not named: preempted, origin unknown."""
    bar = "Processed prompts:   0%|          | 0/1 [00:00<?, ?it/s, est. speed input: 0.00 toks/s, output: 0.00 toks/s]"
    lines = [*[f"2026-04-24 15:4{k}:00,100 [INFO] src.loop: [Cycle 3] eval batch {k}/20 done" for k in range(5)],
             f"{bar}2026-04-24 15:46:03,689 [WARNING] src.loop: Signal 15 received — raising KeyboardInterrupt for "
             "graceful exit", "2026-04-24 15:46:03,690 [WARNING] src.loop: Interrupted — saving state before exit",
             "2026-04-24 15:46:03,696 [INFO] src.loop: Emergency checkpoint saved at cycle 2",
             "(EngineCore pid=13669) INFO 04-24 15:46:03 [core.py:1210] Shutdown initiated (timeout=0)",
             "(EngineCore pid=13669) INFO 04-24 15:46:03 [core.py:1233] Shutdown complete"]
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin, w.diagnosis.rule_id) == ("preempted", "unknown", "sigterm-handler")


def test_a_note_that_names_sigterm_received_is_no_stop(clf: Classifier) -> None:
    """vLLM's executor note at shutdown ("If you see error log from logging.cc regarding SIGTERM
    received, please ignore ...": vllm/executor/ray_distributed_executor.py) says no handler caught it."""
    lines = ["INFO 05-26 18:58:11 [ray_distributed_executor.py:127] Shutting down Ray distributed executor. If you "
             "see error log from logging.cc regarding SIGTERM received, please ignore because this is the expected "
             "termination process in Ray."]
    w = diagnose_text("\n".join(["step 10 loss 0.3", *lines, "Traceback (most recent call last):",
                                 '  File "serve.py", line 3, in <module>', "KeyboardInterrupt"]), clf)
    assert w.diagnosis.rule_id == "user-interrupt"


def test_llama_quantize_output_stream_failure_is_storage(clf: Classifier) -> None:
    """C3/C6: llama.cpp's quantizer writes through an std::ofstream with failbit exceptions
    (src/llama-quant.cpp); a refused write surfaces as libstdc++'s "basic_ios::clear: iostream
    error": storage_error, origin unknown (no errno named)."""
    lines = ["[ 310/ 427] blk.33.ffn_down.weight - [12288,  4096,     1,     1], type =    f16, converting to q4_0 .. "
             "size =    96.00 MiB ->    27.00 MiB",
             "llama_model_quantize: failed to quantize: basic_ios::clear: iostream error",
             "main: failed to quantize model from './out/model-f16.gguf'", "ERROR: command failed with exit code 1"]
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin) == ("storage_error", "unknown")


def _loader_stop(code: str) -> list[str]:
    tb = ["Traceback (most recent call last):", '  File "/work/repo/train.py", line 300, in training_loop',
          f"    {code}", "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
          '  File "/env/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 708, in __next__',
          "    data = self._next_data()",
          '  File "/env/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1447, in _next_data',
          "    raise StopIteration", "StopIteration"]
    return ["Status: kimg 0.0 iter 0.0", *[f"[rank0]: {ln}" for ln in tb]]


def test_stopiteration_on_a_fresh_loaders_first_next_is_an_empty_data_set(clf: Classifier) -> None:
    """C4/C5: torch's DataLoader raises StopIteration from _next_data when its sampler has nothing
    (torch/utils/data/dataloader.py); on a fresh iterator's first next() (next(iter(loader))) the
    data set or split is empty: incorrect_input, origin data. torchrun's "[rank0]: " tag before the
    traceback's indented code line does not make that line progress output."""
    lines = _loader_stop("data = next(iter(test_loader))")
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin, w.diagnosis.rule_id) == ("incorrect_input", "data",
                                                                              "empty-loader-first-next")
    assert w.indicator_lines and w.indicator_lines[-1] == len(lines)  # R3: the bare StopIteration is the exception line


def test_stopiteration_from_an_exhausted_iterator_stays_the_jobs_code(clf: Classifier) -> None:
    """C4: next() on an iterator the job already ran through is its own code's bug."""
    w = diagnose_text("\n".join(_loader_stop("data = next(train_iter)")), clf)
    assert w.diagnosis.category == "semantic_error"


def test_the_runs_own_output_capture_failing_to_reread_its_log_is_the_jobs_code(clf: Classifier) -> None:
    """C3/C4: glue-factory's capture_outputs (gluefactory/utils/stdout_capturing.py, after Sacred's
    stdout_capturing) reads back the file it teed stdout into when the run exits; a UnicodeDecodeError
    there is the job's own log, not its input data: semantic_error, user."""
    lines = ["[06/19/2025 13:50:09 train INFO] Saving checkpoint checkpoint_39.tar",
             "[06/19/2025 13:50:10 train INFO] Finished training on process 0.", "Traceback (most recent call last):",
             '  File "/work/repo/scripts/train.py", line 683, in <module>', "    main_worker(0, conf, output_dir, args)",
             '  File "/env/lib/python3.9/contextlib.py", line 126, in __exit__', "    next(self.gen)",
             '  File "/work/repo/scripts/utils/stdout_capturing.py", line 131, in capture_outputs',
             "    text = target.read()", '  File "/env/lib/python3.9/codecs.py", line 322, in decode',
             "    (result, consumed) = self._buffer_decode(data, self.errors, final)",
             "UnicodeDecodeError: 'utf-8' codec can't decode bytes in position 1257470-1257471: invalid continuation byte"]
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin, w.diagnosis.rule_id) == ("semantic_error", "user",
                                                                              "output-capture-reread")


def test_a_unicode_error_reading_a_data_file_stays_input(clf: Classifier) -> None:
    """C4: the same error in a Dataset's reader is the data's content."""
    lines = ["Traceback (most recent call last):", '  File "/work/repo/data.py", line 40, in __getitem__',
             "    text = open(self.files[i]).read()", '  File "/env/lib/python3.9/codecs.py", line 322, in decode',
             "    (result, consumed) = self._buffer_decode(data, self.errors, final)",
             "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "incorrect_input"


def test_paddle_dataloader_workers_terminated_after_the_sigterm_report_is_its_aftermath(clf: Classifier) -> None:
    """R6/O3: after Paddle's own SIGTERM report, the SystemError its SIGCHLD handler raises for the
    DataLoader workers the same SIGTERM ended (paddle/fluid/imperative/data_loader.cc "DataLoader
    process (pid N) exited is killed by signal: Terminated.") is the stop's aftermath: one line."""
    lines = [*[f"[08/04 13:0{k}:00] ppdet.engine INFO: Epoch: [2] [{k * 10}/500] loss: 1.2{k}" for k in range(6)],
             "[08/04 13:06:20] ppdet.engine INFO: Best test bbox ap is 0.141.", *_paddle_term_report(5000),
             "Traceback (most recent call last):", '  File "tools/train.py", line 204, in <module>', "    main()",
             '  File "/env/lib/python3.7/site-packages/paddle/fluid/multiprocess_utils.py", line 134, in __handler__',
             "    core._throw_error_if_process_failed()",
             "SystemError: (Fatal) DataLoader process (pid 1244489) exited is killed by signal: Terminated. "
             "(at /paddle/paddle/fluid/imperative/data_loader.cc:181)"]
    w = diagnose_text("\n".join(lines), clf)
    assert w.diagnosis.category == "preempted"
    at = next(k for k, ln in enumerate(lines, 1) if "Termination signal" in ln)
    assert w.indicator_lines == [at]


def test_a_rendezvous_store_closed_by_its_host_names_no_cause(clf: Classifier) -> None:
    """O2: the elastic agent's "The connection to the C10d store has failed" with the inner
    error of a connection the store's host closed (TCPStore.cpp "Failed to recv, got 0 bytes",
    DistNetworkError "Broken pipe") says a peer went away, not why: comm_error, origin unknown."""
    lines = [*[f"[rank0]: step {k} loss 2.{k}" for k in range(5)],
             "[W410 10:09:17.187318123 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on SocketImpl(fd=22, "
             "addr=[gc10]:37726, remote=[gc8]:29500): Failed to recv, got 0 bytes. Connection was likely closed. "
             "Did the remote server shutdown or crash?", "Traceback (most recent call last):",
             '  File "/env/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py",'
             " line 117, in _call_store", "    return getattr(self._store, store_op)(*args, **kwargs)",
             "torch.distributed.DistNetworkError: Broken pipe", "",
             "The above exception was the direct cause of the following exception:", "",
             "Traceback (most recent call last):", '  File "/env/bin/torchrun", line 8, in <module>',
             "    sys.exit(main())",
             "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
             "failed. See inner exception for details."]
    w = diagnose_text("\n".join(lines), clf)
    assert (w.diagnosis.category, w.diagnosis.origin) == ("comm_error", "unknown")

"""Reader round 16, phase (P1-P11 of sample_logs/whole/README.md, "Phase: rules"), on excerpts written by hand in the
formats the libraries print: PaddlePaddle's signal report and ``paddle.save``, llama.cpp's quantize export, a save
announced before the loop's end, a batch taken by hand from an evaluation loader, a resume line's step, Python's
warnings, and P2 (c) timestamps around a step's traceback in a stderr file."""

from __future__ import annotations

from gpulens.diagnosis.classifier import Classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.logread.phase import phase_of

_LIB = "/opt/env/lib/python3.10/site-packages"


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def _paddle_signal_report(sig: str = "SIGTERM") -> list[str]:
    """PaddlePaddle's C++ signal handler (``paddle/fluid/platform/init.cc`` ``SignalHandle``)."""
    return ["", "", "--------------------------------------", "C++ Traceback (most recent call last):",
            "--------------------------------------", "No stack trace in paddle, may be caused by external reasons.", "",
            "----------------------", "Error Message Summary:", "----------------------",
            "FatalError: `Termination signal` is detected by the operating system.",
            '  [TimeInfo: *** Aborted at 1700000000 (unix time) try "date -d @1700000000" if you are using GNU date ***]',
            f"  [SignalInfo: *** {sig} (@0x3e8) received by PID 4242 (TID 0x7f00) from PID 4200 ***]", ""]


def test_a_signal_then_paddles_traceback_in_paddle_save_is_checkpoint_save(rules: Classifier) -> None:
    """P6 + P9: PaddleDetection's epoch-end ``Checkpointer`` callback writes the model with ``paddle.save``
    (``paddle/framework/io.py``) when the SIGTERM comes; the main process' traceback, printed after the C++ signal
    report, runs through that save."""
    text = "\n".join([
        "[11/02 10:00:01] ppdet.engine INFO: Epoch: [1] [  0/100] learning_rate: 0.000100 loss: 1.234500",
        "[11/02 10:01:01] ppdet.engine INFO: Epoch: [1] [ 50/100] learning_rate: 0.000100 loss: 1.100000",
        "[11/02 10:02:01] ppdet.engine INFO: Eval iter: 0",
        "[11/02 10:02:30] ppdet.engine INFO: Best test bbox ap is 0.212.",
        *_paddle_signal_report(),
        "Traceback (most recent call last):",
        *_frame("tools/train.py", 150, "run", "trainer.train(FLAGS.eval)"),
        *_frame("/src/ppdet/engine/trainer.py", 600, "train", "self._compose_callback.on_epoch_end(self.status)"),
        *_frame("/src/ppdet/engine/callbacks.py", 220, "on_epoch_end", "save_model(weight, self.model.optimizer, save_dir)"),
        *_frame("/src/ppdet/utils/checkpoint.py", 320, "save_model", 'paddle.save(state_dict, save_path + ".pdopt")'),
        *_frame(f"{_LIB}/paddle/framework/io.py", 730, "save", "_pickle_save(obj, f, protocol)"),
        *_frame(f"{_LIB}/paddle/fluid/multiprocess_utils.py", 134, "__handler__", "core._throw_error_if_process_failed()"),
        "SystemError: (Fatal) DataLoader process (pid 4300) exited is killed by signal: Terminated. "
        "(at /paddle/paddle/fluid/imperative/data_loader.cc:181)",
    ])
    assert diagnose_text(text, rules).phase == "checkpoint_save"


def test_paddles_signal_report_under_a_traceback_takes_that_tracebacks_phase() -> None:
    """P9: the launcher stops a worker whose main process raised in its first forward (the loop announced, no step
    logged); read at the worker's C++ signal report printed under the Python traceback (where a reader that takes
    the signal for the root asks), the phase is where the traceback was: first_step."""
    lines = [
        "Loss, optimizer and schedulers ready.",
        "Starting training!",
        "Traceback (most recent call last):",
        *_frame("main.py", 470, "<module>", "train(args)"),
        *_frame("main.py", 320, "train", "stats = train_one_epoch(model, loader, optimizer, epoch)"),
        *_frame("main.py", 400, "train_one_epoch", "out = model(images)"),
        *_frame(f"{_LIB}/paddle/fluid/dygraph/layers.py", 1012, "__call__", "return self.forward(*inputs, **kwargs)"),
        *_frame("/src/models/vit.py", 170, "forward", "x = x.reshape([B, N, H, W])"),
        "ValueError: (InvalidArgument) The 'shape' in ReshapeOp is invalid. The input tensor X'size must be equal to "
        "the capacity of 'shape'.",
        "  [Hint: Expected capacity == in_size, but received capacity:480 != in_size:240.] (at /paddle/phi/infermeta/unary.cc:1435)",
        "",
        "I1102 10:00:05.100000 4300 tcp_store.cc:257] receive shutdown event and so quit from MasterDaemon run loop",
        *_paddle_signal_report(),
    ]
    at = next(k for k, ln in enumerate(lines) if ln.startswith("FatalError"))
    assert phase_of(lines, at, lines[at - 5:at + 3]) == "first_step"


def test_llama_cpp_quantize_failing_to_write_is_checkpoint_save(rules: Classifier) -> None:
    """P6: llama.cpp's ``llama_model_quantize`` writes the job's result model (a GGUF export); its tensor lines
    "[ 12/ 291] ..." count tensors written, not training steps, and "failed to quantize" is the write failing."""
    tensors = [f"[{k:4d}/ 291] blk.{k // 9}.attn_q.weight              - [ 4096,  4096,     1,     1], type =    f16, "
               "converting to q4_K .. size =    32.00 MiB ->     9.00 MiB" for k in range(1, 13)]
    text = "\n".join([
        "=== Quantizing out/model-f16.gguf -> out/model-Q4_K_M.gguf ===",
        "main: quantizing 'out/model-f16.gguf' to 'out/model-Q4_K_M.gguf' as Q4_K_M",
        *tensors,
        "llama_model_quantize: failed to quantize: basic_ios::clear: iostream error",
        "main: failed to quantize model from 'out/model-f16.gguf'",
        "ERROR: command failed with exit code 1",
    ])
    assert diagnose_text(text, rules).phase == "checkpoint_save"


def _bar(done: int, total: int) -> str:
    pct = done * 100 // total
    return f"{pct:3d}%|#         | {done}/{total} [01:00<01:00,  1.00it/s]"


def test_a_save_announced_before_the_loops_end_is_done_when_the_end_follows(rules: Classifier) -> None:
    """P6 + P10: "Saving checkpoint ..." then the loop's end ("Training finished."): the save completed; a failure
    after the end (writing the run's summary) is shutdown, not checkpoint_save."""
    text = "\n".join([
        _bar(99, 100), _bar(100, 100),
        "[06/19/2025 13:50:09 train INFO] Saving checkpoint checkpoint_39_5000.tar",
        "[06/19/2025 13:50:10 train INFO] Training finished.",
        "Traceback (most recent call last):",
        *_frame("train.py", 600, "<module>", "main()"),
        *_frame("train.py", 590, "main", "write_summary(results, out_dir)"),
        *_frame("train.py", 80, "write_summary", 'with open(os.path.join(out_dir, "summary", "table.csv"), "w") as f:'),
        "FileNotFoundError: [Errno 2] No such file or directory: 'runs/exp/summary/table.csv'",
    ])
    assert diagnose_text(text, rules).phase == "shutdown"


def test_a_batch_taken_by_hand_from_the_test_loader_is_evaluation(rules: Classifier) -> None:
    """P4 + P8: ``next(iter(test_dataset_loader))`` in the loop fetches an evaluation batch (torch's
    ``DataLoader.__next__`` below it): an empty test split's ``StopIteration`` there is evaluation."""
    text = "\n".join([
        "step 10 loss 0.8123", "step 20 loss 0.7456", "step 30 loss 0.7001",
        "Traceback (most recent call last):",
        *_frame("train.py", 212, "<module>", "main()"),
        *_frame("train.py", 128, "main", "training_loop(**cfg)"),
        *_frame("/src/training/loop.py", 307, "training_loop", "data = next(iter(test_dataset_loader))"),
        *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 708, "__next__", "data = self._next_data()"),
        *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 1447, "_next_data", "raise StopIteration"),
        "StopIteration",
    ])
    assert diagnose_text(text, rules).phase == "evaluation"


def test_a_resume_lines_global_step_is_no_step_of_this_attempt(rules: Classifier) -> None:
    """P2 + P11: "Resuming from epoch 2, global_step 278" names the saved state's step; the bar at 0/139 the
    traceback is printed onto shows no step of this attempt done: the failing backward is the first step."""
    text = "\n".join([
        "2026-04-19 12:55:50,419 | INFO | accelerate.accelerator | Loading states from out/epoch_2/training_state",
        "2026-04-19 12:55:50,433 | INFO | root | Resuming from epoch 2, global_step 278",
        "2026-04-19 12:55:50,434 | INFO | root | Resuming from epoch 2, global_step 278",
        "",
        "Epoch 3/3:   0%|          | 0/139 [00:00<?, ?it/s][rank0]: Traceback (most recent call last):",
        "[rank0]:   File \"train.py\", line 1612, in main",
        "[rank0]:     accelerator.backward(loss)",
        f"[rank0]:   File \"{_LIB}/accelerate/accelerator.py\", line 2830, in backward",
        "[rank0]:     loss.backward(**kwargs)",
        f"[rank0]:   File \"{_LIB}/torch/_tensor.py\", line 626, in backward",
        "[rank0]:     torch.autograd.backward(",
        "[rank0]: torch.utils.checkpoint.CheckpointError: torch.utils.checkpoint: Recomputed values for the following "
        "tensors have different metadata than during the forward pass.",
    ])
    assert diagnose_text(text, rules).phase == "first_step"


def test_a_warnings_source_line_is_no_activity(rules: Classifier) -> None:
    """P1 + P9: Python's ``warnings`` prints the line it points at under the warning ("  model.load_state_dict(
    torch.load(path))"); that code ran at start-up and is not the activity a later kill stopped: the file shows
    nothing past set-up, startup (not checkpoint_load)."""
    text = "\n".join([
        "Loading extension module fused...",
        "/src/engine/train.py:567: FutureWarning: You are using `torch.load` with `weights_only=False` (the current "
        "default value), which uses the default pickle module implicitly.",
        "  result = model.load_state_dict(torch.load(path, map_location=device), strict=False)",
        "slurmstepd: error: *** JOB 4242 ON node07 CANCELLED AT 2025-10-12T20:28:49 ***",
    ])
    assert diagnose_text(text, rules).phase == "startup"


def _stderr_step_failure(start: str, end: str, earlier: list[str] | None = None) -> str:
    """A torchrun fairseq job's stderr (its loop output went to stdout): TensorFlow's start-up noise, a rank's
    traceback in ``train_step``, torchrun's reaction with its glog timestamp."""
    return "\n".join([
        f"2025-12-05 {start}.823035: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:467] Unable to register "
        "cuFFT factory: Attempting to register factory for plugin cuFFT when one has already been registered",
        *(earlier or []),
        "[rank3]: Traceback (most recent call last):",
        f"[rank3]:   File \"{_LIB}/fairseq_cli/train.py\", line 316, in train",
        "[rank3]:     log_output = trainer.train_step(samples)",
        f"[rank3]:   File \"{_LIB}/fairseq/trainer.py\", line 824, in train_step",
        "[rank3]:     loss, sample_size_i, logging_output = self.task.train_step(",
        "[rank3]: RuntimeError: a leaf Variable that requires grad is being used in an in-place operation.",
        f"W1205 {end}.441789 14635 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 14671 closing "
        "signal SIGTERM",
    ])


def test_a_step_traceback_over_an_hour_after_the_start_of_a_stderr_file_is_training(rules: Classifier) -> None:
    """P2 (c): no loop output in the file; the traceback is in the step and the log's own timestamps show the job
    ran 1 h 43 min before it: training."""
    assert diagnose_text(_stderr_step_failure("17:26:23", "19:09:36"), rules).phase == "training"


def test_a_step_traceback_minutes_after_the_start_stays_first_step(rules: Classifier) -> None:
    """P2 (c): the same traceback five minutes after the start: first_step."""
    assert diagnose_text(_stderr_step_failure("17:26:23", "17:31:36"), rules).phase == "first_step"


def test_an_earlier_launchs_traceback_keeps_the_first_timestamp_out(rules: Classifier) -> None:
    """P2 (c) + P11: an earlier launch's traceback in the same lines: the first timestamp is not this program's
    start, so the hour is not read from it (not training)."""
    earlier = ["Traceback (most recent call last):", *_frame("train.py", 3, "<module>", "import fairseq_cli"),
               "ModuleNotFoundError: No module named 'fairseq_cli'"]
    assert diagnose_text(_stderr_step_failure("17:26:23", "19:09:36", earlier), rules).phase != "training"


def test_a_load_function_building_a_model_that_runs_out_of_memory_is_startup(rules: Classifier) -> None:
    """P3 + P7: ``load_models`` constructs the text encoder; the OOM is in ``nn.Linear.__init__`` (the model being
    built, no saved state read yet): startup, not checkpoint_load."""
    text = "\n".join([
        "2026-04-01 10:36:41,843 | INFO | root | Loading T5 text encoder...",
        "Traceback (most recent call last):",
        *_frame("train.py", 1058, "<module>", "main()"),
        *_frame("train.py", 900, "main", "model = trainer.load_models(accelerator.device)"),
        *_frame("train.py", 499, "load_models", "self.t5 = T5EncoderModel(text_len=512, dtype=torch.bfloat16)"),
        *_frame("/src/modules/t5.py", 164, "__init__", "self.ffn = T5FeedForward(dim, dim_ffn, dropout)"),
        *_frame(f"{_LIB}/torch/nn/modules/linear.py", 106, "__init__", "torch.empty((out_features, in_features), **factory_kwargs)"),
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 160.00 MiB. GPU 2 has a total capacity of 94.99 GiB "
        "of which 180.12 MiB is free.",
    ])
    assert diagnose_text(text, rules).phase == "startup"


def test_keras_epoch_header_starts_the_loop(rules: Classifier) -> None:
    """P2 + P3: "Epoch 1/1 starting..." (Keras' ``ProgbarLogger.on_epoch_begin`` format, "Epoch 1/1", with a word
    after it) starts the loop: the first batch's OOM is first_step, not training."""
    text = "\n".join([
        "  Preparing dataset lists...", "  Dataset preparation complete.",
        "  Training: mode=image, device=cuda, epochs=1",
        "  Initializing model...", "  Model ready.", "",
        "  Epoch 1/1 starting...",
        "    Processing batch 1/16...",
        "",
        "  [ERROR] Batch 1 failed: CUDA out of memory. Tried to allocate 192.00 MiB. GPU 0 has a total capacity of "
        "4.00 GiB of which 0 bytes is free.",
    ])
    assert diagnose_text(text, rules).phase == "first_step"


def test_a_failure_after_the_first_unbatched_p2p_op_is_first_step(rules: Classifier) -> None:
    """P2 + P3: ProcessGroupNCCL warns once at the first unbatched send/recv (an MoE or pipeline exchange in the
    first step's forward); the rendezvous store failing twenty minutes later, with no step logged, is first_step."""
    warn = ("[rank{r}]:[W410 09:45:00.743711914 ProcessGroupNCCL.cpp:4025] Warning: [PG ID 0 PG GUID 0(default_pg) "
            "Rank {r}] An unbatched P2P op (send/recv) was called on this ProcessGroup with size 4.  In eager "
            "initialization mode, unbatched P2P ops are treated as independent collective ops, and are thus serialized "
            "with all other ops on this ProcessGroup, including other P2P ops. (function operator())")
    text = "\n".join([
        *(warn.format(r=r) for r in range(4)),
        "[W410 10:09:17.187318123 TCPStore.cpp:138] [c10d] recvValueWithTimeout failed on SocketImpl(fd=22, "
        "addr=[gc10]:37726, remote=[gc8]:29500): Failed to recv, got 0 bytes. Connection was likely closed. Did the "
        "remote server shutdown or crash?",
        "W0410 10:09:17.315000 87811 torch/distributed/elastic/multiprocessing/api.py:1010] Sending process 87916 "
        "closing signal SIGTERM",
        "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
        "failed. See inner exception for details.",
    ])
    assert diagnose_text(text, rules).phase == "first_step"


def test_a_device_assert_in_atens_loss_kernel_is_in_the_step(rules: Classifier) -> None:
    """P3: the device-side assertion of ATen's ``Loss.cu`` (binary_cross_entropy's target check) is printed by the
    kernel computing the loss, in the first batch's forward; the CUDA error raised at the next sync is first_step."""
    text = "\n".join([
        "/pytorch/aten/src/ATen/native/cuda/Loss.cu:106: operator(): block: [0,0,0], thread: [2,0,0] Assertion "
        "`target_val >= zero && target_val <= one` failed.",
        "Using GPU: NVIDIA GeForce GTX 1660 Ti",
        "Training feature extractor", "  Trainable parameters: 75,333",
        "Traceback (most recent call last):",
        *_frame("scripts/train.py", 523, "<module>", "main()"),
        *_frame("scripts/train.py", 209, "fit_classifier", "if torch.isnan(loss):"),
        "RuntimeError: CUDA error: device-side assert triggered",
    ])
    assert diagnose_text(text, rules).phase == "first_step"


def test_a_fixed_batch_taken_from_the_val_loader_while_setting_up_is_not_evaluation(rules: Classifier) -> None:
    """P3 + P8: ``main`` taking a fixed validation batch to plot before the loop (no loop function calls it) is
    set-up, not an evaluation pass."""
    text = "\n".join([
        "Building model...", "Model ready.",
        "Traceback (most recent call last):",
        *_frame("train.py", 90, "<module>", "main()"),
        *_frame("train.py", 60, "main", "fixed_batch = next(iter(val_loader))"),
        *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 708, "__next__", "data = self._next_data()"),
        *_frame(f"{_LIB}/torch/utils/data/dataloader.py", 1447, "_next_data", "raise StopIteration"),
        "StopIteration",
    ])
    assert diagnose_text(text, rules).phase != "evaluation"


def test_a_load_function_failing_to_open_its_file_stays_checkpoint_load(rules: Classifier) -> None:
    """P7: ``load_checkpoint`` failing in a file reader's constructor (not a torch module's) reads saved state."""
    text = "\n".join([
        "Epoch 3 step 1200 loss 0.4211",
        "Traceback (most recent call last):",
        *_frame("train.py", 90, "<module>", "main()"),
        *_frame("train.py", 70, "main", "state = load_checkpoint(args.resume)"),
        *_frame("train.py", 30, "load_checkpoint", "with h5py.File(path, 'r') as f:"),
        *_frame(f"{_LIB}/h5py/_hl/files.py", 562, "__init__", "fid = make_fid(name, mode, userblock_size, fapl, fcpl, swmr=swmr)"),
        "FileNotFoundError: [Errno 2] Unable to synchronously open file (unable to open file: name = 'runs/last.h5')",
    ])
    assert diagnose_text(text, rules).phase == "checkpoint_load"

"""Round 22 (category and origin): torch's conv argument checks, albumentations' crop larger than
the image, dynamo's newer fake-tensor wording, a kernel image the GPU cannot load, a Triton
conversion the GPU cannot lower, vLLM's SIGTERM handler and its engine dying with no cause. Each
excerpt is small, written for the test in the library's format (cited in each test), not copied
from a log."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _traceback(frames: list[str], error: str) -> list[str]:
    return ["Traceback (most recent call last):", *frames, error]


def _diagnose(lines: list[str], clf: Classifier) -> tuple[str, str]:
    d = diagnose_text("\n".join(lines), clf).diagnosis
    return d.category, d.origin


def _rule(lines: list[str], clf: Classifier) -> str | None:
    """The signature rule that answered (the SVM alone may guess a short excerpt right)."""
    return diagnose_text("\n".join(lines), clf).diagnosis.rule_id


_LOGURU = "2025-03-01 10:{:02d}:00.000 | INFO     | det.core.trainer:before_train:120 - args: Namespace(batch_size=8)"


def test_conv_groups_check_in_the_last_attempt_beats_an_earlier_attempts_indentation_error(clf: Classifier) -> None:
    # torch/nn/modules/conv.py _ConvNd.__init__ ("out_channels must be divisible by groups"); an
    # appended log whose previous attempt died on CPython's tokenizer ("IndentationError: unexpected indent")
    earlier = [_LOGURU.format(1), *_traceback(['  File "det/models/head.py", line 40', "    self.stem = stem"],
                                               "IndentationError: unexpected indent")]
    frames = ['  File "tools/train.py", line 30, in main', "    model = exp.get_model()",
              '  File "/env/lib/python3.9/site-packages/torch/nn/modules/conv.py", line 88, in __init__',
              "    raise ValueError('out_channels must be divisible by groups')"]
    last = [_LOGURU.format(7), *_traceback(frames, "ValueError: out_channels must be divisible by groups")]
    assert _diagnose([*earlier, *last], clf) == ("semantic_error", "user")


def test_albumentations_crop_larger_than_the_image_is_input_data(clf: Classifier) -> None:
    # albumentations 2.x augmentations/crops/transforms.py CropSizeError, raised in a Dataset's
    # __getitem__ inside a DataLoader worker (torch/_utils.py ExceptionWrapper.reraise)
    frames = ['  File "fit.py", line 210, in <module>', "    for x, y in loader:",
              '  File "/env/lib/python3.11/site-packages/torch/_utils.py", line 733, in reraise',
              "    raise exception"]
    worker = ["Original Traceback (most recent call last):",
              '  File "/env/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 349, in _worker_loop',
              '  File "fit.py", line 61, in __getitem__', "    img = self.tf(image=img)['image']",
              '  File "/env/lib/python3.11/site-packages/albumentations/augmentations/crops/transforms.py", line 990, '
              "in get_params_dependent_on_data", "    raise CropSizeError(",
              "albumentations.augmentations.crops.transforms.CropSizeError: Crop size (height, width) exceeds image "
              "dimensions (height, width): (384, 384) vs (256, 320)"]
    lines = [*_traceback(frames, "albumentations.augmentations.crops.transforms.CropSizeError: Caught CropSizeError "
                                 "in DataLoader worker process 1."), *worker]
    assert _diagnose(lines, clf) == ("incorrect_input", "user")
    assert _rule(lines, clf) == "r22-albumentations-crop-larger-than-image"


def test_dynamo_runtime_error_when_making_fake_tensor_call_is_the_models_own_error(clf: Classifier) -> None:
    # torch 2.13 torch/_dynamo/utils.py get_fake_value: gb_type "RuntimeError when making fake tensor call"
    # (graph_break_hints.USER_ERROR) raised as TorchRuntimeError; torchrun's ChildFailedError follows
    frames = ['  File "train.py", line 300, in <module>', "    loss = model(x, y)"]
    lines = [*_traceback(frames, "[rank0]: torch._dynamo.exc.TorchRuntimeError: RuntimeError when making fake tensor call"),
             "[rank0]:   Explanation: Attempting to broadcast a dimension of length 12 at -1! Mismatching argument "
             "at index 1 had torch.Size([1, 1, 256, 12]); but expected shape should be broadcastable to [8, 4, 256, 16]",
             "E0101 10:00:01.000000 77 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
             "local_rank: 0 (pid: 78) of binary: /env/bin/python",
             "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "]
    assert _diagnose(lines, clf) == ("semantic_error", "user")
    assert _rule(lines, clf) == "r22-dynamo-fake-tensor-call-failed"


def test_triton_invalid_kernel_image_is_the_environment(clf: Classifier) -> None:
    # triton third_party/nvidia/backend/driver.c ("Triton Error [CUDA]: %s" with cuGetErrorString of
    # CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid")
    frames = ['  File "/env/lib/python3.10/site-packages/triton/compiler/compiler.py", line 408, in _init_handles',
              "    self.module, self.function, self.n_regs, self.n_spills = driver.active.utils.load_binary("]
    lines = ["INFO 01-01 10:00:00 [gpu_model_runner.py:1800] Loading model weights took 3.1 GiB",
             *_traceback(frames, "RuntimeError: Triton Error [CUDA]: device kernel image is invalid")]
    assert _diagnose(lines, clf) == ("cuda_env_error", "user")


def test_triton_conversion_the_gpu_cannot_lower_is_the_environment(clf: Classifier) -> None:
    # triton ElementwiseOpToLLVM.cpp FpToFpOpConversion ("Unsupported conversion from ... to ...",
    # report_fatal_error "Unsupported rounding mode for conversion.") and compiler.py make_llir's pm.run,
    # in vLLM's engine process (vllm/v1/engine/core.py logs the traceback), then the client's EngineDeadError
    frames = ['  File "/env/lib/python3.10/site-packages/triton/backends/nvidia/compiler.py", line 341, in make_llir',
              "    pm.run(mod)"]
    engine = [f"(EngineCore_DP0 pid=9) ERROR 01-01 10:00:02 [core.py:700] {x}"
              for x in _traceback(frames, "RuntimeError: PassManager::run failed")]
    client = _traceback(['  File "/env/lib/python3.10/site-packages/vllm/v1/engine/core_client.py", line 670, '
                         "in get_output", "    raise self._format_exception(outputs) from None"],
                        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. "
                        "See stack trace (above) for the root cause.")
    lines = ["INFO 01-01 10:00:00 [llm.py:306] Supported_tasks: ['generate']",
             "Unsupported conversion from bf16 to f8E5M2", "LLVM ERROR: Unsupported rounding mode for conversion.",
             *engine, *client]
    assert _diagnose(lines, clf) == ("cuda_env_error", "user")


def test_vllm_sigterm_handler_keyboardinterrupt_is_an_outside_stop(clf: Classifier) -> None:
    # vllm/entrypoints/openai/api_server.py run_server: signal_handler raises KeyboardInterrupt("terminated")
    frames = ['  File "/env/lib/python3.10/site-packages/uvloop/__init__.py", line 82, in run',
              '  File "/env/lib/python3.10/site-packages/vllm/entrypoints/openai/api_server.py", line 1190, '
              "in signal_handler", '    raise KeyboardInterrupt("terminated")']
    lines = ["INFO 01-01 10:00:00 [api_server.py:1100] vLLM API server version 0.9.2",
             "INFO 01-01 10:00:05 [loader.py:450] Loading weights took 12.40 seconds",
             *_traceback(frames, "KeyboardInterrupt: terminated")]
    assert _diagnose(lines, clf) == ("preempted", "unknown")


def test_vllm_engine_core_dead_with_no_cause_is_unknown(clf: Classifier) -> None:
    # vllm/v1/engine/core_client.py monitor_engine_cores ("Engine core proc %s died unexpectedly, shutting
    # down client.") and vllm/v1/engine/exceptions.py EngineDeadError
    served = [f'(APIServer pid=42) INFO:     127.0.0.1:{5000 + k} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
              for k in range(6)]
    tb = [f"(APIServer pid=42) ERROR 01-01 12:00:00 [async_llm.py:500] {x}" for x in _traceback(
        ['  File "/env/lib/python3.12/site-packages/vllm/v1/engine/async_llm.py", line 450, in output_handler',
         "    outputs = await engine_core.get_output_async()"],
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) "
        "for the root cause.")]
    lines = [*served, "(APIServer pid=42) ERROR 01-01 12:00:00 [core_client.py:590] Engine core proc EngineCore_DP0 "
                      "died unexpectedly, shutting down client.", *tb,
             "(APIServer pid=42) INFO:     Shutting down"]
    assert _diagnose(lines, clf) == ("unknown", "unknown")
    assert _rule(lines, clf) == "r22-vllm-engine-core-died"


def test_vllm_prompt_at_max_model_len_is_an_input_too_long(clf: Classifier) -> None:
    # vllm/v1/worker/gpu_model_runner.py _bookkeeping_sync's assert, printed by the engine process
    # (vllm/v1/engine/core.py) with its log prefix
    frames = ['  File "/env/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 690, in run_engine_core',
              "    engine_core.run_busy_loop()"]
    error = "AssertionError: Sampled token IDs exceed the max model length. Total number of tokens: 4097 > max_model_len: 4096"
    engine = [f"(EngineCore_DP0 pid=7) ERROR 02-01 12:00:00 [core.py:702] {x}" for x in _traceback(frames, error)]
    lines = ["INFO 02-01 11:59:00 [llm.py:306] Supported_tasks: ['generate']",
             "Processed prompts:  40%|####      | 40/100 [00:10<00:15, 4.0it/s]", *engine,
             "[ERROR] Failed: task_b -> Exit code: 1"]
    assert _diagnose(lines, clf) == ("incorrect_input", "user")
    assert _rule(lines, clf) == "r22-vllm-prompt-over-max-model-len"


def test_ultralytics_invalid_cuda_device_in_a_wrapped_console_capture_is_the_environment(clf: Classifier) -> None:
    # ultralytics utils/torch_utils.py select_device ("Invalid CUDA 'device=0' requested. Use 'device=cpu' ...",
    # then "torch.cuda.is_available(): False"), in a console capture that wraps long lines at word boundaries
    frames = ['  File "C:\\proj\\train.py", line 40, in <module>', "    model.train(data='signs.yaml', device=0)",
              '  File "C:\\env\\Lib\\site-packages\\ultralytics\\utils\\torch_utils.py", line 190, in select_device',
              "    raise ValueError("]
    wrapped = ["ValueError: Invalid ", "CUDA 'device=0' ", "requested. Use ", "'device=cpu' or pass ", "valid CUDA device(s) ",
               "if available.", "", "torch.cuda.is_available(): False", "torch.cuda.device_count(): 0"]
    lines = ["[Train] Device: CPU", "Ultralytics 8.3.40 Python-3.12.4 torch-2.5.1+cpu",
             *_traceback(frames, wrapped[0]), *wrapped[1:]]
    assert _diagnose(lines, clf) == ("cuda_env_error", "user")


@pytest.mark.parametrize("error", ["Error: No such command 'runs/eval.yaml'.", "Error: No such option: --max-step",
                                   "Error: Got unexpected extra argument (extra.json)"],
                         ids=["no-such-command", "no-such-option", "extra-argument"])
def test_click_usage_error_is_a_rejected_setting(clf: Classifier, error: str) -> None:
    # click 8.x UsageError.show: "Usage: ...", "Try 'prog --help' for help.", blank line, "Error: <message>"
    # (core.py Group.resolve_command, exceptions.py NoSuchOption, Command.parse_args); exit status 2
    lines = ["+ python evaluate.py runs/eval.yaml --max-step 10", "Usage: evaluate.py [OPTIONS] COMMAND [ARGS]...",
             "Try 'evaluate.py --help' for help.", "", error]
    assert _diagnose(lines, clf) == ("semantic_error", "user")
    assert _rule(lines, clf) == "r22-click-usage-error"


def test_ucx_buffer_registration_failure_is_the_transport_library(clf: Classifier) -> None:
    # UCX src/ucp/core/ucp_request.c ucp_request_memory_reg ("failed to register user buffer datatype ...
    # address ... len ...: <status>"), then Open MPI's pml_ucx send error and MPI_ERRORS_ARE_FATAL
    lines = ["0: rank 0 device cuda:0 local sum 4.0", "1: rank 1 device cuda:1 local sum 4.0",
             "0: [gpu4:7001:1]    ucp_request.c:264  UCX  ERROR failed to register user buffer datatype 0x20 "
             "address 0x7f3a40000000 len 65536: Input/output error",
             "0: [gpu4:7001] pml_ucx.c:775  Error: ucx send failed: Input/output error",
             "0: *** An error occurred in MPI_Bcast", "0: *** MPI_ERR_OTHER: known error not in list",
             "0: *** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,",
             "srun: error: gpu4: task 0: Exited with exit code 16"]
    assert _diagnose(lines, clf) == ("comm_error", "framework")

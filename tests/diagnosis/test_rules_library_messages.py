"""Round 11 (r11-lib): fatal library messages read from the libraries' own raise sites.

Each case is a short excerpt written by hand in the library's message format (not copied from a
log): a training script's traceback that ends in the library's frame and its message. Before the
round-11 rules these were read as the generic Python exception (`semantic_error`) or left to the
model (often `unknown`); each now has the category its cause calls for.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text
from gpulens.diagnosis.rules import best_match, load_rules, match_rules

RULES = load_rules()
SIGNATURES = Path(__file__).resolve().parents[2] / "gpulens" / "diagnosis" / "rules" / "signatures.yaml"

_HEAD = """\
step 40/2000 | loss 3.112 | lr 2.0e-05 | 1.9 s/it
Traceback (most recent call last):
  File "/work/u/project/run_train.py", line 141, in <module>
    main(args)
  File "/work/u/project/run_train.py", line 97, in main
    trainer = build(cfg)
  File "/opt/venv/lib/python3.11/site-packages/{frame}", line 412, in {func}
    raise exc
"""

#: (rule id, category, the library frame, its function, the message lines)
CASES: list[tuple[str, str, str, str, str]] = [
    ("hf-hub-repo-not-found", "checkpoint_error", "huggingface_hub/utils/_http.py", "hf_raise_for_status",
     "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=1-7a)\n\n"
     "Repository Not Found for url: https://huggingface.co/team-x/encoder-v3/resolve/main/config.json.\n"
     "Please make sure you specified the correct `repo_id` and `repo_type`."),
    ("hf-hub-repo-not-found", "checkpoint_error", "huggingface_hub/utils/_http.py", "hf_raise_for_status",
     "huggingface_hub.errors.EntryNotFoundError: 404 Client Error. (Request ID: Root=1-7b)\n\n"
     "Entry Not Found for url: https://huggingface.co/team-x/encoder-v3/resolve/main/model.safetensors."),
    ("hf-hub-dataset-not-found", "incorrect_input", "huggingface_hub/utils/_http.py", "hf_raise_for_status",
     "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=1-7c)\n\n"
     "Repository Not Found for url: https://huggingface.co/api/datasets/team-x/dialogs/revision/main.\n"
     "Please make sure you specified the correct `repo_id` and `repo_type`."),
    ("hf-hub-repo-id-invalid", "checkpoint_error", "huggingface_hub/utils/_validators.py", "validate_repo_id",
     "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
     "'namespace/repo_name': '/mnt/ckpt/run7/final'. Use `repo_type` argument if needed."),
    ("hf-couldnt-connect-to-hub", "checkpoint_error", "transformers/utils/hub.py", "cached_file",
     "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the "
     "cached files and it looks like roberta-large is not the path to a directory containing a file named "
     "tokenizer_config.json."),
    ("fsspec-datasets-glob-skew", "import_error", "fsspec/utils.py", "glob_translate",
     "ValueError: Invalid pattern: '**' can only be an entire path component"),
    ("fsspec-datasets-glob-skew", "import_error", "datasets/builder.py", "as_dataset",
     "NotImplementedError: Loading a dataset cached in a LocalFileSystem is not supported."),
    ("datasets-column-missing", "incorrect_input", "datasets/arrow_dataset.py", "remove_columns",
     "ValueError: Column name ['content'] not in the dataset. Current columns in the dataset: "
     "['question', 'answer']"),
    ("datasets-cast-error", "incorrect_input", "datasets/table.py", "cast_table_to_schema",
     "datasets.table.CastError: Couldn't cast\nquestion: string\nanswer: int64\nto\n"
     "{'question': Value(dtype='string'), 'context': Value(dtype='string')}\nbecause column names don't match"),
    ("datasets-verification-mismatch", "incorrect_input", "datasets/utils/info_utils.py", "verify_splits",
     "datasets.utils.info_utils.NonMatchingSplitsSizesError: [{'expected': SplitInfo(name='validation', "
     "num_bytes=52, num_examples=3), 'recorded': SplitInfo(name='validation', num_bytes=0, num_examples=0)}]"),
    ("datasets-scripts-removed", "import_error", "datasets/load.py", "dataset_module_factory",
     "RuntimeError: Dataset scripts are no longer supported, but found wikitext.py"),
    ("gloo-interface-not-found", "comm_error", "torch/distributed/distributed_c10d.py", "_new_process_group_helper",
     "RuntimeError: [enforce fail at /pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] ifa != nullptr. "
     "Unable to find address for: ib0"),
    ("triton-gpu-too-old", "cuda_env_error", "torch/_inductor/scheduler.py", "create_backend",
     "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n"
     "RuntimeError: Found Quadro P6000 which is too old to be supported by the triton GPU compiler, which is "
     "used as the backend. Triton only supports devices of CUDA Capability >= 7.0, but your device is of CUDA "
     "capability 6.1"),
    ("xformers-not-built", "cuda_env_error", "xformers/ops/fmha/dispatch.py", "_run_priority_list",
     "NotImplementedError: No operator found for `memory_efficient_attention_backward` with inputs:\n"
     "     query       : shape=(2, 1024, 16, 64) (torch.bfloat16)\n"
     "`cutlassB` is not supported because:\n    operator wasn't built - see `python -m xformers.info` for more info"),
    ("cudnn-version-incompatibility", "cuda_env_error", "torch/backends/cudnn/__init__.py", "_init",
     "RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (9, 1, 0) but found runtime "
     "version (8, 9, 7). PyTorch already comes bundled with cuDNN."),
    ("deepspeed-cuda-home-missing", "cuda_env_error", "deepspeed/ops/op_builder/builder.py", "is_compatible",
     "deepspeed.ops.op_builder.builder.MissingCUDAException: CUDA_HOME does not exist, unable to compile CUDA op(s)"),
    ("torch-extension-build-failed", "cuda_env_error", "torch/utils/cpp_extension.py", "_run_ninja_build",
     "RuntimeError: Error building extension 'cpu_adam'"),
    ("deepspeed-no-gpu-resources", "cuda_env_error", "deepspeed/launcher/runner.py", "main",
     "RuntimeError: Unable to proceed, no GPU resources available"),
    ("requested-gpu-not-available", "cuda_env_error", "ultralytics/utils/torch_utils.py", "select_device",
     "ValueError: Invalid CUDA 'device=0,1' requested. Use 'device=cpu' or pass valid CUDA device(s) if "
     "available, i.e. 'device=0' or 'device=0,1,2,3' for Multi-GPU.\n\ntorch.cuda.is_available(): False"),
    ("requested-gpu-not-available", "cuda_env_error", "lightning_fabric/utilities/device_parser.py", "_sanitize",
     "lightning_fabric.utilities.exceptions.MisconfigurationException: You requested gpu: [0, 1, 2, 3]\n"
     " But your machine only has: [0]"),
    ("requested-gpu-not-available", "cuda_env_error", "pytorch_lightning/trainer/connectors/accelerator_connector.py",
     "_check_config", "pytorch_lightning.utilities.exceptions.MisconfigurationException: `CUDAAccelerator` can "
     "not run on your system since the accelerator is not available. The following accelerator(s) is "
     "available and can be passed into `accelerator` argument of `Trainer`: ['cpu']."),
    ("ultralytics-no-labels", "incorrect_input", "ultralytics/data/dataset.py", "get_labels",
     "AssertionError: val: No labels found in /data/parts/labels/val.cache, can not start training. "
     "See https://docs.ultralytics.com/datasets for dataset formatting guidance."),
    ("omegaconf-config-error", "semantic_error", "omegaconf/base.py", "_format_and_raise",
     "omegaconf.errors.ConfigKeyError: Key 'warmup' not in 'OptimConfig'\n    full_key: optim.warmup\n"
     "    object_type=OptimConfig"),
    ("hydra-locate-target", "import_error", "hydra/_internal/instantiate/_instantiate2.py", "_resolve_target",
     "hydra.errors.InstantiationException: Error locating target 'project.nets.UNet3D', set env var "
     "HYDRA_FULL_ERROR=1 to see chained exception.\nfull_key: model"),
    ("wandb-init-timeout", "comm_error", "wandb/sdk/wandb_init.py", "init",
     "wandb.errors.errors.CommError: Run initialization has timed out after 90.0 sec. Please try increasing "
     "the timeout with the `init_timeout` setting: `wandb.init(settings=wandb.Settings(init_timeout=120))`."),
    ("ray-no-running-instance", "comm_error", "ray/_private/services.py", "canonicalize_bootstrap_address_or_die",
     "ConnectionError: Could not find any running Ray instance. Please specify the one to connect to by "
     "setting `--address` flag or `RAY_ADDRESS` environment variable."),
    ("ray-memory-monitor-oom", "cpu_oom", "ray/worker.py", "get",
     "ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node node-12 is used "
     "(122.4 / 125.8 GB). The top 10 memory consumers are:"),
    ("vllm-free-memory-at-startup", "gpu_oom", "vllm/v1/worker/gpu_worker.py", "init_device",
     "ValueError: Free memory on device (12.4/39.4 GiB) on startup is less than desired GPU memory "
     "utilization (0.85, 33.5 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."),
    ("transformers-flash-attn2-unusable", "cuda_env_error", "transformers/modeling_utils.py",
     "_check_and_enable_flash_attn_2",
     "ValueError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
     "Flash Attention 2 is not available on this GPU."),
    ("accelerate-precision-needs-gpu", "cuda_env_error", "accelerate/accelerator.py", "__init__",
     "ValueError: fp16 mixed precision requires a GPU (not 'cpu')."),
    ("bnb-quantization-needs-gpu", "cuda_env_error", "transformers/quantizers/quantizer_bnb_8bit.py",
     "validate_environment", "RuntimeError: No GPU found. A GPU is needed for quantization."),
    ("jax-cuda-components", "cuda_env_error", "jax/_src/xla_bridge.py", "_check_cuda_versions",
     "RuntimeError: Unable to use CUDA because of the following issues with CUDA components:\n"
     "Outdated cuSPARSE installation found.\nVersion JAX was built against: 12200\nInstalled version: 12002"),
    ("keras-custom-object-unknown", "checkpoint_error", "keras/src/saving/serialization_lib.py",
     "deserialize_keras_object",
     "TypeError: Could not locate class 'GatedBlock'. Make sure custom classes are decorated with "
     "`@keras.saving.register_keras_serializable()`. Full object config: {'class_name': 'GatedBlock'}"),
    ("keras-custom-object-unknown", "checkpoint_error", "keras/utils/generic_utils.py",
     "class_and_config_for_serialized_keras_object",
     "ValueError: Unknown layer: GatedBlock. Please ensure this object is passed to the `custom_objects` "
     "argument. See https://www.tensorflow.org/guide/keras/save_and_serialize for details."),
    ("transformers-torch-load-version", "import_error", "transformers/utils/import_utils.py",
     "check_torch_load_is_safe",
     "ValueError: Due to a serious vulnerability issue in `torch.load`, even with `weights_only=True`, we now "
     "require users to upgrade torch to at least v2.6 in order to use the function."),
    ("torch-compile-python-unsupported", "import_error", "torch/_dynamo/eval_frame.py", "check_if_dynamo_supported",
     "RuntimeError: Python 3.12+ not yet supported for torch.compile"),
    ("tokenizer-needs-sentencepiece-or-newer-tokenizers", "import_error", "transformers/tokenization_utils_fast.py",
     "__init__", "Exception: data did not match any variant of untagged enum PyPreTokenizerTypeWrapper at line 60 column 3"),
    ("tokenizer-needs-sentencepiece-or-newer-tokenizers", "import_error", "transformers/tokenization_utils_fast.py",
     "__init__", "ValueError: Cannot instantiate this tokenizer from a slow version. If it's based on "
     "sentencepiece, make sure you have sentencepiece installed."),
    ("peft-adapter-config-missing", "checkpoint_error", "peft/config.py", "from_pretrained",
     "ValueError: Can't find 'adapter_config.json' at 'out/lora-r16/checkpoint-1200'"),
    ("lightning-cuda-initialized-before-fork", "semantic_error",
     "lightning_fabric/strategies/launchers/multiprocessing.py", "_check_bad_cuda_fork",
     "RuntimeError: Lightning can't create new processes if CUDA is already initialized. Did you manually call "
     "`torch.cuda.*` functions, have moved the model to the device, or allocated memory on the GPU any other way?"),
    ("multiprocessing-bootstrap-phase", "semantic_error", "multiprocessing/spawn.py", "_check_not_importing_main",
     "RuntimeError: \n        An attempt has been made to start a new process before the\n"
     "        current process has finished its bootstrapping phase."),
    ("extension-cuda-version-mismatch-any", "cuda_env_error", "torch_scatter/__init__.py", "<module>",
     "RuntimeError: Detected that PyTorch and torch_scatter were compiled with different CUDA versions. "
     "PyTorch has CUDA version 12.1 and torch_scatter has CUDA version 11.8. Please reinstall the "
     "torch_scatter that matches your PyTorch install."),
    ("torchvision-ops-missing", "import_error", "torch/_ops.py", "__getattr__",
     "RuntimeError: operator torchvision::roi_align does not exist"),
    ("torchvision-ops-missing", "import_error", "torchvision/extension.py", "_assert_has_ops",
     "RuntimeError: Couldn't load custom C++ ops. This can happen if your PyTorch and torchvision versions "
     "are incompatible, or if you had errors while compiling torchvision from source."),
    ("numpy2-removed-alias", "import_error", "imgaug/imgaug.py", "<module>",
     "AttributeError: `np.sctypes` was removed in the NumPy 2.0 release. Access dtypes explicitly instead."),
    ("numpy2-removed-alias", "import_error", "torch/utils/data/_utils/collate.py", "collate",
     "RuntimeError: Numpy is not available"),
    ("protobuf-descriptors-skew", "import_error", "tensorboard/compat/proto/tensor_pb2.py", "<module>",
     "TypeError: Descriptors cannot be created directly.\nIf this call came from a _pb2.py file, your "
     "generated code is out of date and must be regenerated with protoc >= 3.19.0."),
    ("tf-cuda-implicit-init-failed", "cuda_env_error", "tensorflow/python/eager/context.py", "ensure_initialized",
     "tensorflow.python.framework.errors_impl.InternalError: CUDA runtime implicit initialization on GPU:1 "
     "failed. Status: out of memory"),
    ("hf-training-args-needs-gpu", "cuda_env_error", "transformers/training_args.py", "__post_init__",
     "ValueError: FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half precision evaluation "
     "(`--fp16_full_eval`) can only be used on CUDA or MLU devices or NPU devices."),
    ("torch-extension-needs-ninja", "import_error", "torch/utils/cpp_extension.py", "verify_ninja_availability",
     "RuntimeError: Ninja is required to load C++ extensions"),
    ("flash-attn-head-dim-gpu", "cuda_env_error", "flash_attn/flash_attn_interface.py", "_flash_attn_backward",
     "RuntimeError: FlashAttention backward for head dim > 192 requires A100/A800 or H100/H800"),
    ("flash-attn-head-dim-gpu", "cuda_env_error", "flash_attn/flash_attn_interface.py", "_flash_attn_backward",
     "RuntimeError: FlashAttention backward for head dim 256 with dropout, or head dim 224 with/without dropout "
     "requires A100/A800 or H100/H800"),
    ("bnb-compiled-without-gpu", "cuda_env_error", "bitsandbytes/functional.py", "optimizer_update_32bit",
     "AttributeError: 'NoneType' object has no attribute 'cadam32bit_grad_bf16'"),
    ("vllm-architecture-unsupported", "import_error", "vllm/model_executor/models/registry.py", "resolve_model_cls",
     "ValueError: Model architectures ['Gemma3ForConditionalGeneration'] are not supported for now. "
     "Supported architectures: dict_keys(['LlamaForCausalLM', 'MistralForCausalLM'])"),
    ("vllm-prompt-too-long", "incorrect_input", "vllm/v1/engine/processor.py", "_validate_model_input",
     "ValueError: The decoder prompt (length 33001) is longer than the maximum model length of 32768. "
     "Make sure that `max_model_len` is no smaller than the number of text tokens."),
    ("vllm-device-type-unknown", "cuda_env_error", "vllm/config.py", "__init__",
     "RuntimeError: Failed to infer device type"),
    ("nccl-error-short-form", "comm_error", "torch/distributed/distributed_c10d.py", "broadcast",
     "RuntimeError: NCCL error: invalid usage (run with NCCL_DEBUG=WARN for details)"),
    ("nccl-shm-too-small", "cpu_oom", "torch/distributed/distributed_c10d.py", "all_reduce",
     "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
     "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.14.3\n"
     "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.\n"
     "Last error:\nError: failed to extend /dev/shm/nccl-Qx81aP to 9637892 bytes"),
    ("jaxlib-newer-than-jax", "import_error", "jax/version.py", "_check_jaxlib_version",
     "RuntimeError: jaxlib version 0.4.31 is newer than and incompatible with jax version 0.4.20. "
     "Please update your jax and/or jaxlib packages."),
    ("wandb-authentication", "permission_error", "wandb/sdk/wandb_login.py", "_verify_login",
     "wandb.errors.AuthenticationError: API key must be 40 characters long, yours was 7"),
    ("hf-token-missing", "permission_error", "huggingface_hub/utils/_headers.py", "get_token_to_send",
     "huggingface_hub.errors.LocalTokenNotFoundError: Token is required (`token=True`), but no token found. "
     "You need to provide a token or be logged in to Hugging Face with `huggingface-cli login`."),
    ("dns-name-not-known", "comm_error", "urllib/request.py", "do_open",
     "urllib.error.URLError: <urlopen error [Errno -2] Name or service not known>"),
    ("openmmlab-version-incompatible", "import_error", "mmseg/__init__.py", "<module>",
     "AssertionError: MMCV==2.2.0 is used but incompatible. Please install mmcv>=2.0.0rc4, <2.2.0."),
    ("fvcore-checkpoint-not-found", "checkpoint_error", "fvcore/common/checkpoint.py", "_load_file",
     "AssertionError: Checkpoint runs/r50/model_0009999.pth not found!"),
    ("hip-environment-error", "cuda_env_error", "torch/nn/functional.py", "linear",
     "RuntimeError: HIP error: invalid device function\nHIP kernel errors might be asynchronously reported at "
     "some other API call, so the stacktrace below might be incorrect."),
    ("cuda-library-undefined-symbol", "cuda_env_error", "torch/__init__.py", "_load_global_deps",
     "OSError: /opt/venv/lib/python3.11/site-packages/nvidia/cusparse/lib/libcusparse.so.12: undefined symbol: "
     "__nvJitLinkAddData_12_1, version libnvJitLink.so.12"),
    ("tf-file-not-found", "incorrect_input", "tensorflow/python/lib/io/file_io.py", "read",
     "tensorflow.python.framework.errors_impl.NotFoundError: /data/vocab/words.txt; No such file or directory"),
    ("deepspeed-zero-offload-client-optimizer", "semantic_error", "deepspeed/runtime/engine.py",
     "_configure_optimizer", "deepspeed.runtime.zero.utils.ZeRORuntimeException: You are using ZeRO-Offload with a "
     "client provided optimizer (<class 'torch.optim.sgd.SGD'>) which in most cases will yield poor performance."),
    ("megatron-cuda-device-max-connections", "semantic_error", "megatron/core/tensor_parallel/layers.py", "forward",
     "RuntimeError: Using async gradient all reduce requires setting the environment variable "
     "CUDA_DEVICE_MAX_CONNECTIONS to 1"),
    ("transformer-engine-fp8-capability", "cuda_env_error", "transformer_engine/pytorch/fp8.py", "fp8_autocast",
     "AssertionError: Device compute capability 8.9 or higher required for FP8 execution."),
    ("triton-not-installed", "import_error", "torch/_inductor/scheduler.py", "create_backend",
     "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nRuntimeError: Cannot find a working "
     "triton installation. Either the package is not installed or it is too old."),
    ("vllm-quantization-capability", "cuda_env_error", "vllm/config.py", "_verify_quantization",
     "ValueError: The quantization method awq_marlin is not supported for the current GPU. Minimum capability: 80. "
     "Current capability: 70."),
    ("datasets-no-data-files", "incorrect_input", "datasets/data_files.py", "get_data_patterns",
     "datasets.exceptions.DataFilesNotFoundError: No (supported) data files found in ./corpus/pretrain"),
    ("audio-backend-missing", "import_error", "torchaudio/_backend/utils.py", "get_load_func",
     "RuntimeError: Couldn't find appropriate backend to handle uri clips/0001.wav and format None."),
    ("audio-backend-missing", "import_error", "soundfile.py", "<module>",
     "OSError: sndfile library not found using ctypes.util.find_library"),
    ("external-executable-missing", "import_error", "subprocess.py", "_execute_child",
     "FileNotFoundError: [Errno 2] No such file or directory: 'ffprobe'"),
    ("sentencepiece-model-unreadable", "checkpoint_error", "sentencepiece/__init__.py", "LoadFromFile",
     "OSError: Not found: \"weights/llama2-7b/tokenizer.model\": No such file or directory Error #2"),
    ("hf-config-not-json", "checkpoint_error", "transformers/configuration_utils.py", "_get_config_dict",
     "OSError: It looks like the config file at 'weights/mistral/config.json' is not a valid JSON file."),
    ("tensorboard-duplicate-plugins", "import_error", "tensorboard/plugins/base_plugin.py", "load",
     "ValueError: Duplicate plugins for name projector"),
    ("pydantic-v2-migration", "import_error", "pydantic/_migration.py", "wrapper",
     "pydantic.errors.PydanticImportError: `BaseSettings` has been moved to the `pydantic-settings` package."),
    ("vllm-kv-cache-too-small-for-max-len", "gpu_oom", "vllm/v1/core/kv_cache_utils.py",
     "check_enough_kv_cache_memory", "ValueError: To serve at least one request with the models's max seq len "
     "(131072), (16.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.84 GiB). "
     "Based on the available memory, the estimated maximum model length is 80576."),
    ("deepspeed-op-builder-cuda-mismatch", "cuda_env_error", "deepspeed/ops/op_builder/builder.py",
     "assert_no_cuda_mismatch", "deepspeed.ops.op_builder.builder.CUDAMismatchException: >- DeepSpeed Op Builder: "
     "Installed CUDA version 12.4 does not match the version torch was compiled with 11.8, unable to compile "
     "cuda/cpp extensions without a matching cuda version."),
    ("cpp-extension-compiler-version", "cuda_env_error", "torch/utils/cpp_extension.py", "_check_cuda_version",
     "RuntimeError: The current installed version of g++ (13.2.0) is greater than the maximum required version by "
     "CUDA 12.1. Please make sure to use an adequate version of g++ (>=6.0.0, <13.0)."),
]


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _log(frame: str, func: str, message: str) -> str:
    return _HEAD.format(frame=frame, func=func) + message + "\n"


@pytest.mark.parametrize(("rule_id", "category", "frame", "func", "message"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_library_message_gets_its_category(clf: Classifier, rule_id: str, category: str, frame: str,
                                           func: str, message: str) -> None:
    d = diagnose_text(_log(frame, func, message), clf).diagnosis
    assert (d.category, d.rule_id) == (category, rule_id), d.reason


def test_every_round_11_rule_has_a_case() -> None:
    # the round 11 block ends where the next block begins (round 18's sweep C follows it)
    block = SIGNATURES.read_text(encoding="utf-8").partition("# ---- round 11: library messages")[2].partition("\n# ---- ")[0]
    ours = set(re.findall(r"^- id: ([\w-]+)$", block, re.MULTILINE))
    assert len(ours) >= 25
    assert ours - {"hydra-missing-config"} <= {c[0] for c in CASES}


@pytest.mark.parametrize(("text", "rule_id"), [
    # Hydra prints a composition error's message alone, without its class, then its exit line
    ("In 'train': Could not find 'optimizer/adamw8'\n\nAvailable options in 'optimizer':\n\tadam\n\tsgd\n"
     "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", "hydra-missing-config"),
    ("Could not override 'data.num_workerz'.\nTo append to your config use +data.num_workerz=8\n"
     "Key 'num_workerz' is not in struct\n    full_key: data.num_workerz\n"
     "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", "omegaconf-config-error"),
])
def test_hydra_messages_without_a_class_match_at_rule_level(text: str, rule_id: str) -> None:
    best = best_match(match_rules(text, RULES))
    assert best is not None and best.rule.id == rule_id


def test_xformers_shape_limits_are_not_an_environment_fault() -> None:
    # every operator refusing the inputs' shape is the caller's choice, not a missing build
    text = ("NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:\n"
            "`cutlassF` is not supported because:\n    attn_bias.stride(-2) % 8 != 0\n")
    assert "xformers-not-built" not in {m.rule.id for m in match_rules(text, RULES)}


def test_a_dataset_url_is_the_dataset_rule_not_the_model_rule() -> None:
    text = "Repository Not Found for url: https://huggingface.co/datasets/team-x/dialogs/resolve/main/a.json."
    ids = {m.rule.id for m in match_rules(text, RULES)}
    assert "hf-hub-dataset-not-found" in ids and "hf-hub-repo-not-found" not in ids


def test_deepspeed_compatible_cuda_minor_mismatch_is_no_error() -> None:
    # DeepSpeed logs this and goes on: only the "unable to compile" form is fatal
    text = ("Installed CUDA version 12.6 does not match the version torch was compiled with 12.4 but since the APIs "
            "are compatible, accepting this combination")
    assert "deepspeed-op-builder-cuda-mismatch" not in {m.rule.id for m in match_rules(text, RULES)}


def test_a_bare_could_not_find_line_is_not_hydra() -> None:
    text = "Could not find 'libnvinfer.so.8'\nTraceback (most recent call last):\nValueError: bad shape\n"
    assert "hydra-missing-config" not in {m.rule.id for m in match_rules(text, RULES)}

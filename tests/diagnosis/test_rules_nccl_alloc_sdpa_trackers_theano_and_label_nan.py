"""Round 17 (slice z): category and origin read from the libraries' message formats. Each excerpt
is small and written for the test in the library's format (cited in each test), not copied from a
log."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


_START = ["Loading configuration from conf/run.yaml", "Building model: 12 layers, 768 hidden",
          "Starting training"]


def _traceback(frames: list[str], error: list[str]) -> list[str]:
    return [*_START, "Traceback (most recent call last):", '  File "/home/u/proj/run.py", line 40, in <module>',
            "    main()", *frames, *error]


def _answer(lines: list[str], clf: Classifier) -> tuple[str, str]:
    d = diagnose_text("\n".join(lines), clf).diagnosis
    return d.category, d.origin


def test_nccl_failed_cuda_allocation_is_a_cuda_error_of_no_named_party(clf: Classifier) -> None:
    """C7/O1: NCCL's ncclUnhandledCudaError whose "Last error:" is its own allocation warning
    (src/include/alloc.h ncclCudaCallocAsync: WARN "Failed to CUDA calloc async %ld bytes") is a CUDA
    call that failed during work, not the network; the log does not say why the allocation failed."""
    err = ["torch.distributed.DistBackendError: NCCL error in: /opt/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
           "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3",
           "ncclUnhandledCudaError: Call to CUDA function failed.", "Last error:",
           "Failed to CUDA calloc async 4 bytes"]
    frames = ['  File "/opt/py/site-packages/torch/distributed/distributed_c10d.py", line 2824, in broadcast',
              "    work = group.broadcast([tensor], opts)"]
    assert _answer(_traceback(frames, err), clf) == ("cuda_error", "unknown")


def test_nccl_allocation_beside_an_out_of_memory_cuda_failure_stays_gpu_oom(clf: Classifier) -> None:
    """C7: when NCCL's CUDACHECK names "out of memory" the device is full: gpu_oom wins."""
    err = ["RuntimeError: NCCL error in: /opt/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, "
           "unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.26.2",
           "ncclUnhandledCudaError: Call to CUDA function failed.", "Last error:",
           "Cuda failure 2 'out of memory'", "Failed to CUDA calloc 2097152 bytes"]
    assert _answer(_traceback([], err), clf)[0] == "gpu_oom"


def test_datasetdict_without_the_split_is_the_jobs_input_setting(clf: Classifier) -> None:
    """C4/C5: HF datasets' DatasetDict.__getitem__ (src/datasets/dataset_dict.py, a dict: the split
    name as a KeyError) after training: a split the data set does not have, chosen by the job."""
    frames = ['  File "/opt/py/site-packages/datasets/dataset_dict.py", line 58, in __getitem__',
              "    return super().__getitem__(k)"]
    lines = ["{'train_runtime': 312.5, 'train_loss': 0.91, 'epoch': 3.0}", *_traceback(frames, ["KeyError: 'dev'"])]
    assert _answer(lines, clf) == ("incorrect_input", "user")


def test_datasetdict_split_missing_with_python_311_carets(clf: Classifier) -> None:
    """C5: Python 3.11+ marks the failing expression with carets under the frame's source line."""
    frames = ['  File "/opt/py/site-packages/datasets/dataset_dict.py", line 72, in __getitem__',
              "    return super().__getitem__(k)", "           ^^^^^^^^^^^^^^^^^^^^^^"]
    assert _answer(_traceback(frames, ["KeyError: 'validation'"]), clf) == ("incorrect_input", "user")


def test_datasets_unknown_split_message(clf: Classifier) -> None:
    """C5: datasets' builder ("Unknown split ... Should be one of [...]") names the splits it has."""
    err = ['ValueError: Unknown split "validation". Should be one of [\'train\', \'test\'].']
    frames = ['  File "/opt/py/site-packages/datasets/builder.py", line 1290, in as_dataset',
              "    raise ValueError(f'Unknown split \"{split}\". Should be one of {list(name2len)}.')"]
    assert _answer(_traceback(frames, err), clf) == ("incorrect_input", "user")


_SDPA_FRAMES = ['  File "/home/u/proj/model.py", line 88, in forward',
                "    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)"]


def test_sdpa_without_the_kernel_in_the_build_is_the_environment(clf: Classifier) -> None:
    """C7: torch's select_sdp_backend (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp) fails
    "No available kernel" after warning "Torch was not compiled with flash attention." at the first
    call: the job's build lacks the one kernel it allowed (cuda_env_error, its own wheels: user)."""
    warn = ["/home/u/proj/model.py:88: UserWarning: Flash attention kernel not used because: (Triggered internally at "
            "/opt/pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:775.)",
            "/home/u/proj/model.py:88: UserWarning: Torch was not compiled with flash attention. (Triggered "
            "internally at /opt/pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:599.)",
            "sdp_backends: flash=True math=False", "world_size:1 grad_accum_steps:8"]
    lines = [*warn, *_traceback(_SDPA_FRAMES, ["RuntimeError: No available kernel. Aborting execution."])]
    assert _answer(lines, clf) == ("cuda_env_error", "user")


def test_sdpa_no_kernel_on_a_full_build_is_the_jobs_backend_choice(clf: Classifier) -> None:
    """C4: the same error with no build warning: the backends the job allowed reject its inputs."""
    warn = ["/home/u/proj/model.py:88: UserWarning: Flash attention kernel not used because: (Triggered internally at "
            "/opt/pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:775.)",
            "/home/u/proj/model.py:88: UserWarning: Expected query, key and value to all be of dtype: {Half, "
            "BFloat16}. Got Query dtype: float (Triggered internally at sdp_utils.cpp:98.)"]
    lines = [*warn, *_traceback(_SDPA_FRAMES, ["RuntimeError: No available kernel. Aborting execution."])]
    assert _answer(lines, clf) == ("semantic_error", "user")


def test_tracker_called_before_init_is_the_jobs_code(clf: Classifier) -> None:
    """C4: trackio/__init__.py log/finish refuses a call with no run ("Call trackio.init() before
    trackio.finish().")."""
    frames = ['  File "/home/u/proj/run.py", line 132, in main', "    trackio.finish()",
              '  File "/opt/py/site-packages/trackio/__init__.py", line 768, in finish',
              '    raise RuntimeError("Call trackio.init() before trackio.finish().")']
    lines = ["{'train_runtime': 2528.1, 'train_loss': 0.32, 'epoch': 3.0}",
             *_traceback(frames, ["RuntimeError: Call trackio.init() before trackio.finish()."])]
    assert _answer(lines, clf) == ("semantic_error", "user")


def test_wandb_called_before_init_is_the_jobs_code(clf: Classifier) -> None:
    """C4: wandb sdk/lib/preinit.py PreInitCallable ("You must call wandb.init() before wandb.log()")."""
    d = clf.classify_text("\n".join(_traceback([], ["wandb.errors.Error: You must call wandb.init() before wandb.log()"])))
    assert (d.category, d.origin, d.rule_id) == ("semantic_error", "user", "tracker-call-before-init")


@pytest.mark.parametrize("error", ["MemoryError: Error allocating 209715200 bytes of device memory (out of memory).",
                                   "MemoryError: CudaNdarray_ZEROS: allocation failed."])
def test_theano_device_allocation_is_gpu_memory(clf: Classifier, error: str) -> None:
    """C7: Theano's cuda_ndarray.cu device_malloc / CudaNdarray_ZEROS raise Python's MemoryError for
    the GPU's memory: gpu_oom, not the host's cpu_oom."""
    frames = ['  File "/opt/py/site-packages/theano/compile/function_module.py", line 871, in __call__',
              "    storage_map=getattr(self.fn, 'storage_map', None))"]
    assert _answer(_traceback(frames, [error]), clf) == ("gpu_oom", "user")


def test_subprocess_program_path_missing_is_the_jobs_program(clf: Classifier) -> None:
    """C2: CPython's Popen._execute_child raises FileNotFoundError with the executable path the job
    launches (an interpreter of another env): the job's own program, not its input data."""
    frames = ['  File "/opt/py/lib/python3.10/subprocess.py", line 971, in __init__',
              "    self._execute_child(args, executable, preexec_fn, close_fds,",
              '  File "/opt/py/lib/python3.10/subprocess.py", line 1863, in _execute_child',
              "    raise child_exception_type(errno_num, err_msg, err_filename)"]
    err = ["FileNotFoundError: [Errno 2] No such file or directory: '/home/u/envs/track/bin/python'"]
    outer = ["Traceback (most recent call last):", '  File "/home/u/proj/pipeline.py", line 92, in <module>',
             "    run_stage(cmd)", '  File "/opt/py/lib/python3.10/subprocess.py", line 526, in run',
             "    raise CalledProcessError(retcode, process.args,",
             "subprocess.CalledProcessError: Command '['/opt/py/bin/python', 'stage.py']' returned non-zero exit "
             "status 1."]
    assert _answer([*_traceback(frames, err), "[RUN] /opt/py/bin/python stage.py", *outer], clf) == (
        "semantic_error", "user")


def test_nan_in_ground_truth_labels_is_the_data(clf: Classifier) -> None:
    """C4/C5: scikit-learn's check_clusterings (metrics/cluster/_supervised.py) checks labels_true
    with check_array -> _assert_all_finite "Input contains NaN": the data's labels hold NaN."""
    frames = ['  File "/opt/py/site-packages/sklearn/metrics/cluster/_supervised.py", line 45, in check_clusterings',
              "    labels_true = check_array(",
              '  File "/opt/py/site-packages/sklearn/utils/validation.py", line 122, in _assert_all_finite',
              '    raise ValueError("Input contains NaN")']
    assert _answer(_traceback(frames, ["ValueError: Input contains NaN"]), clf) == ("incorrect_input", "data")


def test_nan_in_y_true_names_the_input(clf: Classifier) -> None:
    """C4/C5: since 1.1 _check_targets names it: "Input y_true contains NaN."."""
    frames = ['  File "/opt/py/site-packages/sklearn/metrics/_classification.py", line 116, in _check_targets',
              '    type_true = type_of_target(y_true, input_name="y_true")']
    assert _answer(_traceback(frames, ["ValueError: Input y_true contains NaN."]), clf) == ("incorrect_input", "data")


def test_nan_in_a_model_input_stays_the_jobs_code(clf: Classifier) -> None:
    """C4: the same check on X (the job's features or scores) keeps the sklearn rule's answer."""
    frames = ['  File "/opt/py/site-packages/sklearn/utils/validation.py", line 122, in _assert_all_finite',
              "    raise ValueError(msg_err)"]
    assert _answer(_traceback(frames, ["ValueError: Input X contains NaN."]), clf) == ("semantic_error", "user")


def test_hub_id_that_does_not_exist_is_the_jobs_setting(clf: Classifier) -> None:
    """C8/C5: transformers' cached_file ("is not a local folder and is not a valid model identifier")
    after the Hub's 404 for a config file: the job names a model that is not there (user), even though
    the 404's url ends in a .json file name."""
    err = ["requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
           "https://huggingface.co/acme/llm-9b/resolve/main/config.json", "",
           "The above exception was the direct cause of the following exception:", "",
           "OSError: acme/llm-9b is not a local folder and is not a valid model identifier listed on "
           "'https://huggingface.co/models'"]
    frames = ['  File "/opt/py/site-packages/transformers/utils/hub.py", line 469, in cached_file',
              "    raise EnvironmentError("]
    assert _answer(_traceback(frames, err), clf) == ("checkpoint_error", "user")


def test_bare_device_side_assert_is_the_jobs_value(clf: Classifier) -> None:
    """C7: CUDA's bare "device-side assert triggered" (cudaErrorAssert) with no kernel assertion text:
    the assert checks an index or value the job passed (user), not a library's fault."""
    frames = ['  File "/home/u/proj/models/decoder.py", line 61, in forward',
              "    logits = self.head(x).gather(-1, idx)"]
    lines = ["[TRAIN] [016200] loss_model: 154.433",
             *_traceback(frames, ["RuntimeError: CUDA error: device-side assert triggered"])]
    assert _answer(lines, clf) == ("cuda_error", "user")


def test_lightning_without_a_gpu_backend_names_no_party(clf: Classifier) -> None:
    """C7/O1: Lightning's accelerator_connector.py _choose_gpu_accelerator_backend ("No supported gpu
    backend found!") says no CUDA or MPS device is visible, not whether the env's build or the node
    lacks it: cuda_env_error, unknown."""
    frames = ['  File "/opt/py/site-packages/lightning/pytorch/trainer/connectors/accelerator_connector.py", '
              "line 357, in _choose_gpu_accelerator_backend",
              '    raise MisconfigurationException("No supported gpu backend found!")']
    err = ["lightning.fabric.utilities.exceptions.MisconfigurationException: No supported gpu backend found!"]
    assert _answer(_traceback(frames, err), clf) == ("cuda_env_error", "unknown")


_TF_DEVICE = ["I tensorflow/core/common_runtime/gpu/gpu_device.cc:1433] Found device 0 with properties: ",
              "name: Tesla K80 major: 3 minor: 7 memoryClockRate(GHz): 0.8235", "pciBusID: 0000:00:1e.0"]
_TF_OOM = ["tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
           "shape[25088,4096] and type float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc"]


def test_tf_oom_on_a_gpu_taken_before_the_job_names_no_party(clf: Classifier) -> None:
    """O1/C7: TensorFlow 1.x's device line (gpu_device.cc: "totalMemory: ... freeMemory: ...") shows
    the GPU mostly taken before the job allocated anything: the OOM's party is whoever held it,
    which the log does not name."""
    lines = [*_TF_DEVICE, "totalMemory: 11.17GiB freeMemory: 450.38MiB", *_traceback([], _TF_OOM)]
    assert _answer(lines, clf) == ("gpu_oom", "unknown")


def test_tf_oom_on_a_free_gpu_stays_the_jobs(clf: Classifier) -> None:
    """C7: the same OOM on a device that was free at start is the job's own size (user)."""
    lines = [*_TF_DEVICE, "totalMemory: 11.17GiB freeMemory: 11.03GiB", *_traceback([], _TF_OOM)]
    assert _answer(lines, clf) == ("gpu_oom", "user")

"""Round 11 (category and origin): library message formats that the generic Python-exception
rule answered as a bug in the job's code (semantic_error), or that no rule named. Each log is a
short excerpt written by hand in the library's format."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _traceback(frames: list[tuple[str, int, str, str]], exc: str, before: str = "") -> str:
    out = [before.rstrip("\n")] if before else []
    out.append("Traceback (most recent call last):")
    for path, line, fn, code in frames:
        out += [f'  File "{path}", line {line}, in {fn}', f"    {code}"]
    out.append(exc)
    return "\n".join(out) + "\n"


_SITE = "/opt/conda/lib/python3.10/site-packages"


def _diag(clf: Classifier, text: str) -> tuple[str, str, str | None]:
    d = diagnose_text(text, clf).diagnosis
    return d.category, d.origin, d.rule_id


def test_sklearn_input_with_nan_in_a_metric_is_semantic_error(clf: Classifier) -> None:
    text = _traceback([("/home/ana/tf/roc.py", 41, "<module>", "fpr, tpr, _ = roc_curve(labels, scores)"),
                       (f"{_SITE}/sklearn/utils/validation.py", 146, "_assert_all_finite",
                        "raise ValueError(msg_err)")],
                      "ValueError: Input contains NaN.", before="scores computed for 5120 samples\n")
    assert _diag(clf, text) == ("semantic_error", "user", "sklearn-input-not-finite")  # README C4: metric code


def test_image_metric_shape_check_is_semantic_error(clf: Classifier) -> None:
    text = _traceback([("/home/ana/sr/main_train.py", 220, "main", "psnr = util.calculate_psnr(E_img, H_img)"),
                       ("/home/ana/sr/utils/utils_image.py", 610, "calculate_psnr",
                        "raise ValueError('Input images must have the same dimensions.')")],
                      "ValueError: Input images must have the same dimensions.",
                      before="<epoch:  3, iter:   5,000, lr:2.000e-04> G_loss: 1.2e-02\n")
    assert _diag(clf, text) == ("semantic_error", "user", "image-shape-mismatch")  # README C4: metric code


def test_deepspeed_batch_assertion_is_a_configuration_error(clf: Classifier) -> None:
    text = _traceback([("/home/bo/moe/train.py", 88, "<module>", "engine, opt, _, _ = deepspeed.initialize(args=args, model=net)"),
                       (f"{_SITE}/deepspeed/runtime/config.py", 930, "_batch_assertion", "assert train_batch == micro_batch * grad_acc * self.world_size, (")],
                      "AssertionError: Check batch related parameters. train_batch_size is not equal to "
                      "micro_batch_per_gpu * gradient_acc_step * world_size 32 != 4 * 2 * 3")
    assert _diag(clf, text) == ("semantic_error", "user", "deepspeed-batch-size-mismatch")  # README C4


def test_deepspeed_auto_value_left_unfilled_is_a_configuration_error(clf: Classifier) -> None:
    text = _traceback([("/home/bo/llm/train.py", 120, "main", "trainer.train()"),
                       (f"{_SITE}/accelerate/utils/dataclasses.py", 1050, "fill_match", "raise ValueError(")],
                      "ValueError: `zero_optimization.reduce_bucket_size` not found in kwargs. Please specify "
                      "`zero_optimization.reduce_bucket_size` without `auto` (set to correct value) in the DeepSpeed "
                      "config file or pass it in kwargs.", before="Start training...\n")
    assert _diag(clf, text) == ("semantic_error", "user", "deepspeed-config-auto-value")  # README C4


def test_verl_prompt_longer_than_the_maximum_is_incorrect_input(clf: Classifier) -> None:
    text = _traceback([(f"{_SITE}/verl/utils/dataset/rl_dataset.py", 170, "__getitem__",
                        "input_ids, attention_mask = verl_F.tokenize_and_postprocess_data(prompt=prompt_with_chat_template,"),
                       (f"{_SITE}/verl/utils/torch_functional.py", 330, "postprocess_data",
                        "raise NotImplementedError(f'{sequence_length=} is larger than {max_length=}')")],
                      "NotImplementedError: sequence_length=1024 is larger than max_length=512")
    assert _diag(clf, text) == ("incorrect_input", "data", "verl-sequence-too-long")


@pytest.mark.parametrize("exc", ["KeyError: 'Missing task hellaswagg'",
                                 "ValueError: Tasks not found: hellaswagg. Try `lm-eval --tasks list` for list of available tasks"])
def test_lm_eval_unknown_task_is_incorrect_input(clf: Classifier, exc: str) -> None:
    text = _traceback([("/home/cy/eval/zero_shot.py", 60, "<module>", "task_dict = lm_eval.tasks.get_task_dict(tasks)"),
                       (f"{_SITE}/lm_eval/tasks/__init__.py", 340, "get_task", "raise KeyError(f\"Missing task {task_name}\")")],
                      exc)
    assert _diag(clf, text) == ("incorrect_input", "user", "lm-eval-task-not-found")


def test_torch_save_that_cannot_create_its_file_is_checkpoint_error(clf: Classifier) -> None:
    text = _traceback([("/home/dk/gpt/train.py", 290, "<module>", "torch.save(checkpoint, os.path.join(out_dir, 'ckpt.pt'))"),
                       (f"{_SITE}/torch/serialization.py", 651, "__init__", "super().__init__(torch._C.PyTorchFileWriter(self.name))")],
                      "RuntimeError: File out/ckpt.pt cannot be opened.",
                      before="step 2000: train loss 3.41, val loss 3.45\nsaving checkpoint to out\n")
    assert _diag(clf, text) == ("checkpoint_error", "unknown", "torch-save-cannot-open")


def test_windows_symlink_privilege_is_permission_error(clf: Classifier) -> None:
    text = _traceback([("C:\\proj\\train.py", 77, "<module>", "wandb.save(path)"),
                       ("C:\\Python310\\lib\\os.py", 1, "symlink", "os.symlink(src, dst)")],
                      "OSError: [WinError 1314] A required privilege is not held by the client: "
                      "'C:\\runs\\model.zip' -> 'C:\\runs\\wandb\\files\\model.zip'")
    assert _diag(clf, text) == ("permission_error", "user", "windows-privilege-not-held")


def test_hub_download_cut_short_is_comm_error(clf: Classifier) -> None:
    text = _traceback([("/home/wl/rag/engine.py", 40, "load", "self.reranker = FlagReranker(name, use_fp16=True)"),
                       (f"{_SITE}/huggingface_hub/file_download.py", 460, "http_get", "raise EnvironmentError(")],
                      "OSError: Consistency check failed: file should be of size 4938985248 but has size 1073741824 "
                      "(model.safetensors).\nThis is usually due to network issues while downloading the file. "
                      "Please retry with `force_download=True`.")
    assert _diag(clf, text) == ("comm_error", "infrastructure", "hf-hub-download-consistency")


def test_library_segment_that_cannot_be_mapped_is_host_memory(clf: Classifier) -> None:
    text = _traceback([("/home/cl/vo/train.py", 300, "<module>", "loss.backward()")],
                      "RuntimeError: can't alloc",
                      before="epoch 4/9, iteration 4100/11194, loss 0.031\n")
    text += ("Error in sys.excepthook:\nTraceback (most recent call last):\n"
             '  File "/usr/lib/python3/dist-packages/apport_python_hook.py", line 63, in apport_excepthook\n'
             "    from apport.fileutils import likely_packaged, get_recent_crashes\n"
             "ImportError: /usr/lib/python3/dist-packages/apt_pkg.cpython-35m-x86_64-linux-gnu.so: "
             "failed to map segment from shared object\n")
    assert _diag(clf, text)[:2] == ("cpu_oom", "user")


def test_noexec_mount_is_not_host_memory(clf: Classifier) -> None:
    text = _traceback([("/home/cl/k/train.py", 12, "<module>", "import fused_ops")],
                      "ImportError: /tmp/torch_extensions/fused_ops/fused_ops.so: failed to map segment from shared "
                      "object: Operation not permitted")
    assert _diag(clf, text)[0] != "cpu_oom"


@pytest.mark.parametrize("text", [
    "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/THCCachingAllocator.cpp:510\n",
    "iter 240, loss = 0.98\nTHCudaCheck FAIL file=/opt/torch/extra/cutorch/lib/THC/generic/THCStorage.cu line=40 error=2 : out of memory\n"
    "/opt/torch/install/bin/luajit: /opt/torch/install/share/lua/5.1/nn/Module.lua:271: cuda runtime error (2) : out of "
    "memory at /opt/torch/extra/cutorch/lib/THC/generic/THCStorage.cu:40\nstack traceback:\n\t[C]: in function 'Tensor'\n"
    "\ttrain.lua:236: in main chunk\n\t[C]: at 0x00406670\n",
])
def test_thc_cuda_runtime_error_2_is_gpu_oom(clf: Classifier, text: str) -> None:
    assert _diag(clf, text)[:2] == ("gpu_oom", "user")


def test_flash_attention_without_a_cuda_device_is_an_environment_error(clf: Classifier) -> None:
    text = _traceback([("/home/zt/eval/pred.py", 25, "get_pred", "model = AutoModelForCausalLM.from_pretrained(path, attn_implementation='flash_attention_2')"),
                       (f"{_SITE}/transformers/modeling_utils.py", 1500, "_check_and_enable_flash_attn_2", "raise ValueError(")],
                      "ValueError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: "
                      "Flash Attention 2 is not available on CPU. Please make sure torch can access a CUDA device.")
    assert _diag(clf, text) == ("cuda_env_error", "user", "hf-flash-attention-no-cuda-device")


def test_legacy_torch_save_write_failure_is_a_refused_write(clf: Classifier) -> None:
    text = _traceback([("/home/gw/main.py", 158, "train", "torch.save(state, '{}/checkpoint_{:0>6}.ckpt'.format(logdir, epoch))"),
                       ("/opt/conda/lib/python3.6/site-packages/torch/serialization.py", 288, "_save",
                        "serialized_storages[key]._write_file(f, _should_read_directly(f))")],
                      "RuntimeError: Unknown error -1", before="Epoch 61/1000, train loss = 0.52\n")
    assert _diag(clf, text) == ("storage_error", "unknown", "torch-legacy-storage-write-failed")  # README C3/C6, O1


def test_unknown_error_outside_a_save_is_not_a_save_failure(clf: Classifier) -> None:
    text = _traceback([("/home/gw/main.py", 80, "train", "out = ext.forward(x)")], "RuntimeError: Unknown error -1")
    assert _diag(clf, text)[2] != "torch-legacy-storage-write-failed"


def test_unsloth_gguf_export_without_llama_cpp_is_checkpoint_error(clf: Classifier) -> None:
    text = _traceback([("/home/mu/train.py", 90, "<module>", "model.save_pretrained_gguf('model', tokenizer, quantization_method='q4_k_m')"),
                       (f"{_SITE}/unsloth/save.py", 1100, "unsloth_save_pretrained_gguf", "raise RuntimeError(")],
                      "RuntimeError: Unsloth: The file 'llama.cpp/llama-quantize' or `llama.cpp/quantize` does not exist.\n"
                      "But we expect this file to exist! Check if the file exists under llama.cpp.",
                      before="Unsloth: Installing llama.cpp. This might take 3 minutes...\n")
    assert _diag(clf, text) == ("checkpoint_error", "user", "unsloth-llama-cpp-missing")  # README C3


_SPAWN_JOIN = """\
W0622 04:47:57.494000 1399 torch/multiprocessing/spawn.py:145] Terminating process 6266 via signal SIGTERM
Traceback (most recent call last):
  File "/home/nj/gnn/run_dist.py", line 24, in <module>
    mp.spawn(run, args=(params,), nprocs=4)
  File "/opt/env/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 281, in spawn
    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")
  File "/opt/env/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 185, in join
    original_trace = pickle.load(fh)
EOFError: Ran out of input
"""


def test_spawn_eof_after_a_watchdog_timeout_is_the_timeout(clf: Classifier) -> None:
    text = ("epoch 95 loss 0.41\nepoch 96 loss 0.40\n"
            "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=3281, OpType=ALLGATHER, NumelIn=1, NumelOut=4, Timeout(ms)=600000) ran for 600043 "
            "milliseconds before timing out.\n"
            "terminate called after throwing an instance of 'c10::DistBackendError'\n" + _SPAWN_JOIN)
    assert _diag(clf, text)[:2] == ("comm_error", "unknown")


def test_spawn_eof_with_no_failure_of_the_child_is_not_a_damaged_file(clf: Classifier) -> None:
    text = "epoch 95 loss 0.41\nepoch 96 loss 0.40\n" + _SPAWN_JOIN
    assert _diag(clf, text)[:2] == ("unknown", "unknown")


def test_eof_loading_a_checkpoint_stays_a_damaged_checkpoint(clf: Classifier) -> None:
    text = _traceback([("/home/nj/train.py", 40, "main", "state = torch.load('ckpt/last.pt')"),
                       (f"{_SITE}/torch/serialization.py", 1040, "_legacy_load", "magic_number = pickle_module.load(f, **pickle_load_args)")],
                      "EOFError: Ran out of input")
    assert _diag(clf, text)[0] == "checkpoint_error"


_AGENT_KILL = """\
W1013 16:02:19.112000 641967 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 642033 closing signal SIGTERM
E1013 16:02:21.119000 641967 torch/distributed/elastic/multiprocessing/api.py:874] failed (exitcode: -9) local_rank: 3 (pid: 642036) of binary: /opt/env/bin/python3.10
"""


def test_launcher_sigkill_after_a_rank_own_traceback_is_that_error(clf: Classifier) -> None:
    text = ("[rank0]: Traceback (most recent call last):\n"
            '[rank0]:   File "/home/sz/src/dpo.py", line 313, in run_training\n'
            "[rank0]:     wandb_enabled = setup_wandb(config)\n"
            '[rank0]:   File "/home/sz/src/dpo.py", line 190, in setup_wandb\n'
            '[rank0]:     logger.warning("wandb init failed: %s", exc)\n'
            "[rank0]: NameError: name 'logger' is not defined\n" + _AGENT_KILL)
    assert _diag(clf, text)[:2] == ("semantic_error", "user")


def test_bare_launcher_sigkill_stays_an_unattributed_kill(clf: Classifier) -> None:
    text = "step 4400 loss 1.92\nstep 4410 loss 1.90\n" + _AGENT_KILL
    assert _diag(clf, text)[:2] == ("cpu_oom", "unknown")


def test_ray_node_marked_dead_names_no_party(clf: Classifier) -> None:
    text = ("(main_task pid=2231) [validate_config] All configuration checks passed successfully!\n"
            "Error executing job with overrides: ['trainer.n_gpus_per_node=4']\n"
            "ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out for more information.\n"
            "[2025-06-01 10:00:00,000 E 2231 2231] gcs_server: The node with node id: 3f4c9a and address: 10.0.0.12 and "
            "node name: 10.0.0.12 has been marked dead because the detector has missed too many heartbeats from it. "
            "This can happen when a \t(1) raylet crashes unexpectedly (OOM, etc.) \n"
            "\t(2) raylet has lagging heartbeats due to slow network or busy workload.\n")
    assert _diag(clf, text)[1] == "unknown"


def test_ray_unpickling_an_api_connection_error_is_comm_error(clf: Classifier) -> None:
    text = ("[Validation] Starting generation for 1000 samples...\n"
            "2026-04-14 15:18:12,772\tERROR serialization.py:460 -- Failed to unpickle serialized exception\n"
            "Traceback (most recent call last):\n"
            f'  File "{_SITE}/ray/exceptions.py", line 51, in from_ray_exception\n'
            "    return pickle.loads(ray_exception.serialized_exception)\n"
            "TypeError: APIConnectionError.__init__() takes 1 positional argument but 2 were given\n"
            "\nThe above exception was the direct cause of the following exception:\n\n"
            "Traceback (most recent call last):\n"
            f'  File "{_SITE}/ray/_private/serialization.py", line 458, in deserialize_objects\n'
            "    obj = self._deserialize_object(data, metadata, object_ref)\n"
            "RuntimeError: Failed to unpickle serialized exception\n"
            "ray.exceptions.RaySystemError: System error: Failed to unpickle serialized exception\n")
    assert _diag(clf, text) == ("comm_error", "unknown", "ray-unpickled-connection-error")


# README C7: an illegal access in a library's kernel with nothing pointing at the caller is the
# framework's; a launch failure keeps no party (O1)
@pytest.mark.parametrize(("exc", "origin"), [("RuntimeError: CUDA error: an illegal memory access was encountered", "framework"),
                                             ("RuntimeError: CUDA error: unspecified launch failure", "unknown"),
                                             ("torch.AcceleratorError: CUDA error: an illegal instruction was encountered", "framework"),
                                             ("RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED", "framework")])
def test_asynchronous_kernel_fault_in_library_code(clf: Classifier, exc: str, origin: str) -> None:
    text = _traceback([(f"{_SITE}/torch/autograd/graph.py", 768, "_engine_run_backward",
                        "return Variable._execution_engine.run_backward(")],
                      exc + "\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
                      "stacktrace below might be incorrect.", before="step 7400 loss 1.21\n")
    assert _diag(clf, text)[:2] == ("cuda_error", origin)


def test_dataloader_worker_segfault_alone_names_no_party(clf: Classifier) -> None:
    text = _traceback([(f"{_SITE}/torch/utils/data/_utils/signal_handling.py", 73, "handler",
                        "_error_if_any_worker_fails()")],
                      "RuntimeError: DataLoader worker (pid 71096) is killed by signal: Segmentation fault.",
                      before="Validation DataLoader 0:  40%|####      | 8/20 [00:03<00:05,  2.31it/s]\n")
    assert _diag(clf, text)[:2] == ("crash", "unknown")


def test_dataloader_worker_segfault_with_a_fault_dump_keeps_its_origin(clf: Classifier) -> None:
    text = ("Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n"
            f'  File "{_SITE}/cv2/__init__.py", line 10 in imdecode\n' +
            _traceback([(f"{_SITE}/torch/utils/data/_utils/signal_handling.py", 73, "handler", "_error_if_any_worker_fails()")],
                       "RuntimeError: DataLoader worker (pid 71096) is killed by signal: Segmentation fault."))
    assert _diag(clf, text)[:2] == ("crash", "framework")


def test_slurm_cancel_due_to_signal_names_no_sender(clf: Classifier) -> None:
    text = ("[rank0]: using GPU 0 as device\n"
            "Running tokenizer on dataset (num_proc=16):  23%|##        | 20000/87535 [02:38<04:17, 262.08 examples/s]"
            "[2025-12-08T12:44:04.417] error: *** JOB 1469427 ON node17 CANCELLED AT 2025-12-08T12:44:04 DUE to SIGNAL "
            "Terminated ***\n")
    assert _diag(clf, text) == ("preempted", "unknown", "slurm-cancelled")


@pytest.mark.parametrize(("name", "origin"), [("model.safetensors-00003-of-00004.safetensors", "unknown"),
                                              ("pytorch_model.bin", "user")])
def test_missing_shard_of_an_index_names_no_party(clf: Classifier, name: str, origin: str) -> None:
    text = _traceback([("/home/su/train.py", 50, "main", "model = AutoModelForCausalLM.from_pretrained(args.model)"),
                       (f"{_SITE}/transformers/utils/hub.py", 470, "cached_files", "raise EnvironmentError(")],
                      f"OSError: Qwen/Qwen3-8B does not appear to have a file named {name}. Checkout "
                      "'https://huggingface.co/Qwen/Qwen3-8B/tree/main' for available files.")
    assert _diag(clf, text)[:2] == ("checkpoint_error", origin)


_STORE_TIMEOUT = _traceback(
    [(f"{_SITE}/torch/distributed/elastic/agent/server/api.py", 683, "_assign_worker_ranks",
      "role_infos_bytes = store.multi_get(")],
    "torch.distributed.DistStoreError: Socket Timeout")


@pytest.mark.parametrize(("rank", "origin"), [("0", "user"), ("$SLURM_NODEID", "unknown")])
def test_store_timeout_after_a_launch_with_one_node_rank_for_all_nodes(clf: Classifier, rank: str, origin: str) -> None:
    text = ("+ echo 'MASTER_ADDR=gpu54 MASTER_PORT=17075 NNODES=3'\n"
            "+ srun --ntasks=3 --ntasks-per-node=1 torchrun --nnodes=3 --nproc_per_node=8 "
            f"--node_rank={rank} --master_addr=gpu54 --master_port=17075 train.py --plugin moe\n"
            + _STORE_TIMEOUT + "srun: error: gpu54: task 0: Exited with exit code 1\n")
    assert _diag(clf, text)[:2] == ("comm_error", origin)


_PIPELINE = """\
Epoch 27/50:  64%|######4   | 310/482 [01:02<00:34,  4.96it/s]
=== Stage 2: predict ===
usage: predict.py [-h] [--ckpt CKPT] [--out OUT]
predict.py: error: unrecognized arguments: --use_lazy_dataset
=== Stage 3: evaluate ===
"""


def test_missing_output_of_a_stage_that_failed_just_before_is_that_failure(clf: Classifier) -> None:
    text = _PIPELINE + _traceback([("/root/wp/src/evaluate.py", 20, "<module>", "y_true = np.load(os.path.join(out, 'y_true.npy'))")],
                                  "FileNotFoundError: [Errno 2] No such file or directory: '/root/wp/results/y_true.npy'")
    assert _diag(clf, text)[:2] == ("semantic_error", "user")


def test_missing_data_file_with_no_failed_stage_before_stays_incorrect_input(clf: Classifier) -> None:
    text = "=== Stage 3: evaluate ===\nloading predictions\n" + _traceback(
        [("/root/wp/src/evaluate.py", 20, "<module>", "y_true = np.load(os.path.join(out, 'y_true.npy'))")],
        "FileNotFoundError: [Errno 2] No such file or directory: '/root/wp/results/y_true.npy'")
    assert _diag(clf, text)[0] == "incorrect_input"


def test_pbs_walltime_kill_after_the_ranks_died_is_not_the_cause(clf: Classifier) -> None:
    text = _traceback([(f"{_SITE}/hydra/core/utils.py", 75, "_save_config", "file.write(OmegaConf.to_yaml(cfg))")],
                      "OSError: [Errno 122] Disk quota exceeded")
    text += ("\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
             "=>> PBS: job killed: walltime 21672 exceeded limit 21600\n"
             "x3007c0s19b0n0.hsn.cm.polaris.alcf.anl.gov: rank 57 died from signal 15\n")
    assert _diag(clf, text)[0] == "storage_error"


def test_pbs_walltime_kill_during_training_is_preempted(clf: Classifier) -> None:
    text = ("epoch 30 step 1200 loss 0.31\nepoch 30 step 1210 loss 0.30\n"
            "=>> PBS: job killed: walltime 21672 exceeded limit 21600\n")
    assert _diag(clf, text)[0] == "preempted"


def _sharer_traceback(exc: str) -> str:
    return _traceback([(f"{_SITE}/torch/utils/data/dataloader.py", 1132, "_try_get_data", "data = self._data_queue.get(timeout=timeout)"),
                       (f"{_SITE}/torch/multiprocessing/reductions.py", 355, "rebuild_storage_fd", "fd = df.detach()"),
                       ("/opt/conda/lib/python3.9/multiprocessing/resource_sharer.py", 86, "get_connection",
                        "c = Client(address, authkey=process.current_process().authkey)"),
                       ("/opt/conda/lib/python3.9/multiprocessing/connection.py", 630, "SocketClient", "s.connect(address)")],
                      exc)


def test_resource_sharer_error_after_an_interrupt_is_the_interrupt(clf: Classifier) -> None:
    text = ("Epoch 2: 100%|##########| 43/43 [00:21<00:00,  2.01it/s]\n"
            "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x70fd>\n"
            "Traceback (most recent call last):\n"
            '  File "/opt/conda/lib/python3.9/selectors.py", line 416, in select\n'
            "    fd_event_list = self._selector.poll(timeout)\nKeyboardInterrupt: \n"
            "Validation: |          | 0/? [00:00<?, ?it/s]\n"
            + _sharer_traceback("FileNotFoundError: [Errno 2] No such file or directory"))
    assert _diag(clf, text)[:2] == ("preempted", "user")


@pytest.mark.parametrize("exc", ["FileNotFoundError: [Errno 2] No such file or directory",
                                 "ConnectionResetError: [Errno 104] Connection reset by peer"])
def test_resource_sharer_error_alone_names_no_cause(clf: Classifier, exc: str) -> None:
    text = "Epoch 2:  40%|####      | 17/43 [00:08<00:12,  2.01it/s]\n" + _sharer_traceback(exc)
    assert _diag(clf, text)[:2] == ("unknown", "unknown")


# README C5 (r14): an input missing at the location the configuration names is the data's, folder or file
@pytest.mark.parametrize(("path", "origin"), [("/scratch/al/data/tfrecords256/", "data"),
                                              ("/project/al/ScanNet/scans/scene0307_00/color", "data"),
                                              ("/data/al/wavs/6192449487.wav", "data")])
def test_missing_folder_and_missing_record_are_the_data_s(clf: Classifier, path: str, origin: str) -> None:
    text = _traceback([("/home/al/train.py", 40, "load", "items = os.listdir(root)")],
                      f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'", before="TensorFlow is using GPU\n")
    assert _diag(clf, text)[:2] == ("incorrect_input", origin)


@pytest.mark.parametrize(("before", "origin"), [("waiting for batch...\n", "unknown"), ("step 41 loss 0.88\n", "user")])
def test_interrupt_after_the_run_said_it_was_waiting_names_no_party(clf: Classifier, before: str, origin: str) -> None:
    text = ("INFO 12-10 11:57:44 [llm.py:343] Supported tasks: ['generate']\n" + before +
            "[2025-12-10 12:07:08,014] [INFO] [launch.py:344:sigkill_handler] Main process received SIGINT, exiting\n"
            + _traceback([("/opt/conda/lib/python3.13/subprocess.py", 1280, "wait", "return self._wait(timeout=timeout)")],
                         "KeyboardInterrupt"))
    assert _diag(clf, text)[:2] == ("preempted", origin)


def _worker_failure(exc: str, steps: int) -> str:
    progress = "".join(f"10/14/2023 09:59:{s:02d} - INFO -   Epoch: 3/5, Step: {s}/143, Loss: 0.2{s % 10}\n"
                       for s in range(1, steps + 1))
    return progress + _traceback([("/home/bz/main_xclip.py", 400, "train_epoch", "for step, batch in enumerate(loader):"),
                                  (f"{_SITE}/torch/_utils.py", 694, "reraise", "raise exception")],
                                 f"{exc.split(':')[0]}: Caught {exc.split(':')[0]} in DataLoader worker process 2.\n"
                                 "Original Traceback (most recent call last):\n"
                                 '  File "/home/bz/dataloaders/rawvideo_util.py", line 80, in video_to_tensor\n'
                                 "    interval = total_frames // sample_fp\n" + exc)


@pytest.mark.parametrize(("exc", "steps", "category"), [
    ("ZeroDivisionError: integer division or modulo by zero", 40, "incorrect_input"),
    ("ValueError: Sample larger than population or is negative", 40, "incorrect_input"),
    # README C4: raised in data-reading code (the worker's Dataset) even on the first batch (r14)
    ("ZeroDivisionError: integer division or modulo by zero", 0, "incorrect_input"),
])
def test_worker_error_after_the_loader_fed_the_run_is_one_bad_record(clf: Classifier, exc: str, steps: int,
                                                                     category: str) -> None:
    assert _diag(clf, _worker_failure(exc, steps))[0] == category


def test_pin_memory_thread_reset_after_a_bad_record_is_the_record(clf: Classifier) -> None:
    text = (_worker_failure("ValueError: Sample larger than population or is negative", 40)
            + "Exception in thread Thread-4:\n"
            + _sharer_traceback("ConnectionResetError: [Errno 104] Connection reset by peer"))
    assert _diag(clf, text)[:2] == ("incorrect_input", "data")


def test_ucx_caught_signal_is_a_crash_in_the_communication_stack(clf: Classifier) -> None:
    text = ("0: rank 0 local result tensor([1., 1.], device='cuda:0')\n"
            "0: [cgpu03:58050:2]       ucp_rkey.c:250  UCX  ERROR Failed to unpack remote key from remote md[4]: "
            "Input/output error\n"
            "0: [cgpu03:58050:2:58126] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x20)\n"
            "0: ==== backtrace (tid:  58126) ====\n"
            "0:  0 0x000000000004d2c0 ucs_debug_print_backtrace()  /opt/ucx/src/ucs/debug/debug.c:656\n"
            "srun: error: cgpu03: task 0: Segmentation fault\n")
    assert _diag(clf, text)[:2] == ("crash", "framework")

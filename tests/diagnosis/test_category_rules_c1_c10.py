"""Reader round 14 (category and origin): message formats of Caffe, pydantic, TRL and the file
system that no rule named or that a rule named wrongly. Each log is a short excerpt written by hand
in the library's format (README "Category: rules" C1-C10)."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from tests.diagnosis.test_logread_category_formats import _SITE, _diag, _traceback


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


_CAFFE_HEAD = (
    "I0312 10:00:58.100000  4242 solver.cpp:48] Initializing solver from parameters:\n"
    "I0312 10:01:01.900000  4242 net.cpp:283] Network initialization done.\n"
    "I0312 10:01:02.000000  4242 solver.cpp:337] Iteration 0, Testing net (#0)\n"
)


def test_caffe_train_and_test_nets_that_disagree_are_a_semantic_error(clf: Classifier) -> None:
    text = _CAFFE_HEAD + (
        "F0312 10:01:02.123456  4242 net.cpp:703] Check failed: target_blobs[j]->shape() == source_blob->shape() "
        "Cannot share param 0 weights from layer 'cls_score'; shape mismatch.  Source param shape is 21 2048 (43008); "
        "target param shape is 11 2048 (22528)\n"
        "*** Check failure stack trace: ***\n"
        "    @     0x7f3c2a1b1daa  (unknown)\n"
        "    @     0x7f3c2a1b1ce4  (unknown)\n"
    )
    assert _diag(clf, text) == ("semantic_error", "user", "caffe-share-param-shape-mismatch")


def test_caffe_weights_that_do_not_fit_the_net_are_a_checkpoint_error(clf: Classifier) -> None:
    text = (
        "I0312 10:00:58.100000  4242 net.cpp:761] Ignoring source layer prob\n"
        "F0312 10:01:02.123456  4242 net.cpp:771] Cannot copy param 0 weights from layer 'cls_score'; shape mismatch.  "
        "Source param shape is 1000 2048 (2048000); target param shape is 11 2048 (22528). To learn this layer's "
        "parameters from scratch rather than copying from a saved net, rename the layer.\n"
        "*** Check failure stack trace: ***\n"
        "    @     0x7f3c2a1b1daa  (unknown)\n"
    )
    assert _diag(clf, text) == ("checkpoint_error", "user", "caffe-copy-param-shape-mismatch")


@pytest.mark.parametrize("exc", [
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for TrainerConfig",
    "pydantic.error_wrappers.ValidationError: 2 validation errors for ModelArgs",
])
def test_a_pydantic_config_model_rejecting_a_setting_is_a_semantic_error(clf: Classifier, exc: str) -> None:
    text = _traceback([("/home/cy/ft/train.py", 31, "main", "cfg = TrainerConfig(**yaml.safe_load(fh))"),
                       (f"{_SITE}/pydantic/main.py", 212, "__init__",
                        "validated_self = self.__pydantic_validator__.validate_python(data, self_instance=self)")],
                      exc + "\nlr_scheduler\n  Input should be 'cosine' or 'linear' [type=literal_error, "
                      "input_value='cosin', input_type=str]\n", before="loading config configs/ft.yml\n")
    assert _diag(clf, text) == ("semantic_error", "user", "pydantic-validation-error")


def test_trl_completion_collator_without_its_template_is_incorrect_input_of_the_user(clf: Classifier) -> None:
    text = _traceback([(f"{_SITE}/transformers/trainer.py", 1860, "_inner_training_loop",
                        "for step, inputs in enumerate(epoch_iterator):"),
                       (f"{_SITE}/trl/trainer/utils.py", 140, "torch_call",
                        "raise RuntimeError(")],
                      "RuntimeError: Could not find response key [835, 4007, 29901] in token IDs "
                      "tensor([    1,   835,  2799, 29901])",
                      before="  0%|          | 0/300 [00:00<?, ?it/s]\n")
    assert _diag(clf, text) == ("incorrect_input", "user", "trl-completion-collator-key-missing")  # README C4, C5


def test_eintr_saving_a_checkpoint_is_a_refused_write_of_unknown_origin(clf: Classifier) -> None:
    text = _traceback([(f"{_SITE}/lightning_fabric/utilities/cloud_io.py", 88, "_atomic_save",
                        "f.write(bytesbuffer.getvalue())"),
                       (f"{_SITE}/fsspec/core.py", 142, "close", "f.close()"),
                       (f"{_SITE}/fsspec/implementations/local.py", 358, "close", "return self.f.close()")],
                      "InterruptedError: [Errno 4] Interrupted system call",
                      before="Epoch 2: 100%|##########| 640/640 [12:01<00:00]\n")
    assert _diag(clf, text) == ("storage_error", "unknown", "eintr-checkpoint-save")  # README C3/C6 (amended), O1


def test_eintr_outside_a_save_names_no_checkpoint_failure(clf: Classifier) -> None:
    text = _traceback([("/home/cy/srv/loop.py", 12, "main", "time.sleep(5)"),
                       ("/home/cy/srv/loop.py", 40, "wait_for", "select.select([fd], [], [])")],
                      "InterruptedError: [Errno 4] Interrupted system call")
    assert _diag(clf, text)[2] != "eintr-checkpoint-save"


def test_a_full_disk_quota_is_the_owners_storage_error(clf: Classifier) -> None:
    text = _traceback([("/home/cy/ft/train.py", 210, "main", "trainer.save_model(out_dir)"),
                       (f"{_SITE}/torch/serialization.py", 652, "save", "with _open_zipfile_writer(f) as opened_zipfile:")],
                      "OSError: [Errno 122] Disk quota exceeded",
                      before="{'loss': 1.21, 'learning_rate': 1e-05, 'epoch': 2.0}\nSaving model checkpoint to out/checkpoint-500\n")
    assert _diag(clf, text) == ("storage_error", "user", "disk-quota-exceeded")


def test_a_torch_save_write_failure_without_an_errno_is_a_refused_write(clf: Classifier) -> None:
    text = _traceback([("/home/cy/ft/train.py", 301, "save", "torch.save(model.state_dict(), path)"),
                       (f"{_SITE}/torch/serialization.py", 652, "save", "with _open_zipfile_writer(f) as opened_zipfile:")],
                      "RuntimeError: [enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing "
                      "file data/12: file write failed",
                      before="epoch 40 | loss 0.31\nsaving checkpoint ckpt/epoch_40.pt\n")
    assert _diag(clf, text) == ("storage_error", "unknown", "torch-save-write-failed")  # README C3/C6 (amended), O1


def test_multiprocessing_temp_folder_without_space_is_shared_memory(clf: Classifier) -> None:
    text = _traceback([("/usr/lib/python3.10/multiprocessing/util.py", 146, "get_temp_dir",
                        "tempdir = tempfile.mkdtemp(prefix='pymp-')"),
                       ("/usr/lib/python3.10/tempfile.py", 497, "mkdtemp", "_os.mkdir(file, 0o700)")],
                      "OSError: [Errno 28] No space left on device: '/tmp/pymp-x81kq2wd'",
                      before="| epoch 003 | valid on 'valid' subset\n")
    assert _diag(clf, text) == ("cpu_oom", "infrastructure", "multiprocessing-tempdir-no-space")  # README C6


def test_a_semaphore_that_cannot_be_created_is_shared_memory(clf: Classifier) -> None:
    text = _traceback([(f"{_SITE}/torch/utils/data/dataloader.py", 1040, "__init__",
                        "self._worker_result_queue = multiprocessing_context.Queue()"),
                       ("/usr/lib/python3.11/multiprocessing/synchronize.py", 57, "__init__",
                        "sl = self._semlock = _multiprocessing.SemLock(")],
                      "OSError: [Errno 28] No space left on device", before="building dataloaders\n")
    assert _diag(clf, text) == ("cpu_oom", "infrastructure", "multiprocessing-semlock-no-space")  # README C6


def test_a_full_disk_outside_multiprocessing_stays_a_storage_error(clf: Classifier) -> None:
    text = _traceback([("/home/cy/ft/train.py", 88, "dump", "fh.write(blob)")],
                      "OSError: [Errno 28] No space left on device", before="writing predictions\n")
    assert _diag(clf, text)[0] == "storage_error"


@pytest.mark.parametrize(("frame", "exc", "rule"), [
    (("/home/cy/sr/utils/utils_image.py", 610, "calculate_psnr", "raise ValueError('Input images must have the same dimensions.')"),
     "ValueError: Input images must have the same dimensions.", "image-shape-mismatch"),
    ((f"{_SITE}/sklearn/utils/validation.py", 161, "_assert_all_finite", "raise ValueError(msg_err)"),
     "ValueError: Input contains NaN.", "sklearn-input-not-finite"),
    ((f"{_SITE}/PIL/Image.py", 76, "__getattr__", "raise AttributeError(f\"module '{__name__}' has no attribute '{name}'\")"),
     "AttributeError: module 'PIL.Image' has no attribute 'ExifTags'", "library-module-attribute-skew"),
])
def test_metric_checks_and_changed_library_apis_are_semantic_errors(clf: Classifier, frame: tuple[str, int, str, str],
                                                                     exc: str, rule: str) -> None:
    # README C4: raised in evaluation code, not data-reading code; an API changed between versions (C9: at run time)
    text = _traceback([("/home/cy/run/main.py", 200, "main", "evaluate(model, loader)"), frame], exc,
                      before="<epoch:  3, iter:   5,000> loss 0.012\n")
    assert _diag(clf, text) == ("semantic_error", "user", rule)


@pytest.mark.parametrize("exc", [
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "torch.AcceleratorError: CUDA error: an illegal instruction was encountered",
    "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
])
def test_a_kernel_fault_in_library_code_is_the_framework_s(clf: Classifier, exc: str) -> None:
    # README C7: an illegal access in a library's kernel with nothing pointing at the caller is framework
    text = _traceback([("/home/cy/nmt/train.py", 310, "train_step", "stats.update(loss.sum().item())")], exc,
                      before="Step 3550/15000; acc 68.0; ppl 13.4\n")
    assert _diag(clf, text)[:2] == ("cuda_error", "framework")


def test_a_read_only_file_system_is_a_permission_error(clf: Classifier) -> None:
    # README C6: EROFS is the file system refusing, infrastructure (C2: "Read-only" is C6, not an access denial)
    text = _traceback([("/home/cy/ft/train.py", 40, "main", "os.makedirs(out_dir, exist_ok=True)")],
                      "OSError: [Errno 30] Read-only file system: '/models/run7'", before="config loaded\n")
    assert _diag(clf, text) == ("permission_error", "user", "read-only-file-system")  # README C2/C6 (amended)


def test_a_batch_whose_samples_differ_in_size_is_incorrect_input(clf: Classifier) -> None:
    # README C4: a record whose size differs from the others, raised in the DataLoader's collate
    text = _traceback([(f"{_SITE}/torch/utils/data/_utils/collate.py", 141, "collate", "return torch.stack(batch, 0, out=out)")],
                      "RuntimeError: stack expects each tensor to be equal size, but got [3, 224, 224] at entry 0 and "
                      "[1, 224, 224] at entry 7", before="epoch 1 iter 120 loss 0.82\nepoch 1 iter 130 loss 0.80\n")
    assert _diag(clf, text)[:2] == ("incorrect_input", "data")
    assert _diag(clf, text)[2] == "collate-stack-unequal-size"


def test_safetensors_refusing_shared_tensors_is_a_checkpoint_error(clf: Classifier) -> None:
    # README C3: the shared-tensor refusal is a failed save of model state
    text = _traceback([("/home/cy/ft/train.py", 250, "main", "save_file(model.state_dict(), 'out/model.safetensors')"),
                       (f"{_SITE}/safetensors/torch.py", 480, "_remove_duplicate_names", "raise RuntimeError(")],
                      "RuntimeError: \n            Some tensors share memory, this will lead to duplicate memory on disk "
                      "and potential differences when loading them again: [{'lm_head.weight', 'embed.weight'}].",
                      before="training done\n")
    assert _diag(clf, text) == ("checkpoint_error", "user", "safetensors-shared-tensors")


@pytest.mark.parametrize("path", ["configs/train_large.yaml", "/home/cy/ft/ds_config_zero3.json", "exp/opts.cfg"])
def test_a_missing_configuration_file_is_a_semantic_error(clf: Classifier, path: str) -> None:
    # README C2: the job's own configuration that it cannot read
    text = _traceback([("/home/cy/ft/train.py", 30, "main", "cfg = load_config(args.config)")],
                      f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'", before="starting\n")
    assert _diag(clf, text) == ("semantic_error", "user", "config-file-missing")


@pytest.mark.parametrize("path", ["/models/llama-7b/config.json", "/models/llama-7b/tokenizer_config.json",
                                  "out/lora/adapter_model.bin"])
def test_a_missing_model_file_is_a_checkpoint_error(clf: Classifier, path: str) -> None:
    # README C2 (model state) and C5 (a missing weight or tokenizer file is the user's)
    text = _traceback([("/home/cy/ft/infer.py", 30, "main", "model = build(args.model_dir)")],
                      f"FileNotFoundError: [Errno 2] No such file or directory: '{path}'", before="starting\n")
    assert _diag(clf, text)[:2] == ("checkpoint_error", "user")


def test_a_missing_data_json_stays_incorrect_input(clf: Classifier) -> None:
    text = _traceback([("/home/cy/ft/train.py", 30, "main", "rows = json.load(open(args.train_file))")],
                      "FileNotFoundError: [Errno 2] No such file or directory: 'data/train.json'", before="starting\n")
    assert _diag(clf, text)[0] == "incorrect_input"


def _worker_failure(exc_type: str, message: str, code: str) -> str:
    return _traceback([("/home/cy/mol/train.py", 120, "main", "for batch in loader:"),
                       (f"{_SITE}/torch/_utils.py", 705, "reraise", "raise exception")],
                      f"{exc_type}: Caught {exc_type} in DataLoader worker process 0.\n"
                      "Original Traceback (most recent call last):\n"
                      f'  File "{_SITE}/torch/utils/data/_utils/worker.py", line 308, in _worker_loop\n'
                      "    data = fetcher.fetch(index)\n"
                      '  File "/home/cy/mol/datasets/qm9.py", line 88, in __getitem__\n'
                      f"    {code}\n"
                      f"{exc_type}: {message}",
                      before="Training for 200000 kimg...\n")


@pytest.mark.parametrize(("exc_type", "message", "code"), [
    ("KeyError", "'caption'", "caption = item['caption']"),
    ("AssertionError", "", "assert atom_types.shape == (n_atoms,)"),
    ("RuntimeError", "shape mismatch: value tensor of shape [3, 2626] cannot be broadcast to indexing result of shape [3, 2048]",
     "pos[:, idx] = rope_index(ids)"),
])
def test_an_error_a_dataloader_worker_caught_reading_a_sample_is_incorrect_input(
        clf: Classifier, exc_type: str, message: str, code: str) -> None:
    # README C4: an error of either reading raised in data-reading code (the worker runs __getitem__)
    assert _diag(clf, _worker_failure(exc_type, message, code))[0] == "incorrect_input"


def test_a_plain_code_bug_in_a_dataloader_worker_stays_a_semantic_error(clf: Classifier) -> None:
    text = _worker_failure("NameError", "name 'np' is not defined", "x = np.asarray(item['x'])")
    assert _diag(clf, text)[0] == "semantic_error"


@pytest.mark.parametrize(("exc", "rule"), [
    ("ValueError: Some specified arguments are not used by the HfArgumentParser: ['--lr_decay', '0.9']", "hf-arguments-rejected"),
    ("ValueError: --load_best_model_at_end requires the save and eval strategy to match, but found\n- Evaluation "
     "strategy: IntervalStrategy.EPOCH\n- Save strategy: IntervalStrategy.STEPS", "hf-arguments-rejected"),
    ("hydra.errors.ConfigCompositionException: Could not override 'trainer.gpus'.", "omegaconf-config-error"),
])
def test_a_setting_rejected_by_a_library_check_is_a_semantic_error(clf: Classifier, exc: str, rule: str) -> None:
    # README C4: a setting rejected by HfArgumentParser, Hydra or a library's argument validation
    text = _traceback([("/home/cy/ft/train.py", 20, "main", "args = parse()")], exc, before="starting\n")
    assert _diag(clf, text) == ("semantic_error", "user", rule)


def test_a_data_set_missing_from_the_cache_with_the_hub_offline_is_incorrect_input(clf: Classifier) -> None:
    # README C8: the file's category by C2 (a data set: incorrect_input), origin user
    text = _traceback([("/home/cy/ft/train.py", 40, "main", "ds = load_dataset('squad')"),
                       (f"{_SITE}/datasets/load.py", 1900, "dataset_module_factory", "raise ConnectionError(")],
                      "ConnectionError: Couldn't reach 'squad' on the Hub (OfflineModeIsEnabled)", before="starting\n")
    assert _diag(clf, text) == ("incorrect_input", "user", "datasets-hub-offline")


def test_a_data_folder_missing_where_the_configuration_names_it_is_the_data_s(clf: Classifier) -> None:
    # README C5: the input as delivered is missing at the location the job's configuration names
    text = _traceback([("/home/cy/gan/train.py", 60, "main", "files = os.listdir(cfg.train_dir)")],
                      "FileNotFoundError: [Errno 2] No such file or directory: '/scratch/cy/data/tfrecords256/'",
                      before="TensorFlow is using GPU\n")
    assert _diag(clf, text) == ("incorrect_input", "data", "data-folder-missing")


def test_llamafactory_data_file_missing_is_the_data_s(clf: Classifier) -> None:
    # README C2 and C5: an input data file missing where the configuration names it
    text = _traceback([("/srv/LLaMA-Factory/src/llamafactory/data/loader.py", 75, "_load_single_dataset",
                        'raise ValueError(f"File {local_path} not found.")')],
                      "ValueError: File data/safety/sft_50_500.json not found.", before="Loading dataset safety...\n")
    assert _diag(clf, text) == ("incorrect_input", "data", "llamafactory-data-file-missing")


def test_an_exception_raised_by_the_model_save_call_is_a_checkpoint_error(clf: Classifier) -> None:
    # README C3: saving model state that fails is checkpoint_error whatever the cause the code shows
    text = _traceback([("/home/cy/det/main.py", 300, "main", "train_one_epoch(model, loader, args)"),
                       ("/home/cy/det/engine.py", 88, "train_one_epoch", "misc.save_model(args=args, model=model, is_best=True)")],
                      "TypeError: save_model() got an unexpected keyword argument 'is_best'",
                      before="Epoch: [0]  [ 990/1000]  loss: 0.41\nEpoch: [0] Total time: 0:10:02\n")
    assert _diag(clf, text) == ("checkpoint_error", "user", "model-save-raised")


def test_the_same_type_error_outside_a_save_stays_a_semantic_error(clf: Classifier) -> None:
    text = _traceback([("/home/cy/det/engine.py", 40, "train_one_epoch", "out = model(images, mask=True)")],
                      "TypeError: forward() got an unexpected keyword argument 'mask'", before="Epoch: [0]\n")
    assert _diag(clf, text)[0] == "semantic_error"


def test_a_trainer_s_own_interrupt_report_is_the_user_s_ctrl_c(clf: Classifier) -> None:
    # README O4: "Training interrupted by user" (a script's or trainer's report of a caught KeyboardInterrupt)
    text = "Epoch 3: 45%|####5     | 120/266 [01:02<01:15, loss=0.41]\nTraining interrupted by user"
    d = clf.classify_text(text)  # the excerpt classifier (a whole log ending so is a stop the reader leaves unknown)
    assert (d.category, d.origin, d.rule_id) == ("preempted", "user", "user-interrupt")


def test_a_whole_log_stopped_by_the_user_s_caught_ctrl_c_is_preempted_by_the_user(clf: Classifier) -> None:
    # README O4: the stop's own line names the sender; a stop that names none stays unknown (O1, O3)
    bars = "".join(f"Epoch 3: {k}%|####      | {k * 2}/200 [00:0{k % 10}<00:22, loss=0.41]\n" for k in range(10, 50, 10))
    assert _diag(clf, bars + "Training interrupted by user\n") == ("preempted", "user", "user-interrupt")
    assert _diag(clf, bars)[:2] == ("unknown", "unknown")

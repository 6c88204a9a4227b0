"""Round 24 (category and origin): a DataLoader that cannot send a locally defined object to its
spawned workers (the parent's pickling error and the child's empty pipe), and a JVM too old for
the classes it is asked to run. Each excerpt is small, written for the test in the library's
format (cited in each test), not copied from a log."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.classifier import Classifier, default_classifier
from gpulens.diagnosis.logread import diagnose_text


@pytest.fixture(scope="module")
def clf() -> Classifier:
    return default_classifier()


def _diagnose(lines: list[str], clf: Classifier) -> tuple[str, str, str | None]:
    d = diagnose_text("\n".join(lines), clf).diagnosis
    return d.category, d.origin, d.rule_id


_EPOCH = "Epoch 1 [Train]:   0%|          | 0/500 [00:00<?, ?it/s]"

#: CPython 3.12 multiprocessing/popen_spawn_win32.py Popen.__init__ -> reduction.dump ->
#: ForkingPickler.dump, reached when a DataLoader (torch/utils/data/dataloader.py
#: _MultiProcessingDataLoaderIter.__init__, w.start()) starts its workers.
_PARENT = [
    "Traceback (most recent call last):",
    '  File "D:\\proj\\tune.py", line 40, in <module>',
    "    for clip, y in loader:",
    '  File "D:\\proj\\venv\\Lib\\site-packages\\torch\\utils\\data\\dataloader.py", line 1040, in __init__',
    "    w.start()",
    '  File "C:\\Python312\\Lib\\multiprocessing\\popen_spawn_win32.py", line 95, in __init__',
    "    reduction.dump(process_obj, to_child)",
    '  File "C:\\Python312\\Lib\\multiprocessing\\reduction.py", line 60, in dump',
    "    ForkingPickler(file, protocol).dump(obj)",
    "AttributeError: Can't pickle local object 'run.<locals>.Clips'",
]

#: CPython 3.12 multiprocessing/spawn.py spawn_main -> _main (self = reduction.pickle.load(from_parent)),
#: with 3.11+'s caret line under the failing call.
_CHILD = [
    "Traceback (most recent call last):",
    '  File "<string>", line 1, in <module>',
    '  File "C:\\Python312\\Lib\\multiprocessing\\spawn.py", line 132, in _main',
    "    self = reduction.pickle.load(from_parent)",
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    "EOFError: Ran out of input",
]


def test_spawned_childs_empty_pipe_after_the_parents_pickling_error_is_no_damaged_checkpoint(clf: Classifier) -> None:
    cat, origin, rule = _diagnose([_EPOCH, *_PARENT, "Using device: cuda", *_CHILD], clf)
    assert (cat, origin) == ("semantic_error", "user")
    assert rule in {"r24-mp-spawn-child-eof", "r24-mp-pickle-local-object"}


def test_spawned_childs_empty_pipe_on_python_before_3_11(clf: Classifier) -> None:
    child = [x for x in _CHILD if "^^^" not in x]
    assert _diagnose([_EPOCH, *child], clf)[:2] == ("semantic_error", "user")


def test_parents_local_object_pickling_error_alone(clf: Classifier) -> None:
    assert _diagnose([_EPOCH, *_PARENT], clf) == ("semantic_error", "user", "r24-mp-pickle-local-object")


def test_empty_checkpoint_file_is_still_a_checkpoint_error(clf: Classifier) -> None:
    # torch/serialization.py _legacy_load -> pickle_module.load on an empty file: not a spawned child
    lines = ["Traceback (most recent call last):", '  File "eval.py", line 12, in <module>',
             "    state = torch.load(args.ckpt)",
             '  File "/env/lib/python3.10/site-packages/torch/serialization.py", line 1040, in _legacy_load',
             "    magic_number = pickle_module.load(f, **pickle_load_args)", "EOFError: Ran out of input"]
    assert _diagnose(lines, clf)[0] == "checkpoint_error"


@pytest.mark.parametrize("message", [
    # OpenJDK 9+ hotspot classFileParser.cpp (and 8u builds that carry the same wording)
    'Exception in thread "main" java.lang.UnsupportedClassVersionError: org/x/eval/Scorer has been compiled by a more '
    "recent version of the Java Runtime (class file version 61.0), this version of the Java Runtime only recognizes "
    "class file versions up to 52.0",
    # older JDK 7/8 builds
    'Exception in thread "main" java.lang.UnsupportedClassVersionError: org/x/eval/Scorer : Unsupported major.minor '
    "version 52.0",
])
def test_jvm_too_old_for_the_jar_is_an_import_error_even_under_the_pythons_later_exception(
        message: str, clf: Classifier) -> None:
    # the Python job runs a Java evaluator whose output it then parses: the JVM's error comes first
    lines = ["2024-05-01 10:00:00,000 - INFO - trainer - Validating",
             "Error: A JNI error has occurred, please check your installation and try again", message,
             "\tat java.lang.ClassLoader.defineClass1(Native Method)",
             "\tat sun.launcher.LauncherHelper.checkAndLoadMain(LauncherHelper.java:632)",
             "Traceback (most recent call last):", '  File "train.py", line 217, in <module>',
             "    metrics = trainer.train()", '  File "/home/u/parser/eval/commands.py", line 78, in evaluate',
             "    m = re.search(regex, result_lines[line_number])", "IndexError: list index out of range"]
    assert _diagnose(lines, clf) == ("import_error", "user", "r24-java-unsupported-class-version")


#: Pillow 10 PIL/ImageFile.py _save: ``fh = fp.fileno()`` raises AttributeError on PngImagePlugin's
#: ``_idat`` wrapper, caught there to write through a buffer instead; an exception raised while it
#: is handled shows it as "During handling of the above exception".
_PIL_CAUGHT = [
    "Traceback (most recent call last):",
    '  File "/env/lib/python3.10/site-packages/PIL/ImageFile.py", line 547, in _save',
    "    fh = fp.fileno()",
    "AttributeError: '_idat' object has no attribute 'fileno'",
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/home/u/proj/train.py", line 52, in plot',
    "    plt.savefig(out)",
    '  File "/env/lib/python3.10/site-packages/PIL/ImageFile.py", line 570, in _encode_tile',
    "    errcode, data = encoder.encode(bufsize)[1:]",
]


def test_outside_sigterm_during_a_plot_save_is_no_checkpoint_error(clf: Classifier) -> None:
    # torch/utils/data/_utils/signal_handling.py handler -> _error_if_any_worker_fails
    # ("DataLoader worker (pid N) is killed by signal: Terminated."), Lightning's
    # "[rank: N] Received SIGTERM: 15" (lightning_fabric/plugins/environments/slurm.py / signal connector)
    # (torch >= 2.2 prefixes a DDP rank's traceback with "[rankN]: ")
    rank0 = [f"[rank0]: {x}" if x else x for x in [
        *_PIL_CAUGHT,
        '  File "/env/lib/python3.10/site-packages/torch/utils/data/_utils/signal_handling.py", line 66, in handler',
        "    _error_if_any_worker_fails()",
        "RuntimeError: DataLoader worker (pid 2586412) is killed by signal: Terminated. "]]
    lines = ["Epoch 1:   7%|▋         | 66/934 [01:57<25:42,  0.56it/s, v_num=0]",
             "[rank: 1] Received SIGTERM: 15", *rank0]
    cat, _, rule = _diagnose(lines, clf)
    assert cat == "preempted"
    assert rule != "model-save-raised"


def test_a_model_save_that_raises_is_still_a_checkpoint_error(clf: Classifier) -> None:
    # torch/serialization.py save -> _save: a pickling failure of the saved object (README C3)
    lines = ["Traceback (most recent call last):", '  File "train.py", line 90, in <module>',
             "    torch.save(model, path)",
             '  File "/env/lib/python3.10/site-packages/torch/serialization.py", line 862, in _save',
             "    pickler.dump(obj)",
             "AttributeError: Can't pickle local object 'build.<locals>.<lambda>'"]
    assert _diagnose(lines, clf)[:2] == ("checkpoint_error", "user")


def _oom(procs: str, total: str = "79.15 GiB") -> str:
    # torch >= 2.1 c10/cuda/CUDACachingAllocator.cpp: one sentence per process NVML lists, in its order
    return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total capacity of "
            f"{total} of which 16.12 MiB is free. {procs} Of the allocated memory 1.47 GiB is allocated by PyTorch, "
            "and 5.57 MiB is reserved by PyTorch but unallocated.")


_OWN_SMALL = "Including non-PyTorch memory, this process has 1.97 GiB memory in use."
_OTHER_BIG = "Process 130962 has 77.15 GiB memory in use."
_EVAL = ["eval ppl on wikitext2", "Traceback (most recent call last):", '  File "run.py", line 80, in <module>',
         "    ppl = compute_perplexity(model, data)"]


@pytest.mark.parametrize("procs", [f"{_OWN_SMALL} {_OTHER_BIG}", f"{_OTHER_BIG} {_OWN_SMALL}"])
def test_gpu_almost_all_held_by_an_unnamed_process_leaves_the_origin_unknown(procs: str, clf: Classifier) -> None:
    # README O1/C7: torch names the other process by id only; the job had a sliver of the device
    assert _diagnose([*_EVAL, _oom(procs)], clf)[:2] == ("gpu_oom", "unknown")


def test_the_jobs_own_large_share_keeps_the_origin_user(clf: Classifier) -> None:
    procs = "Process 12909 has 21.25 GiB memory in use. Including non-PyTorch memory, this process has 10.44 GiB memory in use."
    assert _diagnose([*_EVAL, _oom(procs, "31.74 GiB")], clf)[:2] == ("gpu_oom", "user")


def test_two_launches_of_the_job_on_one_gpu_keep_the_origin_user(clf: Classifier) -> None:
    # each launch's message names the other's memory, which the other's own message reports as "this
    # process"; the two launches print into one file at once
    first = _oom("Including non-PyTorch memory, this process has 74.00 GiB memory in use. "
                 "Process 1897572 has 2.00 GiB memory in use.")
    second = _oom("Process 1898657 has 74.00 GiB memory in use. "
                  "Including non-PyTorch memory, this process has 2.00 GiB memory in use.")
    assert _diagnose([*_EVAL, "eval ppl on wikitext2", first, *_EVAL[1:], second], clf)[:2] == ("gpu_oom", "user")


def test_indexing_an_empty_hf_dataset_is_an_empty_data_set(clf: Classifier) -> None:
    # datasets src/datasets/formatting/formatting.py _check_valid_index_key, after a map whose every record failed
    lines = ["Map (num_proc=4): 100%|██████████| 40/40 [00:03<00:00, 12.1 examples/s]",
             "Traceback (most recent call last):", '  File "/home/u/prep.py", line 90, in <module>',
             "    sample = processed[0]",
             '  File "/env/lib/python3.12/site-packages/datasets/arrow_dataset.py", line 3156, in __getitem__',
             "    return self._getitem(key)",
             '  File "/env/lib/python3.12/site-packages/datasets/formatting/formatting.py", line 552, in _check_valid_index_key',
             '    raise IndexError(f"Invalid key: {key} is out of bounds for size {size}")',
             "IndexError: Invalid key: 0 is out of bounds for size 0"]
    assert _diagnose(lines, clf) == ("incorrect_input", "user", "r24-hf-datasets-index-into-empty")


def test_an_index_past_the_end_of_a_nonempty_hf_dataset_is_not_an_empty_data_set(clf: Classifier) -> None:
    lines = ["Traceback (most recent call last):", '  File "/home/u/prep.py", line 90, in <module>',
             "    sample = processed[500]", "IndexError: Invalid key: 500 is out of bounds for size 120"]
    assert _diagnose(lines, clf)[2] != "r24-hf-datasets-index-into-empty"


def test_stylegan_snapshot_of_another_configuration_is_a_checkpoint_mismatch(clf: Classifier) -> None:
    # dnnlib/tflib/tfutil.py set_vars feeding "<var>/new_value:0"; TF 1.x client/session.py _run's check
    lines = ["Loading networks from \"results/00012/network-snapshot-000200.pkl\"...",
             "Traceback (most recent call last):", '  File "train.py", line 500, in main',
             "    G.copy_vars_from(rG)",
             '  File "/home/u/sg2/dnnlib/tflib/tfutil.py", line 226, in set_vars', "    run(ops, feed_dict)",
             '  File "/env/lib/python3.7/site-packages/tensorflow_core/python/client/session.py", line 1156, in _run',
             "    (np_val.shape, subfeed_t.name, str(subfeed_t.get_shape())))",
             "ValueError: Cannot feed value of shape (3, 3, 256, 128) for Tensor 'G_synthesis/128x128/Conv0_up/weight/"
             "new_value:0', which has shape '(3, 3, 256, 256)'"]
    assert _diagnose(lines, clf) == ("checkpoint_error", "user", "r24-tflib-set-vars-shape-mismatch")


@pytest.mark.parametrize("code,error", [
    ("    im = cv2.imread(im).astype('float32')", "AttributeError: 'NoneType' object has no attribute 'astype'"),
    ("    h, w = cv2.imread(path)[:2]", "TypeError: 'NoneType' object is not subscriptable"),
])
def test_an_image_cv2_imread_could_not_read_is_input_data(code: str, error: str, clf: Classifier) -> None:
    # OpenCV imgcodecs imread returns None (no exception) for a missing or unreadable file
    lines = ["Exception in thread Thread-2:", "Traceback (most recent call last):",
             '  File "/env/lib/python3.8/site-packages/paddle/io/dataloader/fetcher.py", line 121, in fetch',
             "    data.append(self.dataset[idx])", '  File "/home/u/seg/datasets/dataset.py", line 153, in __getitem__',
             "    im, label = self.transforms(im=image_path, label=label_path)",
             '  File "/home/u/seg/transforms/transforms.py", line 57, in __call__', code, error]
    assert _diagnose(lines, clf) == ("incorrect_input", "data", "r24-cv2-imread-none")


def test_a_none_attribute_error_elsewhere_is_not_an_image_read(clf: Classifier) -> None:
    lines = ["Traceback (most recent call last):", '  File "train.py", line 40, in <module>',
             "    img = cv2.imread(path)", "    out = model(batch).astype('float32')",
             "AttributeError: 'NoneType' object has no attribute 'astype'"]
    assert _diagnose(lines, clf)[2] != "r24-cv2-imread-none"


def test_an_error_in_the_collate_function_is_input_data(clf: Classifier) -> None:
    # torch/utils/data/_utils/fetch.py _MapDatasetFetcher.fetch -> self.collate_fn(data) (num_workers=0)
    lines = ["  0%|          | 0/1500 [00:00<?, ?it/s]Traceback (most recent call last):",
             '  File "/home/u/ft.py", line 240, in train', "    trainer.train()",
             '  File "/env/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 757, in _next_data',
             "    data = self._dataset_fetcher.fetch(index)  # may raise StopIteration",
             '  File "/env/lib/python3.10/site-packages/torch/utils/data/_utils/fetch.py", line 55, in fetch',
             "    return self.collate_fn(data)", '  File "/home/u/ft.py", line 148, in __call__',
             "    labels = [f['labels'] for f in features]", "KeyError: 'labels'"]
    assert _diagnose(lines, clf)[:3] == ("incorrect_input", "user", "r24-collate-fn-raised")


def test_an_error_in_the_model_after_collation_is_not_the_collators(clf: Classifier) -> None:
    lines = ["Traceback (most recent call last):", '  File "/home/u/ft.py", line 240, in train',
             "    loss = model(**batch).loss", '  File "/home/u/model.py", line 30, in forward',
             "    h = self.proj(x)", "TypeError: forward() missing 1 required positional argument: 'mask'"]
    assert _diagnose(lines, clf)[2] != "r24-collate-fn-raised"


def test_stylegans_tfrecord_reader_rejecting_the_data_folder_is_input_data(clf: Classifier) -> None:
    # stylegan2-ada (TF) training/dataset.py TFRecordDataset.__init__: bare asserts on the .tfrecords folder
    lines = ["Loading dataset...", "Traceback (most recent call last):", '  File "train.py", line 520, in main',
             "    training_set = dataset.load_dataset(tfrecord_dir=args.data, max_label_size='full')",
             '  File "/home/u/sg2/training/dataset.py", line 231, in load_dataset',
             "    mirror_augment=mirror_augment, repeat=repeat, shuffle=shuffle)",
             '  File "/home/u/sg2/training/dataset.py", line 73, in __init__',
             "    assert all(shape[1] == shape[2] for shape in tfr_shapes)", "AssertionError"]
    assert _diagnose(lines, clf) == ("incorrect_input", "data", "r24-stylegan-tfrecord-dataset-assert")


def test_a_bare_assert_of_the_jobs_own_settings_is_not_the_data_folders(clf: Classifier) -> None:
    lines = ["Traceback (most recent call last):", '  File "/home/u/sg2/training/networks.py", line 40, in __init__',
             "    assert resolution >= 4", "AssertionError"]
    assert _diagnose(lines, clf)[2] != "r24-stylegan-tfrecord-dataset-assert"


def test_paddles_operator_error_in_user_code_beats_the_executors_abort_after_it(clf: Classifier) -> None:
    # paddle/fluid/framework/op_call_stack.cc InsertCallStackInfo ("In user code:", the frames, the operator's
    # error indented); phi DenseTensor::place's PreconditionNotMet; then the executor's destructor aborts
    # (glog's failure signal handler) as the process unwinds
    lines = ["step 0, loss 11.02", "Traceback (most recent call last):", '  File "run_pretrain.py", line 428, in do_train',
             "    loss_return = exe.run(main_program, feed=batch)",
             '  File "/env/lib/python3.8/site-packages/paddle/fluid/executor.py", line 1062, in _run_parallel',
             "    tensors = exe.run(fetch_var_names, return_merged)._move_to_list()",
             "RuntimeError: In user code:", "",
             '    File "run_pretrain.py", line 317, in do_train', "      scores = model(input_ids)",
             '    File "/env/lib/python3.8/site-packages/paddle/fluid/framework.py", line 2305, in __init__',
             "      for frame in traceback.extract_stack():", "",
             "    PreconditionNotMetError: Tensor not initialized yet when Tensor::place() is called.",
             "      [Hint: holder_ should not be null.] (at /paddle/paddle/fluid/framework/tensor.h:210)",
             "      [operator < fill_any_like > error]",
             "terminate called after throwing an instance of 'paddle::platform::EnforceNotMet'",
             "  what():  (External) CUDA error(900), operation not permitted when stream is capturing. ",
             "", "--------------------------------------", "C++ Traceback (most recent call last):",
             "--------------------------------------", "0   paddle::framework::ParallelExecutor::~ParallelExecutor()",
             "1   paddle::platform::EnforceNotMet::EnforceNotMet(paddle::platform::ErrorSummary const&, char const*, int)",
             "", "----------------------", "Error Message Summary:", "----------------------",
             "FatalError: `Process abort signal` is detected by the operating system.",
             "  [TimeInfo: *** Aborted at 1650000000 (unix time) try \"date -d @1650000000\" if you are using GNU date ***]",
             "  [SignalInfo: *** SIGABRT (@0x1001) received by PID 4097 (TID 0x7f5002fe4740) from PID 4097 ***]"]
    assert _diagnose(lines, clf) == ("semantic_error", "user", "r24-paddle-tensor-not-initialized")

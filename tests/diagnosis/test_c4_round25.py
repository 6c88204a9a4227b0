"""Round 25 (README C4): an error whose message could be the data's or the code's (a KeyError on a field, an
IndexError, ATen's shape checks) is decided by where it was raised, read from the frames of the traceback that
ended the process (raisedin.py): in data-reading code (a DataLoader's fetch, a Dataset's ``__getitem__``, a
collate_fn, a ``datasets`` map function, a data library's reader) it is incorrect_input; in model, trainer or
argument code it stays semantic_error; without frames nothing changes. The excerpts are written by hand in the
formats CPython prints (Lib/traceback.py) with the library frames of torch, datasets, torchvision and
transformers as their sources name them."""

from __future__ import annotations

import pytest

from gpulens.diagnosis.logread.cause.raisedin import CODE, DATA, frames_above, raised_in_frames
from gpulens.diagnosis.logread.whole import diagnose_text

_SP = "/opt/env/lib/python3.11/site-packages"
_HEAD = ["Loading data ...", "Traceback (most recent call last):",
         '  File "/home/u/proj/train.py", line 210, in <module>', "    main(args)"]


def _frame(path: str, line: int, func: str, code: str) -> list[str]:
    return [f'  File "{path}", line {line}, in {func}', f"    {code}"]


def _log(*frames: list[str], exc: str) -> str:
    return "\n".join([*_HEAD, *(ln for f in frames for ln in f), exc])


#: datasets/arrow_dataset.py Dataset.map -> _map_single -> iter_outputs -> apply_function, the job's function,
#: then datasets/formatting/formatting.py LazyDict.__getitem__ looking the field up in the record.
_MAP = (_frame("/home/u/proj/train.py", 150, "main", "ds = ds.map(to_chat)"),
        _frame(f"{_SP}/datasets/arrow_dataset.py", 3074, "map", "for rank, done, content in Dataset._map_single(**kw):"),
        _frame(f"{_SP}/datasets/arrow_dataset.py", 3492, "_map_single", "for i, example in iter_outputs(shard_iterable):"),
        _frame(f"{_SP}/datasets/arrow_dataset.py", 3466, "iter_outputs", "yield i, apply_function(example, i)"),
        _frame(f"{_SP}/datasets/arrow_dataset.py", 3389, "apply_function", "processed = function(*fn_args)"),
        _frame("/home/u/proj/train.py", 98, "to_chat", "return {'prompt': ex['question']}"),
        _frame(f"{_SP}/datasets/formatting/formatting.py", 280, "__getitem__", "value = self.data[key]"))


def test_a_key_error_raised_in_a_datasets_map_function_is_incorrect_input() -> None:
    d = diagnose_text(_log(*_MAP, exc="KeyError: 'question'")).diagnosis
    assert (d.category, d.origin) == ("incorrect_input", "data")
    assert "data-reading code" in (d.reason or "")


#: torch/utils/data/dataloader.py _SingleProcessDataLoaderIter._next_data -> _utils/fetch.py
#: _MapDatasetFetcher.fetch -> the job's Dataset.__getitem__ (num_workers=0: no "Caught ... in DataLoader worker").
_FETCH = (_frame("/home/u/proj/train.py", 120, "train_epoch", "for batch in loader:"),
          _frame(f"{_SP}/torch/utils/data/dataloader.py", 701, "__next__", "data = self._next_data()"),
          _frame(f"{_SP}/torch/utils/data/dataloader.py", 757, "_next_data", "data = self._dataset_fetcher.fetch(index)"),
          _frame(f"{_SP}/torch/utils/data/_utils/fetch.py", 52, "fetch", "data = [self.dataset[idx] for idx in idxs]"))


def test_an_index_error_in_the_jobs_dataset_read_by_a_single_process_loader_is_incorrect_input() -> None:
    own = _frame("/home/u/proj/data.py", 44, "__getitem__", "label = self.labels[idx]")
    d = diagnose_text(_log(*_FETCH, own, exc="IndexError: list index out of range")).diagnosis
    assert d.category == "incorrect_input"


#: torch/_utils.py ExceptionWrapper.reraise: "<Type>: Caught <Type> in DataLoader worker process N." then
#: "Original Traceback (most recent call last):" and the worker's frames (worker.py _worker_loop, fetch.py
#: fetch, the Dataset, torchvision's Normalize); the message is ATen's broadcast check (aten-shape-checks).
_WORKER = ["Traceback (most recent call last):",
           *_frame("/home/u/proj/train.py", 120, "train_epoch", "for images, labels in loader:"),
           *_frame(f"{_SP}/torch/utils/data/dataloader.py", 1491, "_process_data", "data.reraise()"),
           *_frame(f"{_SP}/torch/_utils.py", 719, "reraise", "raise exception"),
           "RuntimeError: Caught RuntimeError in DataLoader worker process 0.",
           "Original Traceback (most recent call last):",
           *_frame(f"{_SP}/torch/utils/data/_utils/worker.py", 351, "_worker_loop", "data = fetcher.fetch(index)"),
           *_frame(f"{_SP}/torch/utils/data/_utils/fetch.py", 52, "fetch", "data = [self.dataset[idx] for idx in idxs]"),
           *_frame("/home/u/proj/data.py", 61, "__getitem__", "img = self.transform(img)"),
           *_frame(f"{_SP}/torchvision/transforms/transforms.py", 277, "forward", "return F.normalize(tensor, self.mean)"),
           *_frame(f"{_SP}/torchvision/transforms/_functional_tensor.py", 926, "normalize", "return tensor.sub_(mean)"),
           "RuntimeError: The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 0"]


def test_a_shape_check_raised_in_a_dataloader_worker_is_incorrect_input() -> None:
    d = diagnose_text("\n".join(["Epoch 0", *_WORKER])).diagnosis
    assert d.category == "incorrect_input"


def test_the_same_shape_check_raised_in_a_models_forward_stays_semantic() -> None:
    model = (_frame("/home/u/proj/train.py", 130, "train_epoch", "out = model(x)"),
             _frame(f"{_SP}/torch/nn/modules/module.py", 1750, "_call_impl", "return forward_call(*args, **kwargs)"),
             _frame("/home/u/proj/model.py", 88, "forward", "h = h + self.pos"))
    d = diagnose_text(_log(*model, exc="RuntimeError: The size of tensor a (4) must match the size of tensor b "
                                        "(3) at non-singleton dimension 1")).diagnosis
    assert d.category == "semantic_error"


def test_a_key_error_in_a_models_forward_stays_semantic() -> None:
    model = (_frame("/home/u/proj/train.py", 130, "train_epoch", "out = model(batch)"),
             _frame(f"{_SP}/torch/nn/modules/module.py", 1750, "_call_impl", "return forward_call(*args, **kwargs)"),
             _frame("/home/u/proj/model.py", 70, "forward", "emb = self.table[batch['kind']]"),
             _frame("/home/u/proj/model.py", 20, "__getitem__", "return self.rows[key]"))
    d = diagnose_text(_log(*model, exc="KeyError: 'kind'")).diagnosis
    assert d.category == "semantic_error"


def test_a_key_error_of_the_standard_librarys_mapping_stays_semantic() -> None:
    env = (_frame("/home/u/proj/train.py", 30, "setup", "rank = int(os.environ['LOCAL_RANK'])"),
           _frame("/usr/lib/python3.10/os.py", 680, "__getitem__", "raise KeyError(key) from None"))
    d = diagnose_text(_log(*env, exc="KeyError: 'LOCAL_RANK'")).diagnosis
    assert d.category == "semantic_error"


def test_a_tokenizers_own_check_inside_a_map_function_decides_nothing() -> None:
    tok = _frame(f"{_SP}/transformers/tokenization_utils_base.py", 2025, "get_chat_template", "raise ValueError(")
    exc = "ValueError: Cannot use apply_chat_template() because tokenizer.chat_template is not set"
    d = diagnose_text(_log(*_MAP[:-1], tok, exc=exc)).diagnosis
    assert d.category == "semantic_error"


def test_without_frames_nothing_changes() -> None:
    d = diagnose_text("\n".join(["Loading data ...", "KeyError: 'question'"])).diagnosis
    assert d.category != "incorrect_input"


@pytest.mark.parametrize(("frames", "want"), [
    ([("/usr/lib/python3.10/argparse.py", "error")], CODE),
    ([(f"{_SP}/transformers/hf_argparser.py", "parse_args_into_dataclasses")], CODE),
    ([(f"{_SP}/torch/utils/data/_utils/collate.py", "default_collate")], DATA),
    ([("/home/u/proj/data.py", "my_collate")], None),
    ([("/home/u/proj/train.py", "build"), ("/home/u/proj/registry.py", "__getitem__")], None),
    ([(f"{_SP}/PIL/Image.py", "open")], DATA),
    ([("/home/u/proj/model.py", "forward"), (f"{_SP}/PIL/Image.py", "open")], CODE),
    ([(f"{_SP}/multiprocess/pool.py", "get")], None),
    ([("/home/u/proj/train.py", "main")], None),
    ([], None),
])
def test_where_the_frames_say_it_was_raised(frames: list[tuple[str, str]], want: str | None) -> None:
    assert raised_in_frames(frames) == want


def test_frames_are_read_up_to_the_tracebacks_head_behind_a_rank_prefix() -> None:
    lines = ["[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "/home/u/a.py", line 3, in <module>', "[rank1]:     main()",
             '[rank1]:   File "C:\\u\\b.py", line 9, in main', "[rank1]:     x[1]", "[rank1]: IndexError: boom"]
    assert frames_above(lines, 5) == [("/home/u/a.py", "<module>"), ("C:/u/b.py", "main")]


def test_module_says_its_job() -> None:
    from tests.diagnosis.logread_structure import assert_part

    assert_part("raisedin")


def test_paddles_fetcher_is_a_loader_too() -> None:
    fetch = [(f"{_SP}/paddle/io/dataloader/fetcher.py", "fetch"), ("/home/u/proj/ds.py", "__getitem__"),
             ("/home/u/proj/ds.py", "parse")]
    assert raised_in_frames(fetch) == DATA
    assert raised_in_frames([(f"{_SP}/paddle/fluid/dataloader/fetcher.py", "fetch")]) == DATA


def test_indexing_a_data_set_from_the_jobs_own_code_is_not_a_loader() -> None:
    own = [("/home/u/proj/train.py", "main"), (f"{_SP}/datasets/arrow_dataset.py", "__getitem__"),
           (f"{_SP}/datasets/arrow_dataset.py", "_getitem"), (f"{_SP}/datasets/formatting/formatting.py",
                                                             "_check_valid_index_key")]
    assert raised_in_frames(own) is None
    subset = [("/home/u/proj/train.py", "main"), (f"{_SP}/torch/utils/data/dataset.py", "__getitem__")]
    assert raised_in_frames(subset) is None


def test_hydras_wrapper_of_the_whole_main_is_not_argument_code() -> None:
    frames = [(f"{_SP}/hydra/_internal/utils.py", "run_and_report"), (f"{_SP}/hydra/core/utils.py", "run_job"),
              ("/home/u/proj/train.py", "main"), (f"{_SP}/PIL/Image.py", "open")]
    assert raised_in_frames(frames) == DATA
    assert raised_in_frames([(f"{_SP}/hydra/_internal/config_loader_impl.py", "_apply_overrides_to_config")]) == CODE


#: numpy's reshape check, raised in the job's model code: "cannot reshape array" reads as a truncated array
#: file by its message (data-malformed) but was raised in a module's forward (README C4: semantic_error).
def test_a_reshape_error_raised_in_a_models_forward_is_semantic() -> None:
    model = (_frame("/home/u/proj/train.py", 130, "train_epoch", "out = model(x)"),
             _frame(f"{_SP}/torch/nn/modules/module.py", 1750, "_call_impl", "return forward_call(*args, **kwargs)"),
             _frame("/home/u/proj/model.py", 52, "forward", "grid = np.asarray(feats).reshape(8, 8)"))
    d = diagnose_text(_log(*model, exc="ValueError: cannot reshape array of size 48 into shape (8,8)")).diagnosis
    assert (d.category, d.origin) == ("semantic_error", "user")
    assert "README C4" in (d.reason or "")


#: A malformed DeepSpeed JSON config: deepspeed/runtime/config.py DeepSpeedConfig.__init__ json.load()s it (C2: the
#: job's configuration, semantic_error), not a data file.
def test_a_json_error_raised_reading_deepspeeds_config_is_semantic() -> None:
    ds = (_frame("/home/u/proj/train.py", 60, "main", "engine, *_ = deepspeed.initialize(config=args.ds)"),
          _frame(f"{_SP}/deepspeed/runtime/config.py", 690, "__init__", "self._param_dict = json.load(f)"),
          _frame("/usr/lib/python3.10/json/__init__.py", 293, "load", "return loads(fp.read(),"),
          _frame("/usr/lib/python3.10/json/decoder.py", 355, "raw_decode", "raise JSONDecodeError(\"Expecting value\")"))
    d = diagnose_text(_log(*ds, exc="json.decoder.JSONDecodeError: Expecting ',' delimiter: line 12 column 5 "
                                     "(char 301)")).diagnosis
    assert d.category == "semantic_error"


def test_the_same_json_error_reading_a_data_file_in_a_dataset_stays_incorrect_input() -> None:
    own = (_frame("/home/u/proj/data.py", 30, "__getitem__", "rec = json.loads(self.lines[idx])"),
           _frame("/usr/lib/python3.10/json/decoder.py", 355, "raw_decode", "raise JSONDecodeError(\"Expecting value\")"))
    d = diagnose_text(_log(*_FETCH, *own, exc="json.decoder.JSONDecodeError: Expecting value: line 1 column 1 "
                                              "(char 0)")).diagnosis
    assert d.category == "incorrect_input"


def test_pandas_parsers_decide_nothing_a_table_may_be_the_jobs_own_output() -> None:
    frames = [("/home/u/proj/report.py", "main"), (f"{_SP}/pandas/io/parsers/readers.py", "read_csv")]
    assert raised_in_frames(frames) is None


def test_a_forward_that_a_loader_ran_is_both() -> None:
    frames = [(f"{_SP}/torch/utils/data/_utils/fetch.py", "fetch"), ("/home/u/proj/data.py", "__getitem__"),
              (f"{_SP}/torch/nn/modules/module.py", "_call_impl"), ("/home/u/proj/aug.py", "forward")]
    assert raised_in_frames(frames) is None

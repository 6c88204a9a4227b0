"""Where the exception that ended a process was raised, read from its traceback's frames (README C4): in
data-reading code (a DataLoader's fetch of a sample, a Dataset's ``__getitem__``, a ``collate_fn``, a
``datasets`` map/filter function, a data library's reader) or in model, trainer or argument code (a module's
``forward``, a loss, ``backward``, an optimizer step, argparse, ``HfArgumentParser``, OmegaConf/Hydra,
DeepSpeed's config checks). C4 decides an error whose message could be either (a ``KeyError`` on a field, an
``IndexError``, a shape check) by this, never by the message.

CPython prints each frame as ``File "<path>", line N, in <function>`` (Lib/traceback.py,
``StackSummary.format_frame_summary``), outermost first. The frames are read from the innermost outwards: the
first frame of a data loader (a DataLoader's fetch, which runs the job's ``__getitem__`` and collate_fn; a
``datasets`` map) says "data"; the first frame of model, trainer or argument code says "code"; a data library's
reader (PIL, torchvision's transforms, torchaudio) says "data" unless model code called it. Frames that
belong to neither (``torch.nn.functional``, ``nn.Module.__call__``, a tokenizer, the job's helpers) decide nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.logread.tracebacks import frame_parts, unprefixed

__all__ = ["CODE", "DATA", "frames_above", "raised_in", "raised_in_frames"]

DATA = "data"
CODE = "code"
#: Lines read up from an exception line for its frames.
_REACH = 400

#: Data loaders: every frame inside them is data-reading code. ``None``: any function of the file.
_LOADERS: tuple[tuple[str, frozenset[str] | None], ...] = (
    # torch/utils/data/_utils/fetch.py _MapDatasetFetcher.fetch (dataset[idx], collate_fn(data)) and
    # _IterableDatasetFetcher.fetch (next(dataset_iter)); worker.py _worker_loop runs fetch in a worker
    ("torch/utils/data/_utils/fetch.py", None),
    ("torch/utils/data/_utils/worker.py", None),
    # torch/utils/data/_utils/collate.py default_collate / collate / collate_tensor_fn
    ("torch/utils/data/_utils/collate.py", None),
    # datasets/arrow_dataset.py Dataset.map -> _map_single -> iter_outputs -> apply_function (the job's
    # function on each record), Dataset.filter. Not Dataset.__getitem__ nor torch's Subset.__getitem__: called
    # by the job's own code (not through a loader's fetch), an index out of range there is the job's indexing.
    ("datasets/arrow_dataset.py", frozenset({"map", "_map_single", "iter_outputs", "apply_function",
                                             "apply_function_on_filtered_inputs", "filter"})),
    # datasets/iterable_dataset.py: the lazy map/filter examples iterables apply the job's function per record
    ("datasets/iterable_dataset.py", None),
    # datasets/formatting/formatting.py LazyDict.__getitem__: a record's field looked up in a map function
    ("datasets/formatting/formatting.py", frozenset({"__getitem__"})),
    # transformers/data/data_collator.py: the collators that turn records into a batch
    ("transformers/data/data_collator.py", None),
    # webdataset/ pipeline.py, filters.py: the sample pipeline a DataLoader iterates
    ("webdataset/", None),
    # torch/utils/data/datapipes/: the DataPipes' map/filter functions applied per sample
    ("torch/utils/data/datapipes/", None),
    # PaddlePaddle's DataLoader: paddle/io/dataloader/fetcher.py _MapDatasetFetcher.fetch (paddle/fluid/dataloader/
    # before 2.5), worker.py _worker_loop, collate.py default_collate_fn
    ("paddle/io/dataloader/fetcher.py", None),
    ("paddle/io/dataloader/worker.py", None),
    ("paddle/io/dataloader/collate.py", None),
    ("paddle/fluid/dataloader/fetcher.py", None),
    ("paddle/fluid/dataloader/worker.py", None),
    ("paddle/fluid/dataloader/collate.py", None),
)
#: Data libraries' readers and per-sample transforms: data unless model code called them (PIL/Image.py open and
#: ImageFile.py load; torchvision/transforms/ and datasets/ and io/; torchaudio load; decord VideoReader;
#: soundfile.py read; librosa/core/audio.py load; albumentations' transforms). Not pandas' parsers: a table the
#: job wrote itself (its results, an earlier stage's output) is read the same way (README C2).
_READERS = ("/PIL/", "torchvision/transforms/", "torchvision/datasets/", "torchvision/io/", "torchaudio/", "decord/",
            "soundfile.py", "librosa/core/audio.py", "albumentations/")
#: Model, trainer and argument code. ``None``: any function of the file.
_CODE: tuple[tuple[str, frozenset[str] | None], ...] = (
    ("torch/_tensor.py", frozenset({"backward"})),  # Tensor.backward
    ("torch/autograd/", None),  # autograd.backward / Function.apply
    ("torch/optim/", None),  # optimizer steps
    ("transformers/trainer.py", frozenset({"training_step", "compute_loss", "prediction_step"})),
    ("transformers/hf_argparser.py", None),  # HfArgumentParser.parse_args_into_dataclasses
    ("transformers/training_args.py", None),  # TrainingArguments.__post_init__ checks
    ("/argparse.py", None),  # ArgumentParser.error
    ("omegaconf/", None),
    # Hydra's config composition, overrides and instantiate (not hydra/_internal/utils.py run_and_report nor
    # hydra/core/utils.py run_job: they wrap the job's whole main, data reading included)
    ("hydra/_internal/config_loader_impl.py", None),
    ("hydra/core/override_parser/", None),
    ("hydra/_internal/instantiate/", None),
    ("deepspeed/runtime/config.py", None),  # DeepSpeedConfig checks
)
#: A function of any file that is model code: a module's forward, a Lightning step, a loss.
_CODE_FUNCS = frozenset({"forward", "training_step", "validation_step", "test_step", "compute_loss"})
#: A transformers tokenizer's or processor's own checks (tokenization_utils_base.py get_chat_template "Cannot use
#: apply_chat_template() because tokenizer.chat_template is not set", _get_padding_truncation_strategies "Asking to
#: pad but the tokenizer does not have a padding token"; processing_utils.py, image_processing_*.py): raised there,
#: an error is about the tokenizer's setting as often as about the record, so it decides nothing (C4: ambiguous).
_OWN_CHECKS = re.compile(r"transformers/(?!data/data_collator\.py)")
#: Where a pool or a DataLoader re-raises an exception raised elsewhere (multiprocess(ing)/pool.py
#: ApplyResult.get "raise self._value"; concurrent/futures/_base.py Future.__get_result; torch/_utils.py
#: ExceptionWrapper.reraise): the frames above it do not show where it was raised.
_RERAISE = ("multiprocess/pool.py", "multiprocessing/pool.py", "concurrent/futures/_base.py", "torch/_utils.py")


def frames_above(lines: Sequence[str], i: int) -> list[tuple[str, str]]:
    """The frames (file with "/" separators, function) of the traceback whose exception line is ``i``, outermost
    first: the frame lines above it up to its head (the first unindented line that is not a frame)."""
    found: list[tuple[str, str]] = []
    for k in range(i - 1, max(-1, i - _REACH), -1):
        parts = frame_parts(lines[k])
        text = unprefixed(lines[k])
        if parts is not None:
            found.append((parts[0].replace("\\", "/"), parts[2]))
        elif text.strip() and not text[:1].isspace():
            break
    return found[::-1]


def _zone(file: str, func: str) -> str | None:
    """``"loader"``, ``"reader"``, ``CODE`` or None for one frame. The job's own ``__getitem__`` or collate
    function is none of them by itself: a DataLoader reaches it through its fetch (a loader), and one the job's
    code calls directly may be a registry's or a config's lookup as well as a Dataset's."""
    if any(key in file and (funcs is None or func in funcs) for key, funcs in _LOADERS):
        return "loader"
    if any(key in file for key in _READERS):
        return "reader"
    if func in _CODE_FUNCS or any(key in file and (funcs is None or func in funcs) for key, funcs in _CODE):
        return CODE
    return None


def raised_in_frames(frames: Sequence[tuple[str, str]]) -> str | None:
    """:data:`DATA`, :data:`CODE` or None (neither shown) for frames listed outermost first (module doc)."""
    inner: str | None = None
    for k, (file, func) in enumerate(reversed(frames)):
        zone = _zone(file, func)
        if zone == "loader":
            return DATA
        if zone == CODE:  # a module's forward that a loader ran (a Dataset's nn.Module transform) is both
            return None if any(_zone(*f) == "loader" for f in frames[:len(frames) - 1 - k]) else CODE
        if k == 0 and (_OWN_CHECKS.search(file) or any(key in file for key in _RERAISE)):
            return None
        inner = inner or zone
    return DATA if inner is not None else None


def raised_in(lines: Sequence[str], i: int) -> str | None:
    """Where the exception on line ``i`` was raised (:func:`raised_in_frames` of :func:`frames_above`)."""
    return raised_in_frames(frames_above(lines, i))

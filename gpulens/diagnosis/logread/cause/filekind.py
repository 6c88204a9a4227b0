"""What a file the job could not read or write is (README C2, C3): the category of a file error comes from
what the file is, not from the exception's type or the message's wording. Input data is ``incorrect_input``,
model state (a checkpoint, pretrained weights, a model's config, tokenizer or adapter files, a Hub model
repository; saving it too, C3) ``checkpoint_error``, the job's own configuration ``semantic_error``.

Two kinds of evidence, read for the exception that ended the process (the answer's first evidence line):

* the frames of its traceback (CPython's ``File "<path>", line N, in <function>``, Lib/traceback.py), read
  from the innermost outwards. A frame of a library that owns a kind of file (transformers' ``from_pretrained``,
  a trainer's checkpoint code, ``datasets.load_dataset``, a DataLoader's fetch, OmegaConf/Hydra) is strong and
  decides; a low-level reader (``torch.load``, ``numpy.load``, pandas, PIL) is weak: it decides only when no
  strong frame encloses it (``numpy.load`` inside timm's pretrained loader reads weights; ``torch.load`` inside
  a DataLoader's fetch reads a sample);
* the path the message names: a weight file's suffix or a checkpoint folder, a data file's suffix or a split's
  name, a configuration's suffix. A path with names of two kinds says nothing.

The answer changes only when the rule read a file error (:data:`FILE_RULES`), the evidence that speaks names one
kind, and that kind's category differs from the answer's. When frames and path disagree, the path mixes kinds,
or neither speaks, the answer stays.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.hints import hint_for
from gpulens.diagnosis.logread.cause.answers import quoted_line
from gpulens.diagnosis.logread.cause.raisedin import frames_above
from gpulens.diagnosis.types import Diagnosis

__all__ = ["CONFIG", "DATA", "FILE_RULES", "MODEL", "WRITE_RULES", "file_kind", "kind_of_frames", "kind_of_path"]

MODEL = "model"
DATA = "data"
CONFIG = "config"
_CATEGORY = {MODEL: "checkpoint_error", DATA: "incorrect_input", CONFIG: "semantic_error"}
#: README C5: a missing checkpoint, weight or tokenizer is the job's (user); a missing input at the location the
#: configuration names is the data's; the job's own configuration is the user's.
_ORIGIN = {MODEL: "user", DATA: "data", CONFIG: "user"}
#: The origin clue (gpulens.diagnosis.origin.CLUES) each kind gives: a data path, or the job's own code and paths.
_CLUE = {MODEL: "user_code", DATA: "data_path", CONFIG: "user_code"}

#: Rules that read a file the job could not find, open or decode (round 25 c2c3): their category follows
#: what the file is.
FILE_RULES = frozenset({
    "checkpoint-file-missing", "model-state-file-missing", "checkpoint-load-path", "data-file-not-found",
    "data-folder-missing", "data-file-missing", "config-file-missing", "corrupt-checkpoint", "zip-central-directory",
    "invalid-load-key", "hf-hub-repo-id-invalid", "tf-file-not-found", "hf-hub-offline-miss", "data-malformed",
    "json-decode-error", "r20d-hdf5-object-missing", "r20d-hdf5-read-failed",
})
#: Rules that read a write into a folder that does not exist (Python's open() for writing, torch.save's
#: "Parent directory ... does not exist."): README C3, saving model state is checkpoint_error, writing anything
#: else (a plot, a table, predictions) semantic_error; the input data is not at fault whatever the name.
WRITE_RULES = frozenset({"output-dir-missing", "torch-save-missing-dir"})

#: Libraries that own model state: (file part, functions or None for any). transformers modeling_utils.py
#: PreTrainedModel.from_pretrained / save_pretrained / load_state_dict; configuration_utils.py
#: PretrainedConfig.from_pretrained / get_config_dict; tokenization_utils_base.py from_pretrained;
#: models/auto/ Auto*.from_pretrained; utils/hub.py cached_file (a model repository's files); trainer.py
#: _load_from_checkpoint / _save_checkpoint; trainer_callback.py TrainerState.load_from_json; peft
#: PeftModel.from_pretrained / load_adapter, PeftConfig.from_pretrained, utils/save_and_load.py
#: load_peft_weights; lightning's checkpoint_connector.py and
#: core/saving.py load_from_checkpoint and TorchCheckpointIO; accelerate accelerator.py save_state /
#: load_state and checkpointing.py; deepspeed runtime/engine.py load_checkpoint / save_checkpoint and
#: checkpoint_engine/; timm models/_helpers.py load_checkpoint and _builder.py load_pretrained; torch/hub.py
#: load_state_dict_from_url; mmengine/mmcv runner/checkpoint.py; fairseq checkpoint_utils.py; diffusers
#: from_pretrained; keras saving/; sentencepiece SentencePieceProcessor.Load (a tokenizer model).
_MODEL_STRONG: tuple[tuple[str, frozenset[str] | None], ...] = (
    ("transformers/modeling_utils.py", None),
    ("transformers/configuration_utils.py", None),
    ("transformers/tokenization_utils_base.py", frozenset({"from_pretrained", "_from_pretrained", "save_pretrained"})),
    ("transformers/models/auto/", frozenset({"from_pretrained", "get_tokenizer_config", "get_class_from_dynamic_module"})),
    ("transformers/utils/hub.py", None),
    ("transformers/trainer.py", frozenset({"_load_from_checkpoint", "_load_best_model", "_load_rng_state",
                                           "_load_optimizer_and_scheduler", "_save_checkpoint", "save_model", "_save",
                                           "_save_optimizer_and_scheduler", "_save_rng_state"})),
    ("transformers/trainer_callback.py", frozenset({"load_from_json", "save_to_json"})),
    ("peft/peft_model.py", frozenset({"from_pretrained", "load_adapter", "save_pretrained"})),
    ("peft/config.py", frozenset({"from_pretrained", "from_json_file", "_get_peft_type"})),
    ("peft/utils/save_and_load.py", None),
    ("connectors/checkpoint_connector.py", None),  # pytorch_lightning/ and lightning/pytorch/trainer/
    ("lightning/pytorch/core/saving.py", None),
    ("pytorch_lightning/core/saving.py", None),
    ("plugins/io/torch_plugin.py", None),  # TorchCheckpointIO (pytorch_lightning)
    ("plugins/io/torch_io.py", None),  # TorchCheckpointIO (lightning fabric)
    ("accelerate/accelerator.py", frozenset({"save_state", "load_state", "save_model"})),  # not save: any object
    ("accelerate/checkpointing.py", None),
    ("deepspeed/runtime/engine.py", frozenset({"load_checkpoint", "_load_checkpoint", "save_checkpoint",
                                              "_save_checkpoint", "_load_zero_checkpoint", "_get_all_zero_checkpoints",
                                              "load_module_state_dict"})),
    ("deepspeed/runtime/checkpoint_engine/", None),
    ("timm/models/_helpers.py", None),
    ("timm/models/_builder.py", None),
    ("torch/hub.py", frozenset({"load_state_dict_from_url", "download_url_to_file", "load"})),
    ("mmengine/runner/checkpoint.py", None),
    ("mmcv/runner/checkpoint.py", None),
    ("fairseq/checkpoint_utils.py", None),
    ("diffusers/", frozenset({"from_pretrained", "load_config", "save_pretrained", "load_state_dict"})),
    ("keras/src/saving/", None),
    ("keras/saving/", None),
    ("sentencepiece/__init__.py", frozenset({"Load", "LoadFromFile", "Init"})),
)
#: Libraries that own input data: datasets load.py load_dataset / load_from_disk, builder.py, data_files.py
#: resolve_pattern ("Couldn't find any data file"), packaged_modules/ (the json, csv, parquet builders);
#: torch's DataLoader fetch and worker (the job's Dataset runs inside them); torchvision datasets/ (ImageFolder
#: find_classes); webdataset.
_DATA_STRONG: tuple[tuple[str, frozenset[str] | None], ...] = (
    ("datasets/load.py", None),
    ("datasets/builder.py", None),
    ("datasets/data_files.py", None),
    ("datasets/packaged_modules/", None),
    ("datasets/arrow_dataset.py", frozenset({"load_from_disk", "from_json", "from_csv", "from_parquet"})),
    ("datasets/dataset_dict.py", frozenset({"load_from_disk"})),
    ("torch/utils/data/_utils/fetch.py", None),
    ("torch/utils/data/_utils/worker.py", None),
    ("torchvision/datasets/", None),
    ("webdataset/", None),
)
#: The job's own configuration: OmegaConf.load (omegaconf/omegaconf.py), Hydra's config loading
#: (hydra/_internal/config_loader_impl.py, config_repository.py), argparse's fromfile args, transformers
#: hf_argparser.py HfArgumentParser.parse_json_file / parse_yaml_file, DeepSpeed's runtime/config.py
#: DeepSpeedConfig (the JSON config it is handed).
_CONFIG_STRONG: tuple[tuple[str, frozenset[str] | None], ...] = (
    ("transformers/hf_argparser.py", frozenset({"parse_json_file", "parse_yaml_file"})),
    ("deepspeed/runtime/config.py", None),
    ("omegaconf/omegaconf.py", frozenset({"load"})),
    ("hydra/_internal/config_loader_impl.py", None),
    ("hydra/_internal/config_repository.py", None),
    ("/argparse.py", frozenset({"_read_args_from_files"})),
)
#: Low-level readers: torch/serialization.py load (its _open_* helpers are torch.save's too) and safetensors/torch.py
#: load_file read model state unless a data loader encloses them; numpy lib/npyio.py (numpy 2: lib/_npyio_impl.py) load /
#: loadtxt, pandas io/ read_*, PIL Image.open, torchaudio load, soundfile, librosa load read data unless a model
#: loader encloses them.
_MODEL_WEAK: tuple[tuple[str, frozenset[str] | None], ...] = (
    ("torch/serialization.py", frozenset({"load", "_load", "_legacy_load"})),
    ("safetensors/torch.py", frozenset({"load_file", "load"})),
)
_DATA_WEAK = ("numpy/lib/npyio.py", "numpy/lib/_npyio_impl.py", "pandas/io/", "/PIL/", "torchaudio/", "soundfile.py",
              "librosa/core/audio.py", "torchvision/io/")


def _in(file: str, func: str, table: tuple[tuple[str, frozenset[str] | None], ...]) -> bool:
    return any(key in file and (funcs is None or func in funcs) for key, funcs in table)


def _frame_kind(file: str, func: str) -> tuple[str, bool] | None:
    """(kind, strong) of one frame, or None when it belongs to no owner of a kind of file."""
    for kind, table in ((MODEL, _MODEL_STRONG), (DATA, _DATA_STRONG), (CONFIG, _CONFIG_STRONG)):
        if _in(file, func, table):
            return kind, True
    if _in(file, func, _MODEL_WEAK):  # torch.save's side says nothing: a tensor of outputs is saved the same way
        return MODEL, False
    if any(key in file for key in _DATA_WEAK):
        return DATA, False
    return None


def kind_of_frames(frames: Sequence[tuple[str, str]]) -> str | None:
    """The kind of file the frames (file, function; outermost first) were handling: the innermost strong frame's,
    else the innermost weak frame's, else None."""
    weak: str | None = None
    for file, func in reversed(frames):
        found = _frame_kind(file.replace("\\", "/"), func)
        if found is not None and found[1]:
            return found[0]
        if found is not None:
            weak = weak or found[0]
    return weak


#: Names of model state, as a file: weight suffixes (PyTorch .pt/.pth/.ckpt, a model's or optimizer's .bin (not
#: Megatron's or nanoGPT's token .bin files), safetensors, GGUF, Paddle
#: .pdparams, Caffe .caffemodel; a sharded checkpoint's *.safetensors.index.json) and the Hugging Face model
#: folder's files (pytorch_model*.bin, model*.safetensors, adapter_model / adapter_config, tokenizer*,
#: special_tokens_map.json, generation_config.json, trainer_state.json;
#: a tokenizer's vocab.txt / vocab.json / merges.txt, sentencepiece's spiece.model; Keras' .keras and a model's or
#: weights' .h5 / .hdf5 (Model.save / save_weights)); as a folder: a checkpoint
#: folder (transformers' Trainer checkpoint-N, checkpoints/, ckpt/), pretrained/ or weights/.
_MODEL_FILE = re.compile(
    r"\.(?:pt|pth|ckpt|safetensors|gguf|pdparams|caffemodel)(?:\.index\.json)?$"
    r"|(?:model|weights?|optimizer|ckpt|checkpoint|adapter|training_args)[\w.-]*\.bin(?:\.index\.json)?$"
    r"|^(?:pytorch_model|tf_model|adapter_model|adapter_config|tokenizer(?:_config)?|special_tokens_map"
    r"|generation_config|trainer_state)\b"
    r"|^(?:vocab\.(?:txt|json)|merges\.txt|spiece\.model|sentencepiece\.bpe\.model)$"
    r"|\.keras$|(?:^|[_.-])(?:model|weights?)(?:[_.-][\w.-]*)?\.(?:h5|hdf5)$", re.I)
_MODEL_FOLDER = re.compile(r"^(?:checkpoints?|ckpts?|checkpoint-\d+|pretrained(?:_models?)?|weights)$", re.I)
#: Names of input data, as a file: record files (JSON Lines, CSV/TSV, Parquet, Arrow, TFRecord), media (images,
#: audio, video), array files of records (.npy, .npz; not .h5: Keras' weights as often), a split's file
#: (train.json, test-00000-of-00001.parquet); as a folder: a split's or a data set's folder (train/, val/, test/,
#: data/, datasets/, images/, annotations/).
_DATA_FILE = re.compile(
    r"\.(?:jsonl|csv|tsv|parquet|arrow|tfrecords?|jpe?g|png|bmp|tiff?|wav|flac|mp3|mp4|avi|npy|npz)$"
    r"|^(?:train|val|valid|validation|test)(?:[-_.][\w.-]*)?$", re.I)
_DATA_FOLDER = re.compile(r"^(?:train|val|valid|validation|test|data|datasets?|images|annotations?)$", re.I)
#: Names of the job's own program and configuration: a Python file, YAML, TOML, INI, CFG, a DeepSpeed JSON
#: (ds_*.json, zero*.json).
_CONFIG_FILE = re.compile(r"\.(?:py|ya?ml|toml|ini|cfg)$|^(?:ds_|deepspeed|zero)[\w.-]*\.json$", re.I)

def kind_of_path(path: str, folders: bool = True) -> str | None:
    """The kind the path's names give: the last name read as a file (a path that ends in "/" names a folder)
    when it speaks, else (``folders``) every name read as a folder's (a mount named /data above a model folder says nothing then); None
    when none speaks or two kinds do."""
    names = [p for p in re.split(r"[/\\]", path) if p not in ("", ".", "..")]
    last = "" if path.endswith(("/", "\\")) or not names else names[-1]
    kinds = {kind for kind, pattern in ((MODEL, _MODEL_FILE), (DATA, _DATA_FILE), (CONFIG, _CONFIG_FILE))
             if last and pattern.search(last)}
    if not kinds and folders:  # a last name that is no file's may be a folder's too
        kinds = {kind for kind, pattern in ((MODEL, _MODEL_FOLDER), (DATA, _DATA_FOLDER))
                 if any(pattern.search(name) for name in names)}
    return kinds.pop() if len(kinds) == 1 else None


def _named_path(line: str) -> str | None:
    """The path a file error names (:func:`logs.extract_inputs`, the project's one path extractor, reading what
    an error names whatever it is)."""
    return next(iter(logs.extract_inputs([line], any_file=True)), None)


#: Lines read above the error region for the exception line.
_SPAN = 400
_CONFIDENCE = 0.75


def file_kind(d: Diagnosis, lines: Sequence[str], floor: int, start: int) -> Diagnosis:
    """The category of what the file is (module doc) for an answer of :data:`FILE_RULES`; else ``d``."""
    if d.rule_id not in FILE_RULES | WRITE_RULES or not d.evidence:
        return d
    at = quoted_line(d, lines, max(floor, start - _SPAN))
    by_frames = kind_of_frames(frames_above(lines, at)) if at is not None else None
    path = _named_path(d.evidence[0])
    # a write's folder names where it goes, not what it writes (a results table under checkpoints/)
    by_path = kind_of_path(path, folders=d.rule_id not in WRITE_RULES) if path else None
    if by_frames is not None and by_path is not None and by_frames != by_path:
        return d
    kind = by_frames or by_path
    if kind is not None and d.rule_id in WRITE_RULES and kind != MODEL:
        kind = CONFIG  # C3: a write of anything but model state is the job's own (semantic_error)
    if kind is None or _CATEGORY[kind] == d.category:
        return d
    return _as_kind(d, kind, path, "frames" if by_frames else "path")


def _as_kind(d: Diagnosis, kind: str, path: str | None, said: str) -> Diagnosis:
    category = _CATEGORY[kind]
    inputs = [path] if category == "incorrect_input" and path else []
    return dataclasses.replace(d, category=category, origin=_ORIGIN[kind], confidence=min(d.confidence, _CONFIDENCE),
                               rule_id=None, clue=_CLUE[kind], inputs=inputs, input_records=[],
                               hint=hint_for(category, d.evidence), reason=f"the file is {kind} ({'its traceback' if said == 'frames' else 'its path'}"
                                      " shows): what the file is decides, README C2/C3")

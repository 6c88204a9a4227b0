"""Tracebacks that show the program still starting (P3, P7).

A syntax error, an import failing at module level or in a model's remote code, base weights of a Hub
repository or published weights fetched while the model is built, a set-up function called from the
script's entry, the process' first CUDA call, a model summary's dummy forward.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.logread.phase.failing_traceback import frame_funcs, func_names
from gpulens.diagnosis.logread.phase.frames import (
    EPOCH_FUNC,
    LOOP_WORDS,
    SETUP_FUNC,
    TRAIN_FUNC,
    TRAIN_STEP_FUNC,
    in_eval,
    in_train_step,
)

__all__ = ["at_import", "built_from_pretrained", "dataset_built", "ends_in_syntax_error", "first_cuda_call", "hub_base_weights",
           "import_failed", "model_summary", "remote_code_import", "setting_up", "weights_loaded_last"]


#: transformers' ``utils/hub.py`` messages for a file a ``from_pretrained`` cannot find, naming the model by a Hub
#: repository id (``{namespace}/{name}``: "Qwen/Qwen2-7B does not appear to have a file named
#: model-00003-of-00004.safetensors. Checkout 'https://huggingface.co/Qwen/Qwen2-7B/tree/main' for available files."),
#: not by a local folder (which may be this job's own output).
_HUB_MISSING = re.compile(r"^\w*(?:Error|Exception)\b[^:]*: (?:[\w-]+/[\w.-]+) does not appear to have a file named ")


def hub_base_weights(frames: Sequence[str]) -> bool:
    """Whether the traceback is a ``from_pretrained`` failing to find a file of a Hub repository (P7: base
    weights loaded while the model is built are ``startup``; the job's own checkpoints are local folders)."""
    last = frames[-1].strip() if frames else ""
    return "does not appear to have a file named " in last and _HUB_MISSING.match(last) is not None \
        and any("from_pretrained" in f for f in func_names(frames))


#: A name of the job's own saved state in a path or message (a step- or epoch-numbered checkpoint folder, a resume):
#: P7 makes such a ``from_pretrained`` ``checkpoint_load`` whatever calls it.
_OWN_STATE = re.compile(r"(?i)checkpoint-\d+|global_step_?\d+|(?<![a-z])(?:step|epoch|iter)_?\d+(?![a-z])|resum")
#: transformers' module that fetches and imports a ``trust_remote_code`` model's own code
#: (``dynamic_module_utils.py``: ``get_class_from_dynamic_module`` -> ``get_cached_module_file`` -> ``get_class_in_module``),
#: which ``AutoConfig``/``AutoModel.from_pretrained`` call to build the model class before any weights are read.
_DYNAMIC_MODULE = 'dynamic_module_utils.py", line '


#: Frames of libraries that fetch published weights while a model is built (P7: "timm ``pretrained=True``, torchvision
#: weights" are ``startup``): ``torch/hub.py`` (``torch.hub.load``, ``load_state_dict_from_url``,
#: ``download_url_to_file``), timm's ``models/_builder.py`` (``build_model_with_cfg`` -> ``load_pretrained``) and
#: ``models/_hub.py`` (``load_state_dict_from_hf``), torchvision's ``models/_api.py`` (``WeightsEnum.get_state_dict``).
#: Not timm's ``_helpers.load_checkpoint`` (``create_model(checkpoint_path=...)``: a checkpoint of the job's own).
_PUBLISHED_WEIGHTS = re.compile(r'File "[^"]*(?:torch[/\\]hub|timm[/\\]models[/\\]_(?:builder|hub)'
                                r'|torchvision[/\\]models[/\\]_api)\.py", line \d+')


def built_from_pretrained(frames: Sequence[str]) -> bool:
    """Whether the traceback fails while the model is being built from pretrained files (P3, P7: base weights and
    the model's code at start-up are ``startup``): published weights being fetched (:data:`_PUBLISHED_WEIGHTS`), a
    ``from_pretrained`` called from a constructor (``__init__``: a model class that loads its pretrained encoder, a
    trainer that loads the model it is given by name), or transformers' remote-code import (:data:`_DYNAMIC_MODULE`),
    with no loop or evaluation frame above it and no name of the job's own saved state (:data:`_OWN_STATE`) in its
    message."""
    funcs = func_names(frames)
    said = [ln for ln in frames if ln[:1].isalpha()]  # the exception lines (the chain's too)
    if any(_OWN_STATE.search(ln) for ln in said):
        return False
    hub = next((k for k, (ln, _) in enumerate(frame_funcs(frames)) if _PUBLISHED_WEIGHTS.search(ln)), None)
    if hub is not None:
        return not any(LOOP_WORDS.search(f) for f in funcs[:hub])
    at = next((k for k, f in enumerate(funcs) if f == "from_pretrained"), None)
    if at is None or any(LOOP_WORDS.search(f) for f in funcs[:at]):
        return False
    return "__init__" in funcs[:at] or any(_DYNAMIC_MODULE in ln for ln in frames)


#: A program's entry function (``main()``, ``run()``, ``cli()``), which calls its set-up and its loop.
_ENTRY_FUNC = re.compile(r"(?i)^_?(?:main|run|cli|app|launch|start)\w*$")


def setting_up(frames: Sequence[str]) -> bool:
    """Whether the traceback fails while the program sets itself up: the script's module level (or
    its entry function, ``main``) calls a set-up function (:data:`SETUP_FUNC`: building the trainer,
    the engine, the model), and no frame is of a loop that trains, iterates or evaluates (whatever
    steps are printed above belong to an earlier program); not when a frame computes an evaluation's
    metrics (:func:`in_eval`: scikit-learn's ``roc_curve`` under a constructor). A worker thread's traceback (no
    ``<module>`` frame) and a constructor called deeper (a distribution built in a forward) are not."""
    funcs = func_names(frames)
    if not funcs or funcs[0] != "<module>" or any(LOOP_WORDS.search(f) for f in funcs) or in_eval(frames):
        return False
    calls = [f for f in funcs[1:] if f != "<module>"]
    k = 0
    while k < len(calls) - 1 and _ENTRY_FUNC.match(calls[k]) and not SETUP_FUNC.match(calls[k]):
        k += 1
    return k < len(calls) and SETUP_FUNC.match(calls[k]) is not None


#: torch.cuda's lazy initialisation (``torch/cuda/__init__.py``, ``_lazy_init`` -> ``torch._C._cuda_init()``):
#: it runs once per process, at its first CUDA call.
_CUDA_INIT_FRAME = re.compile(r'File "[^"]*torch[/\\]cuda[/\\]__init__\.py", line \d+, in _lazy_init')


def first_cuda_call(frames: Sequence[str]) -> bool:
    """Whether the traceback fails in the process's first CUDA call (torch.cuda's lazy
    initialisation: a driver too old, no device, a bad ``CUDA_VISIBLE_DEVICES``), outside any loop
    (a DataLoader worker's "Cannot re-initialize CUDA in forked subprocess" runs in the worker's loop)."""
    if not any("_lazy_init" in ln and _CUDA_INIT_FRAME.search(ln) for ln in frames):
        return False
    return not any(LOOP_WORDS.search(f) for f in func_names(frames))


#: A model summary's dummy forward: torchsummary's ``summary(model, input_size)`` (``torchsummary/torchsummary.py``: it
#: registers hooks and runs ``model(*x)`` on random input) and torchinfo's ``summary`` (``torchinfo/torchinfo.py``,
#: ``forward_pass``), called while the model is built to print its layers (P3: building the model is start-up).
_SUMMARY_FRAME = re.compile(r'File "[^"]*(?:torchsummary[/\\]torchsummary|torchinfo[/\\]torchinfo)\.py", line \d+, in (?:summary|forward_pass)\b')


def model_summary(frames: Sequence[str]) -> bool:
    """Whether the traceback runs through a model summary's dummy forward (:data:`_SUMMARY_FRAME`) called outside any
    epoch or step function (not a summary a training loop prints)."""
    at = next((k for k, ln in enumerate(frames) if "summary" in ln and _SUMMARY_FRAME.search(ln)), None)
    if at is None:
        return False
    return not any(TRAIN_FUNC.match(f) or EPOCH_FUNC.match(f) or TRAIN_STEP_FUNC.match(f) for f in func_names(frames[:at]))


#: Python's exceptions for a script that cannot be compiled.
_SYNTAX = ("SyntaxError", "IndentationError", "TabError")


def ends_in_syntax_error(frames: Sequence[str]) -> bool:
    """Whether the traceback ends in a syntax error (the program was never run)."""
    last = frames[-1].strip() if frames else ""
    return last.startswith(_SYNTAX) or any(k + ":" in last for k in _SYNTAX)


#: Python's exceptions for an import that cannot be done (a module not installed, a name it lacks,
#: a compiled extension that does not load).
_IMPORT_ERRORS = ("ModuleNotFoundError", "ImportError")


def import_failed(frames: Sequence[str]) -> bool:
    """Whether the traceback is an import failing while the program's modules load: an
    ``ImportError``/``ModuleNotFoundError`` through module-level frames only (the script's ``import``
    and the modules it imports; Python's own ``<frozen importlib._bootstrap>`` frames are not the
    program's), before the
    program called anything: it has run none of its own steps."""
    return _ends_in_import_error(frames) and at_import([ln for ln in frames if '"<frozen importlib' not in ln])


#: The module of transformers that imports a model's own code for ``from_pretrained(...,
#: trust_remote_code=True)`` (transformers/dynamic_module_utils.py: ``check_imports`` raises
#: ImportError "This modeling file requires the following packages that were not found in your
#: environment: ..."; ``get_class_in_module`` imports the module, whose own imports may fail): the
#: model class is being built, before any weights are read.
_REMOTE_CODE_FRAME = re.compile(r'File "[^"]*transformers[/\\]dynamic_module_utils\.py", line \d+, in ')


def remote_code_import(frames: Sequence[str]) -> bool:
    """Whether the traceback is an import failing in the remote code of a ``from_pretrained``:
    an ``ImportError``/``ModuleNotFoundError`` below a frame of ``_REMOTE_CODE_FRAME``."""
    return _ends_in_import_error(frames) and any("dynamic_module_utils" in ln and _REMOTE_CODE_FRAME.search(ln) for ln in frames)


def _ends_in_import_error(frames: Sequence[str]) -> bool:
    """Whether the traceback's last line is an ``ImportError``/``ModuleNotFoundError``."""
    last = frames[-1].strip() if frames else ""
    return last.startswith(_IMPORT_ERRORS) or any(f"{k}:" in last for k in _IMPORT_ERRORS)


def at_import(frames: Sequence[str]) -> bool:
    """A traceback of module-level frames only (the program failed while its modules were being
    loaded, before it called anything)."""
    funcs = func_names(frames)
    return bool(funcs) and all(f == "<module>" for f in funcs)


#: A frame's code line that constructs a data set or a data loader (``train_dataset = Dataset(path, cfg)``,
#: ``loader = DataLoader(ds, batch_size=...)``, ``self.val_set = MyVideoDataset(root)``).
_DATA_BUILT = re.compile(r"^\s*[\w.\[\]'\", ]+\s*=\s*(?:[\w.]+\.)?\w*(?:Dataset|DataLoader|Dataloader)\w*\(")


def dataset_built(frames: Sequence[str]) -> bool:
    """Whether the traceback fails inside a data set's or loader's constructor, called by a code line that builds it
    (:data:`_DATA_BUILT`, the next frame an ``__init__``), outside any step, epoch or evaluation function: preparing
    data is set-up (P8), whatever function (``train(config)``) calls it before its loop."""
    if in_train_step(frames) or in_eval(frames):
        return False
    for k, ln in enumerate(frames):
        if "Data" in ln and _DATA_BUILT.match(ln):
            callee = next((f for f in frames[k + 1:k + 4] if 'File "' in f), "")
            if callee.rstrip().endswith(", in __init__"):
                return True
    return False


#: The bar transformers shows while ``from_pretrained`` reads a sharded model's weights (``modeling_utils.py``
#: ``_load_pretrained_model``: ``logging.tqdm(checkpoint_files, desc="Loading checkpoint shards")``): base weights read
#: while the model is built (P7: ``startup``).
_SHARDS_BAR = "Loading checkpoint shards:"
#: Non-blank lines above a kill read for that bar (the tokenizer's and generation config's notes may follow it).
_SHARDS_REACH = 3


def weights_loaded_last(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether one of the last few non-blank lines the program printed before the kill at ``top`` is transformers'
    shard-loading bar (:data:`_SHARDS_BAR`): the last activity the log shows is building the model from its base
    weights, so a kill there (P9) came in ``startup`` (P7), whatever the job went on to do where the log does not show."""
    seen = 0
    for k in range(top - 1, floor - 1, -1):
        if not lines[k].strip():
            continue
        if _SHARDS_BAR in lines[k]:
            return True
        seen += 1
        if seen >= _SHARDS_REACH:
            return False
    return False

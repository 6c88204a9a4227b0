"""Whether the failure came while a checkpoint was written or read (P6, P7).

By the traceback's frames (functions that save or load, torch/safetensors/Paddle/TensorFlow serialization),
by the words of its unindented lines (or of a failure's lines without one), or by a save or load the
program announced just above the failure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

from gpulens.diagnosis import logs
from gpulens.diagnosis.guarded import Guarded
from gpulens.diagnosis.logread import ranks
from gpulens.diagnosis.logread.lines import is_progress
from gpulens.diagnosis.logread.phase.failing_traceback import (
    frame_funcs,
    func_names,
    handler_frames,
)
from gpulens.diagnosis.logread.phase.program import completion_above
from gpulens.diagnosis.logread.phase.text import job_report_cut, without_warning_sources
from gpulens.diagnosis.logread.steplines import on_screen, step_lines, warns

__all__ = ["checkpoint_phase", "own_model_announced"]


#: Read in the traceback's unindented lines (its head and its exception message). "serializ" only
#: as torch's (``torch/serialization``, "failed to serialize"): Python's "Object of type X is not
#: JSON serializable" is about writing results, nor Ray's "Failed to unpickle serialized exception" (a
#: remote task's error it cannot rebuild), not a checkpoint. A disk-full or write error on a
#: checkpoint's path (``.../checkpoints/040000/model.safetensors``, ``ckpt``, ``.pt``) is a save.
_SAVE = Guarded(r"save_checkpoint|_save_checkpoint|torch\.save|save_pretrained|save_model|[Ss]aving (?:model|checkpoint)"
                r"|PytorchStreamWriter|SafetensorError|(?<!JSON )\bserializ(?!able|ed exception)|merge_and_unload|push_to_hub|_save\("
                # llama.cpp's export of a model to a quantized GGUF file (``src/llama-quant.cpp``/``llama.cpp``
                # ``llama_model_quantize``: "llama_model_quantize: failed to quantize: {what}"; ``tools/quantize``'s
                # "main: failed to quantize model from '{fname}'"): the job's result model being written (P6)
                r"|failed to quantize\b"
                r"|(?:No space left on device|Disk quota exceeded|Read-only file system)\b.*"
                r"(?:checkpoint|ckpt|\.safetensors|\.pth?\b|\.bin\b)",
                ("save", "aving", "PytorchStreamWriter", "SafetensorError", "serializ", "merge_and_unload",
                 "push_to_hub", "No space left", "quota exceeded", "Read-only file", "failed to quantize"))
#: Also the errors of ``from_pretrained`` when the weights, config or tokenizer files of a model folder or
#: repository cannot be found (``transformers/utils/hub.py``'s ``cached_file(s)``: "{path} does not appear to
#: have a file named {file}", "Incorrect path_or_model_id: '{path}'"; ``tokenization_utils_base``'s "Can't load
#: tokenizer for '{path}'", ``configuration_utils``'s "Can't load the configuration of '{path}'", ``modeling_utils``'s
#: "Can't load the model for '{path}'"; ``huggingface_hub``'s ``validate_repo_id`` "Repo id must be in the form
#: 'repo_name' or 'namespace/repo_name': '{repo_id}'" for a local path that is not there): a checkpoint being read.
_LOAD = Guarded(r"load_checkpoint|load_state_dict|_load_best_model|resume_from|[Ll]oading checkpoint(?! shards)|torch\.load\("
                r"|_IncompatibleKeys|Error\(s\) in loading state_dict"
                r"|does not appear to have a file named |Incorrect path_or_model_id: "
                r"|Can't load (?:tokenizer for|the configuration of|the model for) '"
                r"|Repo id must be in the form 'repo_name' or 'namespace/repo_name': '(?:/|\.{1,2}/|~/)",
                ("load", "oading", "resume_from", "_IncompatibleKeys", "does not appear to have a file named",
                 "path_or_model_id", "Repo id must be"))


def checkpoint_phase(lines: Sequence[str], failure: int, floor: int, top: int, region: Sequence[str],
                      tb: Sequence[str] | None) -> str | None:
    """``checkpoint_save``/``checkpoint_load`` when the failure came while a checkpoint was written or read:
    by the traceback's frames (or those a signal's handler printed after the failure), by the words of the
    traceback's unindented lines (of the failure's lines without one), or by a save or load announced just
    above ``top`` (the traceback's head, or the failure)."""
    frames = tb or []
    by_name = _serializing(frames) or _checkpoint_func(frame_funcs(frames)) or _save_statement(frames)
    if by_name is not None:
        return by_name
    if not func_names(frames) and (after := handler_frames(lines, failure)) \
            and (named := _serializing(after) or _checkpoint_func(frame_funcs(after))) is not None:
        return named  # P9: a signal (no Python frame above: a C++ stack at most), then the traceback the main
        # process prints for it, in a save or load
    text = _checkpoint_text(lines, failure, floor, region, tb)
    if _LOAD.search(text):
        return "checkpoint_load"
    if _SAVE.search(text):
        return "checkpoint_save"
    return _announced_checkpoint(lines, floor, top)


def _checkpoint_text(lines: Sequence[str], failure: int, floor: int, region: Sequence[str],
                     tb: Sequence[str] | None) -> str:
    """The text read for a checkpoint's save or load: the traceback's unindented lines (its head, its
    exception lines), or without one the failure's lines since the last step (warnings' source lines and a
    job report's command line left out)."""
    if tb is not None:
        return "\n".join(ln for ln in tb if not ln.startswith((" ", "\t")))
    return "\n".join(job_report_cut(ln) for ln in without_warning_sources(_since_steps(lines, failure, floor, region)))


def _since_steps(lines: Sequence[str], failure: int, floor: int, region: Sequence[str]) -> Sequence[str]:
    """The lines of ``region`` (the normalized lines around a failure without a traceback) after the
    last training step printed before ``failure``: a checkpoint save or load announced above steps that
    followed it was done (nanoGPT's ``train.py`` prints "saving checkpoint to {out_dir}" every
    ``eval_interval`` iterations, then goes on with "iter N: loss ..."), it is not what failed."""
    got = step_lines(lines, max(floor, failure - len(region)), failure)
    if not got:
        return region
    last = logs.normalize_line(lines[got[0]])
    at = next((k for k in range(len(region) - 1, -1, -1) if region[k] == last), None)
    return region if at is None else region[at + 1:]


#: What trainers log just before they read or write a checkpoint: the Hugging Face Trainer's "Loading
#: model from {resume_from_checkpoint}." (``_load_from_checkpoint``; a script's own "Loading model from
#: {name}" without the period is usually a pretrained model's set-up), "Loading best model from {path}
#: (score: ...)" and "Saving model checkpoint to {output_dir}" (``_save``); Lightning's "Restoring
#: states from the checkpoint path at {ckpt_path}"; Megatron's "loading checkpoint from {dir} at
#: iteration N" and "saving checkpoint at iteration N to {dir}"; DeepSpeed's "Saving model checkpoint:
#: {path}"; OLMo's "Saving unsharded checkpoint...". A progress bar ("Loading checkpoint shards: 50%|")
#: is a pretrained model's set-up, not this. fairseq's ``checkpoint_utils`` "Preparing to load checkpoint {f}" and
#: "Preparing to save checkpoint for epoch {e} @ {u} updates"; DeepSpeed's ``torch_checkpoint_engine``
#: "[Torch] Checkpoint {tag} is about to be saved!" (or "is begin to save!"), "[Torch] Saving {path}...",
#: "[Torch] Loading checkpoint from {path}..." (newer "[Torch] Begin Load checkpoint from"); mmengine's
#: ``CheckpointLoader`` "Loads checkpoint by local backend from path: {f}" and mmcv 1.x's "load checkpoint from
#: local path: {f}", printed before reading it (not mmengine's runner "Load checkpoint from {f}", printed after).
#: accelerate's ``Accelerator.save_state`` "Saving current state to {output_dir}" and ``load_state`` "Loading states
#: from {input_dir}"; Lightning's ``ModelCheckpoint._update_best_and_save`` "Epoch 3, global step 400: 'val_loss'
#: reached 0.51234 (best 0.51234), saving model to '{filepath}' as top 1", just before ``_save_checkpoint``; timm's
#: ``resume_checkpoint`` "Restoring model state from checkpoint..." (then "Restoring optimizer state ..."); Keras'
#: ``ModelCheckpoint`` "Epoch 3: val_loss improved from 0.41 to 0.39, saving model to {filepath}" ("Epoch 3: saving
#: model to ..."); TensorFlow's ``CheckpointSaverHook`` "Saving checkpoints for 1000 into /tmp/model.ckpt.".
_LOAD_NOTE = Guarded(r"Loading model from \S+\.\s*$|Loading (?:the )?best model from\b|[Ll]oading (?:\w+ )?checkpoint\b(?! shards)"
                     r"|Loading states from |Restoring (?:model|optimizer|amp loss scaler) state from checkpoint"
                     r"|Restoring states from the checkpoint|[Rr]esuming (?:training )?from (?:the )?(?:checkpoint|ckpt|\S*/)"
                     r"|[Pp]reparing to load checkpoint|Loads checkpoint by \w+ backend from path|load checkpoint from \w+ path:"
                     r"|Begin Load checkpoint",
                     ("oading", "Restoring states", "esuming", "to load checkpoint", "Loads checkpoint", "load checkpoint",
                      "Load checkpoint", "state from checkpoint"))
_SAVE_NOTE = Guarded(r"[Ss]aving (?:\w+ )?(?:model )?checkpoint\b|Saving model (?:weights )?to\b|[Pp]reparing to save checkpoint"
                     r"|Saving current state to |[,:] saving model to |Saving checkpoints for \d+ into "
                     r"|\[Torch\] (?:Checkpoint \S+ is (?:about to be saved|begin to save)|Saving )",
                     ("aving", "to save checkpoint", "[Torch] Checkpoint"))
#: A program's own announcement that it reads a model it trained (P7: an earlier stage's output, "Loading Phase 0 trained
#: model from kmseong/llama2-...", "Loading fine-tuned model from ./out"): a Hub name there is the job's own upload,
#: not base weights (not "pretrained").
_OWN_MODEL_NOTE = re.compile(r"(?i)\bload(?:ing)? (?:the |our |my )?(?:[\w-]+ ){0,3}(?:trained|fine-?tuned) "
                             r"(?:\w+ )?(?:model|checkpoint|weights|adapter)s? from\b")
#: Non-blank lines above a traceback read for such an announcement (a warning or two between).
_NOTE_LINES = 3


def own_model_announced(lines: Sequence[str], floor: int, top: int) -> bool:
    """Whether one of the last few lines the program printed before ``top`` (:func:`_last_notes`) announces reading
    a model the work trained itself (:data:`_OWN_MODEL_NOTE`): what failed then is ``checkpoint_load`` (P7)."""
    for _, shown in _last_notes(lines, floor, top):
        if "oad" in shown and _OWN_MODEL_NOTE.search(shown):
            return True
        if is_progress(shown):
            return False  # steps after it
    return False


def _last_notes(lines: Sequence[str], floor: int, top: int) -> Iterator[tuple[int, str]]:
    """(index, line as shown) of the last ``_NOTE_LINES`` lines the program printed before ``top``, latest first: not
    blank, not indented (a warning's source line, a traceback's frame; Megatron's print_rank_0 lines start with one
    space: " loading checkpoint from ..."), not a warning, and none from a progress bar on (a bar after an announcement,
    or an announcement that is a bar's: "Loading checkpoint shards: 50%|")."""
    seen = 0
    for k in range(top - 1, max(floor, top - 4 * _NOTE_LINES) - 1, -1):
        raw = ranks.launcher_text(on_screen(lines[k]))
        shown = raw.strip()
        if not shown or raw.startswith(("  ", "\t")) or warns(shown):
            continue
        if "%|" in shown:
            return
        yield k, shown
        seen += 1
        if seen >= _NOTE_LINES:
            return


def _announced_checkpoint(lines: Sequence[str], floor: int, top: int) -> str | None:
    """``checkpoint_load``/``checkpoint_save`` when one of the last few lines the program printed
    before the failure at ``top`` (:func:`_last_notes`) announces a checkpoint being read or
    written (:data:`_LOAD_NOTE`, :data:`_SAVE_NOTE`): nothing was printed since, so that is what failed."""
    for k, shown in _last_notes(lines, floor, top):
        if completion_above(lines, k, k + 1) is not None:
            return None  # P6, P10: the loop's end printed after it ("Saving checkpoint ...", "Finished training."): the save was done
        if _LOAD_NOTE.search(shown):
            return "checkpoint_load"
        if _SAVE_NOTE.search(shown):
            return "checkpoint_save"
        if is_progress(shown):
            return None  # steps after it: the announced read or write was done
    return None


#: Functions that save or load a checkpoint or pretrained weights (by name).
_SAVE_FUNC = re.compile(r"(?i)save_?(?:checkpoint|model|pretrained|state|weights|fsdp)|_save_(?:\w+_)?checkpoint"
                        r"|checkpoint_save|save_to_disk")
#: Not ``from_pretrained`` itself: it also downloads the config (a gated repository's 401) and builds
#: the model (``__init__`` checking flash-attn), which is start-up; it reads the weights in the
#: ``_load_pretrained_model``/``load_state_dict`` frames it calls, which match. PEFT's ``PeftModel.load_adapter``
#: (``peft/peft_model.py``, called by ``PeftModel.from_pretrained`` after the base model is built) reads a trained
#: adapter's weights and sets them (``set_peft_model_state_dict``).
_LOAD_FUNC = re.compile(r"(?i)load_(?:checkpoint|state|model|pretrained|weights|sharded|best|adapter)|resume_from"
                        r"|_load_from|checkpoint_files")


def _checkpoint_func(frames: Sequence[tuple[str, str]]) -> str | None:
    """``checkpoint_save``/``checkpoint_load`` when a function of the traceback saves or loads a
    checkpoint (the innermost such frame decides: a save called while resuming is a save). Not a load function
    whose failure is deeper in a constructor (``load_models`` -> ``T5EncoderModel(...)`` -> ``nn.Linear.__init__``
    running out of memory, :data:`_MODULE_INIT`): P3/P7, the model is being built, no saved state is being read yet.
    ``frames``: (frame line, function) of the traceback, outermost first (:func:`frame_funcs`)."""
    built = False
    for ln, f in reversed(frames):
        if _SAVE_FUNC.search(f):
            return "checkpoint_save"
        if _LOAD_FUNC.search(f):
            return None if built else "checkpoint_load"
        built = built or (f == "__init__" and _MODULE_INIT.search(ln) is not None)
    return None


#: A statement that saves model state (P6): ``torch.save(``/``paddle.save(`` (torch/serialization.py ``save``,
#: paddle/framework/io.py ``save``), safetensors' ``save_file(``/``save_model(`` (safetensors/torch.py), a model's
#: ``.save_pretrained(`` (transformers modeling_utils.py ``PreTrainedModel.save_pretrained``).
_SAVE_CALL = re.compile(r"^\s*(?:torch|paddle)\.save\(|\bsafetensors\.torch\.save_(?:file|model)\(|\.save_pretrained\(")
#: Where installed libraries' files live (a frame there is not the job's own code; as tracebacks.py).
_LIBRARY_DIRS = ("site-packages/", "dist-packages/", "/lib/python3.", "/lib/python2.")


def _save_statement(frames: Sequence[str]) -> str | None:
    """``checkpoint_save`` when the innermost frame of the job's own code (not an installed library's file) is
    running a save statement (:data:`_SAVE_CALL`): whatever raised below it, in the save or while Python built its
    arguments (torch's ``Module.__getattr__`` for a submodule the model does not have, ``state_dict()``), the
    job was saving its model (P1, P6; README C3)."""
    for k in range(len(frames) - 1, -1, -1):
        if 'File "' not in frames[k] or any(d in frames[k].replace("\\", "/") for d in _LIBRARY_DIRS):
            continue
        code = frames[k + 1] if k + 1 < len(frames) else ""
        return "checkpoint_save" if _SAVE_CALL.search(code) else None
    return None


#: A frame of a torch module's constructor (``torch/nn/modules/linear.py``, ``conv.py``, ... in ``__init__``), which
#: allocates the module's parameters: a model being built.
_MODULE_INIT = re.compile(r'torch[/\\]nn[/\\]modules[/\\]\w+\.py", line \d+, in __init__')


#: The frames of ``torch.save``/``torch.load`` (``torch/serialization.py``, in ``save``, ``_save``,
#: ``load``, ``_load``, whatever called them) and safetensors' (``safetensors/torch.py``, in
#: ``save_file``/``load_file``) and PaddlePaddle's (``paddle/framework/io.py``, ``paddle.save``/``paddle.load``): the innermost one says a checkpoint was being written or read
#: (torch.distributed.checkpoint's ``_save_state_dict``/``_load_state_dict`` match by name).
_SERIAL_FRAME = re.compile(r'File "[^"]*(?:torch[/\\]serialization\.py|safetensors[/\\]torch\.py|paddle[/\\]framework[/\\]io\.py)'
                           r'", line \d+, in _?(save|load)')


#: TensorFlow's own checkpoint save and restore: TF 1.x ``tf.train.Saver`` (``tensorflow/python/training/saver.py``,
#: ``Saver.save``/``Saver.restore``) and TF 2's ``tf.train.Checkpoint`` (``training/tracking/util.py``, later
#: ``checkpoint/checkpoint.py``: ``save``/``write``/``restore``/``read``).
_TF_SAVER = re.compile(r'File "[^"]*tensorflow[/\\]python[/\\](?:training[/\\]saver|training[/\\]tracking[/\\]util'
                       r'|checkpoint[/\\]checkpoint)\.py", line \d+, in (save|write|restore|read)\s*$')


def _serializing(frames: Sequence[str]) -> str | None:
    """``checkpoint_save``/``checkpoint_load`` when the traceback runs through torch's or
    safetensors' own save or load (a user's ``torch.save(state, path)`` is an indented code line,
    which the phase's text does not read). Not a load below a data set's ``__getitem__`` (or torch's
    ``DataLoader`` fetch): a sample or its features stored as a ``.pt`` file, read while training."""
    for k in range(len(frames) - 1, -1, -1):
        ln = frames[k]
        if "tensorflow" in ln and (tf := _TF_SAVER.search(ln)) is not None:
            return "checkpoint_save" if tf.group(1) in ("save", "write") else "checkpoint_load"
        if "serialization" in ln or "safetensors" in ln or "paddle" in ln:
            m = _SERIAL_FRAME.search(ln)
            if m is not None:
                if m.group(1) == "load" and any(_SAMPLE_FRAME.search(f) for f in frames[:k]):
                    return None
                return "checkpoint_save" if m.group(1) == "save" else "checkpoint_load"
    return None


#: A frame that fetches a data sample: a data set's ``__getitem__``/``__getitems__``, or torch's
#: ``torch/utils/data/_utils/fetch.py`` (``_MapDatasetFetcher.fetch``, which calls it).
_SAMPLE_FRAME = re.compile(r'(?:, in __getitems?__|[/\\]utils[/\\]data[/\\]_utils[/\\]fetch\.py", line \d+, in \S+)\s*$')

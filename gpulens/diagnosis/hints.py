"""The one place that turns a diagnosis into what to do about it: (category, evidence lines,
the rule that decided) -> the hint an operator or user reads. The classifier
(:mod:`gpulens.diagnosis.classifier`), the job diagnosis and the pre-submission validator
(:mod:`gpulens.validator.hints`) all call :func:`hint_for`.

Order of preference:

1. the deciding rule's own hint (``hint:`` in ``signatures.yaml``), rendered by
   :func:`gpulens.diagnosis.rules.render_hint` with values taken from the match;
2. the first :data:`HINT_RULES` entry of the category whose pattern matches the evidence
   (entries marked ``dry_run`` speak of the validator's own evidence and limits and apply only
   to its dry runs);
3. a hint built from the evidence line for the common categories (a GPU OOM names the
   allocation that failed and what to reduce, a missing module names the package, ...);
4. the category's default: :data:`gpulens.diagnosis.rules.CATEGORY_HINTS` for job logs,
   :data:`FIX_HINTS` for the validator's dry runs ("validate again").

For dry runs the hint then names the path the evidence names and where it comes from (a
flag, a declared input, the output directory, the program at file:line; :class:`HintContext`).
Paths come from the project's one path extractor, :func:`gpulens.diagnosis.logs.extract_inputs`.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from gpulens.diagnosis.logs import extract_inputs
from gpulens.diagnosis.rules import CATEGORY_HINTS, render_hint

__all__ = [
    "FIX_HINTS",
    "HINT_RULES",
    "HintContext",
    "HintRule",
    "hint_for",
    "path_in_evidence",
    "path_origin",
    "specific_hint",
]

#: Defaults for the validator's dry runs (job logs get rules.CATEGORY_HINTS).
FIX_HINTS: dict[str, str] = {
    "syntax_error": "Fix the syntax error at the file:line shown, then validate again.",
    "import_error": "Install the missing module in the job's environment (or fix the import name) before submitting.",
    "incorrect_input": "Fix the input named in the evidence (path, permissions or contents); a blacklisted input must be cleared by an operator.",
    "semantic_error": "Fix the program error in the evidence (e.g. tensor shapes); it fails the same way on any GPU.",
    "model_diverged": "Lower the learning rate (or add warm-up / gradient clipping): the loss was not finite in the first steps.",
    "cpu_oom": "Use less host memory (smaller batch, no whole-dataset caching, fewer DataLoader workers) or request more memory.",
    "gpu_oom": "Reduce the batch size or model, use mixed precision / activation checkpointing, or request a GPU type with more memory.",
    "checkpoint_error": "Point the output/checkpoint directory at a writable location (create it and check its permissions).",
    "permission_error": "Fix the permissions of the path in the evidence (or run with an account that can read/write it).",
    "cuda_error": "Check the CUDA kernels/extension build and the framework version of the job's environment.",
    "cuda_env_error": "Check the CUDA / driver / framework versions of the job's environment (see the evidence).",
    "gpu_hardware": "The validation GPU looks faulty: report it to the operators and validate again on another GPU.",
    "comm_error": "Check the distributed set-up (rendezvous address, world size, NCCL environment).",
    "preempted": "The dry run was preempted: validate again.",
    "storage_error": "Free space or fix the file system the job writes to (or raise validate.file_size_limit_bytes).",
    "crash": "The process crashed in native code: check the framework / extension versions and the evidence.",
    "unknown": "Read the evidence lines; the dry run failed before training could be confirmed.",
}

_WEIGHTS_ONLY = (
    "torch.load defaults to weights_only=True since PyTorch 2.6 and this file holds other Python objects:"
    " load it with weights_only=False only if you trust it, or allow-list the named global with"
    " torch.serialization.add_safe_globals([...]), or re-save the file as plain tensors / a state_dict."
)
_MISSING_READ = (
    "The file the program reads does not exist: create or download it before submitting"
    " (run the repository's data-preparation step), or fix the path."
)


class HintRule(NamedTuple):
    """A hint for evidence of one category that matches ``pattern`` (case-insensitive)."""

    category: str
    pattern: str
    hint: str
    dry_run: bool = False  # about the validator's own evidence or limits: dry runs only


#: The first matching entry of the category wins.
HINT_RULES: list[HintRule] = [
    HintRule("checkpoint_error", r"weights.only|WeightsUnpickler|UnpicklingError", _WEIGHTS_ONLY),
    HintRule("checkpoint_error", r"PytorchStreamReader|failed finding central directory|EOFError|corrupt|truncated|invalid load key",
     "The checkpoint file is truncated or corrupt: re-create it or resume from an earlier one."),
    HintRule("checkpoint_error", r"(No such file|does not exist|FileNotFoundError).*(while reading|torch\.load|load)|while reading",
     "The checkpoint to resume from does not exist: fix the path (or start without resuming)."),
    HintRule("incorrect_input", r"weights.only|WeightsUnpickler", _WEIGHTS_ONLY),
    HintRule("incorrect_input", r"blacklist", "The input is blacklisted: use another copy of the data or ask an operator to clear it."),
    HintRule("incorrect_input", r"empty", "The input is empty: re-create or re-download it.", dry_run=True),
    HintRule("incorrect_input", r"No such file|does not exist|FileNotFoundError|os\.path\.(exists|isfile|isdir)|\.exists\(\)|not found",
     _MISSING_READ, dry_run=True),
    HintRule("incorrect_input", r"Permission denied|not readable", "The input is not readable: fix its permissions or copy it where the job's account can read it."),
    HintRule("incorrect_input", r"Error|BadGzip|BadZip|could not be read|while reading|decod|corrupt|truncat",
     "The input's contents cannot be decoded (truncated, corrupt or another format): re-create it or point at a good copy.", dry_run=True),
    HintRule("import_error", r"cannot import name",
     "A name is missing from an installed package: the job's environment has another version than the code expects; pin the version the code needs.", dry_run=True),
    HintRule("import_error", r"No module named '?([A-Za-z0-9_]+)",
     "Install the missing module in the job's environment (pip install it there; the package name may differ from the module name), or remove the import.", dry_run=True),
    HintRule("semantic_error", r"invalid index of a 0-dim tensor",
     "Old PyTorch API: use tensor.item() instead of tensor.data[0] / loss.data[0] (removed in PyTorch 0.5)."),
    HintRule("semantic_error", r"Legacy autograd function",
     "Old PyTorch API: rewrite the autograd.Function with static forward(ctx, ...) / backward(ctx, ...) and call it via .apply(...)."),
    HintRule("semantic_error", r"shapes? cannot be multiplied|size mismatch|must match the size|Expected .* size|dimension",
     "Fix the tensor shapes in the evidence (layer sizes vs the data); it fails the same way on any GPU."),
    HintRule("semantic_error", r"device|cuda:0 and cpu",
     "Move the model and every tensor to the same device (.to(device)) before computing.", dry_run=True),
    HintRule("cuda_env_error", r"not compiled with CUDA|_cuda_|CUDA support|cpu-only|\+cpu",
     "The job's environment has a CPU-only PyTorch build: install a CUDA build of torch there (e.g. pip install torch --index-url https://download.pytorch.org/whl/cu126)."),
    HintRule("cuda_env_error", r"driver version is insufficient|driver.*too old|CUDA driver version",
     "The node's NVIDIA driver is older than the CUDA runtime of the job's torch: use a torch build for an older CUDA, or a node with a newer driver.", dry_run=True),
    HintRule("cuda_env_error", r"No CUDA GPUs are available|no NVIDIA driver|CUDA_VISIBLE_DEVICES|CUDA unavailable",
     "The program needs a GPU but saw none: request a GPU, and check CUDA_VISIBLE_DEVICES and the device index it selects."),
    HintRule("cuda_error", r"illegal memory access|device-side assert",
     "Re-run with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel (an index out of range is the usual cause of a device-side assert)."),
    HintRule("cuda_error", r"no kernel image is available",
     "The CUDA kernels were not built for this GPU architecture: rebuild the extension (TORCH_CUDA_ARCH_LIST) or install a matching torch."),
    HintRule("cpu_oom", r"validator|memory limit|more than .* GiB",
     "Use less host memory (smaller batch, no whole-dataset caching, fewer DataLoader workers), or raise validate.memory_limit_bytes if the job's nodes have more memory.", dry_run=True),
    HintRule("comm_error", r"Address already in use|EADDRINUSE",
     "The rendezvous port is taken: use torchrun --standalone, or a free MASTER_PORT / --rdzv-endpoint."),
    HintRule("comm_error", r"timed? ?out|Timeout|watchdog",
     "A collective or the rendezvous timed out: check that every rank starts, the world size, and the NCCL network settings."),
    HintRule("storage_error", r"File too large|EFBIG|Errno 27",
     "The job wrote a file larger than allowed: write less (fewer/smaller checkpoints), or raise validate.file_size_limit_bytes.", dry_run=True),
    HintRule("storage_error", r"No space left|ENOSPC|quota",
     "The file system is full (or the quota is used up): free space or write somewhere else.", dry_run=True),
    HintRule("permission_error", r"Permission denied|Errno 13|Read-only file system",
     "Fix the permissions of the path in the evidence (or write to a directory the job's account owns).", dry_run=True),
    HintRule("model_diverged", r"losses?:.*(nan|inf)",
     "Lower the learning rate (or add warm-up / gradient clipping, check the data for NaN/inf): the loss was not finite in the first steps.", dry_run=True),
    HintRule("syntax_error", r"IndentationError|TabError|unindent|indent",
     "Fix the indentation at the file:line shown (mixed tabs and spaces?), then validate again.", dry_run=True),
]  # fmt: skip


@dataclasses.dataclass
class HintContext:
    """What the validator knows beyond the log: the command, declared inputs, output directory."""

    args: list[str] = dataclasses.field(default_factory=list)
    inputs: list[str] = dataclasses.field(default_factory=list)
    output_dir: str | None = None
    workdir: str | None = None
    #: innermost frame of the job's own code (file:line) where the error was raised
    where: str | None = None


_ALLOC = re.compile(r"[Tt]ried to allocate ([\d.]+ ?[KMGT]i?B)")
_GPU_TOTAL = re.compile(r"GPU \d+ has a total capac\w* of ([\d.]+ ?[KMGT]i?B)")
_FREE = re.compile(r"([\d.]+ ?[KMGT]i?B) (?:is )?free")
_TF_SHAPE = re.compile(r"OOM when allocating tensor (?:with )?shape ?\[([\d,\s]+)\]")
_MODULE = re.compile(r"No module named '?([\w.]+)'?")
_CANNOT_IMPORT = re.compile(r"cannot import name '?(\w+)'? from '?([\w.]+)'?")
_LIB_SO = re.compile(r"(lib[\w+-]+\.so(?:\.[\d.]+)?)")
_SYNTAX_AT = re.compile(r'File "([^"]+)", line (\d+)')
_XID = re.compile(r"Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")
_ARCH = re.compile(r"(sm_\d+)")


def _gpu_oom(line: str, ev: str) -> str | None:
    alloc = _ALLOC.search(ev)
    if alloc:
        total = _GPU_TOTAL.search(ev)
        free = _FREE.search(ev)
        where = f" of {total.group(1)}" if total else ""
        left = f" with {free.group(1)} free" if free else ""
        return (f"An allocation of {alloc.group(1)} failed on a GPU{where}{left}: reduce the batch size or "
                "sequence length, use gradient accumulation, mixed precision or activation checkpointing; "
                "if much memory is reserved but unallocated, set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.")
    shape = _TF_SHAPE.search(ev)
    if shape:
        return (f"TensorFlow could not allocate a tensor of shape [{shape.group(1)}]: its first dimension is "
                "usually the batch; reduce the batch size or input resolution, or enable memory growth.")
    return None


def _import(line: str, ev: str) -> str | None:
    m = _MODULE.search(ev)
    if m:
        top = m.group(1).split(".")[0]
        return (f"Module '{m.group(1)}' is not installed in the job's environment: `pip install {top}` (or the "
                "package that provides it) in the interpreter the job runs, and pin it in the requirements.")
    m2 = _CANNOT_IMPORT.search(ev)
    if m2:
        return (f"'{m2.group(1)}' no longer exists in (or not yet in) the installed '{m2.group(2)}': install the "
                f"version of '{m2.group(2).split('.')[0]}' the code was written for.")
    lib = _LIB_SO.search(ev)
    if lib:
        return (f"The shared library {lib.group(1)} cannot be loaded: install the CUDA/toolkit version the "
                "package was built for, or add its directory to LD_LIBRARY_PATH.")
    return None


def _cuda_env(line: str, ev: str) -> str | None:
    low = ev.lower()
    if "driver" in low and ("too old" in low or "insufficient" in low):
        return ("The NVIDIA driver is older than the CUDA runtime of the framework build: install a build for "
                "the driver's CUDA version (see nvidia-smi) or ask the operators to upgrade the driver.")
    if "driver/library version mismatch" in low:
        return "The loaded NVIDIA kernel module and user-space library differ (driver upgraded): reboot or drain the node."
    arch = _ARCH.search(ev)
    if "no kernel image" in low or arch:
        which = f" ({arch.group(1)})" if arch else ""
        return (f"The framework build has no kernels for this GPU's architecture{which}: install a build "
                "compiled for it (newer CUDA wheel) or rebuild the extension with TORCH_CUDA_ARCH_LIST set.")
    lib = _LIB_SO.search(ev)
    if lib:
        return (f"{lib.group(1)} is not found: install the matching CUDA runtime or add its directory to "
                "LD_LIBRARY_PATH.")
    return None


def _paths(line: str, ev: str, what: str) -> str | None:
    for lines in ([line], ev.splitlines()):
        found = extract_inputs(lines, any_file=True) or extract_inputs(lines)
        if found:
            return what.format(path=found[0].rstrip("."))
    return None


def _input(line: str, ev: str) -> str | None:
    low = ev.lower()
    if "device-side assert" in low or "out of bounds" in low or "t >= 0 && t < n_classes" in low:
        return ("A label or index is outside the valid range: check that every target is in [0, num_classes) "
                "(no -1 or 255 ignore labels without ignore_index) and that num_classes matches the data.")
    return _paths(line, ev, "Check the input '{path}': it is missing, unreadable or malformed; fix or remove "
                            "it and validate the dataset before training.")


def _permission(line: str, ev: str) -> str | None:
    if "read-only file system" in ev.lower():
        return _paths(line, ev, "'{path}' is on a read-only file system: write outputs and caches to a "
                                "writable volume (set output_dir, HF_HOME or TMPDIR).")
    return _paths(line, ev, "The job's user may not access '{path}': use a directory it owns or fix the "
                            "permissions (and check HOME/cache variables inside containers).")


def _storage(line: str, ev: str) -> str | None:
    if "no space left" in ev.lower() or "resource exhausted" in ev.lower():
        return _paths(line, ev, "The volume holding '{path}' is full: free space, write to a larger volume, "
                                "or keep fewer checkpoints.") or (
            "A volume is full (disk, /tmp or /dev/shm): free space, or point checkpoints and temporary files "
            "to a larger volume.")
    return None


def _syntax(line: str, ev: str) -> str | None:
    m = _SYNTAX_AT.search(ev)
    if m:
        return f"Fix the syntax at {m.group(1)} line {m.group(2)}; check it with `python -m py_compile {m.group(1)}`."
    return None


def _hardware(line: str, ev: str) -> str | None:
    m = _XID.search(ev)
    if m:
        return (f"Xid {m.group(2)} on the GPU at PCI {m.group(1)}: a driver/hardware fault; drain the node, "
                "report it with `nvidia-bug-report.sh`, and resubmit on another node.")
    return None


def _cpu_oom(line: str, ev: str) -> str | None:
    low = ev.lower()
    if "shared memory" in low or "/dev/shm" in low or "bus error" in low:
        return ("The DataLoader workers ran out of shared memory (/dev/shm): raise the container's shm size "
                "(docker --shm-size, a memory-backed emptyDir in Kubernetes) or use fewer workers.")
    if "oomkilled" in low or "cgroup" in low or "memory limit" in low:
        return "The container hit its memory limit: raise the limit/request or reduce the job's host memory use."
    return None


_SPECIFIC: dict[str, Callable[[str, str], str | None]] = {
    "gpu_oom": _gpu_oom,
    "cpu_oom": _cpu_oom,
    "import_error": _import,
    "cuda_env_error": _cuda_env,
    "incorrect_input": _input,
    "permission_error": _permission,
    "storage_error": _storage,
    "syntax_error": _syntax,
    "gpu_hardware": _hardware,
}


def _flag_for(value: str, args: list[str], i: int) -> str:
    if "=" in args[i] and args[i].startswith("-"):
        return args[i].split("=", 1)[0] + "=" + args[i].split("=", 1)[1]
    if i > 0 and args[i - 1].startswith("-"):
        return f"{args[i - 1]} {value}"
    return f"argument {value!r}"


def path_origin(path: str, context: HintContext) -> str | None:
    """Where ``path`` comes from: a flag, a declared input, the output directory, or the program."""
    norm = os.path.normpath(path)
    for raw in context.inputs:
        if os.path.normpath(raw) == norm or norm.endswith(os.sep + os.path.normpath(raw)):
            return f"declared input {raw}"
    if context.output_dir and (norm + os.sep).startswith(os.path.normpath(context.output_dir) + os.sep):
        return f"under the output directory {context.output_dir}"
    args = context.args
    best: tuple[int, str] | None = None
    for i, a in enumerate(args):
        value = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
        if not value or value.startswith("-") or len(value) < 3:
            continue
        exact = os.path.normpath(value) == norm
        part = value in norm.split(os.sep) or (os.sep in value and value in norm)
        if exact or part:
            rank = 0 if exact else 1
            if best is None or rank < best[0]:
                how = "given by" if exact else "built from"
                best = (rank, f"{how} {_flag_for(value, args, i)}")
    if best is not None:
        return best[1]
    if context.where:
        return f"named in the program at {context.where}"
    return None


def _rule_hint(category: str, rule: Any, match: Any) -> str | None:
    """The deciding rule's own hint, rendered with values from the match; None for a rule without
    one, or a rule of another category (the answer did not come from it)."""
    if rule is None and match is not None:
        rule = getattr(match, "rule", None)
    if rule is None or not getattr(rule, "hint", None) or getattr(rule, "category", category) != category:
        return None
    return render_hint(rule, match)


def specific_hint(category: str, evidence: Sequence[str]) -> str | None:
    """The hint built from the evidence lines alone (the failed allocation, the missing module,
    the path...), or None when the evidence says nothing more than the category does."""
    fn = _SPECIFIC.get(category)
    return fn(evidence[0] if evidence else "", "\n".join(evidence)) if fn is not None else None


def path_in_evidence(evidence: Sequence[str]) -> str | None:
    """The file path an error message names (``No such file or directory: 'data/x.bin'``), if any."""
    return next(iter(extract_inputs(evidence, any_file=True)), None)


def _dry_run_extras(hint: str, category: str, evidence: Sequence[str], context: HintContext | None) -> str:
    """The module an import failed on; the path the evidence names and where it comes from."""
    text = "\n".join(evidence)
    if category == "import_error":
        module = re.search(r"No module named '([\w.]+)'|import ([\w.]+): ModuleNotFoundError", text)
        if module:
            return f"{hint} Module: {(module.group(1) or module.group(2)).split('.')[0]}."
    if context is None or category not in ("incorrect_input", "checkpoint_error", "permission_error"):
        return hint
    path = path_in_evidence(evidence)
    if path is None:
        return hint
    origin = path_origin(path, context)
    return f"{hint} Path: {path}" + (f" ({origin})." if origin else ".")


def hint_for(category: str, evidence: Sequence[str] = (), *, rule: Any = None, match: Any = None,
             dry_run: bool = False, context: HintContext | None = None) -> str:
    """What to do about a failure of ``category`` shown by ``evidence`` (first line decisive).

    ``rule``/``match``: the signature rule that decided and its match (job logs). ``dry_run``:
    the validator's wording and rules; ``context`` (dry runs) adds the path and its origin.
    """
    text = "\n".join(evidence)
    hint = _rule_hint(category, rule, match) or next(
        (r.hint for r in HINT_RULES if r.category == category and (dry_run or not r.dry_run)
         and re.search(r.pattern, text, re.IGNORECASE)), None) or specific_hint(category, list(evidence))
    if hint is None:
        defaults = FIX_HINTS if dry_run else CATEGORY_HINTS
        hint = defaults.get(category, defaults["unknown"])
    return _dry_run_extras(hint, category, evidence, context) if dry_run else hint

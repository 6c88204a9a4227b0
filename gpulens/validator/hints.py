"""Fix hints keyed by category + evidence, with the validator's own context (which input, which flag).

``fix_hint(category, evidence, context)`` picks the first rule of the category
whose pattern matches the evidence lines, else the category's general hint, and
appends what the validator knows: the path the evidence names and where it comes
from (a command-line flag, a declared input, the output directory, or the
program itself at file:line). The rules are plain data, independent of the
dry run, so the diagnosis can share them later.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence

from gpulens.diagnosis.hints import specific_hint

__all__ = ["FIX_HINTS", "HINT_RULES", "HintContext", "fix_hint", "path_in_evidence", "path_origin"]

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

#: (category, pattern over the evidence, hint): the first match of the category wins.
HINT_RULES: list[tuple[str, str, str]] = [
    ("checkpoint_error", r"weights.only|WeightsUnpickler|UnpicklingError", _WEIGHTS_ONLY),
    ("checkpoint_error", r"PytorchStreamReader|failed finding central directory|EOFError|corrupt|truncated|invalid load key",
     "The checkpoint file is truncated or corrupt: re-create it or resume from an earlier one."),
    ("checkpoint_error", r"(No such file|does not exist|FileNotFoundError).*(while reading|torch\.load|load)|while reading",
     "The checkpoint to resume from does not exist: fix the path (or start without resuming)."),
    ("incorrect_input", r"weights.only|WeightsUnpickler", _WEIGHTS_ONLY),
    ("incorrect_input", r"blacklist", "The input is blacklisted: use another copy of the data or ask an operator to clear it."),
    ("incorrect_input", r"empty", "The input is empty: re-create or re-download it."),
    ("incorrect_input", r"No such file|does not exist|FileNotFoundError|os\.path\.(exists|isfile|isdir)|\.exists\(\)|not found",
     _MISSING_READ),
    ("incorrect_input", r"Permission denied|not readable", "The input is not readable: fix its permissions or copy it where the job's account can read it."),
    ("incorrect_input", r"Error|BadGzip|BadZip|could not be read|while reading|decod|corrupt|truncat",
     "The input's contents cannot be decoded (truncated, corrupt or another format): re-create it or point at a good copy."),
    ("import_error", r"cannot import name",
     "A name is missing from an installed package: the job's environment has another version than the code expects; pin the version the code needs."),
    ("import_error", r"No module named '?([A-Za-z0-9_]+)",
     "Install the missing module in the job's environment (pip install it there; the package name may differ from the module name), or remove the import."),
    ("semantic_error", r"invalid index of a 0-dim tensor",
     "Old PyTorch API: use tensor.item() instead of tensor.data[0] / loss.data[0] (removed in PyTorch 0.5)."),
    ("semantic_error", r"Legacy autograd function",
     "Old PyTorch API: rewrite the autograd.Function with static forward(ctx, ...) / backward(ctx, ...) and call it via .apply(...)."),
    ("semantic_error", r"shapes? cannot be multiplied|size mismatch|must match the size|Expected .* size|dimension",
     "Fix the tensor shapes in the evidence (layer sizes vs the data); it fails the same way on any GPU."),
    ("semantic_error", r"device|cuda:0 and cpu",
     "Move the model and every tensor to the same device (.to(device)) before computing."),
    ("cuda_env_error", r"not compiled with CUDA|_cuda_|CUDA support|cpu-only|\+cpu",
     "The job's environment has a CPU-only PyTorch build: install a CUDA build of torch there (e.g. pip install torch --index-url https://download.pytorch.org/whl/cu126)."),
    ("cuda_env_error", r"driver version is insufficient|driver.*too old|CUDA driver version",
     "The node's NVIDIA driver is older than the CUDA runtime of the job's torch: use a torch build for an older CUDA, or a node with a newer driver."),
    ("cuda_env_error", r"No CUDA GPUs are available|no NVIDIA driver|CUDA_VISIBLE_DEVICES|CUDA unavailable",
     "The program needs a GPU but saw none: request a GPU, and check CUDA_VISIBLE_DEVICES and the device index it selects."),
    ("cuda_error", r"illegal memory access|device-side assert",
     "Re-run with CUDA_LAUNCH_BLOCKING=1 to find the failing kernel (an index out of range is the usual cause of a device-side assert)."),
    ("cuda_error", r"no kernel image is available",
     "The CUDA kernels were not built for this GPU architecture: rebuild the extension (TORCH_CUDA_ARCH_LIST) or install a matching torch."),
    ("cpu_oom", r"validator|memory limit|more than .* GiB",
     "Use less host memory (smaller batch, no whole-dataset caching, fewer DataLoader workers), or raise validate.memory_limit_bytes if the job's nodes have more memory."),
    ("comm_error", r"Address already in use|EADDRINUSE",
     "The rendezvous port is taken: use torchrun --standalone, or a free MASTER_PORT / --rdzv-endpoint."),
    ("comm_error", r"timed? ?out|Timeout|watchdog",
     "A collective or the rendezvous timed out: check that every rank starts, the world size, and the NCCL network settings."),
    ("storage_error", r"File too large|EFBIG|Errno 27",
     "The job wrote a file larger than allowed: write less (fewer/smaller checkpoints), or raise validate.file_size_limit_bytes."),
    ("storage_error", r"No space left|ENOSPC|quota",
     "The file system is full (or the quota is used up): free space or write somewhere else."),
    ("permission_error", r"Permission denied|Errno 13|Read-only file system",
     "Fix the permissions of the path in the evidence (or write to a directory the job's account owns)."),
    ("model_diverged", r"losses?:.*(nan|inf)",
     "Lower the learning rate (or add warm-up / gradient clipping, check the data for NaN/inf): the loss was not finite in the first steps."),
    ("syntax_error", r"IndentationError|TabError|unindent|indent",
     "Fix the indentation at the file:line shown (mixed tabs and spaces?), then validate again."),
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


_PATH_RE = re.compile(r"""(?:No such file or directory|does not exist|not found|Permission denied)[^'"\n]*['"]([^'"\n]+)['"]""")
_QUOTED_RE = re.compile(r"""['"]([^'"\s]*[/.][^'"\s]*)['"]""")


_BARE_RE = re.compile(r"(?:^|[\s:(])((?:[\w.~-]*/)+[\w.-]+|[\w-]+\.[A-Za-z]\w{0,5})(?=$|[\s,;:)])")
_MISSING_WORDS = re.compile(r"not found|does not exist|missing|No such|cannot find|can't find", re.IGNORECASE)


def path_in_evidence(evidence: Sequence[str]) -> str | None:
    """The file path an error message names (``No such file or directory: 'data/x.bin'``), if any."""
    for line in evidence:
        m = _PATH_RE.search(line)
        if m:
            return m.group(1)
    for line in evidence:
        if line.startswith("missing path "):
            return line.split()[2]
    for line in evidence:
        if _MISSING_WORDS.search(line):
            m = _BARE_RE.search(line.split(": ", 1)[-1])
            if m:
                return m.group(1)
    for line in evidence:
        if "Error" in line or "assert" in line:
            m = _QUOTED_RE.search(line)
            if m:
                return m.group(1)
    return None


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


def fix_hint(category: str, evidence: Sequence[str], context: HintContext | None = None) -> str:
    """The hint for ``category`` that follows ``evidence``, plus the path and where it comes from."""
    text = "\n".join(evidence)
    hint = next((h for cat, pattern, h in HINT_RULES
                 if cat == category and re.search(pattern, text, re.IGNORECASE)), None)
    if hint is None:  # the diagnosis' evidence-specific hint (the allocation, the module, the path...)
        hint = specific_hint(category, list(evidence)) or FIX_HINTS.get(category, FIX_HINTS["unknown"])
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

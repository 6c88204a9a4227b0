"""A fix hint for each diagnosis, specific to the evidence line that decided it.

Order of preference:

1. the matched rule's own hint (``hint:`` in ``signatures.yaml``), rendered by
   :func:`gpulens.diagnosis.rules.render_hint` (it fills in values taken from the match);
2. a hint built here from the evidence line for the common categories (a GPU OOM names the
   allocation that failed and what to reduce, a missing module names the package, ...);
3. the category's generic hint (:data:`gpulens.diagnosis.rules.CATEGORY_HINTS`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from gpulens.diagnosis.rules import CATEGORY_HINTS, render_hint

__all__ = [
    "hint_for",
    "specific_hint",
]

_ALLOC = re.compile(r"[Tt]ried to allocate ([\d.]+ ?[KMGT]i?B)")
_GPU_TOTAL = re.compile(r"GPU \d+ has a total capac\w* of ([\d.]+ ?[KMGT]i?B)")
_FREE = re.compile(r"([\d.]+ ?[KMGT]i?B) (?:is )?free")
_TF_SHAPE = re.compile(r"OOM when allocating tensor (?:with )?shape ?\[([\d,\s]+)\]")
_MODULE = re.compile(r"No module named '?([\w.]+)'?")
_CANNOT_IMPORT = re.compile(r"cannot import name '?(\w+)'? from '?([\w.]+)'?")
_LIB_SO = re.compile(r"(lib[\w+-]+\.so(?:\.[\d.]+)?)")
_PATH_IN = re.compile(r"""['"]((?:[A-Za-z]:)?[/\\.~][^'"]+)['"]|\s(/[^\s:;,'"]+)""")
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
    m = _PATH_IN.search(line) or _PATH_IN.search(ev)
    if not m:
        return None
    path = (m.group(1) or m.group(2)).rstrip(".")
    return what.format(path=path)


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


def _rule_hint(rule: Any, match: Any) -> str | None:
    """The rule's own hint, rendered with values from the match; None for a rule without one."""
    if rule is None or not getattr(rule, "hint", None):
        return None
    return render_hint(rule, match)


def specific_hint(category: str, evidence: Sequence[str]) -> str | None:
    """The hint built from the evidence lines alone (the failed allocation, the missing module,
    the path...), or None when the evidence says nothing more than the category does."""
    fn = _SPECIFIC.get(category)
    return fn(evidence[0] if evidence else "", "\n".join(evidence)) if fn is not None else None


def hint_for(category: str, evidence: Sequence[str], *, rule: Any = None, match: Any = None) -> str:
    """A one-paragraph fix hint for ``category`` given the evidence lines (first line decisive)."""
    got = _rule_hint(rule, match) or specific_hint(category, evidence)
    return got or CATEGORY_HINTS.get(category, CATEGORY_HINTS["unknown"])

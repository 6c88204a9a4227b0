"""Whose GPU memory it was when a job ran out of it: torch's out-of-memory message lists the memory each
process on the device held (NVML's figures), and when other processes held most of it and the log shows none of
them is the job's own, the job's own size is not what the log shows (README O1/C7: origin ``unknown``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.keyscan import find_keys

__all__ = ["held_by_another"]

#: torch >= 2.1's CUDA out-of-memory message with NVML's per-process figures
#: (c10/cuda/CUDACachingAllocator.cpp: "GPU N has a total capacity of T of which F is free. " then
#: one sentence per process on the device in NVML's order, "Process 123 has Q memory in use." or
#: "Including non-PyTorch memory, this process has P memory in use.", the sizes from c10's
#: format_size: bytes, KiB, MiB, GiB).
_OOM_SHARES = re.compile(r"total capacity of (?P<total>[\d.]+ (?:bytes|[KMGT]iB)) of which [\d.]+ (?:bytes|[KMGT]iB) is free\."
                         r"(?P<procs>(?: (?:Including non-PyTorch memory, this process|Process \d+) has [\d.]+ (?:bytes|[KMGT]iB) "
                         r"memory in use\.)+)")
_OTHER_SHARE = re.compile(r"Process \d+ has ([\d.]+ (?:bytes|[KMGT]iB)) memory in use")
_OWN_SHARE = re.compile(r"this process has ([\d.]+ (?:bytes|[KMGT]iB)) memory in use")
_SIZE_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
#: The share of the device that other processes hold from which the job met a GPU held elsewhere:
#: the job had at most a fifth of it to begin with, so its own batch or model size (C7's `user`) is not
#: what the log shows; where it held a large share itself, its own size is a cause too (dev labels:
#: another process with 54% and 67% of the device beside the job's own 45% and 33% stay `user`).
_HELD_SHARE = 0.8


def _size(text: str) -> float:
    num, unit = text.split()
    return float(num) * _SIZE_UNITS[unit]


def held_by_another(evidence: Sequence[str], lines: Sequence[str]) -> str:
    """Why a GPU out of memory's origin is not shown (README O1/C7), or "": torch's message says
    other processes held most of the device and more than this process, and the log shows none of
    them is the job's own (no other out-of-memory message of the log reports that size as "this
    process", as two launches of one job on one GPU do). Whose they were (another user, a stuck
    earlier run, a service) the log does not say."""
    m = next((m for e in evidence[:3] if (m := _OOM_SHARES.search(e))), None)
    if m is None:
        return ""  # (an evidence line cut short keeps whole sentences only: this process's own must be read)
    others, own = _OTHER_SHARE.findall(m["procs"]), _OWN_SHARE.findall(m["procs"])
    held = sum(_size(x) for x in others)
    if not own or held <= sum(_size(x) for x in own) or held < _HELD_SHARE * _size(m["total"]):
        return ""
    own_sizes = {x for i in find_keys(lines, ("this process has ",)) for x in _OWN_SHARE.findall(lines[i])}
    if own_sizes & set(others):
        return ""
    return ("other processes held most of the GPU's memory when it ran out (torch's message names them by "
            "process id only): whose they were is not in the log")

"""Whether a GPU out of memory met a device that something else held: TensorFlow 1.x's start-up
device line reporting most of the memory taken before the job allocated anything (origin unknown)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpulens.diagnosis.keyscan import find_keys
from gpulens.diagnosis.logread.cause.answers import reorigin
from gpulens.diagnosis.types import Diagnosis

__all__ = ["held_elsewhere"]


#: TensorFlow 1.x's device line at start-up (core/common_runtime/gpu/gpu_device.cc, the memory in
#: strings::HumanReadableNumBytes: "totalMemory: 11.17GiB freeMemory: 450.38MiB").
_TF_DEVICE_MEMORY = re.compile(r"totalMemory: (?P<total>[\d.]+)(?P<tu>[KMGT]?i?B) freeMemory: (?P<free>[\d.]+)(?P<fu>[KMGT]?i?B)")
_TF_MEMORY_KEY = ("freeMemory: ",)
_BYTE_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
#: The free share of the device's memory below which the job found the GPU held by something else.
_HELD_FREE_SHARE = 0.5


def held_elsewhere(d: Diagnosis, lines: Sequence[str], floor: int, start: int) -> Diagnosis:
    """For a GPU out of memory (``d``), origin ``unknown`` when the framework reported the device
    mostly taken before the job allocated anything (README O1/C7: memory held by another process the
    log does not name: the job's own earlier run, another user, a stuck process), else ``d``. Only the
    attempt's first device line tells: TensorFlow 1.x prints one for each session it opens, and the
    job's own first session holds the memory a second one finds taken."""
    if d.category != "gpu_oom" or d.origin == "unknown":
        return d
    m = next((m for i in find_keys(lines, _TF_MEMORY_KEY, floor, start) if (m := _TF_DEVICE_MEMORY.search(lines[i]))), None)
    if m is None or m["tu"] not in _BYTE_UNITS or m["fu"] not in _BYTE_UNITS:
        return d
    total = float(m["total"]) * _BYTE_UNITS[m["tu"]]
    if total > 0 and float(m["free"]) * _BYTE_UNITS[m["fu"]] < _HELD_FREE_SHARE * total:
        return reorigin(d, "unknown", "the GPU's memory was mostly taken before the job began "
                                       "(another process the log does not name held it)")
    return d

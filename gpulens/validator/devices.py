"""Pick the cheap validation GPU, and project the dry run's memory onto the requested GPU type.

Devices come from the collectors' GPU backend (``gpulens.collectors.gpu.base.GpuBackend``:
``devices()`` + one ``poll()``), turned into :class:`GpuCandidate` records; the
choice itself (:func:`pick_device`) is a pure function over those records.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "GpuCandidate",
    "MODEL_AGE",
    "Projection",
    "candidates_from_backend",
    "gpu_type_of",
    "local_candidates",
    "open_backend",
    "parse_pool",
    "pick_device",
    "project_memory",
]

#: GPU model families from oldest to newest (the tie-break when no price is known).
MODEL_AGE: tuple[str, ...] = (
    "K80", "M60", "P4", "P40", "P100", "T4", "V100", "A10", "A30", "A40", "A100",
    "L4", "L40", "H100", "H200", "B200",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class GpuCandidate:
    """One local GPU as the validator sees it."""

    index: int
    model: str
    memory_total_bytes: int | None = None
    utilization: float | None = None  # percent 0-100
    memory_used_bytes: int | None = None
    processes: int = 0
    price_per_hour: float | None = None
    uuid: str | None = None


def _tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[^A-Za-z0-9]+", text.upper()) if t}


def gpu_type_of(model: str, types: Iterable[str]) -> str | None:
    """The configured type a device model belongs to: ``'NVIDIA A100-SXM4-80GB'`` -> ``'A100'``."""
    tokens = _tokens(model)
    best: str | None = None
    for name in types:
        if name.upper() in tokens or _tokens(name) <= tokens:
            if best is None or len(name) > len(best):
                best = name
    return best


def _age(model: str) -> int:
    tokens = _tokens(model)
    for i, family in enumerate(MODEL_AGE):
        if family in tokens:
            return i
    return len(MODEL_AGE)


def parse_pool(text: str) -> set[int] | None:
    """``"0,2-3"`` -> {0, 2, 3}; empty -> None (every local GPU)."""
    text = text.strip()
    if not text:
        return None
    pool: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, hi = part.split("-", 1)
            pool.update(range(int(lo), int(hi) + 1))
        elif part:
            pool.add(int(part))
    return pool


def _price(c: GpuCandidate, gpu_types: Mapping[str, Mapping[str, float]]) -> float | None:
    if c.price_per_hour is not None:
        return c.price_per_hour
    kind = gpu_type_of(c.model, gpu_types)
    if kind is not None and "price_per_hour" in gpu_types[kind]:
        return float(gpu_types[kind]["price_per_hour"])
    return None


def pick_device(
    candidates: Iterable[GpuCandidate],
    *,
    pool: set[int] | None = None,
    gpu_types: Mapping[str, Mapping[str, float]] | None = None,
    idle_utilization: float = 5.0,
    idle_memory_bytes: int = 512 * 1024**2,
) -> GpuCandidate | None:
    """The cheapest idle GPU of the pool, or None (run on CPU).

    Idle: no compute process, utilization at most ``idle_utilization`` percent,
    at most ``idle_memory_bytes`` used. Order: known price per hour (device's own,
    else its configured type's) ascending, GPUs without a price after those;
    then smallest memory, then oldest model, then lowest index.
    """
    types = gpu_types or {}
    idle = [
        c
        for c in candidates
        if (pool is None or c.index in pool)
        and c.processes == 0
        and (c.utilization or 0.0) <= idle_utilization
        and (c.memory_used_bytes or 0) <= idle_memory_bytes
    ]
    if not idle:
        return None

    def key(c: GpuCandidate) -> tuple[int, float, float, int, int]:
        price = _price(c, types)
        memory = float(c.memory_total_bytes) if c.memory_total_bytes else math.inf
        return (price is None, price if price is not None else 0.0, memory, _age(c.model), c.index)

    return min(idle, key=key)


def candidates_from_backend(backend: Any) -> list[GpuCandidate]:
    """Devices of a ``gpulens.collectors.gpu.base.GpuBackend`` with one poll's utilization and processes."""
    devices = list(backend.devices())
    reading = backend.poll()
    samples = {s.index: s for s in reading.samples}
    busy: dict[int, int] = {}
    for p in reading.processes:
        busy[p.gpu_index] = busy.get(p.gpu_index, 0) + 1
    out: list[GpuCandidate] = []
    for d in devices:
        if d.index in reading.lost:
            continue
        s = samples.get(d.index)
        out.append(
            GpuCandidate(
                index=d.index,
                model=d.model,
                memory_total_bytes=d.memory_total_bytes or (s.mem_total_bytes if s else None),
                utilization=s.util_gpu if s else None,
                memory_used_bytes=s.mem_used_bytes if s else None,
                processes=busy.get(d.index, 0),
                uuid=d.uuid,
            )
        )
    return out


def open_backend(name: str = "auto", scenario: str = "") -> Any:
    """The collectors' GPU backend by name (auto | nvml | fake | none); None when there is none.

    Raises whatever the backend raises when it cannot start (callers treat any
    failure as "no GPU").
    """
    from gpulens.collectors.gpu import open_backend as open_gpu  # lazy: only when a GPU is wanted

    return open_gpu(name, scenario or None, xid_events=False, gpm=False)


def local_candidates(backend_name: str = "auto", scenario: str = "") -> tuple[list[GpuCandidate], str]:
    """This machine's GPUs through the collectors' backend; ([], why) when there are none."""
    try:
        backend = open_backend(backend_name, scenario)
    except Exception as exc:
        text = str(getattr(exc, "message", "") or exc) or type(exc).__name__
        return [], "no GPU found: " + text.splitlines()[0].split(" (")[0].rstrip(".")
    if backend is None:
        return [], "GPU backend disabled (validate.backend = none)"
    try:
        found = candidates_from_backend(backend)
    except Exception as exc:
        return [], f"GPU backend failed ({exc})"
    finally:
        try:
            backend.close()
        except Exception:
            pass
    if not found:
        return [], "no GPU on this machine"
    return found, f"{len(found)} GPU(s) via the {getattr(backend, 'name', 'gpu')} backend"


@dataclasses.dataclass
class Projection:
    """What the dry run's memory says about the requested GPU type."""

    verdict: str | None  # None: no objection; 'fail' or 'inconclusive'
    category: str | None
    message: str


def project_memory(
    *,
    target_type: str | None,
    target_memory_bytes: int | None,
    device_memory_bytes: int | None,
    peak_gpu_bytes: int | None,
    lower_bound_bytes: int | None,
    oom_on_device: bool,
) -> Projection:
    """Project the validation run's memory onto the requested GPU type.

    * out of memory on the validation GPU, and the target GPU is larger: inconclusive;
    * out of memory on a validation GPU at least as large as the target: fail (gpu_oom);
    * peak GPU memory above the target's memory: fail (gpu_oom predicted);
    * on CPU, parameters + gradients + optimizer state (a lower bound of what the
      GPU needs) above the target's memory: fail (gpu_oom predicted);
    * otherwise no objection (activations on CPU are not measured: said so).
    """
    if oom_on_device:
        return _project_oom(target_type, target_memory_bytes, device_memory_bytes)
    if target_memory_bytes is None:
        return Projection(None, None, "no GPU type requested: memory not projected")
    if peak_gpu_bytes:
        return _project_peak(target_type, target_memory_bytes, peak_gpu_bytes)
    return _project_lower_bound(target_type, target_memory_bytes, lower_bound_bytes)


_GIB = 1024**3


def _project_oom(target_type: str | None, target_memory_bytes: int | None,
                 device_memory_bytes: int | None) -> Projection:
    """Out of memory on the validation GPU: inconclusive when the target GPU is larger, else fail."""
    if target_memory_bytes and device_memory_bytes and target_memory_bytes > device_memory_bytes:
        return Projection(
            "inconclusive",
            "gpu_oom",
            f"out of memory on the {device_memory_bytes / _GIB:.0f} GiB validation GPU, but the"
            f" requested {target_type} has {target_memory_bytes / _GIB:.0f} GiB",
        )
    return Projection("fail", "gpu_oom", "out of GPU memory during the dry run")


def _project_peak(target_type: str | None, target_memory_bytes: int, peak_gpu_bytes: int) -> Projection:
    """The measured peak GPU memory against the target's: fail (gpu_oom predicted) above it."""
    if peak_gpu_bytes > target_memory_bytes:
        return Projection(
            "fail",
            "gpu_oom",
            f"peak GPU memory {peak_gpu_bytes / _GIB:.2f} GiB exceeds the requested"
            f" {target_type}'s {target_memory_bytes / _GIB:.0f} GiB (gpu_oom predicted)",
        )
    return Projection(
        None,
        None,
        f"peak GPU memory {peak_gpu_bytes / _GIB:.2f} GiB fits the {target_type}'s"
        f" {target_memory_bytes / _GIB:.0f} GiB",
    )


def _project_lower_bound(target_type: str | None, target_memory_bytes: int,
                         lower_bound_bytes: int | None) -> Projection:
    """A CPU run: parameters + gradients + optimizer state against the target's memory."""
    if lower_bound_bytes and lower_bound_bytes > target_memory_bytes:
        return Projection(
            "fail",
            "gpu_oom",
            f"parameters, gradients and optimizer state alone take {lower_bound_bytes / _GIB:.2f} GiB,"
            f" more than the requested {target_type}'s {target_memory_bytes / _GIB:.0f} GiB"
            " (gpu_oom predicted)",
        )
    return Projection(
        None,
        None,
        "ran on CPU: GPU memory not measured (parameters + optimizer state fit the "
        f"{target_type})" if lower_bound_bytes else "ran on CPU: GPU memory not measured",
    )

"""The GPU seam: what every GPU backend (NVML, fake) reports, and the field guard they share.

A backend reports raw readings: gauges as they are, counters as the device's
cumulative values (the agent turns counters into rates with gpulens.collectors.rates).
Every field is optional: a field the device does not support is ``None``.

:class:`FieldGuard` is the one place that decides what a failed read means:
``FieldUnsupported`` (NVML_ERROR_NOT_SUPPORTED / NOT_FOUND / NO_PERMISSION ...)
becomes ``None`` and is logged once per (device, field); ``DeviceLost``
(NVML_ERROR_GPU_IS_LOST) propagates so the backend can mark the device lost;
any other ``FieldError`` becomes ``None``, is counted, and is logged once.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Protocol, TypeVar, runtime_checkable

__all__ = [
    "GPU_FIELDS",
    "DeviceLost",
    "FieldError",
    "FieldGuard",
    "FieldUnsupported",
    "GpuBackend",
    "GpuDevice",
    "GpuProcess",
    "GpuReading",
    "GpuSample",
    "XidEvent",
]

log = logging.getLogger("gpulens.collectors.gpu")

T = TypeVar("T")


class FieldError(Exception):
    """A device query failed for a reason other than 'unsupported'."""


class FieldUnsupported(FieldError):
    """The device does not support this query (becomes NULL, logged once)."""


class DeviceLost(Exception):
    """The device fell off the bus (NVML_ERROR_GPU_IS_LOST): stop querying it."""


@dataclasses.dataclass(frozen=True)
class GpuDevice:
    """Static identity of one GPU."""

    index: int
    uuid: str
    model: str
    memory_total_bytes: int | None = None


#: Dynamic fields of :class:`GpuSample` (besides ``index``); the fake backend and tests use it.
GPU_FIELDS: tuple[str, ...] = (
    "util_gpu",
    "util_mem",
    "mem_used_bytes",
    "mem_total_bytes",
    "pcie_tx_bytes",
    "pcie_rx_bytes",
    "pcie_tx_snapshot_bps",
    "pcie_rx_snapshot_bps",
    "pcie_replay_total",
    "power_w",
    "energy_j",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "ecc_corrected_total",
    "ecc_uncorrected_total",
    "row_remap_failures",
    "nvlink_tx_bytes",
    "nvlink_rx_bytes",
    "sm_active_ratio",
    "tensor_active_ratio",
)


@dataclasses.dataclass
class GpuSample:
    """One reading of one GPU. Units as in gpulens/store/samples.py.

    Counters (``pcie_*_bytes``, ``nvlink_*_bytes``, ``energy_j``, ``*_total``)
    are cumulative device values; ``pcie_*_snapshot_bps`` is NVML's 20 ms
    throughput snapshot, reported only when the cumulative counter is not.
    """

    index: int
    util_gpu: float | None = None  # percent 0-100
    util_mem: float | None = None  # percent 0-100
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    pcie_tx_bytes: int | None = None
    pcie_rx_bytes: int | None = None
    pcie_tx_snapshot_bps: float | None = None
    pcie_rx_snapshot_bps: float | None = None
    pcie_replay_total: int | None = None
    power_w: float | None = None
    energy_j: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    ecc_corrected_total: int | None = None
    ecc_uncorrected_total: int | None = None
    row_remap_failures: int | None = None
    nvlink_tx_bytes: int | None = None
    nvlink_rx_bytes: int | None = None
    sm_active_ratio: float | None = None  # 0-1 (GPM)
    tensor_active_ratio: float | None = None  # 0-1 (GPM)


@dataclasses.dataclass(frozen=True)
class GpuProcess:
    """A compute process running on a GPU."""

    gpu_index: int
    pid: int
    used_memory_bytes: int | None = None
    sm_util: float | None = None  # percent of the GPU's SMs this process used (0-100)


@dataclasses.dataclass(frozen=True)
class XidEvent:
    """One XID error reported by the driver (each event counts, repeats included)."""

    gpu_index: int
    xid: int


@dataclasses.dataclass
class GpuReading:
    """Everything one backend poll returns."""

    samples: list[GpuSample] = dataclasses.field(default_factory=list)
    processes: list[GpuProcess] = dataclasses.field(default_factory=list)
    xids: list[XidEvent] = dataclasses.field(default_factory=list)
    #: indexes of devices that are lost (no samples are returned for them)
    lost: set[int] = dataclasses.field(default_factory=set)
    #: errors other than 'unsupported' met during this poll
    errors: int = 0


@runtime_checkable
class GpuBackend(Protocol):
    """A source of GPU readings. ``poll`` must never block for long (no waits on events)."""

    name: str

    def devices(self) -> list[GpuDevice]: ...

    def poll(self) -> GpuReading: ...

    def close(self) -> None: ...


class FieldGuard:
    """Run one device query; map its failure to ``None`` and log each (device, field) once."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or log
        self._logged: set[tuple[int, str]] = set()
        self.unsupported: set[tuple[int, str]] = set()
        self.errors = 0

    def read(self, device: int, field: str, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except FieldUnsupported as exc:
            self.unsupported.add((device, field))
            self._once(device, field, f"GPU {device}: {field} is not supported ({exc}); recording NULL")
            return None
        except FieldError as exc:
            self.errors += 1
            self._once(device, field, f"GPU {device}: reading {field} failed ({exc}); recording NULL")
            return None

    def note(self, device: int, field: str, exc: BaseException, *, unsupported: bool) -> None:
        """Record a failure met outside :meth:`read` (e.g. one value of a batch read)."""
        if unsupported:
            self.unsupported.add((device, field))
            self._once(device, field, f"GPU {device}: {field} is not supported ({exc}); recording NULL")
        else:
            self.errors += 1
            self._once(device, field, f"GPU {device}: reading {field} failed ({exc}); recording NULL")

    def _once(self, device: int, field: str, message: str) -> None:
        key = (device, field)
        if key not in self._logged:
            self._logged.add(key)
            self._log.warning(message)

    def take_errors(self) -> int:
        n, self.errors = self.errors, 0
        return n

"""A scripted GPU backend: devices, processes, unsupported fields, lost GPUs, XIDs, counter wraps.

Load it from a JSON scenario (``gpulens collect --backend fake --fake-scenario FILE``)
or build it from a dict. Every poll is one "tick"; values listed as arrays are
taken in turn (cycling), scalars stay constant. Format::

    {
      "missing_library": false,          # true: behave like a machine without NVML
      "devices": [{
        "index": 0, "uuid": "GPU-...", "model": "NVIDIA H100 80GB HBM3",
        "memory_total_bytes": 85899345920,
        "values":   {"util_gpu": [20, 90], "power_w": 350},      # any GpuSample gauge
        "counters": {"pcie_tx_bytes": {"start": 0, "step": 1e9,   # cumulative counters
                                       "wrap_bits": 32, "reset_at_tick": 7}},
        "unsupported": ["nvlink_tx_bytes", "nvlink_rx_bytes"],   # NULL, logged once
        "failing": ["temp_c"],                                   # NULL, counted as errors
        "lost_at_tick": 5                                        # GPU falls off the bus
      }],
      "processes": [{"gpu": 0, "pid": 4242 | "self", "used_memory_bytes": 1e9,
                     "sm_util": [30, 60], "from_tick": 0, "until_tick": 10}],
      "xids": [{"tick": 2, "gpu": 0, "xid": 79, "count": 3}],
      "phases": [{"from_tick": 20, "until_tick": 40, "gpus": [0, 1],   # a degradation part-way
                  "values": {"sm_clock_mhz": 900, "power_w": 250},
                  "counters": {"pcie_tx_bytes": {"step": 1.2e9}}}]     # counters: another step
    }

Fields a device does not mention get plausible defaults, so a one-line
scenario ``{"devices": [{"index": 0}]}`` already fills every column.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpulens.collectors.gpu.base import (
    GPU_FIELDS,
    DeviceLost,
    FieldError,
    FieldGuard,
    FieldUnsupported,
    GpuDevice,
    GpuProcess,
    GpuReading,
    GpuSample,
    XidEvent,
)
from gpulens.errors import BackendUnavailableError, InputError

__all__ = ["COUNTER_FIELDS", "FakeBackend", "load_scenario"]

#: Fields that are cumulative counters in a scenario (``counters`` section).
COUNTER_FIELDS: tuple[str, ...] = (
    "pcie_tx_bytes",
    "pcie_rx_bytes",
    "pcie_replay_total",
    "energy_j",
    "ecc_corrected_total",
    "ecc_uncorrected_total",
    "nvlink_tx_bytes",
    "nvlink_rx_bytes",
)
_GAUGES = tuple(f for f in GPU_FIELDS if f not in COUNTER_FIELDS)

_GIB = 1024**3
_DEFAULT_GAUGES: dict[str, Any] = {
    "util_gpu": [35.0, 72.0, 95.0],
    "util_mem": [20.0, 41.0, 63.0],
    "mem_used_bytes": [10 * _GIB, 30 * _GIB, 60 * _GIB],
    "pcie_tx_snapshot_bps": None,  # the fake has cumulative PCIe counters by default
    "pcie_rx_snapshot_bps": None,
    "power_w": [220.0, 480.0, 650.0],
    "temp_c": [41.0, 55.0, 67.0],
    "sm_clock_mhz": [1410.0, 1755.0, 1980.0],
    "mem_clock_mhz": 2619.0,
    "row_remap_failures": 0,
    "sm_active_ratio": [0.3, 0.7, 0.9],
    "tensor_active_ratio": [0.1, 0.4, 0.6],
}
_DEFAULT_COUNTERS: dict[str, dict[str, float]] = {
    "pcie_tx_bytes": {"start": 0, "step": 2.5e9},
    "pcie_rx_bytes": {"start": 0, "step": 4.0e9},
    "pcie_replay_total": {"start": 0, "step": 0},
    "energy_j": {"start": 1.0e6, "step": 2500.0},
    "ecc_corrected_total": {"start": 0, "step": 0},
    "ecc_uncorrected_total": {"start": 0, "step": 0},
    "nvlink_tx_bytes": {"start": 0, "step": 1.2e10},
    "nvlink_rx_bytes": {"start": 0, "step": 1.1e10},
}
_INT_FIELDS = {
    "mem_used_bytes",
    "mem_total_bytes",
    "pcie_tx_bytes",
    "pcie_rx_bytes",
    "pcie_replay_total",
    "ecc_corrected_total",
    "ecc_uncorrected_total",
    "row_remap_failures",
    "nvlink_tx_bytes",
    "nvlink_rx_bytes",
}


def _pick(value: Any, tick: int) -> Any:
    if isinstance(value, list):
        return value[tick % len(value)] if value else None
    return value


def _bad(where: str, what: str) -> InputError:
    return InputError(
        f"Fake scenario {where}: {what}.",
        "See the scenario format in docs/collectors.md (section 'Fake backend').",
    )


def load_scenario(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a JSON scenario file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"Fake scenario {p} does not exist.", "Pass an existing JSON file to --fake-scenario.") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad(str(p), f"is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise _bad(str(p), "the top level must be an object")
    return data


class _FakeDevice:
    def __init__(self, spec: Mapping[str, Any], pos: int, where: str) -> None:
        if not isinstance(spec, Mapping):
            raise _bad(where, f"devices[{pos}] must be an object")
        self.index = int(spec.get("index", pos))
        self.info = GpuDevice(
            self.index,
            str(spec.get("uuid", f"GPU-fake-{self.index:04d}-0000-0000-000000000000")),
            str(spec.get("model", "NVIDIA H100 80GB HBM3")),
            int(spec.get("memory_total_bytes", 80 * _GIB)),
        )
        values = spec.get("values", {})
        counters = spec.get("counters", {})
        if not isinstance(values, Mapping) or not isinstance(counters, Mapping):
            raise _bad(where, f"devices[{pos}].values and .counters must be objects")
        for name in values:
            if name not in _GAUGES:
                raise _bad(where, f"devices[{pos}].values has unknown field {name!r} (gauges: {', '.join(_GAUGES)})")
        for name in counters:
            if name not in COUNTER_FIELDS:
                raise _bad(where, f"devices[{pos}].counters has unknown field {name!r} (counters: {', '.join(COUNTER_FIELDS)})")
        self.values: dict[str, Any] = {**_DEFAULT_GAUGES, "mem_total_bytes": self.info.memory_total_bytes}
        self.values.update(values)
        self.counters: dict[str, dict[str, float]] = {k: dict(v) for k, v in _DEFAULT_COUNTERS.items()}
        for k, v in counters.items():
            if not isinstance(v, Mapping):
                raise _bad(where, f"devices[{pos}].counters.{k} must be an object")
            self.counters[k] = {**self.counters[k], **{kk: float(vv) for kk, vv in v.items()}}
        self.unsupported = {str(f) for f in spec.get("unsupported", [])}
        self.failing = {str(f) for f in spec.get("failing", [])}
        for name in self.unsupported | self.failing:
            if name not in GPU_FIELDS:
                raise _bad(where, f"devices[{pos}] lists unknown field {name!r}")
        lost = spec.get("lost_at_tick")
        self.lost_at = None if lost is None else int(lost)
        #: (from tick, until tick or None, gauge values) scripted for this device, later ones win
        self.phases: list[tuple[int, int | None, Mapping[str, Any]]] = []
        #: (from tick, until tick or None, counter -> step per tick) scripted for this device
        self.counter_phases: list[tuple[int, int | None, dict[str, float]]] = []

    def field(self, name: str, tick: int) -> Any:
        if self.lost_at is not None and tick >= self.lost_at:
            raise DeviceLost("GPU is lost (scripted)")
        if name in self.unsupported:
            raise FieldUnsupported("Not Supported (scripted)")
        if name in self.failing:
            raise FieldError("Unknown Error (scripted)")
        if name in self.counters:
            c = self.counters[name]
            reset = c.get("reset_at_tick")
            if reset is not None and tick >= reset:  # counter restarted from 0 (driver reload)
                value = c.get("step", 0.0) * (tick - int(reset))
            else:
                value = c.get("start", 0.0) + c.get("step", 0.0) * tick
                for lo, hi, steps in self.counter_phases:  # another step from lo until hi
                    if name in steps and tick > lo:
                        value += (steps[name] - c.get("step", 0.0)) * (min(tick, hi if hi is not None else tick) - lo)
            bits = c.get("wrap_bits")
            if bits:
                value = int(value) % (1 << int(bits))
        else:
            value = _pick(self.values.get(name), tick)
            for lo, hi, vals in self.phases:
                if name in vals and tick >= lo and (hi is None or tick < hi):
                    value = _pick(vals[name], tick)
        if value is None:
            return None
        return int(value) if name in _INT_FIELDS else float(value)


class FakeBackend:
    """Scripted GPUs. ``FakeBackend(scenario_dict)`` or ``FakeBackend.from_file(path)``."""

    name = "fake"

    def __init__(self, scenario: Mapping[str, Any] | None = None, *, where: str = "<dict>") -> None:
        scenario = dict(scenario or {"devices": [{"index": 0}]})
        if scenario.get("missing_library"):
            raise BackendUnavailableError(
                "NVML is not available on this machine (NVML Shared Library Not Found; scripted by the fake scenario).",
                "Install the NVIDIA driver, or run with --backend none for network-only collection.",
            )
        devices = scenario.get("devices", [])
        if not isinstance(devices, list):
            raise _bad(where, "devices must be a list")
        self._devs = [_FakeDevice(spec, i, where) for i, spec in enumerate(devices)]
        self._procs = list(scenario.get("processes", []))
        self._xids = list(scenario.get("xids", []))
        for i, p in enumerate(self._procs):
            if not isinstance(p, Mapping) or "pid" not in p or "gpu" not in p:
                raise _bad(where, f"processes[{i}] needs 'gpu' and 'pid'")
        for i, x in enumerate(self._xids):
            if not isinstance(x, Mapping) or "xid" not in x or "gpu" not in x:
                raise _bad(where, f"xids[{i}] needs 'gpu' and 'xid'")
        self._add_phases(scenario.get("phases", []), where)
        self.guard = FieldGuard()
        self.tick = 0
        self._lost: set[int] = set()
        self.closed = False

    def _add_phases(self, phases: Any, where: str) -> None:
        if not isinstance(phases, list):
            raise _bad(where, "phases must be a list")
        for i, ph in enumerate(phases):
            if not isinstance(ph, Mapping) or not isinstance(ph.get("values", {}), Mapping):
                raise _bad(where, f"phases[{i}] must be an object with a 'values' object")
            vals = ph.get("values", {})
            for name in vals:
                if name not in _GAUGES:
                    raise _bad(where, f"phases[{i}].values has unknown field {name!r} (gauges: {', '.join(_GAUGES)})")
            counters = ph.get("counters", {})
            if not isinstance(counters, Mapping) or not all(
                    name in COUNTER_FIELDS and isinstance(v, Mapping) and "step" in v for name, v in counters.items()):
                raise _bad(where, f"phases[{i}].counters must map counters ({', '.join(COUNTER_FIELDS)}) "
                                  "to {\"step\": N}")
            steps = {name: float(v["step"]) for name, v in counters.items()}
            lo, hi = int(ph.get("from_tick", 0)), ph.get("until_tick")
            gpus = ph.get("gpus")
            for d in self._devs:
                if gpus is None or d.index in {int(g) for g in gpus}:
                    d.phases.append((lo, None if hi is None else int(hi), vals))
                    if steps:
                        d.counter_phases.append((lo, None if hi is None else int(hi), steps))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> FakeBackend:
        return cls(load_scenario(path), where=str(path))

    def devices(self) -> list[GpuDevice]:
        return [d.info for d in self._devs]

    def poll(self) -> GpuReading:
        tick = self.tick
        self.tick += 1
        reading = GpuReading()
        live: set[int] = set()
        for d in self._devs:
            if d.index in self._lost:
                continue
            try:
                s = GpuSample(index=d.index)
                for name in GPU_FIELDS:
                    setattr(s, name, self.guard.read(d.index, name, functools.partial(d.field, name, tick)))
            except DeviceLost:
                self._lost.add(d.index)
                reading.errors += 1
                continue
            reading.samples.append(s)
            live.add(d.index)
        for p in self._procs:
            gpu = int(p["gpu"])
            lo, hi = int(p.get("from_tick", 0)), p.get("until_tick")
            if gpu not in live or tick < lo or (hi is not None and tick >= int(hi)):
                continue
            pid = os.getpid() if p["pid"] == "self" else int(p["pid"])
            mem = _pick(p.get("used_memory_bytes"), tick)
            util = _pick(p.get("sm_util"), tick)
            reading.processes.append(
                GpuProcess(gpu, pid, None if mem is None else int(mem), None if util is None else float(util))
            )
        for x in self._xids:
            if int(x.get("tick", 0)) == tick and int(x["gpu"]) in live:
                reading.xids += [XidEvent(int(x["gpu"]), int(x["xid"]))] * int(x.get("count", 1))
        reading.lost = set(self._lost)
        reading.errors += self.guard.take_errors()
        return reading

    def close(self) -> None:
        self.closed = True

"""The NVML backend (``nvidia-ml-py``, module ``pynvml``).

Every NVML call goes through :meth:`NvmlBackend._q`, the one query wrapper:
``NVML_ERROR_NOT_SUPPORTED`` / ``NOT_FOUND`` / ``NO_PERMISSION`` /
``FUNCTION_NOT_FOUND`` become NULL (logged once per device and field),
``NVML_ERROR_GPU_IS_LOST`` marks the device lost, anything else becomes NULL and
is counted as an agent error. Counters and power are read in one
``nvmlDeviceGetFieldValues`` batch per device; a field the batch reports as
unsupported is dropped from later batches. XID events are drained from an event
set with a 0 ms wait, so a poll never blocks. On GPUs that support GPM
(Hopper and newer) SM activity and tensor activity come from two GPM samples.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gpulens.collectors.gpu.base import (
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
from gpulens.errors import BackendUnavailableError, MissingExtraError
from gpulens.extras import require

__all__ = ["BATCH_FIELDS", "NvmlBackend", "decode_field_value", "translate_error"]

log = logging.getLogger("gpulens.collectors.gpu")

T = TypeVar("T")

#: GpuSample attribute -> (NVML field id name, scale). Scale converts NVML units to ours.
BATCH_FIELDS: dict[str, tuple[str, float]] = {
    "pcie_tx_bytes": ("NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 1.0),
    "pcie_rx_bytes": ("NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 1.0),
    "pcie_replay_total": ("NVML_FI_DEV_PCIE_REPLAY_COUNTER", 1.0),
    "power_w": ("NVML_FI_DEV_POWER_INSTANT", 1e-3),  # mW
    "energy_j": ("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1e-3),  # mJ
    "ecc_corrected_total": ("NVML_FI_DEV_ECC_SBE_VOL_TOTAL", 1.0),
    "ecc_uncorrected_total": ("NVML_FI_DEV_ECC_DBE_VOL_TOTAL", 1.0),
    "row_remap_failures": ("NVML_FI_DEV_REMAPPED_FAILURE", 1.0),
}
_INT_FIELDS = {
    "pcie_tx_bytes",
    "pcie_rx_bytes",
    "pcie_replay_total",
    "ecc_corrected_total",
    "ecc_uncorrected_total",
    "row_remap_failures",
}
_KIB = 1024
_MAX_XID_DRAIN = 10_000


def translate_error(nv: Any, exc: BaseException) -> BaseException:
    """Map an ``NVMLError`` to FieldUnsupported / DeviceLost / FieldError."""
    value = getattr(exc, "value", None)
    unsupported = {
        getattr(nv, name, -1)
        for name in (
            "NVML_ERROR_NOT_SUPPORTED",
            "NVML_ERROR_NOT_FOUND",
            "NVML_ERROR_NO_PERMISSION",
            "NVML_ERROR_FUNCTION_NOT_FOUND",
            "NVML_ERROR_NO_DATA",
        )
    }
    lost = {
        getattr(nv, name, -1)
        for name in ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_GPU_NOT_FOUND", "NVML_ERROR_RESET_REQUIRED")
    }
    if value in unsupported:
        return FieldUnsupported(str(exc))
    if value in lost:
        return DeviceLost(str(exc))
    return FieldError(str(exc))


def decode_field_value(nv: Any, fv: Any) -> float | int | None:
    """The value of one ``c_nvmlFieldValue_t`` by its ``valueType`` (None for unknown types)."""
    vt = int(fv.valueType)
    v = fv.value
    if vt == nv.NVML_VALUE_TYPE_DOUBLE:
        return float(v.dVal)
    if vt == nv.NVML_VALUE_TYPE_UNSIGNED_INT:
        return int(v.uiVal)
    if vt == nv.NVML_VALUE_TYPE_UNSIGNED_LONG:
        return int(v.ulVal)
    if vt == nv.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return int(v.ullVal)
    if vt == nv.NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return int(v.sllVal)
    if vt == nv.NVML_VALUE_TYPE_SIGNED_INT:
        return int(v.siVal)
    if vt == getattr(nv, "NVML_VALUE_TYPE_UNSIGNED_SHORT", -1):
        return int(v.usVal)
    return None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _Dev:
    """Per-device state of the NVML backend."""

    def __init__(self, index: int, handle: Any, info: GpuDevice) -> None:
        self.index = index
        self.handle = handle
        self.info = info
        self.field_names: dict[str, tuple[int, float]] = {}  # attr -> (field id, scale)
        self.batch_ok = True
        self.nvlink_links = 0
        self.pcie_counter = True  # False once the cumulative counters proved unsupported
        self.proc_util_ts = 0
        self.gpm: list[Any] | None = None  # two GPM samples when supported
        self.gpm_have_prev = False


class NvmlBackend:
    """GPU readings through NVML. Raises BackendUnavailableError when NVML or GPUs are absent."""

    name = "nvml"

    def __init__(self, *, xid_events: bool = True, gpm: bool = True) -> None:
        try:
            nv = require("pynvml", "gpu")
        except MissingExtraError as exc:
            raise BackendUnavailableError(exc.message, exc.hint) from None
        self._nv = nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise BackendUnavailableError(
                f"NVML is not available on this machine ({exc}).",
                "Install the NVIDIA driver, or run with --backend none for network-only collection.",
            ) from None
        except OSError as exc:  # pragma: no cover - broken library file
            raise BackendUnavailableError(f"NVML library failed to load ({exc}).") from None
        self.guard = FieldGuard(log)
        self._lost: set[int] = set()
        self._devs: list[_Dev] = []
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as exc:
            nv.nvmlShutdown()
            raise BackendUnavailableError(f"NVML cannot count GPUs ({exc}).") from None
        if count == 0:
            nv.nvmlShutdown()
            raise BackendUnavailableError(
                "NVML found no GPUs on this machine.", "Run with --backend none for network-only collection."
            )
        for i in range(count):
            self._open_device(i)
        self._events: Any = None
        if xid_events:
            self._setup_events()
        if gpm:
            for d in self._devs:
                self._setup_gpm(d)

    # ----------------------------------------------------------------- wrapper
    def _q(self, d: _Dev, field: str, fn: Callable[..., T], *args: Any) -> T | None:
        """THE query wrapper: NVML errors become None (logged once) or DeviceLost."""
        nv = self._nv

        def call() -> T:
            try:
                return fn(*args)
            except nv.NVMLError as exc:
                raise translate_error(nv, exc) from None

        return self.guard.read(d.index, field, call)

    # ------------------------------------------------------------------- setup
    def _open_device(self, i: int) -> None:
        nv = self._nv
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(i)
        except nv.NVMLError as exc:
            self.guard.note(i, "handle", exc, unsupported=False)
            self._lost.add(i)
            return
        probe = _Dev(i, handle, GpuDevice(i, f"GPU-index-{i}", "unknown"))
        try:
            uuid = self._q(probe, "uuid", nv.nvmlDeviceGetUUID, handle)
            name = self._q(probe, "name", nv.nvmlDeviceGetName, handle)
            mem = self._q(probe, "memory", nv.nvmlDeviceGetMemoryInfo, handle)
        except DeviceLost:
            self._lost.add(i)
            return
        info = GpuDevice(
            i,
            _text(uuid) if uuid is not None else f"GPU-index-{i}",
            _text(name) if name is not None else "unknown",
            int(mem.total) if mem is not None else None,
        )
        d = _Dev(i, handle, info)
        for attr, (const, scale) in BATCH_FIELDS.items():
            fid = getattr(nv, const, None)
            if fid is not None:
                d.field_names[attr] = (int(fid), scale)
            else:  # this pynvml is older than the field: fall back to direct calls
                self.guard.note(i, attr, RuntimeError(f"pynvml lacks {const}"), unsupported=True)
        link_fid = getattr(nv, "NVML_FI_DEV_NVLINK_LINK_COUNT", None)
        if link_fid is not None:
            try:
                vals = self._q(d, "nvlink_link_count", nv.nvmlDeviceGetFieldValues, handle, [link_fid])
                if vals is not None and int(vals[0].nvmlReturn) == nv.NVML_SUCCESS:
                    d.nvlink_links = int(decode_field_value(nv, vals[0]) or 0)
            except DeviceLost:
                self._lost.add(i)
                return
        self._devs.append(d)

    def _setup_events(self) -> None:
        nv = self._nv
        try:
            self._events = nv.nvmlEventSetCreate()
        except nv.NVMLError as exc:
            log.warning("NVML event sets are unavailable (%s); XID events will not be counted", exc)
            return
        for d in self._devs:
            try:
                self._q(d, "xid_events", nv.nvmlDeviceRegisterEvents, d.handle,
                        nv.nvmlEventTypeXidCriticalError, self._events)
            except DeviceLost:
                self._lost.add(d.index)

    def _setup_gpm(self, d: _Dev) -> None:
        nv = self._nv
        if not hasattr(nv, "nvmlGpmQueryDeviceSupport"):
            return
        try:
            support = self._q(d, "gpm", nv.nvmlGpmQueryDeviceSupport, d.handle)
            if support is None or not int(support.isSupportedDevice):
                self.guard.note(d.index, "gpm", RuntimeError("device does not support GPM"),
                                unsupported=True)
                return
            a = self._q(d, "gpm", nv.nvmlGpmSampleAlloc)
            b = self._q(d, "gpm", nv.nvmlGpmSampleAlloc)
            if a is not None and b is not None:
                d.gpm = [a, b]
        except DeviceLost:
            self._lost.add(d.index)

    # --------------------------------------------------------------- interface
    def devices(self) -> list[GpuDevice]:
        return [d.info for d in self._devs]

    def poll(self) -> GpuReading:
        reading = GpuReading()
        for d in self._devs:
            if d.index in self._lost:
                continue
            try:
                sample = self._sample(d)
                procs = self._processes(d)
            except DeviceLost as exc:
                self._lost.add(d.index)
                log.error("GPU %d (%s) is lost (%s); no longer sampling it", d.index, d.info.uuid, exc)
                reading.errors += 1
                continue
            reading.samples.append(sample)
            reading.processes.extend(procs)
        reading.xids = self._drain_xids()
        reading.lost = set(self._lost)
        reading.errors += self.guard.take_errors()
        return reading

    def close(self) -> None:
        nv = self._nv
        for d in self._devs:
            for s in d.gpm or []:
                try:
                    nv.nvmlGpmSampleFree(s)
                except nv.NVMLError:
                    pass
        if self._events is not None:
            try:
                nv.nvmlEventSetFree(self._events)
            except nv.NVMLError:
                pass
            self._events = None
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass

    # ---------------------------------------------------------------- reading
    def _sample(self, d: _Dev) -> GpuSample:
        nv = self._nv
        h = d.handle
        s = GpuSample(index=d.index)
        util = self._q(d, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            s.util_gpu, s.util_mem = float(util.gpu), float(util.memory)
        mem = self._q(d, "memory", nv.nvmlDeviceGetMemoryInfo, h)
        if mem is not None:
            s.mem_used_bytes, s.mem_total_bytes = int(mem.used), int(mem.total)
        temp = self._q(d, "temp_c", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        s.temp_c = None if temp is None else float(temp)
        sm = self._q(d, "sm_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        s.sm_clock_mhz = None if sm is None else float(sm)
        mc = self._q(d, "mem_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        s.mem_clock_mhz = None if mc is None else float(mc)
        self._batch(d, s)
        if s.pcie_tx_bytes is None or s.pcie_rx_bytes is None:
            s.pcie_tx_bytes = s.pcie_rx_bytes = None
            tx = self._q(d, "pcie_throughput", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES)
            rx = self._q(d, "pcie_throughput", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES)
            s.pcie_tx_snapshot_bps = None if tx is None else float(tx) * _KIB
            s.pcie_rx_snapshot_bps = None if rx is None else float(rx) * _KIB
        if d.nvlink_links:
            s.nvlink_tx_bytes, s.nvlink_rx_bytes = self._nvlink(d)
        if d.gpm is not None:
            s.sm_active_ratio, s.tensor_active_ratio = self._gpm(d)
        return s

    def _batch(self, d: _Dev, s: GpuSample) -> None:
        """Read the counter/power fields in one nvmlDeviceGetFieldValues call."""
        nv = self._nv
        if d.batch_ok and d.field_names:
            attrs = list(d.field_names)
            ids = [d.field_names[a][0] for a in attrs]
            try:
                values = nv.nvmlDeviceGetFieldValues(d.handle, ids)
            except nv.NVMLError as exc:
                err = translate_error(nv, exc)
                if isinstance(err, DeviceLost):
                    raise err from None
                self.guard.note(d.index, "field_values", err, unsupported=isinstance(err, FieldUnsupported))
                if isinstance(err, FieldUnsupported):
                    d.batch_ok = False  # old driver: direct calls from now on
                values = None
            if values is not None:
                for attr, fv in zip(attrs, values, strict=False):
                    ret = int(fv.nvmlReturn)
                    if ret != nv.NVML_SUCCESS:
                        err = translate_error(nv, nv.NVMLError(ret))
                        if isinstance(err, DeviceLost):
                            raise err
                        unsupported = isinstance(err, FieldUnsupported)
                        self.guard.note(d.index, attr, err, unsupported=unsupported)
                        if unsupported:
                            del d.field_names[attr]
                        continue
                    raw = decode_field_value(nv, fv)
                    if raw is None:
                        continue
                    scale = d.field_names[attr][1]
                    value: float | int = int(raw) if attr in _INT_FIELDS else float(raw) * scale
                    setattr(s, attr, value)
                return
        self._direct(d, s)

    def _direct(self, d: _Dev, s: GpuSample) -> None:
        """Fallback for drivers without nvmlDeviceGetFieldValues."""
        nv = self._nv
        h = d.handle
        p = self._q(d, "power_w", nv.nvmlDeviceGetPowerUsage, h)
        s.power_w = None if p is None else float(p) / 1000.0
        e = self._q(d, "energy_j", nv.nvmlDeviceGetTotalEnergyConsumption, h)
        s.energy_j = None if e is None else float(e) / 1000.0
        r = self._q(d, "pcie_replay_total", nv.nvmlDeviceGetPcieReplayCounter, h)
        s.pcie_replay_total = None if r is None else int(r)
        c = self._q(d, "ecc_corrected_total", nv.nvmlDeviceGetTotalEccErrors, h,
                    nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC)
        s.ecc_corrected_total = None if c is None else int(c)
        u = self._q(d, "ecc_uncorrected_total", nv.nvmlDeviceGetTotalEccErrors, h,
                    nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
        s.ecc_uncorrected_total = None if u is None else int(u)
        rr = self._q(d, "row_remap_failures", nv.nvmlDeviceGetRemappedRows, h)
        s.row_remap_failures = None if rr is None else int(bool(rr[3]))

    def _nvlink(self, d: _Dev) -> tuple[int | None, int | None]:
        nv = self._nv
        tx_id = getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
        rx_id = getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)
        if tx_id is None or rx_id is None:
            return None, None
        req: list[tuple[int, int]] = []
        for link in range(d.nvlink_links):
            req += [(tx_id, link), (rx_id, link)]
        values = self._q(d, "nvlink", nv.nvmlDeviceGetFieldValues, d.handle, req)
        if values is None:
            return None, None
        tx = rx = 0
        ok = False
        for (fid, _link), fv in zip(req, values, strict=False):
            if int(fv.nvmlReturn) != nv.NVML_SUCCESS:
                continue
            ok = True
            kib = int(decode_field_value(nv, fv) or 0)
            if fid == tx_id:
                tx += kib * _KIB
            else:
                rx += kib * _KIB
        if not ok:
            self.guard.note(d.index, "nvlink", RuntimeError("no link reported throughput"), unsupported=True)
            d.nvlink_links = 0
            return None, None
        return tx, rx

    def _gpm(self, d: _Dev) -> tuple[float | None, float | None]:
        nv = self._nv
        assert d.gpm is not None
        prev, cur = d.gpm
        got = self._q(d, "gpm", nv.nvmlGpmSampleGet, d.handle, cur)
        if got is None:
            return None, None
        result: tuple[float | None, float | None] = (None, None)
        if d.gpm_have_prev:
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = nv.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = 2
            mg.sample1 = prev
            mg.sample2 = cur
            mg.metrics[0].metricId = nv.NVML_GPM_METRIC_SM_UTIL
            mg.metrics[1].metricId = nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL
            out = self._q(d, "gpm", nv.nvmlGpmMetricsGet, mg)
            if out is not None:
                vals = [
                    float(m.value) / 100.0 if int(m.nvmlReturn) == nv.NVML_SUCCESS else None
                    for m in (out.metrics[0], out.metrics[1])
                ]
                result = (vals[0], vals[1])
        d.gpm = [cur, prev]
        d.gpm_have_prev = True
        return result

    def _processes(self, d: _Dev) -> list[GpuProcess]:
        nv = self._nv
        procs = self._q(d, "processes", nv.nvmlDeviceGetComputeRunningProcesses, d.handle) or []
        util = self._process_util(d)
        out: list[GpuProcess] = []
        for p in procs:
            pid = int(p.pid)
            mem = getattr(p, "usedGpuMemory", None)
            out.append(GpuProcess(d.index, pid, None if mem is None else int(mem), util.get(pid)))
        return out

    def _process_util(self, d: _Dev) -> dict[int, float]:
        """Mean SM utilization per pid over the samples NVML took since the last poll."""
        nv = self._nv
        try:
            samples: Sequence[Any] = nv.nvmlDeviceGetProcessUtilization(d.handle, d.proc_util_ts)
        except nv.NVMLError as exc:
            err = translate_error(nv, exc)
            if isinstance(err, DeviceLost):
                raise err from None
            if getattr(exc, "value", None) == nv.NVML_ERROR_NOT_FOUND:
                return {}  # no samples since the last poll: nothing ran
            self.guard.note(d.index, "process_utilization", err, unsupported=isinstance(err, FieldUnsupported))
            return {}
        sums: dict[int, list[float]] = {}
        for smp in samples:
            d.proc_util_ts = max(d.proc_util_ts, int(smp.timeStamp))
            sums.setdefault(int(smp.pid), []).append(float(smp.smUtil))
        return {pid: sum(v) / len(v) for pid, v in sums.items()}

    def _drain_xids(self) -> list[XidEvent]:
        """Take every pending XID event without waiting (timeout 0 ms)."""
        nv = self._nv
        out: list[XidEvent] = []
        if self._events is None:
            return out
        by_handle = {ctypes.cast(d.handle, ctypes.c_void_p).value: d.index for d in self._devs}
        for _ in range(_MAX_XID_DRAIN):
            try:
                data = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) != nv.NVML_ERROR_TIMEOUT:
                    self.guard.note(-1, "xid_events", exc, unsupported=False)
                break
            if not int(data.eventType) & nv.nvmlEventTypeXidCriticalError:
                continue
            idx = by_handle.get(ctypes.cast(data.device, ctypes.c_void_p).value)
            if idx is None:
                try:
                    idx = int(nv.nvmlDeviceGetIndex(data.device))
                except nv.NVMLError:
                    idx = -1
            out.append(XidEvent(idx, int(data.eventData)))
        return out

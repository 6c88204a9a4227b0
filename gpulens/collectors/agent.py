"""The node agent: one sampling tick, batched writes into the store, the loop around them.

``Agent.tick()`` polls the GPU backend (never blocking), reads network and
InfiniBand counters, attributes GPU processes to jobs, turns counters into
rates, publishes a snapshot for /metrics, and queues Arrow tables. Tables are
handed to the sink (a SegmentWriter spool) every ``flush_seconds`` in one
transaction and rolled into Parquet every ``segment_seconds``: never a commit
per sample.

Full disk: a failed flush or roll marks the store unwritable
(``gpulens_agent_store_writable 0``); sampling goes on, tables queue in memory
up to ``max_buffer_rows`` (the oldest are dropped beyond that and counted in
``gpulens_agent_dropped_samples_total``), and the next flush that succeeds
writes the queue and sets the gauge back to 1.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from gpulens.collectors.attribution import Attribution, JobResolver
from gpulens.collectors.gpu.base import GpuBackend, GpuDevice, GpuProcess, GpuReading, GpuSample
from gpulens.collectors.net import IbPort, NetCounters, NetReader
from gpulens.collectors.rates import CounterTracker
from gpulens.collectors.sink import SampleSink
from gpulens.errors import GpulensError
from gpulens.store import Store, arrow_schema

__all__ = ["Agent", "AgentSnapshot", "GpuState", "TickResult", "job_utilization", "register_node"]

log = logging.getLogger("gpulens.collectors.agent")

#: Plausibility bounds for counter deltas (units per second); beyond them a jump is not a rate.
PCIE_MAX_BPS = 512e9  # well above PCIe 6.0 x16
NVLINK_MAX_BPS = 4e12
NET_MAX_BPS = 1e12  # 8 Tbit/s
PACKETS_MAX = 1e10


@dataclasses.dataclass(frozen=True)
class GpuState:
    """What /metrics shows for one GPU (monotonic totals where the metric is a counter)."""

    index: int
    uuid: str
    model: str
    sample: GpuSample
    pcie_tx_total: float | None
    pcie_rx_total: float | None
    energy_total: float | None
    nvlink_tx_total: float | None = None
    nvlink_rx_total: float | None = None


@dataclasses.dataclass(frozen=True)
class _Traffic:
    """One GPU link's transmit/receive rates (bytes/s) and monotonic totals, and where the
    rates came from (PCIe: 'counter' or 'snapshot'); None where unknown."""

    tx_bps: float | None = None
    rx_bps: float | None = None
    tx_total: float | None = None
    rx_total: float | None = None
    source: str | None = None


@dataclasses.dataclass(frozen=True)
class NetState:
    device: str
    totals: dict[str, float]  # rx_bytes, tx_bytes, rx_packets, ... (monotonic)
    speed_mbps: int | None
    link_kind: str


@dataclasses.dataclass(frozen=True)
class IbState:
    device: str
    port: int
    symbol_errors: float | None
    link_downed: float | None
    totals: dict[str, float] = dataclasses.field(default_factory=dict)
    speed_mbps: int | None = None


@dataclasses.dataclass(frozen=True)
class AgentSnapshot:
    """The agent's state after a tick, read by the /metrics collector (replaced, never mutated)."""

    node: str
    backend: str
    gpus: tuple[GpuState, ...] = ()
    lost: tuple[GpuDevice, ...] = ()
    xid_totals: dict[tuple[int, int], int] = dataclasses.field(default_factory=dict)
    job_info: tuple[tuple[int, str, str], ...] = ()  # (gpu index, uuid, job)
    job_util: dict[str, float] = dataclasses.field(default_factory=dict)
    job_mem: dict[str, int] = dataclasses.field(default_factory=dict)
    net: tuple[NetState, ...] = ()
    ib: tuple[IbState, ...] = ()
    last_sample: float | None = None
    sample_duration: float | None = None
    errors_total: int = 0
    dropped_total: int = 0
    store_writable: bool = True


@dataclasses.dataclass
class TickResult:
    """Rows produced by one tick, per sample kind."""

    ts: datetime
    rows: dict[str, list[dict[str, Any]]]
    duration: float
    errors: int

    def count(self, kind: str) -> int:
        return len(self.rows.get(kind, []))


def job_utilization(
    samples: Iterable[GpuSample], processes: Iterable[GpuProcess], jobs: dict[int, Attribution]
) -> tuple[dict[str, float], dict[str, int], list[tuple[int, str]]]:
    """Per-job GPU utilization (0-1), memory (bytes) and the (gpu, job) pairs.

    On each GPU a job's utilization is the sum of its processes' SM utilization
    (per-process NVML samples), not the device total. When no process on a GPU
    reports SM utilization and the GPU runs exactly one job and nothing
    unattributed, the device utilization is that job's. A job's value is the
    mean over the GPUs it uses; GPUs where it is unknown are left out.
    """
    util_by_gpu = {s.index: s.util_gpu for s in samples}
    per, unattributed, mem = _job_processes(processes, jobs)
    jobs_on_gpu: dict[int, set[str]] = {}
    for gpu, job_id in per:
        jobs_on_gpu.setdefault(gpu, set()).add(job_id)
    vals: dict[str, list[float]] = {}
    for (gpu, job_id), procs in per.items():
        alone = len(jobs_on_gpu[gpu]) == 1 and gpu not in unattributed
        value = _job_gpu_util(procs, util_by_gpu.get(gpu) if alone else None)
        if value is not None:
            vals.setdefault(job_id, []).append(value / 100.0)
    util = {job: sum(v) / len(v) for job, v in vals.items()}
    pairs = sorted(per)
    return util, mem, pairs


def _job_processes(
    processes: Iterable[GpuProcess], jobs: dict[int, Attribution]
) -> tuple[dict[tuple[int, str], list[GpuProcess]], set[int], dict[str, int]]:
    """The attributed processes per (gpu, job), the GPUs running an unattributed process, and
    each job's memory (bytes)."""
    per: dict[tuple[int, str], list[GpuProcess]] = {}
    unattributed: set[int] = set()
    mem: dict[str, int] = {}
    for p in processes:
        job = jobs.get(p.pid)
        if job is None or job.job_id is None:
            unattributed.add(p.gpu_index)
            continue
        per.setdefault((p.gpu_index, job.job_id), []).append(p)
        if p.used_memory_bytes is not None:
            mem[job.job_id] = mem.get(job.job_id, 0) + p.used_memory_bytes
    return per, unattributed, mem


def _job_gpu_util(procs: list[GpuProcess], device_util: float | None) -> float | None:
    """One job's utilization (percent) of one GPU: its processes' SM utilization summed (at
    most 100), else ``device_util`` (the device's when the job runs alone on it, else None)."""
    sm = [p.sm_util for p in procs if p.sm_util is not None]
    if sm:
        return min(sum(sm), 100.0)
    return device_util


def register_node(store: Store, node: str, devices: list[GpuDevice], now: datetime) -> None:
    """Upsert this node and its GPUs into the state tables (source 'collector')."""
    model = devices[0].model if devices else None
    mem = devices[0].memory_total_bytes if devices else None
    with store.write() as con:
        con.execute(
            "INSERT INTO nodes (node, gpus, gpu_model, gpu_memory_bytes, source, first_seen, last_seen)"
            " VALUES (?, ?, ?, ?, 'collector', ?, ?) ON CONFLICT (node) DO UPDATE SET"
            " gpus = excluded.gpus, gpu_model = excluded.gpu_model,"
            " gpu_memory_bytes = excluded.gpu_memory_bytes, last_seen = excluded.last_seen",
            [node, len(devices), model, mem, now, now],
        )
        for d in devices:
            con.execute(
                "INSERT INTO gpus (node, gpu_index, uuid, model, memory_total_bytes) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT (node, gpu_index) DO UPDATE SET uuid = excluded.uuid, model = excluded.model,"
                " memory_total_bytes = excluded.memory_total_bytes",
                [node, d.index, d.uuid, d.model, d.memory_total_bytes],
            )


_COMPACT_ROWS = 20_000
_SCHEMAS = {k: arrow_schema(k) for k in ("gpu", "net", "proc", "xid")}
_NET_FIELDS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors", "rx_drops", "tx_drops")


class Agent:
    """Samples one node. Not thread-safe except :attr:`snapshot`, which readers may take at any time."""

    def __init__(
        self,
        *,
        node: str,
        backend: GpuBackend | None,
        net: NetReader | None,
        resolver: JobResolver | None,
        sink: SampleSink | None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        flush_seconds: float = 30.0,
        segment_seconds: float = 300.0,
        max_buffer_rows: int = 2_000_000,
    ) -> None:
        self.node = node
        self.backend = backend
        self.net = net
        self.resolver = resolver
        self.sink = sink
        self.clock = clock
        self.wall = wall
        self.flush_seconds = flush_seconds
        self.segment_seconds = segment_seconds
        self.max_buffer_rows = max_buffer_rows
        self.devices: dict[int, GpuDevice] = {d.index: d for d in backend.devices()} if backend else {}
        self.counters = CounterTracker()
        self.snapshot = AgentSnapshot(node=node, backend=backend.name if backend else "none")
        self._init_write_state(clock)

    def _init_write_state(self, clock: Callable[[], float]) -> None:
        """The queues, counts and flags of writing (see :meth:`flush`) before the first tick."""
        # Rows of recent ticks as dicts (cheap to add), compacted into Arrow tables every
        # ``_COMPACT_ROWS`` rows and at each flush (one conversion for many ticks).
        self._rows: dict[str, list[dict[str, Any]]] = {k: [] for k in ("gpu", "net", "proc", "xid")}
        self._rows_n = 0
        self._pending: collections.deque[tuple[str, pa.Table]] = collections.deque()
        self._pending_rows = 0
        self._handed_unflushed = False
        self._xid_totals: dict[tuple[int, int], int] = {}
        self._errors = 0
        self._dropped = 0
        self._writable = True
        self._last_flush = clock()
        self._last_roll = clock()
        self._announced_lost: set[int] = set()
        self.rows_written = 0
        self._handed_rows = 0
        self.ticks = 0

    # ------------------------------------------------------------------- tick
    def tick(self) -> TickResult:
        """Take one sample of everything; queue the rows; update the /metrics snapshot."""
        t0 = time.perf_counter()
        mono = self.clock()
        now = datetime.fromtimestamp(self.wall(), UTC).replace(tzinfo=None)
        rows: dict[str, list[dict[str, Any]]] = {"gpu": [], "net": [], "proc": [], "xid": []}
        reading, errors = self._poll()
        gpu_states = self._gpus(reading, now, mono, rows)
        attributions = self._processes(reading, now, rows)
        net_states, ib_states, net_errors = self._network(now, mono, rows)
        errors += net_errors
        jobs = job_utilization(reading.samples, reading.processes, attributions)
        self._announce_lost(reading.lost)
        self._errors += errors
        self._buffer(rows)
        duration = time.perf_counter() - t0
        self.ticks += 1
        self.snapshot = self._tick_snapshot(reading, gpu_states, jobs, net_states, ib_states, duration)
        return TickResult(now, rows, duration, errors)

    def _poll(self) -> tuple[GpuReading, int]:
        """The GPU backend's reading (empty without a backend or when its poll fails) and
        how many errors it had."""
        errors = 0
        reading = GpuReading()
        if self.backend is not None:
            try:
                reading = self.backend.poll()
            except Exception as exc:  # a backend bug must not stop network sampling
                errors += 1
                log.error("GPU backend poll failed: %s", exc)
            errors += reading.errors
        return reading, errors

    def _announce_lost(self, lost: set[int]) -> None:
        """Log each newly lost GPU once."""
        for gone in lost - self._announced_lost:
            dev = self.devices.get(gone)
            log.error("GPU %d (%s) was lost; its series are replaced by gpulens_gpu_lost", gone,
                      dev.uuid if dev else "?")
            self._announced_lost.add(gone)

    def _buffer(self, rows: dict[str, list[dict[str, Any]]]) -> None:
        """Add a tick's rows to the queue for the sink (none without a sink)."""
        if self.sink is None:
            return
        for kind, kind_rows in rows.items():
            self._rows[kind] += kind_rows
            self._rows_n += len(kind_rows)
        if self._rows_n >= min(_COMPACT_ROWS, max(self.max_buffer_rows // 4, 1)) or not self._writable:
            self._compact()  # while the disk is full, every tick (so the memory bound holds)

    def _tick_snapshot(
        self, reading: GpuReading, gpu_states: list[GpuState],
        jobs: tuple[dict[str, float], dict[str, int], list[tuple[int, str]]],
        net_states: list[NetState], ib_states: list[IbState], duration: float,
    ) -> AgentSnapshot:
        """The /metrics snapshot after a tick."""
        util, mem, pairs = jobs
        return AgentSnapshot(
            node=self.node,
            backend=self.backend.name if self.backend else "none",
            gpus=tuple(gpu_states),
            lost=tuple(self.devices[i] for i in sorted(reading.lost) if i in self.devices),
            xid_totals=dict(self._xid_totals),
            job_info=tuple((g, self.devices[g].uuid if g in self.devices else "", j) for g, j in pairs),
            job_util=util,
            job_mem=mem,
            net=tuple(net_states),
            ib=tuple(ib_states),
            last_sample=self.wall(),
            sample_duration=duration,
            errors_total=self._errors,
            dropped_total=self._dropped,
            store_writable=self._writable,
        )

    def _gpus(
        self, reading: GpuReading, now: datetime, mono: float, rows: dict[str, list[dict[str, Any]]]
    ) -> list[GpuState]:
        xid_count = self._xids(reading, now, rows)
        states: list[GpuState] = []
        for s in reading.samples:
            dev = self.devices.get(s.index) or GpuDevice(s.index, f"GPU-index-{s.index}", "unknown")
            i = s.index
            pcie = self._pcie(s, mono)
            nvlink = self._nvlink(s, mono)
            energy_total = None
            if s.energy_j is not None:
                energy_total = self.counters.update(("energy", i), s.energy_j, mono).total
            rows["gpu"].append(self._gpu_row(now, dev, s, pcie, nvlink, xid_count.get(i, 0)))
            states.append(GpuState(i, dev.uuid, dev.model, s, pcie.tx_total, pcie.rx_total, energy_total,
                                   nvlink.tx_total, nvlink.rx_total))
        return states

    def _xids(self, reading: GpuReading, now: datetime,
              rows: dict[str, list[dict[str, Any]]]) -> dict[int, int]:
        """Add the reading's XID events to the xid rows and running totals; their count per GPU."""
        xid_count: dict[int, int] = {}
        for x in reading.xids:
            xid_count[x.gpu_index] = xid_count.get(x.gpu_index, 0) + 1
            self._xid_totals[(x.gpu_index, x.xid)] = self._xid_totals.get((x.gpu_index, x.xid), 0) + 1
            dev = self.devices.get(x.gpu_index)
            rows["xid"].append(
                {"ts": now, "node": self.node, "gpu_index": x.gpu_index,
                 "uuid": dev.uuid if dev else None, "xid": x.xid}
            )
        return xid_count

    def _pcie(self, s: GpuSample, mono: float) -> _Traffic:
        """PCIe rates and totals of one GPU: from byte counters, else from rate snapshots."""
        c, i = self.counters, s.index
        if s.pcie_tx_bytes is not None and s.pcie_rx_bytes is not None:
            rt = c.update(("pcie_tx", i), s.pcie_tx_bytes, mono, max_rate=PCIE_MAX_BPS)
            rr = c.update(("pcie_rx", i), s.pcie_rx_bytes, mono, max_rate=PCIE_MAX_BPS)
            return _Traffic(rt.rate, rr.rate, rt.total, rr.total, "counter")
        if s.pcie_tx_snapshot_bps is not None and s.pcie_rx_snapshot_bps is not None:
            tx_bps, rx_bps = s.pcie_tx_snapshot_bps, s.pcie_rx_snapshot_bps
            tx_total = c.accumulate(("pcie_tx_snap", i), tx_bps, mono)
            rx_total = c.accumulate(("pcie_rx_snap", i), rx_bps, mono)
            return _Traffic(tx_bps, rx_bps, tx_total, rx_total, "snapshot")
        return _Traffic()

    def _nvlink(self, s: GpuSample, mono: float) -> _Traffic:
        """NVLink rates and totals of one GPU (None where its counter is unknown)."""
        c, i = self.counters, s.index
        out = _Traffic()
        if s.nvlink_tx_bytes is not None:
            r = c.update(("nvlink_tx", i), s.nvlink_tx_bytes, mono, max_rate=NVLINK_MAX_BPS)
            out = dataclasses.replace(out, tx_bps=r.rate, tx_total=r.total)
        if s.nvlink_rx_bytes is not None:
            r = c.update(("nvlink_rx", i), s.nvlink_rx_bytes, mono, max_rate=NVLINK_MAX_BPS)
            out = dataclasses.replace(out, rx_bps=r.rate, rx_total=r.total)
        return out

    def _gpu_row(self, now: datetime, dev: GpuDevice, s: GpuSample, pcie: _Traffic, nvlink: _Traffic,
                 xid_count: int) -> dict[str, Any]:
        """One gpu_samples row."""
        return {
            "ts": now, "node": self.node, "gpu_index": s.index, "uuid": dev.uuid, "model": dev.model,
            "util_gpu": s.util_gpu, "util_mem": s.util_mem,
            "mem_used_bytes": s.mem_used_bytes,
            "mem_total_bytes": s.mem_total_bytes if s.mem_total_bytes is not None else dev.memory_total_bytes,
            "pcie_tx_bps": pcie.tx_bps, "pcie_rx_bps": pcie.rx_bps, "pcie_source": pcie.source,
            "pcie_replay_total": s.pcie_replay_total, "power_w": s.power_w, "energy_j": s.energy_j,
            "temp_c": s.temp_c, "sm_clock_mhz": s.sm_clock_mhz, "mem_clock_mhz": s.mem_clock_mhz,
            "ecc_corrected_total": s.ecc_corrected_total,
            "ecc_uncorrected_total": s.ecc_uncorrected_total,
            "row_remap_failures": s.row_remap_failures,
            "nvlink_tx_bps": nvlink.tx_bps, "nvlink_rx_bps": nvlink.rx_bps,
            "sm_active_ratio": s.sm_active_ratio, "tensor_active_ratio": s.tensor_active_ratio,
            "xid_count": xid_count,
        }

    def _processes(
        self, reading: GpuReading, now: datetime, rows: dict[str, list[dict[str, Any]]]
    ) -> dict[int, Attribution]:
        if not reading.processes:
            if self.resolver is not None:
                self.resolver.resolve_many(())
            return {}
        if self.resolver is not None:
            att = self.resolver.resolve_many(p.pid for p in reading.processes)
        else:
            att = {}
        for p in reading.processes:
            a = att.get(p.pid)
            dev = self.devices.get(p.gpu_index)
            rows["proc"].append(
                {
                    "ts": now, "node": self.node, "gpu_index": p.gpu_index,
                    "uuid": dev.uuid if dev else None, "pid": p.pid,
                    "job_id": a.job_id if a else None, "attribution": a.method if a else "none",
                    "used_memory_bytes": p.used_memory_bytes, "sm_util": p.sm_util,
                }
            )
        return att

    def _network(
        self, now: datetime, mono: float, rows: dict[str, list[dict[str, Any]]]
    ) -> tuple[list[NetState], list[IbState], int]:
        if self.net is None:
            return [], [], 0
        errors = 0
        nets: list[NetState] = []
        ibs: list[IbState] = []
        try:
            interfaces = self.net.interfaces()
            ports = self.net.infiniband()
        except OSError as exc:  # pragma: no cover - readers already swallow per-file errors
            log.error("network counters unreadable: %s", exc)
            return [], [], 1
        for n in interfaces:
            nets.append(self._interface(n, now, mono, rows))
        for p in ports:
            ibs.append(self._ib_port(p, now, mono, rows))
        return nets, ibs, errors

    def _interface(self, n: NetCounters, now: datetime, mono: float,
                   rows: dict[str, list[dict[str, Any]]]) -> NetState:
        """One network interface's net row (appended to ``rows``) and /metrics state."""
        totals: dict[str, float] = {}
        rates: dict[str, float | None] = {}
        for f in _NET_FIELDS:
            bound = NET_MAX_BPS if f.endswith("bytes") else PACKETS_MAX
            r = self.counters.update(("net", n.device, f), getattr(n, f), mono, max_rate=bound)
            totals[f] = r.total
            rates[f] = r.rate
        rows["net"].append(self._net_row(now, n.device, n.link_kind, None, totals, rates, n.speed_mbps, None, None))
        return NetState(n.device, totals, n.speed_mbps, n.link_kind)

    def _ib_port(self, p: IbPort, now: datetime, mono: float,
                 rows: dict[str, list[dict[str, Any]]]) -> IbState:
        """One InfiniBand port's net row (appended to ``rows``) and /metrics state."""
        c = self.counters
        totals: dict[str, float] = {}
        rates: dict[str, float | None] = {}
        for f, v in (("rx_bytes", p.rx_bytes), ("tx_bytes", p.tx_bytes), ("rx_packets", p.rx_packets),
                     ("tx_packets", p.tx_packets), ("rx_errors", p.rx_errors), ("tx_drops", p.tx_drops)):
            if v is None:
                continue
            bound = NET_MAX_BPS if f.endswith("bytes") else PACKETS_MAX
            r = c.update(("ib", p.device, p.port, f), v, mono, max_rate=bound)
            totals[f] = r.total
            rates[f] = r.rate
        sym = c.update(("ib", p.device, p.port, "sym"), p.symbol_errors, mono).total if p.symbol_errors is not None else None
        down = c.update(("ib", p.device, p.port, "down"), p.link_downed, mono).total if p.link_downed is not None else None
        rows["net"].append(self._net_row(now, p.device, "infiniband", p.port, totals, rates, p.speed_mbps, sym, down))
        return IbState(p.device, p.port, sym, down, totals, p.speed_mbps)

    def _net_row(
        self, now: datetime, device: str, kind: str, port: int | None, totals: dict[str, float],
        rates: dict[str, float | None], speed: int | None, sym: float | None, down: float | None,
    ) -> dict[str, Any]:
        def tot(f: str) -> int | None:
            v = totals.get(f)
            return None if v is None else int(v)

        return {
            "ts": now, "node": self.node, "device": device, "link_kind": kind, "port": port,
            "rx_bytes_total": tot("rx_bytes"), "tx_bytes_total": tot("tx_bytes"),
            "rx_packets_total": tot("rx_packets"), "tx_packets_total": tot("tx_packets"),
            "rx_errors_total": tot("rx_errors"), "tx_errors_total": tot("tx_errors"),
            "rx_drops_total": tot("rx_drops"), "tx_drops_total": tot("tx_drops"),
            "rx_bps": rates.get("rx_bytes"), "tx_bps": rates.get("tx_bytes"),
            "link_speed_mbps": speed,
            "symbol_errors_total": None if sym is None else int(sym),
            "link_downed_total": None if down is None else int(down),
        }

    # ---------------------------------------------------------------- writing
    def _compact(self) -> None:
        """Turn the queued row dicts into Arrow tables (compact, and what the sink takes)."""
        for kind, kind_rows in self._rows.items():
            if kind_rows:
                self._queue(kind, pa.Table.from_pylist(kind_rows, schema=_SCHEMAS[kind]))
                self._rows[kind] = []
        self._rows_n = 0

    def _queue(self, kind: str, table: pa.Table) -> None:
        self._pending.append((kind, table))
        self._pending_rows += table.num_rows
        while self._pending_rows > self.max_buffer_rows and self._pending:
            _, old = self._pending.popleft()
            self._pending_rows -= old.num_rows
            self._dropped += old.num_rows

    @property
    def pending_rows(self) -> int:
        return self._pending_rows + self._rows_n

    @property
    def store_writable(self) -> bool:
        return self._writable

    def flush(self) -> bool:
        """Hand queued tables to the sink and commit them in one transaction. False if the disk is full."""
        if self.sink is None:
            return True
        try:
            if not self._writable and self._handed_unflushed:
                self.sink.flush()  # retry what the sink already holds before adding more
                self._count_handed()
            self._compact()
            while self._pending:
                kind, table = self._pending.popleft()
                self._pending_rows -= table.num_rows
                self.sink.append(kind, table)
                self._handed_rows += table.num_rows  # counted once, when a flush succeeds
                self._handed_unflushed = True
            self.sink.flush()
            self._count_handed()
        except (GpulensError, duckdb.Error, OSError) as exc:
            self._set_writable(False, exc)
            return False
        finally:
            self._last_flush = self.clock()
        self._set_writable(True)
        return True

    def _count_handed(self) -> None:
        self.rows_written += self._handed_rows
        self._handed_rows = 0
        self._handed_unflushed = False

    def roll(self) -> list[Path]:
        """Move flushed rows into Parquet segments (after a flush)."""
        self._last_roll = self.clock()
        if self.sink is None or not self.flush():
            return []
        try:
            out = self.sink.roll()
        except (GpulensError, duckdb.Error, OSError) as exc:
            self._set_writable(False, exc)
            return []
        self._set_writable(True)
        return out

    def _set_writable(self, ok: bool, exc: BaseException | None = None) -> None:
        if ok and not self._writable:
            log.warning("store is writable again; resumed writing samples")
        elif not ok:
            if self._writable:
                log.error("cannot write samples (%s); still sampling, keeping up to %d rows in memory",
                          exc, self.max_buffer_rows)
            self._errors += 1
        self._writable = ok
        snap = self.snapshot
        if (snap.store_writable, snap.errors_total, snap.dropped_total) != (ok, self._errors, self._dropped):
            # a new snapshot only when something changed: /metrics re-renders once per snapshot
            self.snapshot = dataclasses.replace(
                snap, store_writable=ok, errors_total=self._errors, dropped_total=self._dropped
            )

    def maybe_write(self) -> None:
        """Flush and roll when their periods are due (called after every tick)."""
        now = self.clock()
        if now - self._last_roll >= self.segment_seconds:
            self.roll()
        elif now - self._last_flush >= self.flush_seconds:
            self.flush()

    # ------------------------------------------------------------------- loop
    def run(self, interval: float, stop: threading.Event, *, max_ticks: int | None = None) -> int:
        """Tick every ``interval`` seconds until ``stop`` is set. Returns the number of ticks
        taken (ticks skipped after an overrun are not counted)."""
        start = self.clock()
        k = done = 0
        while not stop.is_set():
            self.tick()
            self.maybe_write()
            k += 1
            done += 1
            if max_ticks is not None and done >= max_ticks:
                break
            next_at = start + k * interval
            now = self.clock()
            if now > next_at:  # overran: skip the missed ticks rather than bursting
                k = int((now - start) / interval) + 1
                next_at = start + k * interval
            stop.wait(max(0.0, next_at - now))
        return done

    def close(self) -> None:
        """Final flush and roll; close the backend and the sink."""
        try:
            self.roll()
            if not self._writable and self.pending_rows:
                log.error("store not writable at exit: %d queued rows are lost", self.pending_rows)
            if self.sink is not None:
                try:
                    self.sink.close()
                except (GpulensError, duckdb.Error, OSError) as exc:
                    log.error("closing the sample spool failed: %s (flushed rows stay in the spool"
                              " and are rolled at the next start)", exc)
        finally:
            if self.backend is not None:
                self.backend.close()

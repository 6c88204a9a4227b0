"""Vectorised generation of the simulator's time series (gpu, net and xid kinds).

Samples are produced per chunk (one day x a group of consecutive servers) as
``(gpus, minutes)`` numpy arrays and handed to ``Store.write_samples`` as one
Arrow table, so memory is bounded by ``SimParams.chunk_gpus`` and every
``(date, node)`` partition is written exactly once. Cumulative counters
(energy, ECC, PCIe replays, network bytes) carry their state across chunks.
"""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpulens.errors import StoreError
from gpulens.ingest.simulate.model import Plan
from gpulens.ingest.simulate.params import SimParams
from gpulens.store import Store, arrow_schema

__all__ = ["Chunk", "SampleGenerator", "conform", "write_partitioned", "xid_table"]

#: (node name, first row, end row) of each node's contiguous rows in a chunk table.
Spans = list[tuple[str, int, int]]


@dataclasses.dataclass
class Chunk:
    date: str
    gpu: pa.Table
    gpu_spans: Spans
    net: pa.Table
    net_spans: Spans


def write_partitioned(store: Store, kind: str, table: pa.Table, date: str, spans: Spans, tag: str,
                      *, threads: int = 2) -> int:
    """Write one day of samples already grouped by node as one Parquet file per node.

    Same layout and atomicity as ``Store.write_samples`` (files are staged under
    the store's tmp/ and moved in with ``Store.publish_staged``), but written by
    pyarrow straight from the chunk's node spans instead of a partitioned COPY,
    which is about twice as fast for the simulator's already-grouped chunks.
    """
    staging = store.tmp / f"seg-{kind}-{tag}-{uuid.uuid4().hex[:8]}"
    body = table.drop_columns(["node"])

    def one(span: tuple[str, int, int]) -> None:
        node, lo, hi = span
        d = staging / f"date={date}" / f"node={node}"
        d.mkdir(parents=True, exist_ok=True)
        pq.write_table(body.slice(lo, hi - lo), d / "data_0.parquet", compression="zstd",
                       compression_level=1)

    try:
        with ThreadPoolExecutor(max(1, threads)) as pool:
            list(pool.map(one, spans))
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise StoreError(
            f"Cannot write samples under {store.samples} ({exc.strerror or exc}).",
            "Free disk space or point --data-dir at a larger volume; nothing stored was lost.",
        ) from None
    store.publish_staged(kind, staging, tag)
    return table.num_rows

_MIN_US = 60_000_000


def conform(table: pa.Table, kind: str) -> pa.Table:
    """Order columns as the store's schema of ``kind``; columns we do not simulate are NULL."""
    schema = arrow_schema(kind)
    cols = []
    for field in schema:
        if field.name in table.column_names:
            cols.append(table.column(field.name))
        else:
            cols.append(pa.nulls(table.num_rows, field.type))
    return pa.table(cols, names=schema.names)


def _dict(indices: np.ndarray, values: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices.astype(np.int32)), pa.array(values, pa.string()))


@dataclasses.dataclass
class _Group:
    nodes: np.ndarray  # node indices (consecutive)
    g0: int
    g1: int


@dataclasses.dataclass(frozen=True)
class _Window:
    """One chunk's minutes [m0, m1) of the period and global GPUs [g0, g1)."""

    m0: int
    m1: int
    g0: int
    g1: int

    @property
    def n_min(self) -> int:
        return self.m1 - self.m0

    @property
    def n_gpu(self) -> int:
        return self.g1 - self.g0

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_gpu, self.n_min)

    @property
    def gpus(self) -> slice:
        return slice(self.g0, self.g1)


@dataclasses.dataclass(frozen=True)
class _NetCounters:
    """Per node, link (eth, ib) and window: the counters and rates a net sample reports."""

    rate_col: np.ndarray  # (nodes, 2, W) the previous window's rate
    counters: np.ndarray  # (nodes, 2, W) bytes received so far
    err_cum: np.ndarray  # (nodes, 2, 2, W) errors and drops so far


#: The net devices in order (eth0 on every node, mlx5_0 on 8-GPU nodes): (MTU, link speed in Mb/s).
_NET_DEVICES = ((1500, 25_000), (4096, 100_000))


class SampleGenerator:
    """Yields (gpu_table, net_table) per chunk; deterministic for (seed, chunk)."""

    def __init__(self, plan: Plan, params: SimParams, start: datetime, seed: int,
                 uuids: list[str]) -> None:
        self.plan, self.p, self.seed = plan, params, seed
        self.start_us = int(np.datetime64(start, "us").astype(np.int64))
        self.minutes = plan.minutes
        self.uuids = uuids
        self._init_gpus(plan)
        self._init_attempts(plan, seed)
        c = plan.cluster
        xs = plan.xids
        self.x_gpu = np.array([int(c.gpu_offset[x.node]) + x.gpu_index for x in xs], dtype=np.int64)
        self.x_min = np.array([x.minute for x in xs], dtype=np.int64)
        self.x_xid = np.array([x.xid for x in xs], dtype=np.int64)
        self._init_counters(plan, seed)
        self.groups = _node_groups(plan, params.chunk_gpus)
        self.days = (self.minutes + 1439) // 1440

    def _init_gpus(self, plan: Plan) -> None:
        """Per GPU: its node, local index and model's constants."""
        c = plan.cluster
        n_gpus = c.total_gpus
        self.gpu_node = c.gpu_node()
        self.gpu_local = (np.arange(n_gpus) - c.gpu_offset[self.gpu_node]).astype(np.int16)
        models = [c.models[n] for n in self.gpu_node]
        self.mem_total = np.array([m.memory_bytes for m in models], dtype=np.int64)
        self.idle_w = np.array([m.idle_power_w for m in models])
        self.max_w = np.array([m.max_power_w for m in models])
        self.boost = np.array([m.boost_sm_clock_mhz for m in models])
        self.base = np.array([m.base_sm_clock_mhz for m in models])
        self.memclk = np.array([m.mem_clock_mhz for m in models])
        self.model_names = sorted({m.name for m in c.models})
        self.model_idx = np.array([self.model_names.index(m.name) for m in models], dtype=np.int32)
        self.bad_gpu = c.bad[self.gpu_node]

    def _init_attempts(self, plan: Plan, seed: int) -> None:
        """Per-attempt load parameters (rng independent of the chunking) and per-GPU placements."""
        att = plan.attempts
        rng = np.random.default_rng([seed, 101])
        na = len(att)
        self.a_mu = np.array([a.util_mean for a in att], dtype=float)
        self.a_memfrac = rng.uniform(0.25, 0.92, size=na)
        self.a_memratio = rng.uniform(0.3, 0.8, size=na)
        self.a_pcie = rng.lognormal(np.log(1.5e9), 0.5, size=na)
        self.a_smratio = rng.uniform(0.6, 0.95, size=na)
        self.a_multi = np.array([a.servers > 1 for a in att], dtype=bool)
        self.a_pcie = np.where(self.a_multi, self.a_pcie * 1.5, self.a_pcie)
        self.pl_att, self.pl_gpu, self.pl_start, self.pl_end = _placements(plan).T

    def _init_counters(self, plan: Plan, seed: int) -> None:
        """Cumulative counters at the period's start, carried across chunks."""
        n_gpus = plan.cluster.total_gpus
        n_nodes = len(plan.cluster.names)
        self.energy = np.random.default_rng([seed, 102]).uniform(1e9, 5e9, size=n_gpus)
        self.ecc_corr = np.zeros(n_gpus, dtype=np.int64)
        self.ecc_unc = np.zeros(n_gpus, dtype=np.int64)
        self.replay = np.zeros(n_gpus, dtype=np.int64)
        self.remap = np.zeros(n_gpus, dtype=np.int64)
        self.net_cum = np.random.default_rng([seed, 103]).uniform(1e11, 1e12, size=(n_nodes, 2)).astype(np.int64)
        self.net_prev = np.zeros((n_nodes, 2))
        self.net_err = np.zeros((n_nodes, 2, 2), dtype=np.int64)  # (errors, drops) x (rx, tx)

    @property
    def chunks(self) -> int:
        return self.days * len(self.groups)

    def __iter__(self) -> Iterator[Chunk]:
        for day in range(self.days):
            for gi, group in enumerate(self.groups):
                yield self._chunk(day, gi, group)

    # ------------------------------------------------------------------ chunk
    def _chunk(self, day: int, gi: int, grp: _Group) -> Chunk:
        """One day of one group of servers: its gpu and net tables and their node spans."""
        rng = np.random.default_rng([self.seed, 7, day, gi])
        m0 = day * 1440
        w = _Window(m0, min(self.minutes, m0 + 1440), grp.g0, grp.g1)
        occ = self._occupancy(w)
        busy = occ >= 0
        a = occ[busy]
        cols = self._load(rng, w, busy, a)
        u = cols["util_gpu"].astype(np.float64) / 100.0
        cols |= self._power(rng, w, busy, u)
        cols |= self._health(rng, w)
        ts = self.start_us + (np.arange(w.m0, w.m1, dtype=np.int64) * _MIN_US)
        gpu = self._gpu_table(w, grp, ts, cols)
        del cols
        multi = np.zeros(w.shape, dtype=bool)
        if len(a):
            multi[busy] = self.a_multi[a]
        net, net_spans = self._net(rng, grp, u, multi, w.m0)
        date = (datetime(1970, 1, 1) + timedelta(microseconds=int(ts[0]))).strftime("%Y-%m-%d")
        return Chunk(date, gpu, self._gpu_spans(w, grp), net, net_spans)

    def _occupancy(self, w: _Window) -> np.ndarray:
        """(GPUs, minutes) of the window: the attempt row running on each GPU, -1 when idle."""
        occ = np.full(w.shape, -1, dtype=np.int64)
        sel = np.flatnonzero((self.pl_gpu >= w.g0) & (self.pl_gpu < w.g1) & (self.pl_start < w.m1)
                            & (self.pl_end > w.m0))
        for k in sel:
            s = max(int(self.pl_start[k]), w.m0) - w.m0
            e = min(int(self.pl_end[k]), w.m1) - w.m0
            occ[int(self.pl_gpu[k]) - w.g0, s:e] = self.pl_att[k]
        return occ

    def _load(self, rng: np.random.Generator, w: _Window, busy: np.ndarray, a: np.ndarray) -> dict[str, np.ndarray]:
        """Utilization, memory and PCIe columns, drawn around each busy minute's attempt."""
        shape, sl, n_busy = w.shape, w.gpus, len(a)
        util = np.zeros(shape, dtype=np.float32)
        if n_busy:
            mu = np.clip(self.a_mu[a], 1e-3, 1 - 1e-3)
            kappa = self.p.util_minute_concentration
            util[busy] = np.round(100.0 * rng.beta(mu * kappa, (1.0 - mu) * kappa))
        util_mem = np.zeros(shape, dtype=np.float32)
        mem_used = np.zeros(shape, dtype=np.int64)
        pcie_rx = np.zeros(shape)
        sm_active = np.zeros(shape, dtype=np.float32)
        if n_busy:
            ub = util[busy]
            util_mem[busy] = np.clip(np.round(ub * self.a_memratio[a] + rng.normal(0, 2, n_busy)), 0, 100)
            total_b = np.broadcast_to(self.mem_total[sl, None], shape)[busy]
            mem_used[busy] = (total_b * np.clip(self.a_memfrac[a] + rng.normal(0, 0.005, n_busy), 0.01, 0.99)).astype(np.int64)
            pcie_rx[busy] = np.round(ub / 100.0 * self.a_pcie[a] * rng.lognormal(0, 0.3, n_busy))
            sm_active[busy] = np.round(ub / 100.0 * self.a_smratio[a], 3)
        return {"util_gpu": util, "util_mem": util_mem, "mem_used_bytes": mem_used,
                "pcie_tx_bps": np.round(pcie_rx * 0.35), "pcie_rx_bps": pcie_rx, "sm_active_ratio": sm_active}

    def _power(self, rng: np.random.Generator, w: _Window, busy: np.ndarray, u: np.ndarray) -> dict[str, np.ndarray]:
        """Power, energy (carried across chunks), temperature and clocks from the utilization ``u`` (0-1)."""
        sl = w.gpus
        idle_w = self.idle_w[sl, None]
        power = idle_w + (self.max_w[sl, None] - idle_w) * u ** 0.9 + rng.normal(0, 2.0, w.shape)
        power = np.round(np.clip(power, idle_w * 0.9, self.max_w[sl, None]), 1)
        energy = _carry(self.energy, sl, power * 60.0)
        temp = np.round(27.0 + 0.2 * power + rng.normal(0, 0.8, w.shape))
        return {
            "power_w": power, "energy_j": energy, "temp_c": temp,
            "sm_clock_mhz": np.where(busy, self.boost[sl, None] - np.where(temp > 80, 100.0, 0.0),
                                     np.round(self.base[sl, None] * 0.42)),
            "mem_clock_mhz": np.where(busy, self.memclk[sl, None], 405.0),
        }

    def _health(self, rng: np.random.Generator, w: _Window) -> dict[str, np.ndarray]:
        """XIDs and the health counters they move (ECC, row remaps), plus the bad GPUs' background errors."""
        shape, sl = w.shape, w.gpus
        xid_count = np.zeros(shape, dtype=np.int32)
        xsel = (self.x_gpu >= w.g0) & (self.x_gpu < w.g1) & (self.x_min >= w.m0) & (self.x_min < w.m1)
        xg, xm, xx = self.x_gpu[xsel] - w.g0, self.x_min[xsel] - w.m0, self.x_xid[xsel]
        np.add.at(xid_count, (xg, xm), 1)
        unc = np.zeros(shape, dtype=np.int64)
        np.add.at(unc, (xg[xx == 48], xm[xx == 48]), 1)
        remap = np.zeros(shape, dtype=np.int64)
        np.add.at(remap, (xg[xx == 64], xm[xx == 64]), 1)
        bad = self.bad_gpu[sl]
        corr = np.zeros(shape, dtype=np.int64)
        replay = np.zeros(shape, dtype=np.int64)
        if bad.any():
            corr[bad] = rng.poisson(0.02, (int(bad.sum()), w.n_min))
            replay[bad] = rng.poisson(0.05, (int(bad.sum()), w.n_min))
        np.add.at(corr, (xg[(xx == 92) | (xx == 94)], xm[(xx == 92) | (xx == 94)]), 5)
        return {
            "xid_count": xid_count,
            "ecc_corrected_total": _carry(self.ecc_corr, sl, corr),
            "ecc_uncorrected_total": _carry(self.ecc_unc, sl, unc),
            "pcie_replay_total": _carry(self.replay, sl, replay),
            "row_remap_failures": _carry(self.remap, sl, remap),
        }

    def _gpu_table(self, w: _Window, grp: _Group, ts: np.ndarray, cols: dict[str, np.ndarray]) -> pa.Table:
        """The chunk's gpu samples, GPU by GPU, minute by minute, in the store's column order."""
        G, M, sl = w.n_gpu, w.n_min, w.gpus
        n = G * M
        node_names = [self.plan.cluster.names[i] for i in grp.nodes]
        zeros = np.zeros(n)
        return conform(pa.table({
            "ts": pa.array(np.tile(ts, G), pa.timestamp("us")),
            "node": _dict(np.repeat(self.gpu_node[sl] - grp.nodes[0], M), node_names),
            "gpu_index": pa.array(np.repeat(self.gpu_local[sl], M), pa.int16()),
            "uuid": _dict(np.repeat(np.arange(G), M), self.uuids[w.g0:w.g1]),
            "model": _dict(np.repeat(self.model_idx[sl], M), self.model_names),
            "util_gpu": pa.array(cols["util_gpu"].ravel(), pa.float32()),
            "util_mem": pa.array(cols["util_mem"].ravel(), pa.float32()),
            "mem_used_bytes": pa.array(cols["mem_used_bytes"].ravel(), pa.int64()),
            "mem_total_bytes": pa.array(np.repeat(self.mem_total[sl], M), pa.int64()),
            "pcie_tx_bps": pa.array(cols["pcie_tx_bps"].ravel(), pa.float64()),
            "pcie_rx_bps": pa.array(cols["pcie_rx_bps"].ravel(), pa.float64()),
            "pcie_source": _dict(np.zeros(n, dtype=np.int32), ["counter"]),
            "pcie_replay_total": pa.array(cols["pcie_replay_total"].ravel(), pa.int64()),
            "power_w": pa.array(cols["power_w"].ravel().astype(np.float32), pa.float32()),
            "energy_j": pa.array(np.round(cols["energy_j"].ravel(), 1), pa.float64()),
            "temp_c": pa.array(cols["temp_c"].ravel().astype(np.float32), pa.float32()),
            "sm_clock_mhz": pa.array(cols["sm_clock_mhz"].ravel().astype(np.float32), pa.float32()),
            "mem_clock_mhz": pa.array(cols["mem_clock_mhz"].ravel().astype(np.float32), pa.float32()),
            "ecc_corrected_total": pa.array(cols["ecc_corrected_total"].ravel(), pa.int64()),
            "ecc_uncorrected_total": pa.array(cols["ecc_uncorrected_total"].ravel(), pa.int64()),
            "row_remap_failures": pa.array(cols["row_remap_failures"].ravel(), pa.int64()),
            "nvlink_tx_bps": pa.array(zeros, pa.float64()),
            "nvlink_rx_bps": pa.array(zeros, pa.float64()),
            "sm_active_ratio": pa.array(cols["sm_active_ratio"].ravel(), pa.float32()),
            "tensor_active_ratio": pa.array(np.zeros(n, dtype=np.float32), pa.float32()),
            "xid_count": pa.array(cols["xid_count"].ravel(), pa.int32()),
        }), "gpu")

    def _gpu_spans(self, w: _Window, grp: _Group) -> Spans:
        """Each node's rows of the chunk's gpu table."""
        c, M = self.plan.cluster, w.n_min
        return [
            (c.names[nd], int(c.gpu_offset[nd] - w.g0) * M, int(c.gpu_offset[nd] + c.sizes[nd] - w.g0) * M)
            for nd in grp.nodes
        ]

    # -------------------------------------------------------------------- net
    def _net(self, rng: np.random.Generator, grp: _Group, u: np.ndarray, multi: np.ndarray,
             m0: int) -> tuple[pa.Table, Spans]:
        """The chunk's net samples (one row per node, device and window) and their node spans."""
        rates, wstarts, wlen = self._net_rates(rng, grp, u, multi)
        ctr = self._net_counters(rng, grp.nodes, rates, wlen)
        ts = self.start_us + (m0 + wstarts).astype(np.int64) * _MIN_US
        node_i, ts_col, cat = self._device_columns(grp.nodes, ctr, ts)
        names = [self.plan.cluster.names[i] for i in grp.nodes]
        table = _net_table(node_i, ts_col, cat, names)
        order = np.argsort(node_i, kind="stable")
        table = table.take(pa.array(order))
        counts = np.bincount(node_i, minlength=len(names))
        ends = np.cumsum(counts)
        spans = [(names[i], int(ends[i] - counts[i]), int(ends[i])) for i in range(len(names)) if counts[i]]
        return table, spans

    def _net_rates(self, rng: np.random.Generator, grp: _Group, u: np.ndarray,
                   multi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rates (nodes, eth/ib, windows), window starts, window lengths) from the GPUs' load."""
        c = self.plan.cluster
        starts = (c.gpu_offset[grp.nodes] - grp.g0).astype(np.int64)
        node_util = np.add.reduceat(u, starts, axis=0)  # (nodes, M) GPU-equivalents busy
        node_multi = np.add.reduceat(u * multi, starts, axis=0)
        nn, M = node_util.shape
        eth = 2e6 + node_util * 6e6 + rng.lognormal(0, 0.2, (nn, M)) * 1e6
        ib = node_multi * 2.5e8 + 1e4
        step = max(1, self.p.net_interval_s // 60)
        wstarts = np.arange(0, M, step)
        wlen = np.diff(np.append(wstarts, M)).astype(float)
        rates = np.stack([np.add.reduceat(eth, wstarts, axis=1) / wlen,
                          np.add.reduceat(ib, wstarts, axis=1) / wlen], axis=1)  # (nodes, 2, W)
        return rates, wstarts, wlen

    def _net_counters(self, rng: np.random.Generator, nodes: np.ndarray, rates: np.ndarray,
                      wlen: np.ndarray) -> _NetCounters:
        """Byte and error counters of each window, carried across chunks."""
        nn, _, W = rates.shape
        prev = self.net_prev[nodes][:, :, None]
        rate_col = np.concatenate([prev, rates[:, :, :-1]], axis=2)
        bytes_w = rates * wlen[None, None, :] * 60.0
        cum0 = self.net_cum[nodes][:, :, None].astype(np.float64)
        counters = cum0 + np.concatenate([np.zeros((nn, 2, 1)), np.cumsum(bytes_w, axis=2)[:, :, :-1]], axis=2)
        self.net_cum[nodes] = (cum0[:, :, 0] + bytes_w.sum(axis=2)).astype(np.int64)
        self.net_prev[nodes] = rates[:, :, -1]
        errs = rng.poisson(0.002, (nn, 2, 2, W))
        err_cum = self.net_err[nodes][:, :, :, None] + np.cumsum(errs, axis=3) - errs
        self.net_err[nodes] = err_cum[:, :, :, -1] + errs[:, :, :, -1]
        return _NetCounters(rate_col, counters, err_cum)

    def _device_columns(self, nodes: np.ndarray, ctr: _NetCounters,
                        ts: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """(node row, ts, columns) of every node's eth0 then every 8-GPU node's mlx5_0, window by window."""
        nn, _, W = ctr.counters.shape
        has_ib = self.plan.cluster.sizes[nodes] == 8
        rows_node: list[np.ndarray] = []
        ts_list: list[np.ndarray] = []
        cols: dict[str, list[np.ndarray]] = {k: [] for k in (
            "dev", "rx", "tx", "rxp", "txp", "rxe", "txe", "rxd", "txd", "rxr", "txr", "speed")}
        for d, (mtu, speed) in enumerate(_NET_DEVICES):
            idx = np.arange(nn) if d == 0 else np.flatnonzero(has_ib)
            if len(idx) == 0:
                continue
            k = len(idx)
            rx = ctr.counters[idx, d]
            tx = rx * (0.6 if d == 0 else 1.0)
            rows_node.append(np.repeat(idx, W))
            ts_list.append(np.tile(ts, k))
            cols["dev"].append(np.full(k * W, d, dtype=np.int32))
            cols["rx"].append(rx.ravel())
            cols["tx"].append(tx.ravel())
            cols["rxp"].append(rx.ravel() / mtu)
            cols["txp"].append(tx.ravel() / mtu)
            cols["rxe"].append(ctr.err_cum[idx, d, 0].ravel())
            cols["txe"].append(ctr.err_cum[idx, d, 0].ravel() // 2)
            cols["rxd"].append(ctr.err_cum[idx, d, 1].ravel())
            cols["txd"].append(ctr.err_cum[idx, d, 1].ravel() // 2)
            cols["rxr"].append(ctr.rate_col[idx, d].ravel())
            cols["txr"].append(ctr.rate_col[idx, d].ravel() * (0.6 if d == 0 else 1.0))
            cols["speed"].append(np.full(k * W, speed, dtype=np.int64))
        cat = {k: np.concatenate(v) for k, v in cols.items()}
        return np.concatenate(rows_node), np.concatenate(ts_list), cat


def _carry(state: np.ndarray, sl: slice, per_minute: np.ndarray) -> np.ndarray:
    """Running totals of ``per_minute`` from each GPU's counter in ``state``, which moves to the last one."""
    total = state[sl, None] + np.cumsum(per_minute, axis=1)
    state[sl] = total[:, -1]
    return total


def _placements(plan: Plan) -> np.ndarray:
    """(attempt row, global GPU, start minute, end minute) of every GPU of every attempt."""
    c = plan.cluster
    rows: list[tuple[int, int, int, int]] = []
    for i, a in enumerate(plan.attempts):
        end = plan.minutes if a.end is None else a.end
        for node, gi in a.gpus:
            rows.append((i, int(c.gpu_offset[node]) + gi, a.start, end))
    return np.array(rows, dtype=np.int64).reshape(-1, 4)


def _node_groups(plan: Plan, chunk_gpus: int) -> list[_Group]:
    """Consecutive servers grouped until each group holds ``chunk_gpus`` GPUs (the last may hold fewer)."""
    c = plan.cluster
    groups: list[_Group] = []
    cur: list[int] = []
    count = 0
    for node in range(len(c.names)):
        cur.append(node)
        count += int(c.sizes[node])
        if count >= chunk_gpus:
            groups.append(_group(plan, cur))
            cur, count = [], 0
    if cur:
        groups.append(_group(plan, cur))
    return groups


def _group(plan: Plan, nodes: list[int]) -> _Group:
    c = plan.cluster
    g0 = int(c.gpu_offset[nodes[0]])
    g1 = int(c.gpu_offset[nodes[-1]] + c.sizes[nodes[-1]])
    return _Group(np.array(nodes, dtype=np.int64), g0, g1)


def _net_table(node_i: np.ndarray, ts: np.ndarray, cat: dict[str, np.ndarray], names: list[str]) -> pa.Table:
    """The net samples of :meth:`SampleGenerator._device_columns`, in the store's column order."""
    dev = cat["dev"]
    i64 = pa.int64()
    zeros = pa.array(np.zeros(len(node_i), dtype=np.int64), i64)
    return conform(pa.table({
        "ts": pa.array(ts, pa.timestamp("us")),
        "node": _dict(node_i, names),
        "device": _dict(dev, ["eth0", "mlx5_0"]),
        "port": pa.array(np.where(dev == 1, 1, 0).astype(np.int16), pa.int16(),
                         mask=dev == 0),
        "link_kind": _dict(dev, ["ethernet", "infiniband"]),
        "rx_bytes_total": pa.array(cat["rx"].astype(np.int64), i64),
        "tx_bytes_total": pa.array(cat["tx"].astype(np.int64), i64),
        "rx_packets_total": pa.array(cat["rxp"].astype(np.int64), i64),
        "tx_packets_total": pa.array(cat["txp"].astype(np.int64), i64),
        "rx_errors_total": pa.array(cat["rxe"].astype(np.int64), i64),
        "tx_errors_total": pa.array(cat["txe"].astype(np.int64), i64),
        "rx_drops_total": pa.array(cat["rxd"].astype(np.int64), i64),
        "tx_drops_total": pa.array(cat["txd"].astype(np.int64), i64),
        "rx_bps": pa.array(np.round(cat["rxr"]), pa.float64()),
        "tx_bps": pa.array(np.round(cat["txr"]), pa.float64()),
        "link_speed_mbps": pa.array(cat["speed"], i64),
        "symbol_errors_total": zeros,
        "link_downed_total": zeros,
    }), "net")


def xid_table(plan: Plan, start: datetime, uuids: list[str]) -> pa.Table:
    c = plan.cluster
    start_us = int(np.datetime64(start, "us").astype(np.int64))
    xs = plan.xids
    ts = np.array([start_us + x.minute * _MIN_US + x.second * 1_000_000 for x in xs], dtype=np.int64)
    return conform(pa.table({
        "ts": pa.array(ts, pa.timestamp("us")),
        "node": pa.array([c.names[x.node] for x in xs], pa.string()),
        "gpu_index": pa.array([x.gpu_index for x in xs], pa.int16()),
        "uuid": pa.array([uuids[int(c.gpu_offset[x.node]) + x.gpu_index] for x in xs], pa.string()),
        "xid": pa.array([x.xid for x in xs], pa.int32()),
    }), "xid")

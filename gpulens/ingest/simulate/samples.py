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


class SampleGenerator:
    """Yields (gpu_table, net_table) per chunk; deterministic for (seed, chunk)."""

    def __init__(self, plan: Plan, params: SimParams, start: datetime, seed: int,
                 uuids: list[str]) -> None:
        self.plan, self.p, self.seed = plan, params, seed
        c = plan.cluster
        self.start_us = int(np.datetime64(start, "us").astype(np.int64))
        self.minutes = plan.minutes
        n_gpus = c.total_gpus
        self.gpu_node = c.gpu_node()
        self.gpu_local = (np.arange(n_gpus) - c.gpu_offset[self.gpu_node]).astype(np.int16)
        self.uuids = uuids
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

        # Per-attempt parameters (rng independent of the chunking).
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
        rows: list[tuple[int, int, int, int]] = []
        for i, a in enumerate(att):
            end = self.minutes if a.end is None else a.end
            for node, gi in a.gpus:
                rows.append((i, int(c.gpu_offset[node]) + gi, a.start, end))
        arr = np.array(rows, dtype=np.int64).reshape(-1, 4)
        self.pl_att, self.pl_gpu, self.pl_start, self.pl_end = arr.T

        xs = plan.xids
        self.x_gpu = np.array([int(c.gpu_offset[x.node]) + x.gpu_index for x in xs], dtype=np.int64)
        self.x_min = np.array([x.minute for x in xs], dtype=np.int64)
        self.x_xid = np.array([x.xid for x in xs], dtype=np.int64)

        # Cumulative state.
        self.energy = np.random.default_rng([seed, 102]).uniform(1e9, 5e9, size=n_gpus)
        self.ecc_corr = np.zeros(n_gpus, dtype=np.int64)
        self.ecc_unc = np.zeros(n_gpus, dtype=np.int64)
        self.replay = np.zeros(n_gpus, dtype=np.int64)
        self.remap = np.zeros(n_gpus, dtype=np.int64)
        n_nodes = len(c.names)
        self.net_cum = np.random.default_rng([seed, 103]).uniform(1e11, 1e12, size=(n_nodes, 2)).astype(np.int64)
        self.net_prev = np.zeros((n_nodes, 2))
        self.net_err = np.zeros((n_nodes, 2, 2), dtype=np.int64)  # (errors, drops) x (rx, tx)

        self.groups: list[_Group] = []
        cur: list[int] = []
        count = 0
        for node in range(n_nodes):
            cur.append(node)
            count += int(c.sizes[node])
            if count >= params.chunk_gpus:
                self._add_group(cur)
                cur, count = [], 0
        if cur:
            self._add_group(cur)
        self.days = (self.minutes + 1439) // 1440

    def _add_group(self, nodes: list[int]) -> None:
        c = self.plan.cluster
        g0 = int(c.gpu_offset[nodes[0]])
        g1 = int(c.gpu_offset[nodes[-1]] + c.sizes[nodes[-1]])
        self.groups.append(_Group(np.array(nodes, dtype=np.int64), g0, g1))

    @property
    def chunks(self) -> int:
        return self.days * len(self.groups)

    def __iter__(self) -> Iterator[Chunk]:
        for day in range(self.days):
            for gi, group in enumerate(self.groups):
                yield self._chunk(day, gi, group)

    # ------------------------------------------------------------------ chunk
    def _chunk(self, day: int, gi: int, grp: _Group) -> Chunk:
        p = self.p
        rng = np.random.default_rng([self.seed, 7, day, gi])
        m0 = day * 1440
        m1 = min(self.minutes, m0 + 1440)
        M = m1 - m0
        g0, g1 = grp.g0, grp.g1
        G = g1 - g0
        occ = np.full((G, M), -1, dtype=np.int64)
        sel = np.flatnonzero((self.pl_gpu >= g0) & (self.pl_gpu < g1) & (self.pl_start < m1) & (self.pl_end > m0))
        for k in sel:
            s = max(int(self.pl_start[k]), m0) - m0
            e = min(int(self.pl_end[k]), m1) - m0
            occ[int(self.pl_gpu[k]) - g0, s:e] = self.pl_att[k]
        busy = occ >= 0
        a = occ[busy]
        n_busy = len(a)
        shape = (G, M)
        sl = slice(g0, g1)

        util = np.zeros(shape, dtype=np.float32)
        if n_busy:
            mu = np.clip(self.a_mu[a], 1e-3, 1 - 1e-3)
            kappa = p.util_minute_concentration
            util[busy] = np.round(100.0 * rng.beta(mu * kappa, (1.0 - mu) * kappa))
        u = util.astype(np.float64) / 100.0
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
        pcie_tx = np.round(pcie_rx * 0.35)
        idle_w = self.idle_w[sl, None]
        power = idle_w + (self.max_w[sl, None] - idle_w) * u ** 0.9 + rng.normal(0, 2.0, shape)
        power = np.round(np.clip(power, idle_w * 0.9, self.max_w[sl, None]), 1)
        energy = self.energy[sl, None] + np.cumsum(power * 60.0, axis=1)
        self.energy[sl] = energy[:, -1]
        temp = np.round(27.0 + 0.2 * power + rng.normal(0, 0.8, shape))
        sm_clock = np.where(busy, self.boost[sl, None] - np.where(temp > 80, 100.0, 0.0), np.round(self.base[sl, None] * 0.42))
        mem_clock = np.where(busy, self.memclk[sl, None], 405.0)

        # XIDs and the health counters they move.
        xid_count = np.zeros(shape, dtype=np.int32)
        xsel = (self.x_gpu >= g0) & (self.x_gpu < g1) & (self.x_min >= m0) & (self.x_min < m1)
        xg, xm, xx = self.x_gpu[xsel] - g0, self.x_min[xsel] - m0, self.x_xid[xsel]
        np.add.at(xid_count, (xg, xm), 1)
        unc = np.zeros(shape, dtype=np.int64)
        np.add.at(unc, (xg[xx == 48], xm[xx == 48]), 1)
        remap = np.zeros(shape, dtype=np.int64)
        np.add.at(remap, (xg[xx == 64], xm[xx == 64]), 1)
        bad = self.bad_gpu[sl]
        corr = np.zeros(shape, dtype=np.int64)
        replay = np.zeros(shape, dtype=np.int64)
        if bad.any():
            corr[bad] = rng.poisson(0.02, (int(bad.sum()), M))
            replay[bad] = rng.poisson(0.05, (int(bad.sum()), M))
        np.add.at(corr, (xg[(xx == 92) | (xx == 94)], xm[(xx == 92) | (xx == 94)]), 5)
        ecc_corr = self.ecc_corr[sl, None] + np.cumsum(corr, axis=1)
        ecc_unc = self.ecc_unc[sl, None] + np.cumsum(unc, axis=1)
        rep = self.replay[sl, None] + np.cumsum(replay, axis=1)
        rem = self.remap[sl, None] + np.cumsum(remap, axis=1)
        self.ecc_corr[sl], self.ecc_unc[sl] = ecc_corr[:, -1], ecc_unc[:, -1]
        self.replay[sl], self.remap[sl] = rep[:, -1], rem[:, -1]

        n = G * M
        ts = self.start_us + (np.arange(m0, m1, dtype=np.int64) * _MIN_US)
        gidx = np.arange(g0, g1)
        c = self.plan.cluster
        node_names = [c.names[i] for i in grp.nodes]
        zeros = np.zeros(n)
        gpu = conform(pa.table({
            "ts": pa.array(np.tile(ts, G), pa.timestamp("us")),
            "node": _dict(np.repeat(self.gpu_node[sl] - grp.nodes[0], M), node_names),
            "gpu_index": pa.array(np.repeat(self.gpu_local[sl], M), pa.int16()),
            "uuid": _dict(np.repeat(np.arange(G), M), self.uuids[g0:g1]),
            "model": _dict(np.repeat(self.model_idx[sl], M), self.model_names),
            "util_gpu": pa.array(util.ravel(), pa.float32()),
            "util_mem": pa.array(util_mem.ravel(), pa.float32()),
            "mem_used_bytes": pa.array(mem_used.ravel(), pa.int64()),
            "mem_total_bytes": pa.array(np.repeat(self.mem_total[sl], M), pa.int64()),
            "pcie_tx_bps": pa.array(pcie_tx.ravel(), pa.float64()),
            "pcie_rx_bps": pa.array(pcie_rx.ravel(), pa.float64()),
            "pcie_source": _dict(np.zeros(n, dtype=np.int32), ["counter"]),
            "pcie_replay_total": pa.array(rep.ravel(), pa.int64()),
            "power_w": pa.array(power.ravel().astype(np.float32), pa.float32()),
            "energy_j": pa.array(np.round(energy.ravel(), 1), pa.float64()),
            "temp_c": pa.array(temp.ravel().astype(np.float32), pa.float32()),
            "sm_clock_mhz": pa.array(sm_clock.ravel().astype(np.float32), pa.float32()),
            "mem_clock_mhz": pa.array(mem_clock.ravel().astype(np.float32), pa.float32()),
            "ecc_corrected_total": pa.array(ecc_corr.ravel(), pa.int64()),
            "ecc_uncorrected_total": pa.array(ecc_unc.ravel(), pa.int64()),
            "row_remap_failures": pa.array(rem.ravel(), pa.int64()),
            "nvlink_tx_bps": pa.array(zeros, pa.float64()),
            "nvlink_rx_bps": pa.array(zeros, pa.float64()),
            "sm_active_ratio": pa.array(sm_active.ravel(), pa.float32()),
            "tensor_active_ratio": pa.array(np.zeros(n, dtype=np.float32), pa.float32()),
            "xid_count": pa.array(xid_count.ravel(), pa.int32()),
        }), "gpu")
        del util, util_mem, mem_used, pcie_rx, pcie_tx, power, energy, temp
        multi = np.zeros(shape, dtype=bool)
        if n_busy:
            multi[busy] = self.a_multi[a]
        net, net_spans = self._net(rng, grp, gidx, u, multi, m0, m1)
        gpu_spans = [
            (c.names[nd], int(c.gpu_offset[nd] - g0) * M, int(c.gpu_offset[nd] + c.sizes[nd] - g0) * M)
            for nd in grp.nodes
        ]
        date = (datetime(1970, 1, 1) + timedelta(microseconds=int(ts[0]))).strftime("%Y-%m-%d")
        return Chunk(date, gpu, gpu_spans, net, net_spans)

    def _net(self, rng: np.random.Generator, grp: _Group, gidx: np.ndarray, u: np.ndarray,
             multi: np.ndarray, m0: int, m1: int) -> tuple[pa.Table, Spans]:
        p = self.p
        c = self.plan.cluster
        starts = (c.gpu_offset[grp.nodes] - gidx[0]).astype(np.int64)
        node_util = np.add.reduceat(u, starts, axis=0)  # (nodes, M) GPU-equivalents busy
        node_multi = np.add.reduceat(u * multi, starts, axis=0)
        nn, M = node_util.shape
        eth = 2e6 + node_util * 6e6 + rng.lognormal(0, 0.2, (nn, M)) * 1e6
        ib = node_multi * 2.5e8 + 1e4
        step = max(1, p.net_interval_s // 60)
        wstarts = np.arange(0, M, step)
        wlen = np.diff(np.append(wstarts, M)).astype(float)
        rates = np.stack([np.add.reduceat(eth, wstarts, axis=1) / wlen,
                          np.add.reduceat(ib, wstarts, axis=1) / wlen], axis=1)  # (nodes, 2, W)
        W = len(wstarts)
        nodes = grp.nodes
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

        has_ib = c.sizes[nodes] == 8
        rows_node: list[np.ndarray] = []
        cols: dict[str, list[np.ndarray]] = {k: [] for k in (
            "dev", "rx", "tx", "rxp", "txp", "rxe", "txe", "rxd", "txd", "rxr", "txr", "speed")}
        ts_list: list[np.ndarray] = []
        ts = self.start_us + (m0 + wstarts).astype(np.int64) * _MIN_US
        for d, (mtu, speed) in enumerate(((1500, 25_000), (4096, 100_000))):
            idx = np.arange(nn) if d == 0 else np.flatnonzero(has_ib)
            if len(idx) == 0:
                continue
            k = len(idx)
            rx = counters[idx, d]
            tx = rx * (0.6 if d == 0 else 1.0)
            rows_node.append(np.repeat(idx, W))
            ts_list.append(np.tile(ts, k))
            cols["dev"].append(np.full(k * W, d, dtype=np.int32))
            cols["rx"].append(rx.ravel())
            cols["tx"].append(tx.ravel())
            cols["rxp"].append(rx.ravel() / mtu)
            cols["txp"].append(tx.ravel() / mtu)
            cols["rxe"].append(err_cum[idx, d, 0].ravel())
            cols["txe"].append(err_cum[idx, d, 0].ravel() // 2)
            cols["rxd"].append(err_cum[idx, d, 1].ravel())
            cols["txd"].append(err_cum[idx, d, 1].ravel() // 2)
            cols["rxr"].append(rate_col[idx, d].ravel())
            cols["txr"].append(rate_col[idx, d].ravel() * (0.6 if d == 0 else 1.0))
            cols["speed"].append(np.full(k * W, speed, dtype=np.int64))
        cat = {k: np.concatenate(v) for k, v in cols.items()}
        node_i = np.concatenate(rows_node)
        dev = cat["dev"]
        n = len(node_i)
        i64 = pa.int64()
        zeros = pa.array(np.zeros(n, dtype=np.int64), i64)
        table = conform(pa.table({
            "ts": pa.array(np.concatenate(ts_list), pa.timestamp("us")),
            "node": _dict(node_i, [c.names[i] for i in nodes]),
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
        order = np.argsort(node_i, kind="stable")
        table = table.take(pa.array(order))
        counts = np.bincount(node_i, minlength=nn)
        ends = np.cumsum(counts)
        spans = [(c.names[nodes[i]], int(ends[i] - counts[i]), int(ends[i])) for i in range(nn) if counts[i]]
        return table, spans


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

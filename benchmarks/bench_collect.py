"""Node agent benchmarks: CPU time of one sampling tick, and sustained ingest into the store.

Tick: 8 GPUs (fake backend) + 4 NICs + lo + 2 InfiniBand ports + 64 GPU processes,
with real procfs/sysfs parsing of a generated fixture tree of that size
(``/proc/net/dev``, ``/sys/class/net/*``, IB counters, 64 ``/proc/<pid>/cgroup``).
Reported cold (job attribution cache cleared before every tick, so all 64
cgroup files are parsed) and warm (steady state: processes already known).
Target <= 5 ms CPU per tick.

Ingest: SegmentWriter.append of Arrow gpu-sample tables + flush (one
transaction per flush) into a fresh store; rows/s. Target >= 500,000 rows/s.
Roll (spool -> Parquet segments) is timed separately, wall and CPU, and
spool + roll together (the whole path a sample takes to a Parquet segment).

Usage: python -m benchmarks.run collect [--quick]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpulens.collectors.agent import Agent
from gpulens.collectors.attribution import JobResolver
from gpulens.collectors.gpu.fake import FakeBackend
from gpulens.collectors.net import NetReader
from gpulens.collectors.sink import MemorySink
from gpulens.store import SegmentWriter, Store, arrow_schema

__all__ = ["build_tree", "main"]

N_GPUS, N_NICS, N_PROCS = 8, 4, 64
IB_PORTS = (("mlx5_0", 1), ("mlx5_1", 1))


def build_tree(root: Path) -> list[int]:
    """A procfs/sysfs tree with 4 NICs + lo, 2 IB ports and 64 GPU processes; returns the pids."""
    proc, sysfs = root / "proc", root / "sys"
    (proc / "net").mkdir(parents=True)
    lines = ["Inter-|   Receive |  Transmit", " face |bytes packets errs drop fifo frame compressed multicast|..."]
    names = ["lo"] + [f"eth{i}" for i in range(N_NICS)]
    for i, n in enumerate(names):
        lines.append(f"{n:>6}: {10**9 * (i + 1)} {10**6} 0 0 0 0 0 0 {10**9} {10**6} 0 0 0 0 0 0")
        d = sysfs / "class" / "net" / n
        d.mkdir(parents=True)
        (d / "type").write_text("772\n" if n == "lo" else "1\n")
        if n != "lo":
            (d / "speed").write_text("100000\n")
    (proc / "net" / "dev").write_text("\n".join(lines) + "\n")
    for dev, port in IB_PORTS:
        base = sysfs / "class" / "infiniband" / dev / "ports" / str(port)
        (base / "counters").mkdir(parents=True)
        (base / "rate").write_text("200 Gb/sec (4X HDR)\n")
        for c in ("port_rcv_data", "port_xmit_data", "port_rcv_packets", "port_xmit_packets",
                  "port_rcv_errors", "port_xmit_discards", "symbol_error", "link_downed"):
            (base / "counters" / c).write_text("123456789\n")
    pids = list(range(20000, 20000 + N_PROCS))
    for k, pid in enumerate(pids):
        d = proc / str(pid)
        d.mkdir()
        (d / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/job_{1000 + k // 8}/step_0/user/task_{k % 8}\n")
        (d / "environ").write_bytes(b"PATH=/usr/bin\0HOME=/home/u\0SLURM_JOB_ID=%d\0" % (1000 + k // 8))
    return pids


def _tick_bench(root: Path, pids: list[int], n: int) -> dict[str, float]:
    scenario = {
        "devices": [{"index": i} for i in range(N_GPUS)],
        "processes": [{"gpu": k % N_GPUS, "pid": pid, "used_memory_bytes": 2**30, "sm_util": [10, 40]}
                      for k, pid in enumerate(pids)],
    }
    resolver = JobResolver(root / "proc")
    clock = [0.0]
    agent = Agent(node="bench", backend=FakeBackend(scenario), net=NetReader(root / "proc", root / "sys"),
                  resolver=resolver, sink=MemorySink(), clock=lambda: clock[0], wall=time.time,
                  flush_seconds=float("inf"), segment_seconds=float("inf"), max_buffer_rows=10**9)
    for _ in range(20):  # warm-up (imports, caches)
        clock[0] += 5
        agent.tick()
    res = agent.tick()
    assert res.count("gpu") == N_GPUS and res.count("proc") == N_PROCS
    assert res.count("net") == N_NICS + 1 + len(IB_PORTS)
    assert all(r["job_id"] for r in res.rows["proc"])
    out: dict[str, float] = {}
    for mode in ("cold", "warm"):
        times = []
        for _ in range(n):
            clock[0] += 5
            if mode == "cold":
                resolver.clear()
            t0 = time.thread_time()
            agent.tick()
            times.append(time.thread_time() - t0)
        times.sort()
        out[f"{mode}_mean_ms"] = statistics.fmean(times) * 1e3
        out[f"{mode}_p50_ms"] = times[len(times) // 2] * 1e3
        out[f"{mode}_p95_ms"] = times[int(len(times) * 0.95)] * 1e3
    return out


def _gpu_table(rows: int, start: datetime) -> pa.Table:
    """Realistic gpu samples: 8 GPUs per node, 5 s apart, values shaped like NVML readings."""
    rng = np.random.default_rng(0)
    schema = arrow_schema("gpu")
    gpu = np.arange(rows) % 8
    tick = np.arange(rows) // 8
    util = np.clip(np.round(rng.normal(70, 25, rows)), 0, 100)
    base = np.datetime64(start, "us")
    cols: dict[str, object] = {
        "ts": pa.array(base + tick * np.timedelta64(5, "s")),
        "node": pa.array(["node-0001"] * rows),
        "gpu_index": pa.array(gpu, pa.int16()),
        "uuid": pa.array([f"GPU-3f5c0a1e-9b7d-4c2a-8e61-00000000000{g}" for g in gpu]),
        "model": pa.array(["NVIDIA H100 80GB HBM3"] * rows),
        "util_gpu": pa.array(util, pa.float32()),
        "util_mem": pa.array(np.round(util * 0.6), pa.float32()),
        "mem_used_bytes": pa.array((rng.integers(10, 80, rows) * 2**30), pa.int64()),
        "mem_total_bytes": pa.array(np.full(rows, 80 * 2**30), pa.int64()),
        "pcie_tx_bps": pa.array(np.round(rng.random(rows) * 2e10, -6)),
        "pcie_rx_bps": pa.array(np.round(rng.random(rows) * 2e10, -6)),
        "pcie_source": pa.array(["counter"] * rows),
        "pcie_replay_total": pa.array(np.zeros(rows, np.int64)),
        "power_w": pa.array(np.round(100 + util * 5, 1), pa.float32()),
        "energy_j": pa.array(1e6 + tick * 2500.0 + gpu),
        "temp_c": pa.array(np.round(35 + util * 0.4), pa.float32()),
        "sm_clock_mhz": pa.array(np.where(util > 10, 1980.0, 345.0), pa.float32()),
        "mem_clock_mhz": pa.array(np.full(rows, 2619.0), pa.float32()),
        "ecc_corrected_total": pa.array(np.zeros(rows, np.int64)),
        "ecc_uncorrected_total": pa.array(np.zeros(rows, np.int64)),
        "row_remap_failures": pa.array(np.zeros(rows, np.int64)),
        "nvlink_tx_bps": pa.array(np.round(rng.random(rows) * 1e11, -6)),
        "nvlink_rx_bps": pa.array(np.round(rng.random(rows) * 1e11, -6)),
        "sm_active_ratio": pa.array(np.round(util / 110, 3), pa.float32()),
        "tensor_active_ratio": pa.array(np.round(util / 200, 3), pa.float32()),
        "xid_count": pa.array(np.zeros(rows, np.int32)),
    }
    return pa.table(cols).cast(schema)


def _ingest_bench(tmp: Path, batches: int, batch_rows: int, per_flush: int) -> dict[str, float]:
    store = Store.open(tmp / "data")
    table = _gpu_table(batch_rows, datetime(2026, 11, 22))
    writer = SegmentWriter(store, "bench-node", segment_seconds=float("inf"))
    load0 = os.getloadavg()[0]
    try:
        t0 = time.perf_counter()
        c0 = time.process_time()
        for i in range(batches):
            writer.append("gpu", table)
            if (i + 1) % per_flush == 0:
                writer.flush()
        writer.flush()
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        t1 = time.perf_counter()
        c1 = time.process_time()
        files = writer.roll()
        roll = time.perf_counter() - t1
        roll_cpu = time.process_time() - c1
    finally:
        writer.close()
    load1 = os.getloadavg()[0]
    rows = batches * batch_rows
    con = store.connect()
    stored = con.execute("SELECT count(*) FROM gpu_samples").fetchone()
    assert stored == (rows,), stored
    return {"rows": rows, "rows_per_s": rows / wall, "cpu_s": cpu, "wall_s": wall,
            "roll_s": roll, "roll_cpu_s": roll_cpu, "roll_rows_per_s": rows / roll, "files": len(files),
            "load_start": load0, "load_end": load1}


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        pids = build_tree(root / "tree")
        n = 100 if quick else 500
        t = _tick_bench(root / "tree", pids, n)
        print(f"tick ({N_GPUS} GPUs, {N_NICS} NICs + lo, {len(IB_PORTS)} IB ports, {N_PROCS} GPU processes;"
              f" {n} ticks each, CPU time per tick):")
        for mode in ("cold", "warm"):
            print(f"  {mode:<5} mean {t[f'{mode}_mean_ms']:.2f} ms  p50 {t[f'{mode}_p50_ms']:.2f} ms"
                  f"  p95 {t[f'{mode}_p95_ms']:.2f} ms   (target <= 5 ms)")
        print("  (the mean includes the Arrow conversion of queued rows, done once per 20,000 rows)")
        batches, batch_rows = (10, 50_000) if quick else (40, 50_000)
        r = _ingest_bench(root, batches, batch_rows, per_flush=4)
        print(f"ingest: {r['rows']:,} gpu rows as {batches} Arrow tables of {batch_rows:,}, flush every 4:"
              f" {r['rows_per_s']:,.0f} rows/s wall ({r['wall_s']:.2f} s);"
              f" {r['rows'] / r['cpu_s']:,.0f} rows per CPU-second   (target >= 500,000 rows/s)")
        print(f"        1-min load average {r['load_start']:.1f} at the start, {r['load_end']:.1f} at the end,"
              f" on {os.cpu_count()} cores (CPU-seconds count every thread of this process)")
        print(f"roll:   spool -> Parquet {r['roll_s']:.2f} s ({r['roll_rows_per_s']:,.0f} rows/s wall,"
              f" {r['rows'] / r['roll_cpu_s']:,.0f} rows per CPU-second, {r['files']} file(s))")
        wall, cpu = r["wall_s"] + r["roll_s"], r["cpu_s"] + r["roll_cpu_s"]
        print(f"spool + roll (every ingested row also ends in Parquet): {r['rows'] / wall:,.0f} rows/s wall;"
              f" {r['rows'] / cpu:,.0f} rows per CPU-second")


if __name__ == "__main__":  # pragma: no cover
    import sys

    main(sys.argv[1:])

"""CPU cost of the live straggler watcher: 1,000 nodes x 8 GPUs at 5 s sampling, one core?

One watcher tick (``LiveWatcher.step``) over a cluster of running multi-node jobs covering
``--nodes`` machines (sizes 2-32, the evaluation's mix): parse every agent's /metrics text (the
real agent renderer's output for 8 fake GPUs, with Ethernet and InfiniBand series), counters into
rates, stack each job's machines, and run every job's detector. HTTP is left out (the agents'
bodies are handed over in memory; fetching is I/O in a thread pool), and so is the store (no
detection changes, so nothing is written). Measured with ``time.process_time`` over ``--ticks``
ticks after the baselines are learnt; "share of one core" = CPU seconds per tick / interval.

Run: ``python -m benchmarks.run straggler`` (options ``--nodes=1000 --ticks=30 --interval=5``).
"""

from __future__ import annotations

import os
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from gpulens.collectors.agent import Agent
from gpulens.collectors.gpu.fake import FakeBackend
from gpulens.config import LiveConfig
from gpulens.diagnosis.live import LiveWatcher
from gpulens.exporters.agent import render_text
from gpulens.store import Store

__all__ = ["main"]

_SIZES = (2, 3, 4, 4, 6, 8, 8, 16, 32)


def _opts(argv: list[str]) -> dict[str, float]:
    out = {"nodes": 1000.0, "ticks": 30.0, "interval": 5.0}
    for a in argv:
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            if k in out:
                out[k] = float(v)
    return out


def _body() -> str:
    """One node's /metrics: the agent renderer over 8 fake GPUs, plus Ethernet and InfiniBand series."""
    t = [1.8e9]
    agent = Agent(node="@NODE@", backend=FakeBackend({"devices": [{"index": i} for i in range(8)]}), net=None,
                  resolver=None, sink=None, clock=lambda: t[0], wall=lambda: t[0])
    agent.tick()
    text = render_text(agent.snapshot).decode()
    extra = []
    for dev in ("eth0", "eth1"):
        for fam in ("receive_bytes_total", "transmit_bytes_total", "receive_errors_total", "transmit_errors_total"):
            extra.append(f'gpulens_network_{fam}{{node="@NODE@",device="{dev}"}} @C@')
        extra.append(f'gpulens_network_speed_bytes{{node="@NODE@",device="{dev}"}} 3.125e+09')
    for hca in range(4):
        lab = f'node="@NODE@",device="mlx5_{hca}",port="1"'
        for fam in ("receive_bytes_total", "transmit_bytes_total", "symbol_errors_total", "link_downed_total",
                    "receive_errors_total"):
            extra.append(f"gpulens_infiniband_{fam}{{{lab}}} @C@")
        extra.append(f"gpulens_infiniband_rate_bytes{{{lab}}} 5e+10")
    lines = [ln for ln in text.splitlines() if not ln.startswith("gpulens_agent_last_sample_timestamp_seconds")]
    lines.append('gpulens_agent_last_sample_timestamp_seconds{node="@NODE@"} @TS@')
    return "\n".join(lines + extra) + "\n"


def _jobs(n_nodes: int, rng: np.random.Generator) -> list[list[str]]:
    jobs, i = [], 0
    while i < n_nodes:
        size = min(int(rng.choice(_SIZES)), n_nodes - i)
        size = max(size, 2) if n_nodes - i >= 2 else size
        jobs.append([f"b{k:05d}" for k in range(i, i + size)])
        i += size
    return [j for j in jobs if len(j) >= 2]


def main(argv: list[str]) -> None:
    o = _opts(argv)
    n_nodes, ticks, interval = int(o["nodes"]), int(o["ticks"]), o["interval"]
    rng = np.random.default_rng(0)
    jobs = _jobs(n_nodes, rng)
    template = _body()
    with tempfile.TemporaryDirectory(prefix="bench-straggler-") as tmp:
        store = Store.open(Path(tmp) / "data")
        t0 = datetime(2027, 1, 1)
        with store.write() as con:
            for j, nodes in enumerate(jobs):
                con.execute("INSERT INTO attempts (job_id, attempt, start_time, status) VALUES (?, 0, ?, 'running')",
                            [f"bj{j:04d}", t0])
                con.executemany("INSERT INTO placements (job_id, attempt, node, gpu_index, start_time)"
                                " VALUES (?, 0, ?, ?, ?)", [[f"bj{j:04d}", n, g, t0] for n in nodes for g in range(8)])
        per_node = {n: template.replace("@NODE@", n) for nodes in jobs for n in nodes}
        now = [1.9e9]
        bodies: dict[str, str] = {}

        def fetch(url: str) -> str:
            return bodies[url.split("/")[2].split(":")[0]]

        cfg = LiveConfig(interval=interval, grace_s=0.0, learn_s=3 * interval, jobs_every_s=15.0)
        watcher = LiveWatcher(store, cfg, wall=lambda: now[0], fetch=fetch)
        counter = rng.integers(0, 10**9, len(per_node))

        def tick(k: int) -> None:
            # the agents' new sample (built outside the timed region's per-node parsing)
            for idx, (n, body) in enumerate(per_node.items()):
                bodies[n] = body.replace("@TS@", f"{now[0]:.3f}").replace("@C@", str(int(counter[idx]) + k * 1000))

        warm = int(4 + cfg.learn_s / interval)
        for k in range(warm):
            tick(k)
            watcher.step()
            now[0] += interval
        cpu = wall = 0.0
        for k in range(warm, warm + ticks):
            tick(k)
            c0, w0 = time.process_time(), time.perf_counter()
            watcher.step()
            cpu += time.process_time() - c0
            wall += time.perf_counter() - w0
            now[0] += interval
        watcher.close()
        res: dict[str, Any] = {
            "nodes": sum(len(j) for j in jobs), "gpus": 8 * sum(len(j) for j in jobs), "jobs": len(jobs),
            "ticks": ticks, "cpu_s_per_tick": cpu / ticks, "wall_s_per_tick": wall / ticks,
            "share_of_one_core": cpu / ticks / interval, "body_bytes": len(next(iter(bodies.values()))),
            "load_avg": os.getloadavg()[0],
        }
    print(f"straggler watcher: {res['nodes']} nodes x 8 GPUs in {res['jobs']} jobs, {res['ticks']} ticks "
          f"at {interval:g} s: {res['cpu_s_per_tick'] * 1e3:.0f} ms CPU per tick "
          f"({res['wall_s_per_tick'] * 1e3:.0f} ms wall), {100 * res['share_of_one_core']:.1f}% of one core; "
          f"/metrics body {res['body_bytes']:,} bytes per node; load average {res['load_avg']:.1f}")

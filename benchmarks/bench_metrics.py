"""Scrape throughput and latency of the two /metrics endpoints.

* the node agent (``gpulens collect --backend fake``) with a fake backend of
  1,024 GPUs, each with a job process (so ``gpulens_gpu_job_info`` has 1,024
  series too), sampling every 5 s, not writing to the store;
* the cluster exporter (``gpulens exporter``) over a simulated 1,024-GPU store.

Each endpoint runs in its own process on 127.0.0.1 and is loaded by a local
load generator (threads, one HTTP connection per scrape, the Accept and
Accept-Encoding headers Prometheus 2.x sends). Two measurements per endpoint,
both bounded in request count and time:

1. paced: ``--rate`` scrapes/s (default 50) for ``--duration`` seconds;
   "sustained" means every scrape answered 200 with a full body and the last
   one finished within 1 s of its schedule (no backlog);
2. closed loop: ``--concurrency`` clients scraping back to back for at most
   ``--duration`` seconds / ``--max-scrapes`` scrapes: the maximum rate.

Run: ``make bench BENCH=metrics`` or ``python -m benchmarks.run metrics --gpus=256``.
Options (``--name=value``): --gpus, --rate, --duration, --concurrency,
--max-scrapes, --sim-days, --data-dir (reuse a store for the exporter),
--identity (no gzip), --only=agent|exporter|render, --render-reps, --render-reps-old.

Before the agent endpoint, the same 1,024-GPU snapshot is rendered in-process both
ways: prometheus-client's generic path (text and OpenMetrics, what every scrape
cost before the agent cached its exposition) and the agent's cached renderer.
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LoadResult", "load", "main"]

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@dataclass
class LoadResult:
    requested: int
    completed: int = 0
    errors: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    backlog: float = 0.0  # how late the last scrape finished relative to its schedule
    body_bytes: int = 0

    @property
    def rate(self) -> float:
        return self.completed / self.elapsed if self.elapsed > 0 else 0.0

    def pct(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))]


def _scrape(port: int, headers: dict[str, str], min_bytes: int) -> tuple[float, int, str | None]:
    t0 = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics", headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
    except OSError as exc:
        return time.perf_counter() - t0, 0, repr(exc)
    dt = time.perf_counter() - t0
    if resp.status != 200:
        return dt, len(body), f"HTTP {resp.status}"
    if len(body) < min_bytes:
        return dt, len(body), f"short body ({len(body)} bytes)"
    return dt, len(body), None


def load(port: int, *, rate: float | None, duration: float, concurrency: int, max_scrapes: int,
         headers: dict[str, str], min_bytes: int) -> LoadResult:
    """Scrape ``port`` at ``rate``/s (None: back to back) for ``duration`` s, at most ``max_scrapes``."""
    n = max_scrapes if rate is None else min(max_scrapes, int(rate * duration))
    res = LoadResult(requested=n)
    lock = threading.Lock()
    counter = iter(range(n))
    start = time.perf_counter() + 0.05
    hard_stop = start + duration * 2 + 10  # bounded in time whatever the server does
    last_done = [start]

    def worker() -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            due = start + (i / rate if rate else 0.0)
            now = time.perf_counter()
            if now > hard_stop or (rate is None and now > start + duration):
                return
            if due > now:
                time.sleep(due - now)
            dt, size, err = _scrape(port, headers, min_bytes)
            done = time.perf_counter()
            with lock:
                res.latencies.append(dt)
                res.completed += 1
                res.body_bytes = max(res.body_bytes, size)
                if err:
                    res.errors.append(err)
                last_done[0] = max(last_done[0], done)
                if rate:
                    res.backlog = max(res.backlog, done - (start + (n - 1) / rate))

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0.0, hard_stop - time.perf_counter()) + 5)
    res.elapsed = last_done[0] - start
    return res


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_metrics(port: int, proc: subprocess.Popen[bytes], needle: bytes, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics")
            body = conn.getresponse().read()
            conn.close()
            if needle in body:
                return body
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"port {port} did not serve {needle!r} within {timeout:.0f} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def _report(name: str, series: int, plain_bytes: int, paced: LoadResult, closed: LoadResult,
            rate: float, concurrency: int) -> dict[str, Any]:
    ok = not paced.errors and not closed.errors and paced.completed == paced.requested \
        and paced.backlog <= 1.0 and closed.rate >= rate
    row = {
        "endpoint": name,
        "series": series,
        "body_bytes_plain": plain_bytes,
        "body_bytes_sent": paced.body_bytes,
        "paced_target_per_s": rate,
        "paced_scrapes": paced.completed,
        "paced_rate_per_s": round(paced.rate, 1),
        "paced_errors": len(paced.errors),
        "paced_backlog_s": round(paced.backlog, 3),
        "paced_p50_ms": round(paced.pct(0.50) * 1000, 1),
        "paced_p99_ms": round(paced.pct(0.99) * 1000, 1),
        "paced_max_ms": round(max(paced.latencies, default=float("nan")) * 1000, 1),
        "closed_concurrency": concurrency,
        "closed_scrapes": closed.completed,
        "closed_rate_per_s": round(closed.rate, 1),
        "closed_errors": len(closed.errors),
        "closed_p99_ms": round(closed.pct(0.99) * 1000, 1),
        "sustains_target": ok,
    }
    print(json.dumps(row), flush=True)
    if paced.errors or closed.errors:
        print(f"  first errors: {(paced.errors + closed.errors)[:3]}", flush=True)
    return row


def _measure(name: str, port: int, body: bytes, opts: dict[str, str]) -> dict[str, Any]:
    rate = float(opts.get("rate", "50"))
    duration = float(opts.get("duration", "10"))
    concurrency = int(opts.get("concurrency", "4"))
    max_scrapes = int(opts.get("max-scrapes", "2000"))
    headers = {"Accept": PROMETHEUS_ACCEPT}
    if "identity" not in opts:
        headers["Accept-Encoding"] = "gzip"
    min_bytes = len(gzip.compress(body)) // 2 if "identity" not in opts else len(body) // 2
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    paced = load(port, rate=rate, duration=duration, concurrency=max(concurrency, 8),
                 max_scrapes=max_scrapes, headers=headers, min_bytes=min_bytes)
    closed = load(port, rate=None, duration=duration, concurrency=concurrency,
                  max_scrapes=max_scrapes, headers=headers, min_bytes=min_bytes)
    return _report(name, series, len(body), paced, closed, rate, concurrency)


def bench_agent(opts: dict[str, str], tmp: Path) -> dict[str, Any]:
    gpus = int(opts.get("gpus", "1024"))
    scenario = tmp / "scenario.json"
    scenario.write_text(json.dumps({
        "devices": [{"index": i} for i in range(gpus)],
        "processes": [{"gpu": i, "pid": "self", "used_memory_bytes": 2e9} for i in range(gpus)],
    }))
    port = _free_port()
    env = {**os.environ, "GPULENS_JOB_ID": "bench-job"}
    cmd = [sys.executable, "-m", "gpulens", "--quiet", "--data-dir", str(tmp / "agent-data"),
           "collect", "--backend", "fake", "--fake-scenario", str(scenario), "--no-store",
           "--interval", "5", "--node", "bench-node", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        needle = f'gpu="{gpus - 1}"'.encode()
        body = _wait_metrics(port, proc, needle, timeout=120)
        return _measure(f"agent ({gpus} fake GPUs)", port, body, opts)
    finally:
        _stop(proc)


def _cpu_wall(fn: Callable[[], object], reps: int) -> tuple[float, float]:
    """Mean CPU seconds and wall seconds of ``fn()`` over ``reps`` calls."""
    c, w = time.process_time(), time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.process_time() - c) / reps, (time.perf_counter() - w) / reps


def bench_render(opts: dict[str, str]) -> dict[str, Any]:
    """In-process, same snapshot: the per-scrape prometheus-client path (before) vs the cached renderer (now)."""
    from prometheus_client import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

    from gpulens.collectors.agent import Agent
    from gpulens.collectors.attribution import JobResolver
    from gpulens.collectors.gpu.fake import FakeBackend
    from gpulens.exporters.agent import make_registry, render_text

    gpus = int(opts.get("gpus", "1024"))
    os.environ.setdefault("GPULENS_JOB_ID", "bench-job")
    agent = Agent(node="bench-node", backend=FakeBackend({
        "devices": [{"index": i} for i in range(gpus)],
        "processes": [{"gpu": i, "pid": os.getpid(), "used_memory_bytes": 2e9} for i in range(gpus)],
    }), net=None, resolver=JobResolver("/proc"), sink=None)
    agent.tick()
    agent.tick()
    snap = agent.snapshot
    registry = make_registry(lambda: snap)
    text = generate_latest(registry)
    new = render_text(snap)
    assert new == text, "cached renderer and prometheus-client differ"
    reps_old = int(opts.get("render-reps-old", "2"))
    reps_new = int(opts.get("render-reps", "10"))
    res = {
        "old_text": _cpu_wall(lambda: generate_latest(registry), reps_old),
        "old_openmetrics": _cpu_wall(lambda: generate_openmetrics(registry), reps_old),
        "old_gzip9": _cpu_wall(lambda: gzip.compress(text), reps_old),
        "new_render": _cpu_wall(lambda: render_text(snap), reps_new),
        "new_gzip1": _cpu_wall(lambda: gzip.compress(new, compresslevel=1, mtime=0), reps_new),
    }
    row = {"gpus": gpus, "bytes": len(new), "gzip1_bytes": len(gzip.compress(new, compresslevel=1)),
           "load_avg": round(os.getloadavg()[0], 1)}
    row |= {f"{k}_cpu_ms": round(v[0] * 1e3, 1) for k, v in res.items()}
    row |= {f"{k}_wall_ms": round(v[1] * 1e3, 1) for k, v in res.items()}
    print(f"render, in-process, {gpus} GPUs ({len(new):,} bytes; byte-identical to prometheus-client's text"
          f" format), load average {row['load_avg']}:", flush=True)
    for k, (cpu, wall) in res.items():
        print(f"  {k:<16} CPU {cpu * 1e3:8.1f} ms   wall {wall * 1e3:8.1f} ms", flush=True)
    before = res["old_openmetrics"][0] + res["old_gzip9"][0]
    now = res["new_render"][0] + res["new_gzip1"][0]
    print(f"  per scrape before (OpenMetrics + gzip, every scrape): {before * 1e3:.0f} ms CPU;"
          f" now once per tick (render + gzip): {now * 1e3:.0f} ms CPU ({before / now:.0f}x less),"
          f" every other scrape serves cached bytes", flush=True)
    print(json.dumps(row), flush=True)
    return row


def bench_exporter(opts: dict[str, str], tmp: Path) -> dict[str, Any]:
    data = Path(opts["data-dir"]) if "data-dir" in opts else tmp / "sim-data"
    if "data-dir" not in opts:
        from gpulens.ingest.simulate import simulate
        from gpulens.store import Store

        gpus = int(opts.get("gpus", "1024"))
        days = float(opts.get("sim-days", "1"))
        t0 = time.perf_counter()
        simulate(Store.open(data), gpus=gpus, days=days, seed=7)
        print(f"  simulated {gpus} GPUs x {days:g} days in {time.perf_counter() - t0:.1f} s", flush=True)
    port = _free_port()
    cmd = [sys.executable, "-m", "gpulens", "--quiet", "--data-dir", str(data), "exporter",
           "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.perf_counter()
        body = _wait_metrics(port, proc, b"gpulens_cluster_exporter_up 1.0", timeout=300)
        print(f"  exporter first snapshot ready after {time.perf_counter() - t0:.1f} s", flush=True)
        for line in body.decode().splitlines():
            if line.startswith(("gpulens_cluster_exporter_refresh_duration_seconds",
                                "gpulens_cluster_exporter_section_duration_seconds")):
                print(f"  {line}", flush=True)
        return _measure("cluster exporter", port, body, opts)
    finally:
        _stop(proc)


def main(argv: list[str]) -> None:
    opts: dict[str, str] = {}
    for arg in argv:
        key, _, value = arg.lstrip("-").partition("=")
        opts[key] = value
    only = opts.get("only")
    tmp = Path(tempfile.mkdtemp(prefix="gpulens-bench-metrics-"))
    rows = []
    try:
        if only in (None, "agent", "render"):
            bench_render(opts)
        if only in (None, "agent"):
            rows.append(bench_agent(opts, tmp))
        if only in (None, "exporter"):
            rows.append(bench_exporter(opts, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(f"{'endpoint':<28}{'series':>8}{'paced/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'max/s':>8}"
          f"{'errors':>8}  sustains")
    for r in rows:
        print(f"{r['endpoint']:<28}{r['series']:>8}{r['paced_rate_per_s']:>9}{r['paced_p50_ms']:>9}"
              f"{r['paced_p99_ms']:>9}{r['closed_rate_per_s']:>8}"
              f"{r['paced_errors'] + r['closed_errors']:>8}  {r['sustains_target']}")

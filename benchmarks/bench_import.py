"""`make bench BENCH=import`: `gpulens import prometheus` throughput from a local Prometheus.

Backfills 2 nodes x 8 GPUs x 30 days of dcgm-exporter series at 60 s
(``DCGM_FI_DEV_GPU_UTIL``, ``_FB_USED``, ``_FB_FREE``, ``_POWER_USAGE``,
``_TOTAL_ENERGY_CONSUMPTION``: 5 metrics, 3.46 M points) with ``promtool tsdb
create-blocks-from openmetrics`` (one file per day, so the text never takes more
than a day's worth of disk), starts the Debian ``prometheus`` on 127.0.0.1 and
times a full import into an empty store: GPU rows per second (one row = one GPU
at one step, every metric of it), Prometheus points per second, and the wall
seconds for the 30 days. Options: ``--days=N`` (default 30), ``--keep`` (leave the
temporary directory), ``--tsdb=DIR`` (backfill into DIR once and reuse it on later runs).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

NODES = ("gpu-a", "gpu-b")
GPUS = 8
STEP = 60
START = datetime(2026, 1, 1, tzinfo=UTC)
METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
           "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")


def _labels(node: str, gpu: int) -> str:
    u = uuid.uuid5(uuid.NAMESPACE_DNS, f"{node}/{gpu}")
    return (f'gpu="{gpu}",UUID="GPU-{u}",pci_bus_id="00000000:{0x18 + gpu:02X}:00.0",device="nvidia{gpu}",'
            f'modelName="NVIDIA H100 80GB HBM3",Hostname="{node}",instance="{node}:9400",job="dcgm"')


def _value(metric: str, gpu: int, k: int) -> int:
    util = (k * 7 + gpu * 13) % 101
    if metric == "DCGM_FI_DEV_GPU_UTIL":
        return util
    if metric == "DCGM_FI_DEV_FB_USED":
        return 1000 + (k * 37) % 70000
    if metric == "DCGM_FI_DEV_FB_FREE":
        return 81559 - 1000 - (k * 37) % 70000
    if metric == "DCGM_FI_DEV_POWER_USAGE":
        return 100 + util * 5
    return 10**9 + k * 18_000_000


def _day_file(path: Path, day: int) -> int:
    t0 = int(START.timestamp())
    per_day = 86400 // STEP
    n = 0
    with open(path, "w") as fh:
        for metric in METRICS:
            fh.write(f"# TYPE {metric} gauge\n")
            for node in NODES:
                for gpu in range(GPUS):
                    lab = _labels(node, gpu)
                    lines = [f"{metric}{{{lab}}} {_value(metric, gpu, k)} {t0 + k * STEP}\n"
                             for k in range(day * per_day, (day + 1) * per_day)]
                    fh.writelines(lines)
                    n += len(lines)
        fh.write("# EOF\n")
    return n


def _backfill(tsdb: Path, tmp: Path, days: int) -> None:
    for day in range(days):
        om = tmp / f"day{day}.om"
        _day_file(om, day)
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)],
                       check=True, capture_output=True, timeout=600)
        om.unlink()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(tmp: Path, tsdb: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 1m}\n")
    proc = subprocess.Popen(
        ["prometheus", f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tsdb}",
         "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if urllib.request.urlopen(f"{url}/-/ready", timeout=1).status == 200:
                return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("Prometheus did not become ready")


def main(argv: list[str]) -> None:
    from gpulens.ingest.importers.promapi import PromClient
    from gpulens.ingest.importers.prometheus import PromImport, import_prometheus
    from gpulens.store import Store

    opts: dict[str, str] = {}
    for a in argv:
        key, _, value = a.lstrip("-").partition("=")
        opts[key] = value or "1"
    days = int(opts.get("days", "30"))
    tmp = Path(tempfile.mkdtemp(prefix="gpulens-bench-import-"))
    try:
        t = time.perf_counter()
        tsdb = Path(opts["tsdb"]) if "tsdb" in opts else tmp / "tsdb"
        points = len(NODES) * GPUS * days * 86400 // STEP * len(METRICS)
        marker = tsdb / f".gpulens-bench-{days}d"
        if not marker.exists():
            _backfill(tsdb, tmp, days)
            marker.write_text("complete\n")
        print(f"backfill: {points:,} points ({len(NODES)} nodes x {GPUS} GPUs x {days} days at {STEP} s,"
              f" {len(METRICS)} metrics) in {time.perf_counter() - t:.1f} s")
        proc, url = _start(tmp, tsdb)
        try:
            store = Store.open(tmp / "data")
            end = START + timedelta(days=days) - timedelta(seconds=STEP)
            load0 = os.getloadavg()[0]
            t, c = time.perf_counter(), time.process_time()
            client = PromClient(url)
            res = import_prometheus(store, PromImport(url, START, end, float(STEP), "dcgm"), client=client)
            wall, cpu = time.perf_counter() - t, time.process_time() - c
            load1 = os.getloadavg()[0]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        rows = res.rows["gpu_samples"]
        assert rows == len(NODES) * GPUS * days * 86400 // STEP, res.rows
        print(f"import: {rows:,} GPU rows ({points:,} Prometheus points) in {wall:.1f} s wall,"
              f" {cpu:.1f} s CPU of this process; 1-min load {load0:.2f} -> {load1:.2f}")
        print(f"  {rows / wall:,.0f} GPU rows/s, {points / wall:,.0f} points/s (wall);"
              f" {rows / cpu:,.0f} GPU rows per CPU-s of the importer")
        print(f"  2 nodes x 8 GPUs x 30 days at 60 s: {wall * 30 / days:.1f} s"
              + ("" if days == 30 else " (scaled from the run)"))
        print(f"  HTTP: {client.requests} requests, {client.seconds:.1f} s summed request time incl. JSON decoding"
              " (requests overlap: two chunks are fetched ahead)")
        print(f"  quirks: {res.quirks[url]}")
    finally:
        if "keep" not in opts:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")

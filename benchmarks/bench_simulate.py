"""Benchmark `gpulens simulate`: wall time, peak RSS and output size.

Default: the issue's target, 2,000 GPUs x 30 days (about 86 M GPU samples).
``--quick`` runs 256 GPUs x 2 days instead. Runs the real CLI in a child process
(``--data-dir`` in a temporary directory, removed afterwards unless ``--keep``)
and reads the child's peak RSS from ``getrusage(RUSAGE_CHILDREN)``.

    make bench BENCH=simulate                      # 2000 x 30
    .venv/bin/python -m benchmarks.run simulate --quick
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main"]


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str]) -> None:
    quick = "--quick" in argv
    keep = "--keep" in argv
    gpus, days = (256, 2) if quick else (2000, 30)
    for a in argv:
        if a.startswith("--gpus="):
            gpus = int(a.split("=", 1)[1])
        if a.startswith("--days="):
            days = int(a.split("=", 1)[1])
    exe = Path(sys.executable).with_name("gpulens")
    data = Path(tempfile.mkdtemp(prefix="gpulens-bench-sim-"))
    cmd = [str(exe), "--quiet", "--data-dir", str(data), "simulate", "--gpus", str(gpus),
           "--days", str(days), "--seed", "0", "--start", "2026-10-01", "--json"]
    print("command:", " ".join(cmd[:1] + cmd[4:]), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "GPULENS_DATA_DIR": str(data)})
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_kib = usage.ru_maxrss
    cpu = usage.ru_utime + usage.ru_stime
    if proc.returncode != 0:
        print(proc.stderr, file=sys.stderr)
        raise SystemExit(f"gpulens simulate failed with exit code {proc.returncode}")
    summary = json.loads(proc.stdout)
    size = _du(data)
    print(f"gpus={summary['gpus']} nodes={summary['nodes']} days={days} jobs={summary['jobs']} "
          f"attempts={summary['attempts']} failed_attempts={summary['failed_attempts']}")
    print(f"gpu_samples={summary['gpu_samples']:,} net_samples={summary['net_samples']:,} "
          f"job_metrics={summary['job_metrics']:,} xid_events={summary['xid_events']}")
    print(f"wall_s={wall:.1f} (in simulate(): {summary['elapsed_s']:.1f}) "
          f"gpu_samples_per_s={summary['gpu_samples'] / wall:,.0f}")
    print(f"cpu_s={cpu:.1f} (user+sys of the child) gpu_samples_per_cpu_s={summary['gpu_samples'] / cpu:,.0f} "
          f"load_average_1m_after={os.getloadavg()[0]:.1f}")
    print(f"peak_rss_mib={peak_kib / 1024:.0f} data_dir_mib={size / 2**20:.0f}")
    if keep:
        print("kept:", data)
    else:
        shutil.rmtree(data, ignore_errors=True)

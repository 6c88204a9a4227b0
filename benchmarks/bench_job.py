"""`gpulens diagnose --job ID` on the demo's data: cold and warm, as an operator runs it.

    make bench BENCH=job      (or: .venv/bin/python -m benchmarks.run job)
    options: --gpus=N --days=D (default: the demo's 256 GPUs over 7 days) --reps=N (5)

Builds the demo's store (``gpulens demo --no-serve``: simulate, diagnose every failure,
blacklist, flag nodes) in a temp dir, picks failed jobs, then times whole
``python -m gpulens diagnose --job ID`` processes (interpreter start and imports included):

* **cold**: the origin network's cache (``<data dir>/models/origin-bn-*.json``) and the
  per-user cache removed first, so the process imports pgmpy and learns the network (what
  every run cost before the network was read from its cache);
* **warm**: the cache in place (what every later run costs);
* ``gpulens --version``: the interpreter and CLI start-up floor.

Wall and CPU seconds (children's rusage) are reported with the load average before and
after: the machine is shared, so CPU time is the number to compare. Target: warm < 2 s.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main"]

ROOT = Path(__file__).resolve().parents[1]


def _arg(argv: list[str], name: str, default: float) -> float:
    for a in argv:
        if a.startswith(f"--{name}="):
            return float(a.split("=", 1)[1])
    return default


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one child process."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - w0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def _failed_jobs(data: Path, n: int) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from gpulens.store import Store

    con = Store.open(data).connect()
    try:
        rows = con.execute("SELECT DISTINCT job_id FROM failures ORDER BY job_id LIMIT ?", [n]).fetchall()
    finally:
        con.close()
    return [str(r[0]) for r in rows]


def main(argv: list[str]) -> None:
    gpus, days, reps = int(_arg(argv, "gpus", 256)), _arg(argv, "days", 7), int(_arg(argv, "reps", 5))
    tmp = Path(tempfile.mkdtemp(prefix="gpulens-bench-job-"))
    data, cache = tmp / "data", tmp / "cache"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")},
           "GPULENS_DATA_DIR": str(data), "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(ROOT)}
    gl = [sys.executable, "-m", "gpulens"]
    try:
        t0 = time.perf_counter()
        subprocess.run([*gl, "-q", "demo", "--gpus", str(gpus), "--days", str(days), "--no-serve"],
                       check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
        print(f"demo store ({gpus} GPUs, {days:g} days) built in {time.perf_counter() - t0:.0f} s")
        jobs = _failed_jobs(data, reps)
        load0 = os.getloadavg()
        floor = [_timed([*gl, "--version"], env) for _ in range(reps)]
        cold, warm = [], []
        for job in jobs:
            for f in (data / "models").glob("origin-bn-*.json"):
                f.unlink()
            shutil.rmtree(cache, ignore_errors=True)
            cold.append(_timed([*gl, "diagnose", "--job", job], env))
            warm.append(_timed([*gl, "diagnose", "--job", job], env))
        load1 = os.getloadavg()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average before {load0[0]:.1f} / after {load1[0]:.1f}; {len(jobs)} failed jobs, "
          "one cold and one warm process each (medians)")
    print("| run | wall s | CPU s |")
    print("| --- | ---: | ---: |")
    for name, runs in (("`gpulens --version` (start-up floor)", floor),
                       ("`diagnose --job ID`, cold (no cached network: pgmpy import + fit)", cold),
                       ("**`diagnose --job ID`, warm (cached network)**", warm)):
        print(f"| {name} | {statistics.median(w for w, _ in runs):.2f} | "
              f"{statistics.median(c for _, c in runs):.2f} |")
    ratio = statistics.median(c for _, c in cold) / statistics.median(c for _, c in warm)
    print(f"cold / warm CPU: {ratio:.1f}x")

"""What the sbatch check adds to a healthy job's submission (issue 24: at most 1 s).

Starts the test suite's single-node Slurm (tests/slurm/cluster.py: Debian's slurmctld/slurmd,
munge, as root) with ``CliFilterPlugins=cli_filter/lua`` and the script from
``gpulens slurm cli-filter``, then times, interleaved in one run:

* plain ``sbatch`` (a copy of slurm.conf without the CliFilterPlugins line, as SLURM_CONF),
* ``sbatch`` through the filter (``gpulens slurm check`` on the script's Python entry point),
* ``gpulens submit -- sbatch`` with the copy (the wrapper: the check in-process, then exec
  sbatch, without the filter so that the check is not counted twice).

Prints the medians and the added seconds. ``--runs N`` (default 15).
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.slurm.cluster import REPO, SlurmCluster

CPU: dict[str, list[float]] = {}


def _time(cmd: list[str], env: dict[str, str], cwd: Path, what: str = "") -> float:
    """Wall seconds; the CPU seconds of the command and its children go to CPU[what]."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU.setdefault(what, []).append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    if res.returncode != 0:
        raise RuntimeError(f"{cmd}: {res.stderr}")
    return took


def main(argv: list[str]) -> None:
    runs = 15
    for a in argv:
        if a.startswith("--runs="):
            runs = int(a.split("=", 1)[1])
    if os.geteuid() != 0:
        print("bench_slurm: needs root (the test cluster runs as SlurmUser=root); skipped")
        return
    with tempfile.TemporaryDirectory(prefix="gpulens-bench-slurm-") as tmp:
        c = SlurmCluster(Path(tmp), epilog_timeout=30)
        try:
            c.start()
            work = c.jobs / "healthy"
            work.mkdir()
            (work / "model.py").write_text("import math\n\ndef build():\n    return math.sqrt(2)\n")
            (work / "train.py").write_text("import argparse\nimport json\n\nfrom model import build\n\n"
                                           "print(json.dumps({'loss': build()}))\n")
            script = work / "job.sbatch"
            script.write_text("#!/bin/bash\n#SBATCH -J bench -o /dev/null --hold\npython3 train.py --lr 0.1\n")
            env = {**c.env, "PYTHONPATH": str(REPO)}
            bare_conf = c.conf.with_name("slurm-nofilter.conf")
            bare_conf.write_text("".join(ln for ln in c.conf.read_text().splitlines(keepends=True)
                                         if not ln.startswith("CliFilterPlugins")))
            bare = {**env, "SLURM_CONF": str(bare_conf)}
            sbatch = ["sbatch", "--parsable", str(script)]
            wrapper = [sys.executable, "-m", "gpulens", "--data-dir", str(c.data_dir), "submit", "--", *sbatch]
            plain, filtered, wrapped = [], [], []
            for _ in range(runs):
                plain.append(_time(sbatch, bare, work, "plain"))
                filtered.append(_time(sbatch, env, work, "filter"))
                wrapped.append(_time(wrapper, bare, work, "submit"))
            subprocess.run(["scancel", "-u", "root"], env=c.env, check=False)
        finally:
            c.stop()
    p, f, w = (statistics.median(x) for x in (plain, filtered, wrapped))
    cp, cf, cw = (statistics.median(CPU[k]) for k in ("plain", "filter", "submit"))
    print(f"runs={runs} load={os.getloadavg()[0]:.2f} cpus={os.cpu_count()}")
    print(f"sbatch (no filter)             median {p:.3f} s wall, {cp:.3f} s CPU")
    print(f"sbatch through cli_filter/lua  median {f:.3f} s wall (added {f - p:+.3f} s), "
          f"{cf:.3f} s CPU (added {cf - cp:+.3f} s)")
    print(f"gpulens submit -- sbatch       median {w:.3f} s wall (added {w - p:+.3f} s), "
          f"{cw:.3f} s CPU (added {cw - cp:+.3f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])

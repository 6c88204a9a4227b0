"""Benchmark of the analyses (issue 4).

(a) On a ~10 M-sample simulated store: DuckDB utilization + locality (this
    package, from Store.open() on, connect included) vs a straightforward
    pandas implementation of the same computation, side by side in one
    process, asserting the same numbers: DuckDB, pandas, DuckDB again, and
    DuckDB's time is the mean of its two runs (they bracket pandas, so both
    see the same machine load). Wall and CPU time (process time: DuckDB's
    threads run in this process) and the load average are printed. Both read
    the same Parquet samples (page cache warmed first); the pandas time is
    also given without its loading step. Bootstrap CIs are off in both
    (n_boot=0): they are the same numpy code on either side.
(b) All analyses together (utilization by each key, time series, jobs,
    locality, locality loss, early stop and its summary, online stop, goodput
    by nothing/vc/user, failure cost, and a 1-day window) on one connection in
    a fresh child process, on the simulated 2,000-GPU x 30-day cluster
    (~86 M samples): wall time per step and in all, CPU time (user + system)
    and peak RSS of the child; then the same without the rollups (issue 26: the
    store's rollups folder renamed away for that run), side by side.

The simulated stores are compacted once (``gpulens store compact``: the simulator writes
one file per node-day, so this writes the rollups and merges nothing); what that cost is
printed (recorded in a ``.bench-rollups`` file beside the store).

    python -m benchmarks.run analysis                  # (a) and (b)
    python -m benchmarks.run analysis --small-only     # (a) only
    python -m benchmarks.run analysis --big-only

Simulated stores are cached under $GPULENS_BENCH_DIR (default /tmp/gpulens-bench,
sim-232x30-s0 and sim-2000x30-s0, start 2026-01-01, seed 0; a store counts once it has
a .bench-complete file) and reused by later runs; generating the big one takes the
simulator 7-14 minutes on 2 cores. Equivalent to
`gpulens --data-dir DIR simulate --gpus 2000 --days 30 --seed 0 --start 2026-01-01`.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["all_analyses", "main", "own_peak_rss_kib", "pandas_util_locality"]

BENCH_DIR = Path(os.environ.get("GPULENS_BENCH_DIR", "/tmp/gpulens-bench"))
SMALL = (232, 30.0)  # 232 GPUs x 30 days x 1440 = 10.0 M samples
BIG = (2000, 30.0)  # 86.4 M samples


def _store(gpus: int, days: float, seed: int = 0) -> Path:
    from gpulens.ingest.simulate import simulate
    from gpulens.store import Store

    root = BENCH_DIR / f"sim-{gpus}x{days:g}-s{seed}"
    done = root / ".bench-complete"
    if not done.exists():
        print(f"  simulating {gpus} GPUs x {days:g} days into {root} (cached for later runs) ...",
              flush=True)
        t0 = time.perf_counter()
        store = Store.open(root)
        simulate(store, gpus=gpus, days=days, seed=seed, start=datetime(2026, 1, 1), force=True)
        done.write_text(f"{time.perf_counter() - t0:.1f}\n")
        print(f"  simulated in {time.perf_counter() - t0:.0f} s", flush=True)
    _rollups(root)
    return root


def _rollups(root: Path) -> None:
    """``gpulens store compact`` once (the simulator writes one file per node-day: compaction
    merges nothing and writes the rollups, issue 26); prints what it cost (recorded once)."""
    from gpulens.store import Store
    from gpulens.store.compact import compact

    mark = root / ".bench-rollups"
    if not mark.exists():
        t0 = time.perf_counter()
        report = compact(Store(root))
        samples = sum(p.stat().st_size for p in (root / "samples").rglob("*.parquet"))
        mark.write_text(json.dumps({"seconds": time.perf_counter() - t0, "load": os.getloadavg(),
                                    "rollup_seconds": report.rollup_seconds,
                                    "rollup_bytes": report.rollup_bytes,
                                    "sample_bytes": samples}))
    cost = json.loads(mark.read_text())
    print(f"  rollups (store compact, once): {cost['rollup_seconds']:.0f} s, "
          f"{cost['rollup_bytes'] / 2**20:.0f} MiB = {cost['rollup_bytes'] / cost['sample_bytes']:.1%} "
          f"of the samples' {cost['sample_bytes'] / 2**30:.2f} GiB (load {_load(cost['load'])})",
          flush=True)


# --------------------------------------------------------------- pandas side
def pandas_util_locality(data_dir: Path) -> tuple[dict[str, float], pd.DataFrame, float]:
    """The same utilization and locality numbers, straightforwardly in pandas.

    Returns (cluster numbers, locality table, seconds spent loading)."""
    import duckdb
    import pyarrow.dataset as ds

    t0 = time.perf_counter()
    snap = data_dir / "snapshots"
    gen = int((snap / "CURRENT").read_text())
    con = duckdb.connect(":memory:")
    con.execute(f"ATTACH '{snap / f'state-{gen:08d}.duckdb'}' AS s (READ_ONLY)")
    att = con.execute("SELECT job_id, attempt, start_time, end_time FROM s.attempts").df()
    pl = con.execute("SELECT job_id, attempt, node, gpu_index, start_time AS ps, end_time AS pe"
                     " FROM s.placements").df()
    con.close()
    dataset = ds.dataset(data_dir / "samples" / "kind=gpu", format="parquet", partitioning="hive")
    smp = dataset.to_table(columns=["ts", "gpu_index", "util_gpu", "node"]).to_pandas()
    load = time.perf_counter() - t0

    smp = smp[smp["node"] != "__seed__"]
    smp["node"] = smp["node"].astype(str)
    smp = smp[smp["util_gpu"].notna() & ~np.isnan(smp["util_gpu"].astype("float64"))]
    smp["minute"] = smp["ts"].dt.floor("min")
    # one value per GPU-minute: the mean of the samples in that minute
    per_min = smp.groupby(["node", "gpu_index", "minute"], as_index=False)["util_gpu"].mean()
    last = smp["ts"].max()
    open_end = (last.floor("min") + pd.Timedelta(minutes=1)) if pd.notna(last) else pd.Timestamp.now()

    p = pl.merge(att, on=["job_id", "attempt"])
    p["s"] = p["ps"].fillna(p["start_time"]).dt.floor("min")
    p["e"] = p["pe"].fillna(p["end_time"]).fillna(open_end)
    p = p[p["s"].notna()]
    ce = p["e"].dt.ceil("min")
    p = p[ce > p["s"]].copy()
    p["minute"] = [pd.date_range(s, c - pd.Timedelta(minutes=1), freq="min")
                   for s, c in zip(p["s"], ce[ce > p["s"]], strict=True)]
    ex = p[["job_id", "attempt", "node", "gpu_index", "minute"]].explode("minute")
    ex["minute"] = pd.to_datetime(ex["minute"])
    ex["gpu_index"] = ex["gpu_index"].astype("int16")
    per_min["gpu_index"] = per_min["gpu_index"].astype("int16")
    m = ex.merge(per_min, on=["node", "gpu_index", "minute"], how="left")
    m["busy"] = m["util_gpu"].astype("float64") / 100.0
    a = m.groupby(["job_id", "attempt"]).agg(alloc=("minute", "size"), busy=("busy", "sum"),
                                             k=("util_gpu", "count")).reset_index()
    shape = (p.groupby(["job_id", "attempt"])
             .agg(gpus=("gpu_index", "size"), servers=("node", "nunique")).reset_index())
    gpus_distinct = (p.drop_duplicates(["job_id", "attempt", "node", "gpu_index"])
                     .groupby(["job_id", "attempt"]).size().rename("gpus_d").reset_index())
    a = a.merge(shape, on=["job_id", "attempt"]).merge(gpus_distinct, on=["job_id", "attempt"])
    cluster = {
        "allocated_gpu_hours": float(a["alloc"].sum()) / 60.0,
        "busy_gpu_hours": float(a["busy"].sum()) / 60.0,
        "mean_util": 100.0 * float(a["busy"].sum()) / float(a["k"].sum()),
    }
    main = (a.sort_values(["job_id", "alloc", "attempt"], ascending=[True, False, False])
            .drop_duplicates("job_id"))
    main = main[main["k"] > 0].copy()
    main["util"] = 100.0 * main["busy"] / main["k"]
    loc = (main.groupby(["gpus_d", "servers"])["util"]
           .agg(jobs="size", mean_util="mean", median_util="median").reset_index()
           .rename(columns={"gpus_d": "gpus"}))
    return cluster, loc, load


def _warm_page_cache(root: Path) -> None:
    """Read every GPU sample file once, so neither side pays for a cold disk."""
    for f in sorted((root / "samples" / "kind=gpu").glob("*/*/*.parquet")):
        with open(f, "rb") as fh:
            while fh.read(1 << 20):
                pass


def _duckdb_util_locality(root: Path) -> dict[str, Any]:
    """utilization + locality on a fresh store connection: wall and CPU seconds per step."""
    from gpulens import analysis
    from gpulens.store import Store

    out: dict[str, Any] = {}
    w0, c0 = time.perf_counter(), time.process_time()
    con = Store.open(root).connect()
    out["connect_s"] = time.perf_counter() - w0
    w1 = time.perf_counter()
    out["util"] = analysis.utilization(con).iloc[0]
    out["utilization_s"] = time.perf_counter() - w1  # includes the one sample scan
    w2 = time.perf_counter()
    out["loc"] = analysis.locality(con, n_boot=0)
    out["locality_s"] = time.perf_counter() - w2
    out["wall_s"] = time.perf_counter() - w0
    out["cpu_s"] = time.process_time() - c0  # DuckDB's threads run in this process
    con.close()
    return out


def bench_small(gpus: int, days: float) -> dict[str, Any]:
    """DuckDB, pandas, DuckDB again, in one process; DuckDB's time is the mean of its
    two runs (they bracket the pandas run, so both sides see the same load)."""
    import duckdb

    import gpulens.analysis  # noqa: F401 - imported before the clock starts, as pandas is

    root = _store(gpus, days)
    n = duckdb.connect().execute(
        f"SELECT count(*) FROM read_parquet('{root}/samples/kind=gpu/*/*/*.parquet',"  # noqa: S608
        " hive_partitioning = true) WHERE node <> '__seed__'"
    ).fetchone()
    samples = int(n[0]) if n else 0
    _warm_page_cache(root)

    load_before = os.getloadavg()
    d1 = _duckdb_util_locality(root)
    w0, c0 = time.perf_counter(), time.process_time()
    p_util, p_loc, p_load = pandas_util_locality(root)
    t_pandas, c_pandas = time.perf_counter() - w0, time.process_time() - c0
    d2 = _duckdb_util_locality(root)
    load_after = os.getloadavg()

    for d in (d1, d2):
        util, loc = d["util"], d["loc"]
        for key in ("allocated_gpu_hours", "busy_gpu_hours", "mean_util"):
            assert np.isclose(float(util[key]), p_util[key], rtol=1e-9), (key, util[key], p_util[key])
        merged = loc.merge(p_loc, on=["gpus", "servers"], suffixes=("", "_pd"), how="outer")
        assert (merged["jobs"] == merged["jobs_pd"]).all(), merged
        assert np.allclose(merged["mean_util"], merged["mean_util_pd"], rtol=1e-9)
        assert np.allclose(merged["median_util"], merged["median_util_pd"], rtol=1e-9)
    t_duck = (d1["wall_s"] + d2["wall_s"]) / 2
    c_duck = (d1["cpu_s"] + d2["cpu_s"]) / 2
    return {
        "samples": samples, "duckdb_s": t_duck, "duckdb_cpu_s": c_duck,
        "duckdb_runs": [
            {k: round(v, 3) for k, v in d.items() if k.endswith("_s")} for d in (d1, d2)
        ],
        "pandas_s": t_pandas, "pandas_cpu_s": c_pandas, "pandas_load_s": p_load,
        "ratio": t_pandas / t_duck, "cpu_ratio": c_pandas / c_duck,
        "ratio_excluding_pandas_load": (t_pandas - p_load) / t_duck,
        "load_before": load_before, "load_after": load_after,
        "allocated_gpu_hours": float(d1["util"]["allocated_gpu_hours"]),
        "mean_util": float(d1["util"]["mean_util"]), "locality_groups": len(d1["loc"]),
    }


# ------------------------------------------------------------ all analyses
def all_analyses(data_dir: Path) -> dict[str, float]:
    """Every analysis on one fresh connection; returns seconds per step."""
    from gpulens import analysis
    from gpulens.store import Store

    steps: dict[str, float] = {}
    t0 = time.perf_counter()
    con = Store.open(data_dir).connect()
    steps["open store + connect"] = time.perf_counter() - t0

    def step(name: str, fn: Any) -> None:
        t0 = time.perf_counter()
        fn()
        steps[name] = time.perf_counter() - t0

    step("utilization (cluster; builds the base)", lambda: analysis.utilization(con))
    for by in ("user", "vc", "day"):
        step(f"utilization by {by}", lambda by=by: analysis.utilization(con, by=by))
    step("utilization_timeseries (hour)", lambda: analysis.utilization_timeseries(con, freq="hour"))
    step("job_utilization", lambda: analysis.job_utilization(con))
    step("locality (1000 bootstraps)", lambda: analysis.locality(con, n_boot=1000))
    step("locality_loss", lambda: analysis.locality_loss(con))
    step("early_stop", lambda: analysis.early_stop(con))
    step("early_stop_summary", lambda: analysis.early_stop_summary(con))
    step("online_stop", lambda: analysis.online_stop(con))
    step("goodput", lambda: analysis.goodput(con))
    step("goodput by vc", lambda: analysis.goodput(con, by="vc"))
    step("goodput by user", lambda: analysis.goodput(con, by="user"))
    step("failure_cost", lambda: analysis.failure_cost(con))
    first = con.execute("SELECT min(start_time) FROM attempts").fetchone()
    if first and first[0]:
        w = analysis.Filters(start=first[0] + timedelta(days=1), end=first[0] + timedelta(days=2))
        step("utilization, 1-day window (new base)", lambda: analysis.utilization(con, w))
    return steps


def own_peak_rss_kib() -> int:
    """This process's peak RSS since its exec (VmHWM; ru_maxrss where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _child_all(root: Path) -> dict[str, Any]:
    """all_analyses in a fresh child process: wall, CPU (user + system) and peak RSS."""
    code = ("import json, sys, time; from pathlib import Path;"
            "from benchmarks.bench_analysis import all_analyses, own_peak_rss_kib;"
            "t=time.perf_counter(); s=all_analyses(Path(sys.argv[1]));"
            "print(json.dumps({'steps': s, 'total_s': time.perf_counter()-t,"
            " 'peak_rss_kib': own_peak_rss_kib()}))")
    load_before = os.getloadavg()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, str(root)], check=True, capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[1], timeout=1800)
    wall = time.perf_counter() - w0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    last = out.stdout.strip().splitlines()[-1]
    res: dict[str, Any] = json.loads(last[last.index("{"):])  # after any DuckDB progress bar
    res["process_wall_s"] = wall  # including interpreter start and imports
    res["cpu_s"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    # The child's own high-water mark (VmHWM): RUSAGE_CHILDREN's ru_maxrss would
    # include this process's peak (pandas in (a)), which a vfork()ed child inherits.
    res["peak_rss_gib"] = res["peak_rss_kib"] / 2**20
    res["load_before"], res["load_after"] = load_before, os.getloadavg()
    return res


def bench_big(gpus: int, days: float) -> dict[str, Any]:
    """all_analyses in a fresh child process, with the rollups, then (side by side, same
    store) without them: the rollups folder renamed away for that run and back after."""
    root = _store(gpus, days)
    res = _child_all(root)
    away = root / "rollups.bench-off"
    (root / "rollups").rename(away)
    try:
        res["raw"] = _child_all(root)
    finally:
        away.rename(root / "rollups")
    import duckdb

    n = duckdb.connect().execute(
        f"SELECT count(*) FROM read_parquet('{root}/samples/kind=gpu/*/*/*.parquet',"  # noqa: S608
        " hive_partitioning = true) WHERE node <> '__seed__'"
    ).fetchone()
    res["samples"] = int(n[0]) if n else 0
    return res


def _load(t: tuple[float, float, float]) -> str:
    return "/".join(f"{x:.2f}" for x in t)


def main(argv: list[str]) -> None:
    small_only = "--small-only" in argv
    big_only = "--big-only" in argv
    print(f"  machine: {os.cpu_count()} cores; load average {_load(os.getloadavg())}")
    if not big_only:
        print(f"(a) utilization + locality, DuckDB vs pandas, {SMALL[0]} GPUs x {SMALL[1]:g} days")
        r = bench_small(*SMALL)
        print(f"  samples {r['samples']:,}; same numbers asserted (allocated "
              f"{r['allocated_gpu_hours']:,.1f} GPU-h, mean util {r['mean_util']:.3f}%, "
              f"{r['locality_groups']} locality groups)")
        for i, d in enumerate(r["duckdb_runs"], 1):
            print(f"  duckdb run {i}: wall {d['wall_s']:.2f} s, cpu {d['cpu_s']:.2f} s (connect "
                  f"{d['connect_s']:.2f}, utilization {d['utilization_s']:.2f}, "
                  f"locality {d['locality_s']:.2f})")
        print(f"  duckdb (mean of 2) {r['duckdb_s']:.2f} s wall, {r['duckdb_cpu_s']:.2f} s cpu | "
              f"pandas {r['pandas_s']:.2f} s wall, {r['pandas_cpu_s']:.2f} s cpu "
              f"(of which loading {r['pandas_load_s']:.2f} s wall)")
        print(f"  ratio {r['ratio']:.1f}x wall (target >= 50x, issue 26), {r['cpu_ratio']:.1f}x cpu; "
              f"excluding pandas loading {r['ratio_excluding_pandas_load']:.1f}x; "
              f"load average {_load(r['load_before'])} -> {_load(r['load_after'])}")
    if not small_only:
        print(f"(b) all analyses, {BIG[0]} GPUs x {BIG[1]:g} days (child process)")
        r = bench_big(*BIG)
        print(f"  {'step':40s} {'rollups':>9s} {'raw only':>9s}")
        for name, s in r["steps"].items():
            print(f"  {name:40s} {s:7.2f} s {r['raw']['steps'].get(name, float('nan')):7.2f} s")
        print(f"  samples {r['samples']:,}; total {r['total_s']:.1f} s wall (target <= 5 s, issue 26; "
              f"child process {r['process_wall_s']:.1f} s), cpu {r['cpu_s']:.1f} s; "
              f"peak RSS {r['peak_rss_gib']:.2f} GiB (target <= 6 GiB); "
              f"load average {_load(r['load_before'])} -> {_load(r['load_after'])}")
        raw = r["raw"]
        print(f"  raw samples only (rollups renamed away, same store, right after): total "
              f"{raw['total_s']:.1f} s wall, cpu {raw['cpu_s']:.1f} s; rollups "
              f"{raw['total_s'] / r['total_s']:.1f}x faster; load average "
              f"{_load(raw['load_before'])} -> {_load(raw['load_after'])}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Benchmark of the analyses (issue 4).

(a) On a ~10 M-sample simulated store: DuckDB utilization + locality (this
    package) vs a straightforward pandas implementation of the same
    computation, side by side in one process, asserting the same numbers.
    Both read the same Parquet samples; the pandas time is reported with and
    without its loading step. Bootstrap CIs are off in both (n_boot=0): they
    are the same numpy code on either side.
(b) All analyses together, in a fresh child process, on the simulated
    2,000-GPU x 30-day cluster (~86 M samples): wall time and peak RSS.

    python -m benchmarks.run analysis                  # (a) and (b)
    python -m benchmarks.run analysis --small-only     # (a) only
    python -m benchmarks.run analysis --big-only

Simulated stores are cached under $GPULENS_BENCH_DIR (default /tmp/gpulens-bench)
and reused by later runs; generating the big one takes the simulator many minutes.
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

__all__ = ["all_analyses", "main", "pandas_util_locality"]

BENCH_DIR = Path(os.environ.get("GPULENS_BENCH_DIR", "/tmp/gpulens-bench"))
SMALL = (232, 30.0)  # 232 GPUs x 30 days x 1440 = 10.0 M samples
BIG = (2000, 30.0)  # 86.4 M samples


def _store(gpus: int, days: float, seed: int = 0) -> Path:
    from collectors.simulate import simulate
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
    return root


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


def bench_small(gpus: int, days: float) -> dict[str, Any]:
    import analysis
    from gpulens.store import Store

    root = _store(gpus, days)
    store = Store.open(root)
    con = store.connect()
    n = con.execute("SELECT count(*) FROM gpu_samples").fetchone()
    samples = int(n[0]) if n else 0
    con.close()

    t0 = time.perf_counter()
    con = store.connect()
    util = analysis.utilization(con).iloc[0]
    loc = analysis.locality(con, n_boot=0)
    t_duck = time.perf_counter() - t0
    con.close()

    t0 = time.perf_counter()
    p_util, p_loc, p_load = pandas_util_locality(root)
    t_pandas = time.perf_counter() - t0

    for key in ("allocated_gpu_hours", "busy_gpu_hours", "mean_util"):
        assert np.isclose(float(util[key]), p_util[key], rtol=1e-9), (key, util[key], p_util[key])
    merged = loc.merge(p_loc, on=["gpus", "servers"], suffixes=("", "_pd"), how="outer")
    assert (merged["jobs"] == merged["jobs_pd"]).all(), merged
    assert np.allclose(merged["mean_util"], merged["mean_util_pd"], rtol=1e-9)
    assert np.allclose(merged["median_util"], merged["median_util_pd"], rtol=1e-9)
    return {
        "samples": samples, "duckdb_s": t_duck, "pandas_s": t_pandas, "pandas_load_s": p_load,
        "ratio": t_pandas / t_duck, "ratio_excluding_pandas_load": (t_pandas - p_load) / t_duck,
        "allocated_gpu_hours": float(util["allocated_gpu_hours"]),
        "mean_util": float(util["mean_util"]), "locality_groups": len(loc),
    }


# ------------------------------------------------------------ all analyses
def all_analyses(data_dir: Path) -> dict[str, float]:
    """Every analysis on a fresh connection; returns seconds per step."""
    import analysis
    from gpulens.store import Store

    store = Store.open(data_dir)
    con = store.connect()
    steps: dict[str, float] = {}

    def step(name: str, fn: Any) -> None:
        t0 = time.perf_counter()
        fn()
        steps[name] = time.perf_counter() - t0

    step("utilization (cluster)", lambda: analysis.utilization(con))
    for by in ("user", "vc", "day"):
        step(f"utilization by {by}", lambda by=by: analysis.utilization(con, by=by))
    step("utilization_timeseries", lambda: analysis.utilization_timeseries(con, freq="hour"))
    step("job_utilization", lambda: analysis.job_utilization(con))
    step("locality (1000 bootstraps)", lambda: analysis.locality(con, n_boot=1000))
    step("locality_loss", lambda: analysis.locality_loss(con))
    step("early_stop_summary", lambda: analysis.early_stop_summary(con))
    step("online_stop", lambda: analysis.online_stop(con))
    step("goodput", lambda: analysis.goodput(con))
    step("goodput by vc", lambda: analysis.goodput(con, by="vc"))
    step("failure_cost", lambda: analysis.failure_cost(con))
    first = con.execute("SELECT min(start_time) FROM attempts").fetchone()
    if first and first[0]:
        w = analysis.Filters(start=first[0] + timedelta(days=1), end=first[0] + timedelta(days=2))
        step("utilization, 1-day window", lambda: analysis.utilization(con, w))
    return steps


def bench_big(gpus: int, days: float) -> dict[str, Any]:
    root = _store(gpus, days)
    code = ("import json, sys, time; from pathlib import Path;"
            "from benchmarks.bench_analysis import all_analyses;"
            "t=time.perf_counter(); s=all_analyses(Path(sys.argv[1]));"
            "print(json.dumps({'steps': s, 'total_s': time.perf_counter()-t}))")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run([sys.executable, "-c", code, str(root)], check=True, capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[1])
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["peak_rss_gib"] = max(peak_kib, before) / 2**20
    import duckdb

    con = duckdb.connect()
    n = con.execute(
        f"SELECT count(*) FROM read_parquet('{root}/samples/kind=gpu/*/*/*.parquet')"  # noqa: S608
    ).fetchone()
    res["samples"] = int(n[0]) if n else 0
    return res


def main(argv: list[str]) -> None:
    small_only = "--small-only" in argv
    big_only = "--big-only" in argv
    if not big_only:
        print(f"(a) utilization + locality, DuckDB vs pandas, {SMALL[0]} GPUs x {SMALL[1]:g} days")
        r = bench_small(*SMALL)
        print(f"  samples {r['samples']:,}; same numbers asserted (allocated "
              f"{r['allocated_gpu_hours']:,.1f} GPU-h, mean util {r['mean_util']:.3f}%, "
              f"{r['locality_groups']} locality groups)")
        print(f"  duckdb {r['duckdb_s']:.2f} s | pandas {r['pandas_s']:.2f} s "
              f"(of which loading {r['pandas_load_s']:.2f} s)")
        print(f"  ratio {r['ratio']:.1f}x (target >= 20x); excluding pandas loading "
              f"{r['ratio_excluding_pandas_load']:.1f}x")
    if not small_only:
        print(f"(b) all analyses, {BIG[0]} GPUs x {BIG[1]:g} days (child process)")
        r = bench_big(*BIG)
        for name, s in r["steps"].items():
            print(f"  {name:32s} {s:7.2f} s")
        print(f"  samples {r['samples']:,}; total {r['total_s']:.1f} s (target <= 60 s); "
              f"peak RSS {r['peak_rss_gib']:.2f} GiB (target <= 6 GiB)")


if __name__ == "__main__":
    main(sys.argv[1:])

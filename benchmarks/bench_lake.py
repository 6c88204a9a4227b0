"""Benchmark of the lake at cluster shape (issue 16): many small segments vs compacted.

One simulated cluster (``gpulens simulate``: nodes of 8 GPUs, one GPU sample per minute)
is laid out three ways, side by side in one run:

* ``node-day``: one file per kind, node and day (what the simulator writes): the reference;
* ``segments``: the same GPU rows as an agent writes them, one file per node and
  ``--roll`` seconds (default 300 s: 288 files per node-day), generated directly;
* ``compacted``: ``segments`` after ``gpulens store compact`` (timed too).

For each layout, on a fresh connection: ``Store.connect()``, the main analyses
(``utilization``, ``locality``, ``goodput``, ``job_utilization``) and the dashboard's
heaviest page (the cold Overview: utilization, jobs, hourly time series, goodput and
utilization by vc, on a fresh connection), and a query through the ``gpu_samples`` view
(per-node mean utilization, the issue's probe). Results are asserted equal across layouts.
Then the granularity probe: the same view-style query on one file per kind and day across
nodes (node as a column) vs one file per node-day, for all nodes and for one node.

    python -m benchmarks.run lake                       # 32 x 8 GPUs x 2 days (default)
    python -m benchmarks.run lake --nodes=500 --days=3  # 4,000 GPUs x 3 days (about an hour here)
    python -m benchmarks.run lake --nodes=500 --days=3 --reuse   # keep the lake built by a run before

``--nodes=N`` simulates 8*N GPUs; the simulator puts them on nodes of mixed size, so there are
more nodes than N (650 for 4,000 GPUs) and more segment files than N x 288 a day. The segments
layout is measured in a child process that is stopped when its resident memory passes
``--rss-limit-gib`` (default 16 of this machine's 24 GiB): at 561,600 files the OOM killer took
the whole benchmark before this guard. ``--reuse`` keeps the simulated and segmented lake of an
earlier run (``built.json`` marks it complete); compaction then starts from the same segments.

Only GPU samples are laid out as segments (the analyses and the Overview read only those);
the sample rate is one per minute per GPU (an agent's default is one per 5 s): file counts
have the real shape, rows per file are 12x fewer. Stores live under $GPULENS_BENCH_DIR
(default /tmp/gpulens-bench/lake-<nodes>x<days>) and are rebuilt each run unless ``--reuse``.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ["main"]

BENCH_DIR = Path(os.environ.get("GPULENS_BENCH_DIR", "/tmp/gpulens-bench"))
TARGET = 2.0
NOISE_S = 0.05  # steps faster than this on node-day are timer noise on a shared machine
START = datetime(2026, 1, 1)


def _arg(argv: list[str], name: str, default: float) -> float:
    for a in argv:
        if a.startswith(f"--{name}="):
            return float(a.split("=", 1)[1])
    return default


def _files(root: Path, kind: str = "gpu") -> int:
    return sum(1 for _ in (root / "samples" / f"kind={kind}").glob("date=2*/node=*/*.parquet"))


def _live(root: Path) -> int:
    """Live GPU sample files (replaced ones still on disk within the grace period left out)."""
    from gpulens.store.lake import list_live

    return len(list_live(root / "samples", "gpu").files)


def _cut(part: Path, out: Path, roll_s: int) -> int:
    """``part``'s rows as ``roll_s`` segments, named as this release's agents name them (schema mark)."""
    from gpulens.store.lake import marked_name

    table = pq.read_table(part, partitioning=None).sort_by("ts")
    slot = pc.divide(pc.cast(table["ts"], pa.int64()), roll_s * 1_000_000).to_numpy()
    out.mkdir(parents=True, exist_ok=True)
    bounds = [*(np.flatnonzero(np.diff(slot)) + 1).tolist(), len(slot)]
    lo = 0
    for hi in bounds:
        name = marked_name("gpu", table.schema, "seg", f"{int(slot[lo]):010d}.parquet")
        pq.write_table(table.slice(lo, hi - lo), out / name, compression="zstd", compression_level=3)
        lo = hi
    return len(bounds)


def _segment(src: Path, dst: Path, roll_s: int) -> int:
    """Copy the store at ``src`` to ``dst`` with its GPU samples cut into ``roll_s`` segments."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("kind=gpu"))
    parts = sorted((src / "samples" / "kind=gpu").glob("date=2*/node=*"))

    def cut(part: Path) -> int:
        return _cut(part, dst / "samples" / "kind=gpu" / part.parent.name / part.name, roll_s)

    with ThreadPoolExecutor(2) as pool:  # pyarrow writes without the GIL
        n = sum(pool.map(cut, parts))
    seed = src / "samples" / "kind=gpu" / "date=1970-01-01"
    shutil.copytree(seed, dst / "samples" / "kind=gpu" / seed.name)
    return n


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _steps(root: Path) -> Iterator[tuple[str, float, pd.DataFrame | None]]:
    """Every measured step on ``root``: (name, seconds, result frame)."""
    from gpulens import analysis
    from gpulens.store import Store

    store = Store(root)
    t, con = _timed(store.connect)
    yield "connect", t, None
    t, df = _timed(lambda: analysis.utilization(con))
    yield "utilization (first: the sample scan)", t, df
    t, df = _timed(lambda: analysis.locality(con, n_boot=0))
    yield "locality", t, df
    t, df = _timed(lambda: analysis.goodput(con))
    yield "goodput", t, df
    con.close()

    def overview() -> pd.DataFrame:
        c = store.connect()
        analysis.utilization(c, by="cluster")
        analysis.job_utilization(c)
        analysis.utilization_timeseries(c, freq="hour")
        analysis.goodput(c)
        out = analysis.utilization(c, by="vc")
        c.close()
        return out

    t, df = _timed(overview)
    yield "dashboard Overview, cold (incl. connect)", t, df

    def per_node() -> pd.DataFrame:
        c = store.connect()
        out = c.execute("SELECT node, avg(util_gpu) AS u, count(*) AS n FROM gpu_samples"
                        " GROUP BY node ORDER BY node").df()
        c.close()
        return out

    t, df = _timed(per_node)
    yield "per-node mean via gpu_samples view (incl. connect)", t, df


STEPS = ("connect", "utilization (first: the sample scan)", "locality", "goodput",
         "dashboard Overview, cold (incl. connect)", "per-node mean via gpu_samples view (incl. connect)")
RESULT = {"utilization (first: the sample scan)": "utilization", "locality": "locality",
          "goodput": "goodput", "dashboard Overview, cold (incl. connect)": "overview",
          "per-node mean via gpu_samples view (incl. connect)": "per_node"}


def _measure_once(root: Path) -> tuple[dict[str, float], dict[str, pd.DataFrame]]:
    t: dict[str, float] = {}
    res: dict[str, pd.DataFrame] = {}
    for name, secs, df in _steps(root):
        t[name] = secs
        if df is not None:
            res[RESULT[name]] = df
    return t, res


def _child(root: Path, out: Path) -> None:
    """``--child``: the steps on ``root`` in this process, one JSON line each, frames to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for name, secs, df in _steps(root):
        if df is not None:
            df.to_parquet(out / f"{RESULT[name]}.parquet")
        print(json.dumps({"step": name, "seconds": secs}), flush=True)


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _strip_marks(root: Path) -> int:
    """Rename the GPU files of ``root`` without their schema mark (as an older release named them)."""
    from gpulens.store.lake import schema_mark

    mark = f"-{schema_mark('gpu')}-"
    n = 0
    for path in (root / "samples" / "kind=gpu").glob(f"date=2*/node=*/*{mark}*.parquet"):
        path.rename(path.with_name(path.name.replace(mark, "-")))
        n += 1
    return n


def _measure_guarded(root: Path, out: Path, limit_gib: float, limit_s: float = 1800.0) -> tuple[
        dict[str, float], dict[str, pd.DataFrame], int, str | None]:
    """The steps on ``root`` in a child process stopped when its RSS passes ``limit_gib`` or it
    has run ``limit_s`` seconds.

    Returns the step times, the result frames, the peak RSS (KiB) and why it stopped (None: it
    finished). The machine has 24 GiB; the OOM killer would otherwise take the whole benchmark.
    """
    shutil.rmtree(out, ignore_errors=True)
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_lake", "--child", str(root), str(out)],
                            stdout=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or []), daemon=True)
    reader.start()
    peak, why, t0 = 0, None, time.perf_counter()
    while proc.poll() is None:
        peak = max(peak, _rss_kib(proc.pid))
        if peak > limit_gib * 2**20:
            proc.kill()
            why = f"stopped at {peak / 2**20:.1f} GiB RSS after {time.perf_counter() - t0:.0f} s"
        elif time.perf_counter() - t0 > limit_s:
            proc.kill()
            why = f"stopped after {limit_s:.0f} s (time limit)"
        time.sleep(0.2)
    reader.join()
    if why is None and proc.returncode != 0:
        why = f"child exited {proc.returncode} after {time.perf_counter() - t0:.0f} s"
    times = {r["step"]: r["seconds"] for r in map(json.loads, lines)}
    frames = {p.stem: pd.read_parquet(p) for p in out.glob("*.parquet")}
    return times, frames, peak, why


def _measure_pair(a: Path, b: Path, repeat: int) -> tuple[dict[str, float], dict[str, float],
                                                          dict[str, pd.DataFrame],
                                                          dict[str, pd.DataFrame]]:
    """Best of ``repeat`` runs of every step on ``a`` and ``b``, alternating (same load)."""
    ta, ra = _measure_once(a)
    tb, rb = _measure_once(b)
    for _ in range(repeat - 1):
        ta = {k: min(v, t) for (k, v), t in zip(ta.items(), _measure_once(a)[0].values(),
                                                 strict=True)}
        tb = {k: min(v, t) for (k, v), t in zip(tb.items(), _measure_once(b)[0].values(),
                                                 strict=True)}
    return ta, tb, ra, rb


def _same(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame]) -> None:
    for name, df in a.items():
        pd.testing.assert_frame_equal(df.reset_index(drop=True), b[name].reset_index(drop=True),
                                      check_exact=False, rtol=1e-9)


def _best(con: Any, sql: str, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        con.execute(sql).fetchall()
        best = min(best, time.perf_counter() - t0)
    return best


def _granularity(node_day: Path, work: Path) -> list[tuple[str, float, float, float, int]]:
    """Per-node mean over (a) one file per node-day, (b) one file per day across nodes."""
    import duckdb

    days = sorted((node_day / "samples" / "kind=gpu").glob("date=2*"))
    per_day = work / "per-day"
    shutil.rmtree(per_day, ignore_errors=True)
    for d in days:
        (per_day / d.name).mkdir(parents=True)
        tables = []
        for part in sorted(d.glob("node=*")):
            t = pq.read_table(part, partitioning=None)
            tables.append(t.append_column("node", pa.array([part.name[5:]] * t.num_rows)))
        table = pa.concat_tables(tables).sort_by([("ts", "ascending"), ("node", "ascending")])
        pq.write_table(table, per_day / d.name / "all.parquet", compression="zstd",
                       row_group_size=1_048_576)
    node = sorted((days[0]).glob("node=*"))[0].name[5:]
    out = []
    layouts = [("one file per node-day", str(node_day / "samples/kind=gpu/date=2*/node=*/*.parquet"),
                len(days) * len(list(days[0].glob("node=*")))),
               ("one file per day, all nodes", str(per_day / "*/*.parquet"), len(days))]
    for name, glob, nfiles in layouts:
        con = duckdb.connect()
        q_all = (f"SELECT node, avg(util_gpu) FROM read_parquet('{glob}', hive_partitioning=true)"  # noqa: S608
                 " GROUP BY node")
        q_one = (f"SELECT avg(util_gpu) FROM read_parquet('{glob}', hive_partitioning=true)"  # noqa: S608
                 f" WHERE node = '{node}'")
        t_all = _best(con, q_all)
        t_one = _best(con, q_one)
        size = sum(os.path.getsize(p) for p in Path("/").glob(glob.lstrip("/")))
        out.append((name, t_all, t_one, size / 2**20, nfiles))
        con.close()
    return out


def _build(work: Path, nodes: int, days: float, roll: int, reuse: bool) -> tuple[Path, Path]:
    """The node-day store (simulated) and its segmented copy, reused when ``reuse`` and complete."""
    from gpulens.ingest.simulate import simulate
    from gpulens.store import Store

    ref, seg = work / "node-day", work / "segments"
    done = work / "built.json"
    if reuse and done.is_file():
        info = json.loads(done.read_text())
        print(f"  reusing {work} (built {info['built']}: simulated in {info['simulate_s']:.0f} s, "
              f"cut in {info['cut_s']:.0f} s)", flush=True)
        return ref, seg
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t_sim, _ = _timed(lambda: simulate(Store.open(ref), gpus=8 * nodes, days=days, seed=0, start=START))
    t_seg, _n = _timed(lambda: _segment(ref, seg, roll))
    done.write_text(json.dumps({"built": f"{datetime.now():%Y-%m-%d %H:%M}", "simulate_s": t_sim,
                                "cut_s": t_seg}))
    return ref, seg


def main(argv: list[str]) -> None:
    from gpulens.store import Store
    from gpulens.store.compact import compact

    if argv[:1] == ["--child"]:
        _child(Path(argv[1]), Path(argv[2]))
        return
    nodes, days = int(_arg(argv, "nodes", 32)), _arg(argv, "days", 2)
    roll = int(_arg(argv, "roll", 300))
    limit = _arg(argv, "rss-limit-gib", 16)
    limit_s = _arg(argv, "child-limit-s", 1800)
    work = BENCH_DIR / f"lake-{nodes}x{days:g}"
    print(f"  machine: {os.cpu_count()} cores; load average {os.getloadavg()}; "
          f"{datetime.now():%Y-%m-%d %H:%M} local", flush=True)
    ref, seg = _build(work, nodes, days, roll, "--reuse" in argv)
    n_nodes = len({p.name for p in (ref / "samples/kind=gpu").glob("date=2*/node=*")})
    rows = Store(ref).connect().execute("SELECT count(*) FROM gpu_samples").fetchone()[0]  # type: ignore[index]
    counts = {"node-day": _files(ref), "segments": _files(seg)}
    print(f"  {8 * nodes:,} GPUs on {n_nodes} nodes x {days:g} days, {rows:,} GPU samples; "
          f"{counts['segments']:,} GPU segment files ({roll} s roll)", flush=True)

    results: dict[str, dict[str, float]] = {}
    frames: dict[str, dict[str, pd.DataFrame]] = {}
    guarded: list[tuple[str, int, dict[str, float], int, str | None]] = []
    results["segments"], frames["segments"], peak, why = _measure_guarded(seg, work / "child-out", limit, limit_s)
    guarded.append(("segments, schema-marked (this release)", counts["segments"], results["segments"], peak, why))
    print(f"  measured segments: peak RSS {peak / 2**20:.1f} GiB" + (f"; {why}" if why else ""), flush=True)
    if "--unmarked" in argv:
        print(f"  renamed {_strip_marks(seg):,} files without the schema mark", flush=True)
        t, f, peak, why = _measure_guarded(seg, work / "child-out-unmarked", limit, limit_s)
        _same({k: v for k, v in frames["segments"].items() if k in f}, f)
        guarded.append(("segments, unmarked (union_by_name over every file)", counts["segments"], t, peak, why))
        print(f"  measured unmarked segments: peak RSS {peak / 2**20:.1f} GiB" + (f"; {why}" if why else ""),
              flush=True)
    (work / "built.json").unlink(missing_ok=True)  # compaction changes the segments: no --reuse after
    t_compact, report = _timed(lambda: compact(Store(seg), kinds=["gpu"], settle=0, grace=0))
    compact(Store(seg), kinds=["gpu"], settle=0, grace=0)  # deletes the replaced segments
    counts["compacted"] = _files(seg)
    print(f"  compaction: {report.files_in:,} files ({report.bytes_in / 2**20:.1f} MiB) -> "
          f"{report.partitions:,} files ({report.bytes_out / 2**20:.1f} MiB) in {t_compact:.1f} s", flush=True)
    print(f"  rollups at compaction (issue 26): {report.rollup_files} files, "
          f"{report.rollup_bytes / 2**20:.1f} MiB ({report.rollup_bytes / max(report.bytes_out, 1):.1%} "
          f"of the compacted bytes), {report.rollup_seconds:.1f} s of the {t_compact:.1f} s "
          f"({report.rollup_seconds / max(t_compact, 1e-9):.0%}); node-day below reads raw samples "
          "(never compacted, no rollups), compacted reads the rollups", flush=True)
    (results["node-day"], results["compacted"], frames["node-day"],
     frames["compacted"]) = _measure_pair(ref, seg, 3)
    _same(frames["node-day"], frames["compacted"])
    _same({k: v for k, v in frames["node-day"].items() if k in frames["segments"]}, frames["segments"])
    print(f"  same results: node-day = compacted; node-day = segments on the "
          f"{len(frames['segments'])} step(s) that finished (rtol 1e-9)")
    _table(results, counts)
    print(f"  load average after: {os.getloadavg()}", flush=True)
    if "--open-day" in argv:
        guarded += _open_day(ref, seg, roll, limit, limit_s, work, frames["node-day"])
    _guarded_table(guarded)
    print("\n  granularity probe (DuckDB read_parquet, best of 3):")
    print("| layout | files | MiB | per-node mean, all nodes | mean of one node |")
    print("|---|---|---|---|---|")
    for name, t_all, t_one, mib, nfiles in _granularity(ref, work):
        print(f"| {name} | {nfiles:,} | {mib:.1f} | {t_all:.3f} s | {t_one:.3f} s |")


def _open_day(ref: Path, seg: Path, roll: int, limit: float, limit_s: float, work: Path,
              expected: dict[str, pd.DataFrame]) -> list[tuple[str, int, dict[str, float], int, str | None]]:
    """The last day at 23:59, still open: its segments as the agents left them, then as hourly
    `store compact` runs leave it (the segments arrive hour by hour, a run at every full hour
    from 01:00 to 23:00, leaving a few tiers and 23:00's 12 segments per node). Results asserted
    equal to node-day's."""
    from gpulens.store import Store
    from gpulens.store.compact import compact

    last = sorted((ref / "samples" / "kind=gpu").glob("date=2*"))[-1]
    staged = work / "open-day-staging"
    day = datetime.fromisoformat(last.name[5:]).replace(tzinfo=UTC)

    def restage() -> None:  # the last day's partitions out of the tree, cut into segments
        shutil.rmtree(staged, ignore_errors=True)
        for part in sorted(last.glob("node=*")):
            shutil.rmtree(seg / "samples" / "kind=gpu" / last.name / part.name)
            _cut(part, staged / part.name, roll)

    def arrive(hour: int) -> None:  # the segments of [hour:00, hour+1:00) enter the tree
        for src in staged.glob("node=*/*.parquet"):
            slot = int(src.stem.rsplit("-", 1)[1])
            if datetime.fromtimestamp(slot * roll, UTC).hour == hour:
                dst = seg / "samples" / "kind=gpu" / last.name / src.parent.name
                dst.mkdir(parents=True, exist_ok=True)
                src.rename(dst / src.name)

    def measured(name: str) -> tuple[str, int, dict[str, float], int, str | None]:
        t, f, peak, why = _measure_guarded(seg, work / "child-open", limit, limit_s)
        _same({k: v for k, v in expected.items() if k in f}, f)
        return name, _live(seg), t, peak, why

    restage()
    for hour in range(24):
        arrive(hour)
    out = [measured("open day at 23:59 as the agents left it")]
    restage()  # the same day again, compacted hourly as it arrives
    t0 = time.perf_counter()
    for hour in range(24):
        arrive(hour)
        if hour < 23:
            at = (day.replace(hour=hour) + timedelta(hours=1)).timestamp()
            compact(Store(seg), kinds=["gpu"], settle=3600, grace=0, clock=functools.partial(float, at))
    print(f"  23 hourly runs on the open day in {time.perf_counter() - t0:.1f} s", flush=True)
    out.append(measured("open day at 23:59 after hourly runs (tiers + 12 segments a node)"))
    return out


def _guarded_table(rows: list[tuple[str, int, dict[str, float], int, str | None]]) -> None:
    print("\n  layouts measured in a child process (1 run each; results equal node-day's where finished):")
    print("| layout | GPU files | " + " | ".join(STEPS) + " | peak RSS | stopped |")
    print("|---|---|" + "---|" * len(STEPS) + "---|---|")
    for name, files, t, peak, why in rows:
        cells = " | ".join(f"{t[k]:.2f} s" if k in t else "not reached" for k in STEPS)
        print(f"| {name} | {files:,} | {cells} | {peak / 2**20:.1f} GiB | {why or 'no'} |")


def _table(results: dict[str, dict[str, float]], counts: dict[str, int]) -> None:
    print()
    print("| step (node-day and compacted: best of 3, alternating; segments: 1 run) | node-day"
          " | segments (before) | compacted (after) | after / node-day |")
    print("|---|---|---|---|---|")
    print(f"| GPU sample files | {counts['node-day']:,} | {counts['segments']:,} | "
          f"{counts['compacted']:,} | |")
    worst = 0.0
    for step in STEPS:
        a, c = results["node-day"][step], results["compacted"][step]
        b = results["segments"].get(step)
        ratio = c / a if a > 0 else float("nan")
        if a >= NOISE_S:
            worst = max(worst, ratio)
        before = f"{b:.2f} s" if b is not None else "not reached"
        print(f"| {step} | {a:.2f} s | {before} | {c:.2f} s | {ratio:.2f}x |")
    print(f"\n  worst after/node-day ratio (steps of >= {NOISE_S:g} s on node-day): {worst:.2f}x;"
          f" target <= {TARGET:g}x: {'met' if worst <= TARGET else 'NOT met'}")


if __name__ == "__main__":
    main(sys.argv[1:])

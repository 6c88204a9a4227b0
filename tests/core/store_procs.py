"""Child-process programs for the store concurrency and crash tests (run with python -m)."""

from __future__ import annotations

import datetime as dt
import os
import sys
import time

import pyarrow as pa

from gpulens.store import SegmentWriter, Store, arrow_schema


def state_writer(root: str, commits: int) -> None:
    """Commit ``commits`` transactions (0: forever), each with one job and 8 samples."""
    store = Store.open(root)
    i = 0
    while commits == 0 or i < commits:
        with store.write() as con:
            con.execute(
                "INSERT INTO jobs (job_id, status) VALUES (?, 'passed')", [f"job-{i:06d}"]
            )
        table = pa.table(
            {"ts": [dt.datetime(2026, 1, 1) + dt.timedelta(minutes=i)] * 8,
             "node": ["n1"] * 8, "gpu_index": list(range(8)), "util_gpu": [float(i)] * 8},
        )
        store.write_samples("gpu", table)
        i += 1
        print(f"committed {i}", flush=True)


def reader(root: str, stop_file: str) -> None:
    """Query until ``stop_file`` exists (at most 10 minutes), counting failures."""
    store = Store(root)
    deadline = time.monotonic() + 600
    queries = errors = 0
    last_jobs = last_samples = 0
    regressions = 0
    print("reading", flush=True)
    while time.monotonic() < deadline and not os.path.exists(stop_file):
        try:
            con = store.connect()
            jobs = con.execute("SELECT count(*) FROM jobs").fetchone()[0]  # type: ignore[index]
            samples = con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0]  # type: ignore[index]
            con.close()
            if jobs < last_jobs or samples < last_samples or samples % 8:
                regressions += 1
            last_jobs, last_samples = jobs, samples
            queries += 1
        except Exception as exc:
            errors += 1
            print(f"error {type(exc).__name__}: {exc}", flush=True)
    print(f"queries={queries} errors={errors} regressions={regressions} jobs={last_jobs}", flush=True)


def spool_writer(root: str, agent: str, batch: int, start: int) -> None:
    """Flush batches of ``batch`` rows forever; rows carry a unique pid value = row number."""
    store = Store(root)
    writer = SegmentWriter(store, agent, segment_seconds=0.05)
    n = start
    schema = arrow_schema("proc")
    while True:
        rows = pa.table(
            {
                "ts": [dt.datetime(2026, 1, 1) + dt.timedelta(seconds=n + k) for k in range(batch)],
                "node": [agent] * batch,
                "gpu_index": [0] * batch,
                "pid": list(range(n, n + batch)),
            }
        ).cast(pa.schema([schema.field(c) for c in ("ts", "node", "gpu_index", "pid")]))
        writer.append("proc", rows)
        writer.flush()
        n += batch
        print(f"flushed {n}", flush=True)
        writer.maybe_roll()


def segments(root: str, nodes: int, files: int, rows: int, start: int) -> None:
    """Write ``files`` proc segments per node into 2026-01-01 (a closed day); pid = row number."""
    from tests.core.lake_builders import write_segments

    write_segments(Store(root), nodes=nodes, files=files, rows=rows, start=start)


def compactor(root: str, grace: str, stop_file: str) -> None:
    """Compact closed days again and again until ``stop_file`` exists."""
    from gpulens.store.compact import compact

    store = Store(root)
    runs = 0
    print("compacting", flush=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not os.path.exists(stop_file):
        report = compact(store, settle=0, grace=float(grace))
        runs += 1
        print(f"run {runs} partitions={report.partitions} deleted={report.deleted_files}",
              flush=True)
    print(f"runs={runs}", flush=True)


def compact_once(root: str) -> None:
    from gpulens.store.compact import compact

    print("start", flush=True)
    compact(Store(root), settle=0, grace=0,
            progress=lambda what: print(f"merged {what}", flush=True))
    print("done", flush=True)


def proc_reader(root: str, stop_file: str) -> None:
    """Count proc rows until ``stop_file`` exists: never an error, a duplicate or a drop."""
    store = Store(root)
    deadline = time.monotonic() + 600
    queries = errors = regressions = dups = 0
    last = 0
    print("reading", flush=True)
    while time.monotonic() < deadline and not os.path.exists(stop_file):
        try:
            con = store.connect()
            n, distinct = con.execute(
                "SELECT count(*), count(DISTINCT pid) FROM gpu_process_samples").fetchone()  # type: ignore[misc]
            con.close()
            dups += n != distinct
            regressions += n < last
            last = n
            queries += 1
        except Exception as exc:
            errors += 1
            print(f"error {type(exc).__name__}: {exc}", flush=True)
    print(f"queries={queries} errors={errors} regressions={regressions} dups={dups} rows={last}",
          flush=True)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "state_writer":
        state_writer(sys.argv[2], int(sys.argv[3]))
    elif what == "reader":
        reader(sys.argv[2], sys.argv[3])
    elif what == "spool_writer":
        spool_writer(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif what == "segments":
        segments(sys.argv[2], *(int(a) for a in sys.argv[3:7]))
    elif what == "compactor":
        compactor(sys.argv[2], sys.argv[3], sys.argv[4])
    elif what == "compact_once":
        compact_once(sys.argv[2])
    elif what == "proc_reader":
        proc_reader(sys.argv[2], sys.argv[3])

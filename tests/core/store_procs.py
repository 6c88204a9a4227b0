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


def chaos_state_writer(root: str, start: int) -> None:
    """Commit job ``start``, ``start+1``, ... forever, each with 8 samples of node ``sw``.

    Store errors end the process like the CLI does: one line on stderr, the error's exit code.
    """
    from gpulens.errors import GpulensError

    try:
        store = Store.open(root)
        i = start
        while True:
            with store.write() as con:
                if i < 0:  # resume after the last job in the state file (a kill may have
                    # committed one that no snapshot shows yet)
                    i = int(con.execute("SELECT count(*) FROM jobs WHERE job_id LIKE 'chaos-%'"
                                        ).fetchone()[0])  # type: ignore[index]
                con.execute("INSERT INTO jobs (job_id, status) VALUES (?, 'passed')", [f"chaos-{i:06d}"])
            table = pa.table({"ts": [dt.datetime(2026, 1, 1) + dt.timedelta(minutes=i)] * 8,
                              "node": ["sw"] * 8, "gpu_index": list(range(8)), "util_gpu": [1.0] * 8})
            store.write_samples("gpu", table)
            i += 1
            print(f"committed {i}", flush=True)
    except GpulensError as exc:
        print(f"gpulens: error: {exc}", file=sys.stderr, flush=True)
        sys.exit(exc.exit_code)


def chaos_reader(root: str, stop_file: str) -> None:
    """Read state and samples like an analysis does until ``stop_file`` exists; count failures
    and duplicated sample rows (a damaged segment is quarantined, not a failure)."""
    store = Store(root)
    store.warn = lambda line: print(f"warning {line}", flush=True)
    deadline = time.monotonic() + 600
    queries = errors = duplicates = 0

    def once() -> tuple[int, int]:
        con = store.connect()
        try:
            con.execute("SELECT count(*) FROM jobs").fetchone()
            n, distinct, _ = con.execute(
                "SELECT count(*), count(DISTINCT (node, gpu_index, ts)), sum(util_gpu) FROM gpu_samples"
            ).fetchone()  # type: ignore[misc]
            return int(n), int(distinct)
        finally:
            con.close()

    while time.monotonic() < deadline and not os.path.exists(stop_file):
        try:
            n, distinct = store.read_retrying(once)
            duplicates = max(duplicates, n - distinct)
            queries += 1
        except Exception as exc:
            errors += 1
            print(f"error {type(exc).__name__}: {exc}", flush=True)
    print(f"queries={queries} errors={errors} duplicates={duplicates}", flush=True)


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


def proc_reader(root: str, stop_file: str, grace: str) -> None:
    """Count proc rows until ``stop_file`` exists: never an error, a duplicate or a drop.

    A compaction keeps the files it replaced for ``grace`` seconds (lake.py), so only a query
    that ran longer than that may find a file it listed gone; such a failure counts as
    ``late``, apart from ``errors`` (a loaded 2-core runner can stall one query that long)."""
    store = Store(root)
    deadline = time.monotonic() + 600
    queries = errors = late = regressions = dups = 0
    last = 0
    print("reading", flush=True)
    while time.monotonic() < deadline and not os.path.exists(stop_file):
        began = time.monotonic()
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
            took = time.monotonic() - began
            if took >= float(grace):
                late += 1
            else:
                errors += 1
            print(f"error after {took:.2f} s {type(exc).__name__}: {exc}", flush=True)
    print(f"queries={queries} errors={errors} late={late} regressions={regressions} dups={dups}"
          f" rows={last}", flush=True)


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "chaos_state_writer":
        chaos_state_writer(sys.argv[2], int(sys.argv[3]))
    elif what == "chaos_reader":
        chaos_reader(sys.argv[2], sys.argv[3])
    elif what == "state_writer":
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
        proc_reader(sys.argv[2], sys.argv[3], sys.argv[4])

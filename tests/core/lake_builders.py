"""Small segmented lakes for the compaction tests: many files per partition, as agents roll them."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from gpulens.store import Store, arrow_schema

__all__ = ["DAY", "proc_rows", "write_segments"]

DAY = dt.datetime(2026, 1, 1)


def proc_rows(node: str, first: int, n: int, day: dt.datetime = DAY) -> pa.Table:
    """``n`` proc samples of ``node`` with pid = first .. first+n-1, inside ``day``."""
    schema = arrow_schema("proc")
    pids = list(range(first, first + n))
    table = pa.table({
        "ts": [day + dt.timedelta(seconds=(p * 7) % 86_000) for p in pids],
        "node": [node] * n,
        "gpu_index": [p % 8 for p in pids],
        "pid": pids,
    })
    return table.cast(pa.schema([schema.field(c) for c in table.column_names]))


def write_segments(store: Store, *, nodes: int, files: int, rows: int, start: int,
                   day: dt.datetime = DAY) -> int:
    """``files`` segments of ``rows`` rows per node (node names n0, n1, ...); returns the next pid."""
    pid = start
    for _ in range(files):
        for k in range(nodes):
            store.write_samples("proc", proc_rows(f"n{k}", pid, rows, day))
            pid += rows
    return pid

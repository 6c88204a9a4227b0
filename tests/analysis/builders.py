"""Helpers to build small hand-made stores for the analysis tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from gpulens.store import Store, arrow_schema

__all__ = ["gpu_table", "insert_rows", "write_gpu_samples"]


def gpu_table(rows: Iterable[tuple[datetime, str, int, float | None]]) -> pa.Table:
    """A full-schema gpu sample table from (ts, node, gpu_index, util_gpu) rows."""
    rows = list(rows)
    schema = arrow_schema("gpu")
    cols: dict[str, list[Any]] = {name: [None] * len(rows) for name in schema.names}
    cols["ts"] = [r[0] for r in rows]
    cols["node"] = [r[1] for r in rows]
    cols["gpu_index"] = [r[2] for r in rows]
    cols["util_gpu"] = [r[3] for r in rows]
    return pa.table({n: pa.array(cols[n], type=schema.field(n).type) for n in schema.names})


def write_gpu_samples(store: Store, rows: Iterable[tuple[datetime, str, int, float | None]]) -> None:
    store.write_samples("gpu", gpu_table(rows))


def insert_rows(store: Store, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    cols = ", ".join(f'"{c}"' for c in columns)
    marks = ", ".join("?" for _ in columns)
    with store.write() as con:
        for row in rows:
            con.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", list(row))  # noqa: S608

"""What every importer shares: quirk counting, result records, staged writes."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from gpulens.errors import InputError

__all__ = [
    "ImportResult",
    "Quirks",
    "arrow_rows",
    "delete_jobs",
    "insert_arrow",
    "parse_local_time",
    "record_import",
    "register",
    "unregister",
]

_TZ_SUFFIX = re.compile(r"\s+(PDT|PST|UTC|GMT)$")


class Quirks(Counter[str]):
    """Named counts of oddities met in an input (reported, never fatal)."""

    def as_dict(self) -> dict[str, int]:
        return {k: int(v) for k, v in sorted(self.items()) if v}


@dataclass
class ImportResult:
    """What one ``gpulens import`` did: rows written per table and quirks per file."""

    kind: str
    paths: list[str]
    rows: dict[str, int] = field(default_factory=dict)
    quirks: dict[str, dict[str, int]] = field(default_factory=dict)
    sample_files: int = 0


def parse_local_time(value: Any, where: str, quirks: Quirks, name: str) -> datetime | None:
    """Parse 'YYYY-MM-DD HH:MM:SS' (optionally ISO 'T', optionally a zone suffix that is
    dropped: the Philly clock is local and both files use it). None/'' -> None (a quirk)."""
    if value is None or value == "" or value in ("None", "Unknown", "NA"):
        quirks[f"{name}_missing"] += 1
        return None
    if not isinstance(value, str):
        raise InputError(f"{where}: {name} {value!r} is not a time string.",
                         "Expected 'YYYY-MM-DD HH:MM:SS'; fix that record and import again.")
    text = value.strip()
    m = _TZ_SUFFIX.search(text)
    if m:
        quirks[f"{name}_zone_suffix_stripped"] += 1
        text = text[: m.start()]
    try:
        return datetime.fromisoformat(text).replace(tzinfo=None)
    except ValueError:
        raise InputError(f"{where}: {name} {value!r} is not a time.",
                         "Expected 'YYYY-MM-DD HH:MM:SS'; fix that record and import again.") from None


def arrow_rows(columns: Sequence[tuple[str, pa.DataType]], rows: list[tuple[Any, ...]]) -> pa.Table:
    cols: list[Any] = list(zip(*rows, strict=True)) if rows else [() for _ in columns]
    return pa.table({name: pa.array(list(col), type=typ)
                     for (name, typ), col in zip(columns, cols, strict=True)})


def register(con: duckdb.DuckDBPyConnection, name: str, data: pa.Table) -> None:
    """Register an Arrow table on a connection that may hold an unfetched result."""
    con.execute("SELECT 1").fetchall()  # DuckDB refuses register() while a result is pending
    con.register(name, data)


def unregister(con: duckdb.DuckDBPyConnection, name: str) -> None:
    con.execute("SELECT 1").fetchall()
    con.unregister(name)


def insert_arrow(con: duckdb.DuckDBPyConnection, table: str, data: pa.Table) -> int:
    """INSERT an Arrow table into a state table by column name (our own identifiers)."""
    if data.num_rows == 0:
        return 0
    name = f"__import_{table}"
    register(con, name, data)
    try:
        cols = ", ".join(f'"{c}"' for c in data.column_names)
        con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {name}")  # noqa: S608
    finally:
        unregister(con, name)
    return data.num_rows


def delete_jobs(con: duckdb.DuckDBPyConnection, job_ids: pa.Array) -> None:
    """Remove earlier imports of these jobs (so re-importing a trace is idempotent)."""
    if len(job_ids) == 0:
        return
    register(con, "__import_ids", pa.table({"job_id": job_ids}))
    try:
        for table in ("placements", "attempts", "jobs"):
            con.execute(f"DELETE FROM {table} WHERE job_id IN (SELECT job_id FROM __import_ids)")  # noqa: S608
    finally:
        unregister(con, "__import_ids")


def record_import(con: duckdb.DuckDBPyConnection, kind: str, path: str | Path, rows: int,
                  quirks: dict[str, int]) -> None:
    con.execute(
        "INSERT INTO imports (ts, kind, path, rows, quirks) VALUES (now(), ?, ?, ?, ?)",
        [kind, str(path), int(rows), json.dumps(quirks)],
    )

"""What every importer shares: quirk counting, result records, staged writes."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from gpulens.errors import InputError
from gpulens.store.tables import delete_matching, insert_batch

__all__ = [
    "ImportResult",
    "Quirks",
    "arrow_rows",
    "delete_jobs",
    "insert_arrow",
    "parse_local_time",
    "parsing",
    "record_import",
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


@contextmanager
def parsing(where: str | Path, hint: str) -> Iterator[None]:
    """Turn what a malformed or wrongly typed record can raise into one :class:`InputError`
    that names it (file, or file:line), so bad input never ends in a traceback."""
    try:
        yield
    except InputError:
        raise
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start}).",
                         "Pass the original trace file; nothing was stored.") from None
    except (AttributeError, TypeError, ValueError, KeyError, IndexError, OverflowError,
            pa.ArrowException) as exc:
        detail = str(exc).splitlines()[0][:200] if str(exc) else ""
        raise InputError(f"{where}: a value has an unexpected type or form ({type(exc).__name__}: {detail}).",
                         hint) from None
    except OSError as exc:  # gzip.BadGzipFile, EOFError-like truncation, unreadable file
        raise InputError(f"{where}: cannot be read ({exc.strerror or exc}).",
                         "Pass the original trace file; nothing was stored.") from None
    except EOFError:
        raise InputError(f"{where}: the file ends in the middle of a record (truncated?).",
                         "Pass the complete trace file; nothing was stored.") from None


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


def insert_arrow(con: duckdb.DuckDBPyConnection, table: str, data: pa.Table) -> int:
    """INSERT an Arrow table into a state table by column name (our own identifiers)."""
    return insert_batch(con, table, data)


def delete_jobs(con: duckdb.DuckDBPyConnection, job_ids: pa.Array) -> None:
    """Remove earlier imports of these jobs (so re-importing a trace is idempotent)."""
    if len(job_ids) == 0:
        return
    ids = pa.table({"job_id": job_ids})
    for table in ("placements", "attempts", "jobs"):
        delete_matching(con, table, ids, ["job_id"])


def record_import(con: duckdb.DuckDBPyConnection, kind: str, path: str | Path, rows: int,
                  quirks: dict[str, int]) -> None:
    con.execute(
        "INSERT INTO imports (ts, kind, path, rows, quirks) VALUES (now(), ?, ?, ?, ?)",
        [kind, str(path), int(rows), json.dumps(quirks)],
    )

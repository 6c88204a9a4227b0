"""Integrity of the state database: verify before publishing, stop on damage, restore.

DuckDB stores a checksum with every block and verifies it when the block is read, so
reading every table of a database file end to end finds a damaged block. ``Store.write``
verifies each new snapshot that way before publishing it. On damage the writer stops: a
marker file ``state.corrupt`` (JSON: why, when, the last good snapshot) makes every later
writer refuse with the same one-line error until ``gpulens store restore`` brings the last
good snapshot back. Readers keep reading the last published snapshot meanwhile.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import duckdb

__all__ = ["clear_marker", "is_corruption", "read_marker", "verify_db", "write_marker"]

_MARKER = "state.corrupt"
_CORRUPTION = re.compile(r"corrupt database file|does not match stored checksum|not a valid duckdb", re.IGNORECASE)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def verify_db(path: Path) -> str | None:
    """Read every table of the DuckDB file ``path`` end to end; why it failed, or None."""
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        return str(exc).splitlines()[0][:300]
    try:
        tables = con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() WHERE NOT internal"
        ).fetchall()
        for schema, name in tables:
            reader = con.sql(
                f"SELECT * FROM {_ident(schema)}.{_ident(name)}"  # noqa: S608 - catalog names
            ).to_arrow_reader(65_536)
            assert reader is not None
            while True:
                try:
                    reader.read_next_batch()
                except StopIteration:
                    break
    except (duckdb.Error, OSError) as exc:  # the Arrow stream reports DuckDB's errors as OSError
        return str(exc).splitlines()[0][:300]
    finally:
        con.close()
    return None


def is_corruption(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.Error) and bool(_CORRUPTION.search(str(exc)))


def write_marker(root: Path, reason: str, last_good: Path | None) -> dict[str, Any]:
    info = {"reason": reason, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "last_good": str(last_good) if last_good else None}
    tmp = root / f".{_MARKER}.{os.getpid()}"
    try:
        tmp.write_text(json.dumps(info, indent=1))
        os.replace(tmp, root / _MARKER)
    except OSError:
        pass  # the error itself still stops this writer
    return info


def read_marker(root: Path) -> dict[str, Any] | None:
    try:
        info = json.loads((root / _MARKER).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"reason": "unreadable state.corrupt marker", "at": None, "last_good": None}
    return info if isinstance(info, dict) else {"reason": str(info), "at": None, "last_good": None}


def clear_marker(root: Path) -> None:
    (root / _MARKER).unlink(missing_ok=True)

"""``gpulens store export``: the state tables of the newest snapshot as Parquet files.

For engines that read Parquet but not DuckDB files (Spark, Trino, Polars): one
``<table>.parquet`` per state table in ``<data dir>/export/state-<generation>/`` (or a
folder of your choice), written into a temporary folder and renamed into place, so a
reader never sees half an export. The samples need no export: they already are
Parquet (list the live files with ``Store.sample_files``).
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import duckdb

from gpulens.errors import StoreError
from gpulens.store.store import Store, quote_ident, quote_literal

__all__ = ["export_state"]

_DONE = "_SUCCESS"
_KEEP = 2


def export_state(store: Store, dest: str | os.PathLike[str] | None = None) -> Path:
    """Write every state table to ``dest`` (default: the export of the current generation,
    reused when it exists). Returns the folder."""
    gen = store.generation()
    base = store.root / "export"
    folder = Path(dest) if dest is not None else base / f"state-{gen:08d}"
    if (folder / _DONE).exists():
        return folder
    tmp = folder.with_name(f".{folder.name}-{uuid.uuid4().hex}")
    con = store.connect()
    try:
        tmp.mkdir(parents=True)
        names = [str(r[0]) for r in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = 'state'").fetchall()]
        for name in names:
            out = quote_literal(tmp / f"{name}.parquet")
            con.execute(f"COPY (SELECT * FROM state.{quote_ident(name)}) TO {out}"  # noqa: S608
                        " (FORMAT parquet, COMPRESSION zstd)")
        (tmp / _DONE).write_text(f"{gen}\n")
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(tmp, folder)
    except (OSError, duckdb.Error) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise StoreError(f"Cannot export the state tables to {folder} ({exc}).",
                         "Free disk space or pass another folder.") from None
    finally:
        con.close()
    if dest is None:
        _prune(base, folder)
    return folder


def _prune(base: Path, keep: Path) -> None:
    exports = sorted(p for p in base.glob("state-*") if p.is_dir())
    for old in exports[:-_KEEP]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)
    for debris in base.glob(".state-*"):
        shutil.rmtree(debris, ignore_errors=True)

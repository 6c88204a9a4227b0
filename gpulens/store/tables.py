"""Writing Arrow/pandas batches into state tables, one way everywhere.

Every bulk writer (importers, simulator, ``diagnose --all``, node anomaly scores)
registers its batch on the writer connection, deletes the rows it replaces by key and
inserts the new ones by column name. Table and column names are gpulens's own
identifiers (quoted with :func:`quote_ident`); values never enter SQL text.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import duckdb

from gpulens.store.store import quote_ident

__all__ = ["delete_matching", "insert_batch", "registered", "replace_batch"]


@contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, batch: Any) -> Iterator[str]:
    """Expose ``batch`` (an Arrow table or a DataFrame) as the view ``name`` while inside."""
    _settle(con)
    con.register(name, batch)
    try:
        yield quote_ident(name)
    finally:
        _settle(con)
        con.unregister(name)


def _settle(con: duckdb.DuckDBPyConnection) -> None:
    """Finish any partly fetched result: DuckDB refuses (un)register() while one is pending
    (a caller's ``fetchone()`` leaves the rest of its result open)."""
    con.execute("SELECT 1").fetchall()


def _columns(batch: Any) -> list[str]:
    names = getattr(batch, "column_names", None)
    return list(names) if names is not None else [str(c) for c in batch.columns]


def insert_batch(con: duckdb.DuckDBPyConnection, table: str, batch: Any) -> int:
    """INSERT ``batch`` into ``table`` by column name; returns the number of rows."""
    rows = len(batch)
    if rows == 0:
        return 0
    cols = ", ".join(quote_ident(c) for c in _columns(batch))
    with registered(con, f"__batch_{table}", batch) as view:
        con.execute(f"INSERT INTO {quote_ident(table)} ({cols}) SELECT {cols} FROM {view}")  # noqa: S608
    return rows


def delete_matching(
    con: duckdb.DuckDBPyConnection, table: str, batch: Any, key: Sequence[str]
) -> None:
    """DELETE the rows of ``table`` whose ``key`` columns match a row of ``batch``."""
    if len(batch) == 0:
        return
    cols = ", ".join(quote_ident(c) for c in key)
    with registered(con, f"__keys_{table}", batch) as view:
        con.execute(
            f"DELETE FROM {quote_ident(table)} WHERE ({cols}) IN (SELECT {cols} FROM {view})"  # noqa: S608
        )


def replace_batch(
    con: duckdb.DuckDBPyConnection, table: str, batch: Any, key: Sequence[str]
) -> int:
    """Upsert: delete the rows ``batch`` replaces (by ``key``), then insert ``batch``."""
    delete_matching(con, table, batch, key)
    return insert_batch(con, table, batch)

"""Versioned schema: SQL migrations applied in order inside the writer's transaction."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import duckdb

__all__ = [
    "Migration",
    "apply_migrations",
    "current_version",
    "latest_version",
    "migrations",
    "missing_versions",
]

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations() -> list[Migration]:
    """All migrations shipped in ``gpulens/store/migrations``, ordered by version."""
    found: list[Migration] = []
    for entry in resources.files("gpulens.store.migrations").iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration versions in {versions}")
    return found


def latest_version() -> int:
    ms = migrations()
    return ms[-1].version if ms else 0


def missing_versions(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> set[int]:
    """Shipped migrations not yet applied to the database (or attached ``catalog``)."""
    if current_version(con, catalog) == 0:
        return {m.version for m in migrations()}
    prefix = f'"{catalog}".' if catalog else ""
    rows = con.execute(f"SELECT version FROM {prefix}schema_version").fetchall()  # noqa: S608
    return {m.version for m in migrations()} - {int(r[0]) for r in rows}


def current_version(con: duckdb.DuckDBPyConnection, catalog: str | None = None) -> int:
    prefix = f'"{catalog}".' if catalog else ""
    # fetchall(), not fetchone(): DuckDB 2.0 keeps a half-read result open, and then
    # refuses con.register() on the same connection.
    exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'schema_version'"
        " AND (? IS NULL OR database_name = ?)",
        [catalog, catalog],
    ).fetchall()
    if exists[0][0] == 0:
        return 0
    rows = con.execute(
        f"SELECT coalesce(max(version), 0) FROM {prefix}schema_version"  # noqa: S608
    ).fetchall()
    return int(rows[0][0])


def apply_migrations(
    con: duckdb.DuckDBPyConnection, available: list[Migration] | None = None
) -> list[int]:
    """Apply pending migrations on a read-write connection already inside a transaction.

    ``available`` defaults to the migrations shipped with gpulens.
    """
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_version ("
        "version INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMP DEFAULT now())"
    )
    # Track the set, not the maximum: migrations written on parallel branches may land
    # with a lower number after a higher one was applied.
    have = {int(r[0]) for r in con.execute("SELECT version FROM schema_version").fetchall()}
    applied: list[int] = []
    for m in migrations() if available is None else sorted(available, key=lambda m: m.version):
        if m.version not in have:
            con.execute(m.sql)
            con.execute("INSERT INTO schema_version (version, name) VALUES (?, ?)", [m.version, m.name])
            applied.append(m.version)
    return applied

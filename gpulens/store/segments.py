"""A collector's private write path: spool in its own DuckDB file, roll into Parquet.

Each agent owns ``spool/<agent>.duckdb``; no other process opens it, so the
agent never waits on a lock. ``append`` buffers rows in memory, ``flush``
commits the buffer in one transaction (a SIGKILL loses at most the unflushed
buffer), and ``roll`` moves everything flushed so far into immutable Parquet
segments in three recorded steps, so a crash at any point is finished on the
next start without losing or duplicating rows:

1. record ``pending(seg, kind, max_seq, 'staging')`` and commit;
2. COPY rows with ``seq <= max_seq`` into ``tmp/seg-...`` (partitioned by date
   and node), set the state to ``'moving'`` and commit;
3. rename the staged files into the samples tree, then delete the rows and the
   pending record in one transaction.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import duckdb
import pyarrow as pa

from gpulens.errors import InputError, StoreCorruptError, StoreError, StoreLockedError
from gpulens.store.samples import SAMPLE_KINDS, arrow_schema, duckdb_columns
from gpulens.store.store import Store, quote_literal

__all__ = ["SegmentWriter"]

_AGENT = re.compile(r"^[A-Za-z0-9._-]{1,128}$")

Rows: TypeAlias = pa.Table | Sequence[Mapping[str, Any]]


class SegmentWriter:
    """Buffered, crash-safe writer of one agent's samples."""

    def __init__(
        self,
        store: Store,
        agent: str,
        *,
        segment_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not _AGENT.match(agent):
            raise InputError(
                f"Agent name {agent!r} is not usable as a file name.",
                "Use letters, digits, '.', '_' and '-' only (set collect.node).",
            )
        self.store = store
        self.agent = agent
        self.segment_seconds = segment_seconds
        self._clock = clock
        self._last_roll = clock()
        self._buffer: dict[str, list[pa.Table]] = {k: [] for k in SAMPLE_KINDS}
        self.path = store.spool / f"{agent}.duckdb"
        self._lock_fd = os.open(store.spool / f"{agent}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise StoreLockedError(
                f"Spool {self.path} is in use by another agent named {agent!r}.",
                "Stop the other agent or give this one another name (collect.node).",
            ) from None
        try:
            self._con = duckdb.connect(str(self.path))
        except duckdb.Error as exc:
            os.close(self._lock_fd)
            raise StoreCorruptError(
                f"Spool file {self.path} cannot be opened ({str(exc).splitlines()[0]}).",
                "Is another agent with the same node name running? Otherwise move the file aside.",
            ) from None
        self._create()
        self.recover()

    def _create(self) -> None:
        con = self._con
        # The spool is transient (rows leave at the next roll): compressing them, or
        # checkpointing the WAL at every commit, costs CPU for nothing. Measured with
        # benchmarks/bench_collect.py: about 3x more rows per CPU-second.
        con.execute("PRAGMA force_compression='uncompressed'")
        con.execute("SET checkpoint_threshold = '256MB'")
        for kind in SAMPLE_KINDS:
            cols = ", ".join(f'"{n}" {t}' for n, t in duckdb_columns(kind))
            con.execute(f"CREATE TABLE IF NOT EXISTS s_{kind} (seq BIGINT, {cols})")
            for name, typ in duckdb_columns(kind):  # columns added by a newer gpulens
                con.execute(f'ALTER TABLE s_{kind} ADD COLUMN IF NOT EXISTS "{name}" {typ}')
        con.execute(
            "CREATE TABLE IF NOT EXISTS pending (seg VARCHAR PRIMARY KEY, kind VARCHAR,"
            " max_seq BIGINT, state VARCHAR)"
        )
        # Row numbers are assigned here, not by a DuckDB sequence (nextval per row is slow);
        # they only need to grow within this spool, so continue after the largest left.
        parts = [f"SELECT max(seq) FROM s_{k}" for k in SAMPLE_KINDS]  # noqa: S608
        parts.append("SELECT max(max_seq) FROM pending")
        top = con.execute(" UNION ALL ".join(parts)).fetchall()
        self._next_seq = 1 + max((int(r[0]) for r in top if r[0] is not None), default=0)

    # --------------------------------------------------------------- buffering
    def append(self, kind: str, rows: Rows) -> None:
        """Buffer rows in memory (cheap). ``rows`` is an Arrow table or a list of dicts."""
        if kind not in SAMPLE_KINDS:
            raise InputError(f"Unknown sample kind {kind!r}.", f"Use one of {sorted(SAMPLE_KINDS)}.")
        schema = arrow_schema(kind)
        if isinstance(rows, pa.Table):
            table = rows.select([n for n in schema.names if n in rows.column_names])
        else:
            if not rows:
                return
            table = pa.Table.from_pylist(list(rows), schema=schema)
        if table.num_rows:
            self._buffer[kind].append(table)

    def pending_rows(self) -> int:
        return sum(t.num_rows for tables in self._buffer.values() for t in tables)

    def flush(self) -> int:
        """Commit the buffer to the spool in one transaction. Returns rows written."""
        n = 0
        con = self._con
        try:
            con.execute("BEGIN TRANSACTION")
            for kind, tables in self._buffer.items():
                if not tables:
                    continue
                table = pa.concat_tables(tables, promote_options="default")
                seq = pa.array(range(self._next_seq + n, self._next_seq + n + table.num_rows),
                               pa.int64())
                table = table.append_column("seq", seq)
                name = f"b_{kind}"
                con.register(name, table)
                cols = ", ".join(f'"{c}"' for c in table.column_names)
                con.execute(f"INSERT INTO s_{kind} ({cols}) SELECT {cols} FROM {name}")  # noqa: S608
                con.unregister(name)
                n += table.num_rows
            con.execute("COMMIT")
        except (duckdb.Error, pa.ArrowInvalid) as exc:
            con.execute("ROLLBACK")
            raise self._spool_error(exc) from None
        self._next_seq += n
        for tables in self._buffer.values():
            tables.clear()
        return n

    def _spool_error(self, exc: BaseException) -> StoreError:
        return StoreError(
            f"Cannot write to spool {self.path} ({str(exc).splitlines()[0]}).",
            "Free disk space on the data directory; buffered samples are kept until then.",
        )

    # ----------------------------------------------------------------- rolling
    def maybe_roll(self) -> list[Path]:
        if self._clock() - self._last_roll >= self.segment_seconds:
            return self.roll()
        return []

    def roll(self) -> list[Path]:
        """Move every flushed row into Parquet segments. Returns the new files."""
        self._last_roll = self._clock()
        con = self._con
        out: list[Path] = []
        for kind in SAMPLE_KINDS:
            row = con.execute(f"SELECT max(seq) FROM s_{kind}").fetchone()  # noqa: S608
            if not row or row[0] is None:
                continue
            seg = f"{self.agent}-{kind}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
            con.execute("INSERT INTO pending VALUES (?, ?, ?, 'staging')", [seg, kind, row[0]])
            out += self._finish(seg, kind, int(row[0]), "staging")
        return out

    def recover(self) -> list[Path]:
        """Finish segments a previous run left half-rolled."""
        out: list[Path] = []
        for seg, kind, max_seq, state in self._con.execute(
            "SELECT seg, kind, max_seq, state FROM pending ORDER BY seg"
        ).fetchall():
            out += self._finish(seg, kind, int(max_seq), state)
        return out

    def _staging(self, seg: str) -> Path:
        return self.store.tmp / f"spool-{seg}"

    def _finish(self, seg: str, kind: str, max_seq: int, state: str) -> list[Path]:
        con = self._con
        staging = self._staging(seg)
        if state == "staging":
            shutil.rmtree(staging, ignore_errors=True)
            cols = ", ".join(f'"{n}"' for n, _ in duckdb_columns(kind))
            try:
                con.execute(
                    f"COPY (SELECT {cols}, CAST(ts AS DATE) AS date FROM s_{kind} "  # noqa: S608
                    f"WHERE seq <= {int(max_seq)} ORDER BY node, ts) TO {quote_literal(staging)} "
                    "(FORMAT parquet, PARTITION_BY (date, node), COMPRESSION zstd)"
                )
            except (duckdb.Error, OSError) as exc:
                shutil.rmtree(staging, ignore_errors=True)
                raise self._spool_error(exc) from None
            con.execute("UPDATE pending SET state = 'moving' WHERE seg = ?", [seg])
        out = self.store.publish_staged(kind, staging, seg)
        con.execute("BEGIN TRANSACTION")
        con.execute(f"DELETE FROM s_{kind} WHERE seq <= ?", [max_seq])  # noqa: S608
        con.execute("DELETE FROM pending WHERE seg = ?", [seg])
        con.execute("COMMIT")
        return out

    def close(self) -> None:
        """Flush, roll what is left, and close the spool."""
        try:
            self.flush()
            self.roll()
        finally:
            self._con.close()
            os.close(self._lock_fd)

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

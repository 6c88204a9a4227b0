"""The gpulens store: one data directory shared by every part.

Layout of a data directory::

    state.duckdb                 small state tables (jobs, attempts, failures, ...);
                                 opened read-write only inside Store.write()
    state.lock                   flock held by the one writer of state.duckdb
    snapshots/state-<gen>.duckdb read-only copies published after each write
    snapshots/CURRENT            the newest generation number
    samples/kind=K/date=D/node=N/*.parquet   time series, immutable segments (and the
                                 compacted files that replace them, see lake.py)
    compact.lock                 flock held by the one `gpulens store compact` run
    spool/<agent>.duckdb         each collector's private buffer (see segments.py)
    logs/                        job logs (the simulator writes failure logs here)

Readers never open ``state.duckdb``: they attach the newest snapshot read-only
and query Parquet through views, so a writer never blocks a reader and a reader
never blocks a writer. A segment file appears in the samples tree only through
an atomic rename, so readers never see a half-written one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpulens.errors import InputError, StoreCorruptError, StoreError, StoreLockedError
from gpulens.store.lake import (
    ROOT_VARIABLE,
    SEED_NODE,
    LakeListing,
    files_variable,
    list_live,
    seed_file,
    set_files,
)
from gpulens.store.samples import SAMPLE_KINDS, VIEW_NAMES, arrow_schema
from gpulens.store.schema import apply_migrations, missing_versions

__all__ = ["Store", "quote_ident", "quote_literal"]

_SEED_NODE = SEED_NODE
_KEEP_SNAPSHOTS = 3
_NODE = re.compile(r"^[A-Za-z0-9._:-]{1,253}$")


def quote_ident(name: str) -> str:
    """Quote a SQL identifier that comes from our own code (never from users)."""
    return '"' + name.replace('"', '""') + '"'


def quote_literal(text: str | os.PathLike[str]) -> str:
    """Quote a SQL string literal (for file paths in COPY/ATTACH, which take no parameters)."""
    return "'" + str(text).replace("'", "''") + "'"


def _is_lock_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "could not set lock" in text or "conflicting lock" in text


class Store:
    """A gpulens data directory. Cheap to construct; safe to share across threads."""

    def __init__(self, root: str | os.PathLike[str], *, lock_timeout: float = 60.0) -> None:
        self.root = Path(root).expanduser()
        self.lock_timeout = lock_timeout
        self.state_db = self.root / "state.duckdb"
        self.lock_file = self.root / "state.lock"
        self.snapshots = self.root / "snapshots"
        self.samples = self.root / "samples"
        self.spool = self.root / "spool"
        self.logs = self.root / "logs"
        self.tmp = self.root / "tmp"

    # ------------------------------------------------------------------ setup
    @classmethod
    def open(cls, root: str | os.PathLike[str], *, lock_timeout: float = 60.0) -> Store:
        """Open (and create or migrate if needed) the store at ``root``."""
        store = cls(root, lock_timeout=lock_timeout)
        store.ensure()
        return store

    def ensure(self) -> None:
        """Create directories, seed sample views, apply migrations, publish a snapshot."""
        try:
            for d in (self.root, self.snapshots, self.samples, self.spool, self.logs, self.tmp):
                d.mkdir(parents=True, exist_ok=True)
            probe = self.tmp / f".probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StoreError(
                f"Data directory {self.root} is not writable ({exc.strerror}).",
                "Pass a writable directory with --data-dir or set GPULENS_DATA_DIR.",
            ) from None
        self._seed_samples()
        if self.generation() == 0 or self._snapshot_missing_migrations():
            with self.write():
                pass

    def _seed_samples(self) -> None:
        """An empty file per kind, so views exist (with every column) before any data."""
        for kind in SAMPLE_KINDS:
            seed = seed_file(self.samples, kind)
            part = seed.parent
            schema = arrow_schema(kind, with_node=False)
            if seed.exists():
                try:
                    if pq.read_schema(seed).equals(schema):
                        continue
                except (OSError, pa.ArrowInvalid):
                    pass
            part.mkdir(parents=True, exist_ok=True)
            tmp = self.tmp / f"seed-{kind}-{uuid.uuid4().hex}.parquet"
            pq.write_table(schema.empty_table(), tmp)
            os.replace(tmp, seed)

    # ---------------------------------------------------------------- writing
    @contextlib.contextmanager
    def _flock(self) -> Iterator[None]:
        fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + self.lock_timeout
            delay = 0.005
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StoreLockedError(
                            f"Store {self.root} stayed locked by another writer for "
                            f"{self.lock_timeout:.0f} s.",
                            "Wait for the running import or simulation to finish, then retry.",
                        ) from None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.25)
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the flock

    def _connect_rw(self) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.01
        while True:
            try:
                return duckdb.connect(str(self.state_db))
            except duckdb.Error as exc:
                if _is_lock_error(exc) and time.monotonic() < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, 0.5)
                    continue
                if _is_lock_error(exc):
                    raise StoreLockedError(
                        f"Store file {self.state_db} is held by another process.",
                        "Stop the other gpulens writer or wait for it to finish.",
                    ) from None
                raise self._corrupt(self.state_db, exc) from None

    def _corrupt(self, path: Path, exc: BaseException) -> StoreCorruptError:
        return StoreCorruptError(
            f"Store file {path} cannot be opened ({str(exc).splitlines()[0]}).",
            f"Move it aside; the latest good copy is in {self.snapshots} (see docs/architecture.md).",
        )

    @contextlib.contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short read-write transaction on the state tables.

        Writers are serialised by a file lock; the transaction commits when the
        block exits normally and rolls back on an exception. After the commit a
        new read-only snapshot is published for readers.
        """
        with self._flock():
            con = self._connect_rw()
            try:
                con.execute("BEGIN TRANSACTION")
                apply_migrations(con)
                try:
                    yield con
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                con.execute("COMMIT")
                con.execute("CHECKPOINT")
            finally:
                con.close()
            self._publish()

    def generation(self) -> int:
        try:
            return int((self.snapshots / "CURRENT").read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _snapshot_path(self, gen: int) -> Path:
        return self.snapshots / f"state-{gen:08d}.duckdb"

    def _publish(self) -> None:
        gen = self.generation() + 1
        self.snapshots.mkdir(parents=True, exist_ok=True)
        tmp = self.snapshots / f".tmp-{gen}-{uuid.uuid4().hex}"
        shutil.copyfile(self.state_db, tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self._snapshot_path(gen))
        cur_tmp = self.snapshots / f".CURRENT-{uuid.uuid4().hex}"
        cur_tmp.write_text(f"{gen}\n")
        os.replace(cur_tmp, self.snapshots / "CURRENT")
        for old in self.snapshots.iterdir():
            name = old.name
            if name.startswith(".tmp-") or name.startswith(".CURRENT-"):
                old.unlink(missing_ok=True)  # debris of a writer killed mid-publish
            elif name.startswith("state-") and name.endswith(".duckdb"):
                if int(name[6:14]) <= gen - _KEEP_SNAPSHOTS:
                    old.unlink(missing_ok=True)

    def _snapshot_missing_migrations(self) -> bool:
        con = duckdb.connect(":memory:")
        try:
            self._attach_snapshot(con)
            return bool(missing_versions(con, "state"))
        finally:
            con.close()

    # ---------------------------------------------------------------- reading
    def _attach_snapshot(self, con: duckdb.DuckDBPyConnection) -> int:
        last: BaseException | None = None
        for _ in range(20):
            gen = self.generation()
            if gen == 0:
                raise StoreError(
                    f"Store {self.root} has not been initialised.",
                    "Run `gpulens simulate`, `gpulens collect` or `gpulens demo` first.",
                )
            path = self._snapshot_path(gen)
            try:
                con.execute(f"ATTACH {quote_literal(path)} AS state (READ_ONLY)")
                return gen
            except duckdb.Error as exc:
                last = exc
                if not path.exists():  # a newer generation replaced it: read CURRENT again
                    time.sleep(0.01)
                    continue
                raise self._corrupt(path, exc) from None
        raise self._corrupt(self.snapshots, last or RuntimeError("no snapshot"))

    def sample_files(
        self, kind: str, first: date | None = None, last: date | None = None
    ) -> LakeListing:
        """The live sample files of ``kind`` (compacted inputs left out; see lake.py)."""
        return list_live(self.samples, kind, first, last)

    def connect(self) -> duckdb.DuckDBPyConnection:
        """A new read-only view of the whole store (state snapshot + Parquet samples).

        The connection is in-memory; state tables are views over the newest
        snapshot. Sample views read the live files listed when the connection was
        opened (:mod:`gpulens.store.lake`); ``lake.live_files(con, kind)`` re-lists
        (the analyses do at every call). Open a new one to see state written after
        this call.
        """
        con = duckdb.connect(":memory:")
        try:
            # The sample views merge the schemas of every file (union_by_name): cache the
            # Parquet footers so repeated queries on this connection do not re-read them
            # (about 30% off a repeated scan of a 10 M-sample store).
            con.execute("SET parquet_metadata_cache = true")
            self._attach_snapshot(con)
            tables = con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = 'state'"
            ).fetchall()
            for (name,) in tables:
                q = quote_ident(name)
                con.execute(f"CREATE VIEW {q} AS SELECT * FROM state.{q}")  # noqa: S608
            con.execute(f"SET VARIABLE {ROOT_VARIABLE} = $root", {"root": str(self.samples)})
            for kind, view in VIEW_NAMES.items():
                set_files(con, self.samples, kind, self.sample_files(kind))
                con.execute(
                    f"CREATE VIEW {view} AS SELECT * EXCLUDE (kind) FROM read_parquet("  # noqa: S608
                    f"getvariable('{files_variable(kind)}'), hive_partitioning = true,"
                    " union_by_name = true,"
                    " hive_types = {'kind': VARCHAR, 'date': DATE, 'node': VARCHAR})"
                    f" WHERE node <> '{_SEED_NODE}'"
                )
        except BaseException:
            con.close()
            raise
        return con

    # ------------------------------------------------------- bulk sample write
    def write_samples(self, kind: str, table: pa.Table, *, tag: str | None = None) -> list[Path]:
        """Write a batch of samples as new immutable segment files (atomic per file).

        ``table`` must have the kind's columns (see samples.py), ``node`` included.
        Returns the final paths. Used by the simulator, importers and the spool.
        """
        if table.num_rows == 0:
            return []
        tag = tag or uuid.uuid4().hex
        staging = self.tmp / f"seg-{kind}-{tag}"
        shutil.rmtree(staging, ignore_errors=True)
        try:
            self.stage_partitioned(table, staging)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise self._write_failed(exc) from None
        return self.publish_staged(kind, staging, tag)

    def stage_partitioned(self, table: pa.Table, staging: Path) -> None:
        """Write ``table`` (with ``ts`` and ``node``) as ``staging/date=D/node=N/part.parquet``.

        pyarrow writes the files (about 2.5x fewer CPU-seconds per row than DuckDB's
        partitioned COPY, measured in benchmarks/bench_collect.py); ``date`` and ``node``
        live in the path only, as the hive layout wants.
        """
        node = table.column("node").combine_chunks()
        if node.null_count:
            raise InputError("Samples without a node name cannot be stored.",
                             "Set the node column of every sample.")
        bad = [str(n) for n in pc.unique(node).to_pylist() if not _NODE.match(str(n))]
        if bad:
            raise InputError(
                f"Node name {bad[0]!r} cannot be a partition folder.",
                "Use letters, digits, '.', '_', ':' and '-' only in node names.",
            )
        day = pc.cast(table.column("ts"), pa.date32())
        keyed = table.drop_columns(["node"])
        pairs = pa.table({"date": day, "node": node}).group_by(["date", "node"]).aggregate([])
        for d, n in zip(pairs.column("date").to_pylist(), pairs.column("node").to_pylist(),
                        strict=True):
            mask = pc.and_(pc.equal(day, pa.scalar(d, pa.date32())), pc.equal(node, n))
            part = staging / f"date={d.isoformat()}" / f"node={n}"
            part.mkdir(parents=True, exist_ok=True)
            pq.write_table(keyed.filter(mask), part / "part.parquet", compression="zstd",
                           compression_level=3, row_group_size=262_144)

    def publish_staged(self, kind: str, staging: Path, tag: str) -> list[Path]:
        """Move files of a staged partitioned COPY into the samples tree (idempotent)."""
        out: list[Path] = []
        if not staging.exists():
            return out
        for src in sorted(staging.glob("date=*/node=*/*.parquet")):
            dest_dir = self.samples / f"kind={kind}" / src.parent.parent.name / src.parent.name
            dest_dir.mkdir(parents=True, exist_ok=True)
            dest = dest_dir / f"{tag}-{src.stem}.parquet"
            os.replace(src, dest)
            out.append(dest)
        shutil.rmtree(staging, ignore_errors=True)
        return out

    def _write_failed(self, exc: OSError) -> StoreError:
        return StoreError(
            f"Cannot write samples under {self.samples} ({exc.strerror or exc}).",
            "Free disk space or point --data-dir at a larger volume; nothing stored was lost.",
        )

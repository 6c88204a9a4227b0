"""The gpulens store: one data directory shared by every part.

Layout of a data directory::

    state.duckdb                 small state tables (jobs, attempts, failures, ...);
                                 opened read-write only inside Store.write()
    state.lock                   flock held by the one writer of state.duckdb
    snapshots/state-<gen>.duckdb read-only copies published after each write
    snapshots/CURRENT            the newest generation number (every published snapshot was
                                 verified first: integrity.py)
    state.corrupt                present after damage was found: writers refuse until
                                 `gpulens store restore`
    samples/kind=K/date=D/node=N/*.parquet   time series, immutable segments (and the
                                 compacted files that replace them, see lake.py)
    quarantine/samples/...       segments found unreadable, each with a .json record (quarantine.py)
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
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from gpulens.errors import InputError, StoreCorruptError, StoreError, StoreLockedError
from gpulens.store import integrity
from gpulens.store import quarantine as qr
from gpulens.store.lake import (
    FILES_FUNCTION,
    ROOT_VARIABLE,
    SEED_NODE,
    LakeListing,
    attach_views,
    list_live,
    marked_name,
    seed_file,
)
from gpulens.store.samples import SAMPLE_KINDS, VIEW_NAMES, arrow_schema
from gpulens.store.schema import apply_migrations, missing_versions

__all__ = ["Store", "quote_ident", "quote_literal"]

T = TypeVar("T")

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
        self.quarantine_dir = self.root / "quarantine"
        #: True when the data dir could not be written at open (readers only)
        self.read_only = False
        #: where one-line warnings go (a damaged segment left out of a result)
        self.warn: Callable[[str], None] = qr.warn_stderr

    # ------------------------------------------------------------------ setup
    @classmethod
    def open(cls, root: str | os.PathLike[str], *, lock_timeout: float = 60.0) -> Store:
        """Open (and create or migrate if needed) the store at ``root``."""
        store = cls(root, lock_timeout=lock_timeout)
        store.ensure()
        return store

    def ensure(self) -> None:
        """Create directories, seed sample views, apply migrations, publish a snapshot.

        A data directory that cannot be written (a read-only mount for analysts) is
        opened read-only when it is already initialised and migrated: readers work,
        writers get a one-line error (:attr:`read_only`).
        """
        try:
            for d in (self.root, self.snapshots, self.samples, self.spool, self.logs, self.tmp):
                d.mkdir(parents=True, exist_ok=True)
            probe = self.tmp / f".probe-{os.getpid()}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            self._open_read_only(exc)
            return
        self._seed_samples()
        if self.generation() == 0 or self._snapshot_missing_migrations():
            with self.write():
                pass

    def _open_read_only(self, exc: OSError) -> None:
        if self.generation() == 0:
            raise StoreError(
                f"Data directory {self.root} is not writable ({exc.strerror}) and holds no store yet.",
                "Pass a writable directory with --data-dir or set GPULENS_DATA_DIR.",
            ) from None
        if self._snapshot_missing_migrations():
            raise StoreError(
                f"Store {self.root} is read-only here ({exc.strerror}) and needs a schema upgrade.",
                "Run any gpulens command once with write access to the data directory.",
            ) from None
        self.read_only = True

    def _not_writable(self, exc: OSError) -> StoreError:
        return StoreError(
            f"Data directory {self.root} is not writable ({exc.strerror or exc}); nothing was stored.",
            "Readers work on a read-only data directory; run writers where it is mounted read-write.",
        )

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
        try:
            fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise self._not_writable(exc) from None
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
                if integrity.is_corruption(exc):
                    raise self._damaged(str(exc).splitlines()[0][:300]) from None
                raise self._corrupt(self.state_db, exc) from None

    def _corrupt(self, path: Path, exc: BaseException) -> StoreCorruptError:
        return StoreCorruptError(
            f"Store file {path} cannot be opened ({str(exc).splitlines()[0]}).",
            f"Run `gpulens store restore` to bring back the last good snapshot from {self.snapshots} "
            "(see Failure modes in docs/architecture.md).",
        )

    def _damaged(self, why: str) -> StoreCorruptError:
        """Stop writing: leave the marker, name the last good snapshot and the restore command."""
        good = self.last_good_snapshot()
        integrity.write_marker(self.root, why, good)
        return self._refusal(why, good)

    def _refusal(self, why: str, good: Path | str | None) -> StoreCorruptError:
        where = f"the last good snapshot is {good}" if good else "no snapshot verifies either"
        return StoreCorruptError(
            f"State file {self.state_db} is damaged ({why}); writing stopped and nothing was published.",
            f"Readers still see the last published snapshot; {where}: stop the writers and run "
            "`gpulens store restore`.",
        )

    def _refuse_if_damaged(self) -> None:
        marker = integrity.read_marker(self.root)
        if marker is not None:
            raise self._refusal(str(marker.get("reason")), marker.get("last_good"))

    @contextlib.contextmanager
    def write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short read-write transaction on the state tables.

        Writers are serialised by a file lock; the transaction commits when the
        block exits normally and rolls back on an exception. After the commit a
        new read-only snapshot is verified (every table read, so DuckDB checks each
        block's checksum) and published for readers. A damaged state file stops
        the writer with :class:`StoreCorruptError` (see integrity.py).
        """
        with self._flock():
            self._refuse_if_damaged()
            con = self._connect_rw()
            try:
                con.execute("BEGIN TRANSACTION")
                apply_migrations(con)
                try:
                    yield con
                except BaseException:
                    with contextlib.suppress(duckdb.Error):
                        con.execute("ROLLBACK")
                    raise
                con.execute("COMMIT")
                con.execute("CHECKPOINT")
            except duckdb.Error as exc:
                if integrity.is_corruption(exc):
                    raise self._damaged(str(exc).splitlines()[0][:300]) from None
                if isinstance(exc, duckdb.IOException) or "No space left" in str(exc):
                    raise self._state_write_failed(exc) from None  # e.g. a full disk
                raise
            finally:
                con.close()
            self._publish()

    def _state_write_failed(self, exc: BaseException) -> StoreError:
        why = getattr(exc, "strerror", None) or str(exc).splitlines()[0][:200]
        return StoreError(
            f"Cannot write the state file {self.state_db} ({why}); the change was not stored.",
            "Free disk space or point --data-dir at a larger volume, then retry.",
        )

    def generation(self) -> int:
        try:
            return int((self.snapshots / "CURRENT").read_text().strip() or 0)
        except (OSError, ValueError):
            return 0

    def _snapshot_path(self, gen: int) -> Path:
        return self.snapshots / f"state-{gen:08d}.duckdb"

    def _snapshot_gens(self) -> list[int]:
        gens = []
        for f in self.snapshots.glob("state-*.duckdb"):
            with contextlib.suppress(ValueError):
                gens.append(int(f.name[6:14]))
        return sorted(gens)

    def last_good_snapshot(self) -> Path | None:
        """The newest snapshot that reads end to end (None if none does)."""
        for gen in reversed(self._snapshot_gens()):
            path = self._snapshot_path(gen)
            if integrity.verify_db(path) is None:
                return path
        return None

    def _publish(self) -> None:
        gen = self.generation() + 1
        self.snapshots.mkdir(parents=True, exist_ok=True)
        tmp = self.snapshots / f".tmp-{gen}-{uuid.uuid4().hex}"
        try:
            shutil.copyfile(self.state_db, tmp)
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise StoreError(
                f"The change is stored in {self.state_db} but its snapshot cannot be written "
                f"({exc.strerror or exc}); readers see it after the next write.",
                "Free disk space on the data directory.",
            ) from None
        why = integrity.verify_db(tmp)
        if why is not None:
            tmp.unlink(missing_ok=True)
            raise self._damaged(why)
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
                    old.unlink(missing_ok=True)  # every kept snapshot was verified on publish

    def restore(self, generation: int | None = None) -> dict[str, object]:
        """Bring back a snapshot (default: the newest that verifies) as the state file.

        The current state file is kept as ``state.duckdb.damaged-<time>``; the marker is
        removed and the restored state is published as a new generation.
        """
        with self._flock():
            gens = [generation] if generation is not None else list(reversed(self._snapshot_gens()))
            chosen = next((g for g in gens if self._snapshot_path(g).is_file()
                           and integrity.verify_db(self._snapshot_path(g)) is None), None)
            if chosen is None:
                which = f"Snapshot generation {generation}" if generation is not None else "No snapshot"
                raise StoreCorruptError(
                    f"{which} in {self.snapshots} is present and readable; nothing was restored.",
                    "List them with `ls` and pass --generation N, or restore the data dir from a backup.",
                )
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            aside = self.root / f"state.duckdb.damaged-{stamp}"
            try:
                for f, dest in ((self.state_db, aside),
                                (self.root / "state.duckdb.wal", self.root / f"{aside.name}.wal")):
                    if f.exists():
                        os.replace(f, dest)
                tmp = self.root / f".restore-{uuid.uuid4().hex}"
                shutil.copyfile(self._snapshot_path(chosen), tmp)
                os.replace(tmp, self.state_db)
            except OSError as exc:
                raise self._state_write_failed(exc) from None
            integrity.clear_marker(self.root)
            self._publish()
            return {"restored_generation": chosen, "restored_from": str(self._snapshot_path(chosen)),
                    "damaged_file_kept_as": str(aside) if aside.exists() else None,
                    "published_generation": self.generation()}

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
                older = self._attach_older(con, gen, exc)
                if older is not None:
                    return older
                raise self._corrupt(path, exc) from None
        raise self._corrupt(self.snapshots, last or RuntimeError("no snapshot"))

    def _attach_older(self, con: duckdb.DuckDBPyConnection, gen: int, exc: BaseException) -> int | None:
        """The newest snapshot cannot be opened (damaged on disk): read the newest older one."""
        for older in reversed([g for g in self._snapshot_gens() if g < gen]):
            try:
                con.execute(f"ATTACH {quote_literal(self._snapshot_path(older))} AS state (READ_ONLY)")
            except duckdb.Error:
                continue
            self.warn(f"snapshot {self._snapshot_path(gen)} cannot be opened ({str(exc).splitlines()[0][:200]});"
                      f" reading generation {older}, {gen - older} write(s) older; `gpulens store check`.")
            return older
        return None

    def sample_files(
        self, kind: str, first: date | None = None, last: date | None = None
    ) -> LakeListing:
        """The live sample files of ``kind``: compacted inputs left out, damaged files
        quarantined (with a warning) and left out; see lake.py."""
        return list_live(self.samples, kind, first, last, warn=self.warn)

    def segment_files(self, kind: str | None = None) -> list[Path]:
        """Every segment file in the samples tree (of one kind, or all)."""
        pattern = f"kind={kind or '*'}/*/*/*.parquet"
        return sorted(self.samples.glob(pattern))

    def check_segments(self, *, full: bool = False) -> list[qr.QuarantineRecord]:
        """Magic/footer-check every segment (``full``: also decode every page); quarantine
        (and warn about) the bad ones."""
        return qr.scan(self.root, self.segment_files(), self.warn, full=full)

    def quarantine_segment(self, path: Path, reason: str) -> qr.QuarantineRecord | None:
        rec = qr.quarantine(self.root, path, reason)
        if rec is not None:
            self.warn(rec.warning())
        return rec

    def quarantine_from_error(self, exc: BaseException) -> bool:
        """If ``exc`` comes from a damaged segment, quarantine it; True when one was."""
        qr.register_root(self.root)
        return qr.quarantine_named_in_error(exc, self.warn)

    def read_retrying(self, read: Callable[[], T], attempts: int = 20) -> T:
        """Run ``read``; when it fails on a damaged segment, quarantine it and run it again."""
        for _ in range(attempts - 1):
            try:
                return read()
            except Exception as exc:
                if not self.quarantine_from_error(exc):
                    raise
        return read()

    def connect(self, *, samples: bool = True) -> duckdb.DuckDBPyConnection:
        """A new read-only view of the whole store (state snapshot + Parquet samples).

        The connection is in-memory; state tables are views over the newest
        snapshot. A sample view reads the live files of its kind listed when the first
        query of this connection read that kind (:func:`gpulens.store.lake.attach_views`:
        kinds nobody reads are never listed); ``lake.live_files(con, kind)`` re-lists
        (the analyses do at every call). Open a new one to see state written after
        this call. ``samples=False`` creates no sample views (readers of state tables
        never touch a segment). The listing quarantines segments that fail the
        magic/footer check; a read that fails on a damaged one can be run again with
        :meth:`read_retrying` (see quarantine.py).
        """
        con = duckdb.connect(":memory:")
        try:
            # The sample views merge the schemas of every file (union_by_name): cache the
            # Parquet footers so repeated queries on this connection do not re-read them
            # (about 30% off a repeated scan of a 10 M-sample store).
            con.execute("SET parquet_metadata_cache = true")
            # The analyses keep their tables on the connection (TEMP): past DuckDB's default
            # 16 MB of changes the next commit checkpoints (compresses) the whole in-memory
            # database, 0.1-0.2 s in the middle of a cold dashboard page, to save memory that a
            # reader connection holds only while it lives.
            con.execute("SET checkpoint_threshold = '1GB'")
            self._attach_snapshot(con)
            tables = con.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = 'state'"
            ).fetchall()
            for (name,) in tables:
                q = quote_ident(name)
                con.execute(f"CREATE VIEW {q} AS SELECT * FROM state.{q}")  # noqa: S608
            if samples:
                qr.register_root(self.root, lambda line: self.warn(line))
                con.execute(f"SET VARIABLE {ROOT_VARIABLE} = $root", {"root": str(self.samples)})
                self._sample_views(con)
        except BaseException:
            con.close()
            raise
        return con

    def _sample_views(self, con: duckdb.DuckDBPyConnection) -> None:
        hive = "hive_partitioning = true, hive_types = {'kind': VARCHAR, 'date': DATE, 'node': VARCHAR}"

        def create() -> None:
            for kind, view in VIEW_NAMES.items():
                con.execute(
                    f"CREATE OR REPLACE VIEW {view} AS SELECT * EXCLUDE (kind) FROM ("  # noqa: S608
                    f"SELECT * FROM read_parquet({FILES_FUNCTION}('{kind}', false), {hive})"
                    " UNION ALL BY NAME SELECT * FROM read_parquet("
                    f"{FILES_FUNCTION}('{kind}', true), {hive}, union_by_name = true)"
                    f") WHERE node <> '{_SEED_NODE}'"
                )

        attach_views(con, self.samples, lambda line: self.warn(line), create)

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
        """Write ``table`` (with ``ts`` and ``node``) as ``staging/date=D/node=N/part-r<rows>.parquet``.

        pyarrow writes the files (about 2.5x fewer CPU-seconds per row than DuckDB's
        partitioned COPY, measured in benchmarks/bench_collect.py); ``date`` and ``node``
        live in the path only, as the hive layout wants.
        """
        import pyarrow.compute as pc  # here: opening a store needs no compute kernels (0.1 CPU-s)

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
            rows = keyed.filter(mask)  # the row count in the name survives a damaged footer
            pq.write_table(rows, part / f"part-r{rows.num_rows}.parquet", compression="zstd",
                           compression_level=3, row_group_size=262_144)

    def publish_staged(self, kind: str, staging: Path, tag: str) -> list[Path]:
        """Move files of a staged partitioned COPY into the samples tree (idempotent)."""
        out: list[Path] = []
        if not staging.exists():
            return out
        for src in sorted(staging.glob("date=*/node=*/*.parquet")):
            dest_dir = self.samples / f"kind={kind}" / src.parent.parent.name / src.parent.name
            dest_dir.mkdir(parents=True, exist_ok=True)
            dest = dest_dir / marked_name(kind, pq.read_schema(src), tag, f"{src.stem}.parquet")
            os.replace(src, dest)
            out.append(dest)
        shutil.rmtree(staging, ignore_errors=True)
        return out

    def _write_failed(self, exc: OSError) -> StoreError:
        return StoreError(
            f"Cannot write samples under {self.samples} ({exc.strerror or exc}).",
            "Free disk space or point --data-dir at a larger volume; nothing stored was lost.",
        )

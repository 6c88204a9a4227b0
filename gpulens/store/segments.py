"""A collector's private write path: spool as Arrow files, roll into Parquet segments.

Each agent owns ``spool/<agent>/`` (guarded by ``spool/<agent>.lock``, so two agents
cannot share a name). ``append`` buffers rows in memory; ``flush`` writes each sample
kind's buffer as one Arrow IPC file (temporary name, fsync, atomic rename), so a
SIGKILL loses at most the unflushed buffer and never leaves half a batch visible.
``roll`` moves everything flushed so far into immutable Parquet segments in three
recorded steps, so a crash at any point is finished on the next start without
losing or duplicating rows:

1. write a manifest ``roll-<seg>.json`` naming the spool files, state ``staging``;
2. write the rows as partitioned Parquet into ``tmp/spool-<seg>/`` and set the
   manifest's state to ``moving``;
3. rename the staged files into the samples tree, then delete the spool files and
   the manifest.

Why not a DuckDB file: the spool is transient and private to one process, and a
DuckDB insert spends most of its time writing its own log. Arrow files take the
same rows at several times fewer CPU-seconds (benchmarks/RESULTS.md, ``## collect``).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from gpulens.errors import InputError, StoreError, StoreLockedError
from gpulens.store.samples import SAMPLE_KINDS, arrow_schema
from gpulens.store.store import Store

__all__ = ["SegmentWriter", "commit_parquet"]

_AGENT = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_BATCH = re.compile(r"^(?P<kind>[a-z]+)-(?P<seq>\d{20})\.arrow$")

Rows: TypeAlias = pa.Table | Sequence[Mapping[str, Any]]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, write: Callable[[Any], None]) -> None:
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex}")
    with open(tmp, "wb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def commit_parquet(table: pa.Table, staged: Path, path: Path, **options: Any) -> int:
    """Write ``table`` as Parquet at ``staged``, fsync it and rename it over ``path`` (the
    commit: readers see the old file or the new one, never a part); the bytes written.
    ``options`` go to ``pyarrow.parquet.write_table``; the caller fsyncs the folder if it must."""
    pq.write_table(table, staged, **options)
    with open(staged, "rb+") as fh:
        os.fsync(fh.fileno())
    size = staged.stat().st_size
    os.replace(staged, path)
    return size


def _check_agent_name(agent: str) -> None:
    """Raise InputError unless ``agent`` is usable as a file name."""
    if not _AGENT.match(agent):
        raise InputError(
            f"Agent name {agent!r} is not usable as a file name.",
            "Use letters, digits, '.', '_' and '-' only (set collect.node).",
        )


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
        _check_agent_name(agent)
        self.store = store
        self.agent = agent
        self.segment_seconds = segment_seconds
        self._clock = clock
        self._last_roll = clock()
        self._buffer: dict[str, list[pa.Table]] = {k: [] for k in SAMPLE_KINDS}
        self.path = store.spool / agent
        self._lock_fd = self._lock_spool()
        for debris in self.path.glob(".tmp-*"):  # writes a crash interrupted
            debris.unlink(missing_ok=True)
        seqs = [int(m["seq"]) for f in self.path.iterdir() if (m := _BATCH.match(f.name))]
        self._next_seq = max(seqs, default=0) + 1
        self.recover()

    def _lock_spool(self) -> int:
        """Create this agent's spool folder and take its lock; the lock file's descriptor.
        Raises StoreError when it cannot be created, StoreLockedError when another agent of
        the same name holds it."""
        store, agent = self.store, self.agent
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            lock_fd = os.open(store.spool / f"{agent}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(
                f"Spool {self.path} cannot be created ({exc.strerror}).",
                "Check that the data directory is writable.",
            ) from None
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise StoreLockedError(
                f"Spool {self.path} is in use by another agent named {agent!r}.",
                "Stop the other agent or give this one another name (collect.node).",
            ) from None
        return lock_fd

    # --------------------------------------------------------------- buffering
    def append(self, kind: str, rows: Rows) -> None:
        """Buffer rows in memory (cheap). ``rows`` is an Arrow table or a list of dicts."""
        if kind not in SAMPLE_KINDS:
            raise InputError(f"Unknown sample kind {kind!r}.", f"Use one of {sorted(SAMPLE_KINDS)}.")
        schema = arrow_schema(kind)
        if isinstance(rows, pa.Table):
            missing = [f for f in schema if f.name not in rows.column_names]
            table = rows.select([n for n in schema.names if n in rows.column_names])
            for f in missing:  # every batch file carries the kind's full schema
                table = table.append_column(f, pa.nulls(table.num_rows, f.type))
            table = table.select(schema.names).cast(schema)
        else:
            if not rows:
                return
            table = pa.Table.from_pylist(list(rows), schema=schema)
        if table.num_rows:
            self._buffer[kind].append(table)

    def pending_rows(self) -> int:
        return sum(t.num_rows for tables in self._buffer.values() for t in tables)

    def flush(self) -> int:
        """Make the buffer durable: one Arrow file per sample kind. Returns rows written."""
        n = 0
        for kind, tables in self._buffer.items():
            if not tables:
                continue
            table = pa.concat_tables(tables)
            name = self.path / f"{kind}-{self._next_seq:020d}.arrow"

            def write(fh: Any, table: pa.Table = table) -> None:
                with ipc.new_file(fh, table.schema) as out:
                    out.write_table(table)

            try:
                _write_atomic(name, write)
            except OSError as exc:
                raise self._spool_error(exc) from None  # the buffer is kept for a retry
            self._next_seq += 1
            n += table.num_rows
            tables.clear()
        return n

    def _spool_error(self, exc: BaseException) -> StoreError:
        return StoreError(
            f"Cannot write to spool {self.path} ({getattr(exc, 'strerror', None) or exc}).",
            "Free disk space on the data directory; buffered samples are kept until then.",
        )

    # ----------------------------------------------------------------- rolling
    def maybe_roll(self) -> list[Path]:
        if self._clock() - self._last_roll >= self.segment_seconds:
            return self.roll()
        return []

    def roll(self) -> list[Path]:
        """Move every flushed batch into Parquet segments. Returns the new files."""
        self._last_roll = self._clock()
        out: list[Path] = []
        batches: dict[str, list[str]] = {}
        for f in sorted(self.path.iterdir()):
            m = _BATCH.match(f.name)
            if m:
                batches.setdefault(m["kind"], []).append(f.name)
        for kind, files in batches.items():
            seg = f"{self.agent}-{kind}-{time.time_ns()}-{uuid.uuid4().hex[:8]}"
            manifest = {"seg": seg, "kind": kind, "files": files, "state": "staging"}
            self._save(manifest)
            out += self._finish(manifest)
        return out

    def recover(self) -> list[Path]:
        """Finish segments a previous run left half-rolled."""
        out: list[Path] = []
        for f in sorted(self.path.glob("roll-*.json")):
            out += self._finish(json.loads(f.read_text()))
        return out

    def _manifest_path(self, seg: str) -> Path:
        return self.path / f"roll-{seg}.json"

    def _save(self, manifest: dict[str, Any]) -> None:
        data = json.dumps(manifest).encode()
        try:
            _write_atomic(self._manifest_path(manifest["seg"]), lambda fh: fh.write(data))
        except OSError as exc:
            raise self._spool_error(exc) from None

    def _finish(self, manifest: dict[str, Any]) -> list[Path]:
        seg, kind = manifest["seg"], manifest["kind"]
        staging = self.store.tmp / f"spool-{seg}"
        if manifest["state"] == "staging":
            shutil.rmtree(staging, ignore_errors=True)
            try:
                tables = [t for name in manifest["files"] if (t := self._read_batch(name)) is not None]
                if tables:
                    self.store.stage_partitioned(pa.concat_tables(tables), staging)
            except OSError as exc:
                shutil.rmtree(staging, ignore_errors=True)
                raise self._spool_error(exc) from None
            manifest = {**manifest, "state": "moving"}
            self._save(manifest)
        out = self.store.publish_staged(kind, staging, seg)
        for name in manifest["files"]:
            (self.path / name).unlink(missing_ok=True)
        self._manifest_path(seg).unlink(missing_ok=True)
        return out

    def _read_batch(self, name: str) -> pa.Table | None:
        """One flushed batch; a damaged one is quarantined (with a warning), not fatal."""
        path = self.path / name
        try:
            with ipc.open_file(path) as reader:
                return reader.read_all()
        except FileNotFoundError:
            return None
        except (pa.ArrowInvalid, OSError) as exc:
            self.store.quarantine_segment(path, f"spool batch unreadable: {str(exc).splitlines()[0][:200]}")
            return None

    def close(self) -> None:
        """Flush, roll what is left, and release the spool."""
        try:
            self.flush()
            self.roll()
        finally:
            os.close(self._lock_fd)

    def __enter__(self) -> SegmentWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

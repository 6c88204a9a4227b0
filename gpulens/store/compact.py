"""Compaction: merge the small segments of each closed day into one sorted file per partition.

An agent rolls a Parquet segment per sample kind every ``segment_seconds`` (288 a day
at 300 s); readers pay per file, not per row. ``compact`` rewrites every partition
``samples/kind=K/date=D/node=N/`` of a closed day (``D`` ended at least ``settle``
seconds ago) that holds two or more live files into one ``compact-<id>-s<hash>-r<rows>.parquet``
(the row count in the name, like a segment's, survives a damaged footer: quarantine.py; the
``s<hash>`` schema mark when its columns are the kind's current ones, missing ones filled with
NULL, :func:`gpulens.store.lake.conform`): rows sorted by time (then GPU, device or pid), zstd, row groups of up to a million
rows (one per node-day at the default rates), and the names of the files it replaces
in its metadata (see :mod:`gpulens.store.lake` for why that makes the swap atomic).

Granularity, one file per kind, node and day, was chosen by measurement
(benchmarks/bench_lake.py, benchmarks/RESULTS.md ``## lake``): it keeps the hive
layout every reader (and Spark) already understands, keeps node pruning for the
per-node pages, and is already within the target of one file per node-day.

Steps, each safe to interrupt with SIGKILL:

1. write the merged rows to ``tmp/compact-<id>/`` and fsync (a crash leaves debris
   there, removed by the next run; nothing in the tree changed);
2. ``rename`` it into the partition: the commit. From now on readers skip its inputs;
3. record it in the ``lake_compactions`` state table (a run interrupted before this
   is recorded by the next one, from the file's metadata);
4. in a later run, once the compacted file is older than ``grace`` seconds, delete the
   files it replaced (readers that listed them before the commit have had that long), a
   replaced compacted file only after the files it hides;
5. once a kind's partitions are done, rewrite the rollups (:mod:`gpulens.store.rollups`) of
   every day whose live files changed: staged under ``tmp/rollup-<id>/``, fsynced, renamed
   over the day's previous rollup. A rollup names the files it summarises, so readers never
   use one out of step with the live files (a crash between 2 and 5 leaves the previous
   rollup, which no longer matches the compacted partition: its nodes are read raw).

A damaged input is never merged: the listing (lake.py) quarantines files that fail the
cheap check, and a file that fails while it is read is found by reading each input of
the partition in full, quarantined with a one-line warning, and the partition is
listed and merged again without it.

The open day (not yet closed) is compacted too, in tiers: once a partition of it holds
``open_min_files`` plain segments (12: an hour at the default roll), those segments alone are
merged into a compacted file (earlier compacted files of the day are left as they are); when
it already holds ``OPEN_MAX_TIERS`` (4) such tiers, tiers and segments are merged into one.
With hourly runs a partition holds at most 4 tiers and 12 segments, not 288, and a row is
rewritten a few times a day, not 24. When the day closes, everything is merged into one
file, as above.

Runs are serialised by ``compact.lock``. Agents keep writing meanwhile: a segment
renamed into a partition after it was listed is no input and stays live (the next
run merges it into a new compacted file that replaces the old one).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from gpulens.errors import StoreError, StoreLockedError
from gpulens.store import quarantine as qr
from gpulens.store import rollups
from gpulens.store.lake import (
    COMPACT_PREFIX,
    INPUTS_KEY,
    Partition,
    compact_inputs,
    conform,
    marked_name,
    partitions,
    plain_schema,
)
from gpulens.store.samples import SAMPLE_KINDS
from gpulens.store.segments import _fsync_dir as fsync_dir
from gpulens.store.segments import commit_parquet
from gpulens.store.store import Store
from gpulens.store.tables import replace_batch

__all__ = ["CompactReport", "compact", "deletion_order", "OPEN_MAX_TIERS", "OPEN_MIN_FILES", "ROW_GROUP_ROWS"]

ROW_GROUP_ROWS = 1_048_576
#: an open day's partition is merged once it holds this many plain segments (an hour at 300 s)
OPEN_MIN_FILES = 12
#: ... and with this many compacted tiers already, the tiers are merged with the segments into one
OPEN_MAX_TIERS = 4
_BYTES_IN_KEY = b"gpulens.compact.bytes_in"
_CREATED_KEY = b"gpulens.compact.created"
_SORT = {"gpu": ["gpu_index"], "net": ["device", "port"], "proc": ["gpu_index", "pid"],
         "xid": ["gpu_index", "xid"]}
_KEY = ["kind", "day", "node", "output"]


@dataclass
class CompactReport:
    """What one run did. ``pending_files`` are replaced files still inside the grace period."""

    partitions: int = 0
    files_in: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    rows: int = 0
    deleted_files: int = 0
    deleted_bytes: int = 0
    pending_files: int = 0
    recorded: int = 0
    days: list[str] = field(default_factory=list)
    rollup_files: int = 0
    rollup_bytes: int = 0
    rollup_seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextmanager
def _run_lock(store: Store) -> Iterator[None]:
    fd = os.open(store.root / "compact.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreLockedError(
                f"Another `gpulens store compact` is running on {store.root}.",
                "Wait for it to finish; runs are safe to repeat.",
            ) from None
        yield
    finally:
        os.close(fd)


def _read_all(paths: list[Path]) -> pa.Table:
    """The rows of ``paths`` as one table, columns united by name (a file without a newer
    column reads it as NULL). One multi-threaded scan; file by file if the types differ."""
    try:
        schema = pa.unify_schemas([plain_schema(pq.read_schema(p)) for p in paths],
                                  promote_options="permissive")
        return ds.dataset([str(p) for p in paths], schema=schema, format="parquet").to_table()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        tables = [pq.read_table(p, partitioning=None) for p in paths]
        return pa.concat_tables([t.cast(plain_schema(t.schema)) for t in tables], promote_options="permissive")


def _merge(kind: str, part: Partition) -> tuple[pa.Table, int]:
    """The live files of ``part`` as one sorted table, and their total size in bytes."""
    paths = [part.path / name for name in part.live]
    size = sum(p.stat().st_size for p in paths)
    table = conform(_read_all(paths), kind)
    keys = [("ts", "ascending")] + [(c, "ascending") for c in _SORT.get(kind, [])
                                    if c in table.column_names]
    return table.sort_by(keys), size


def _write_compacted(store: Store, kind: str, part: Partition, now: datetime,
                     clock: Callable[[], float]) -> dict[str, Any]:
    """Steps 1 and 2 for one partition; returns its lake_compactions row. The file's created
    stamp is the clock when its write begins, not the run's start: the grace period of the
    files it replaces counts from (just before) their replacement entered the tree, however
    long the run had been going (a first run over a month of 2,000 GPUs takes minutes)."""
    table, size_in = _merge(kind, part)
    created = datetime.fromtimestamp(clock(), UTC).replace(tzinfo=None)
    cid = f"{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:12]}"
    name = marked_name(kind, table.schema, f"{COMPACT_PREFIX}{cid}", f"r{table.num_rows}.parquet")
    staging = store.tmp / f"compact-{cid}"
    staging.mkdir(parents=True)
    staged = staging / name
    meta = dict(table.schema.metadata or {})
    meta.update({INPUTS_KEY: json.dumps(list(part.live)).encode(),
                 _BYTES_IN_KEY: str(size_in).encode(), _CREATED_KEY: created.isoformat().encode()})
    size_out = commit_parquet(table.replace_schema_metadata(meta), staged, part.path / name,
                              compression="zstd", compression_level=3, row_group_size=ROW_GROUP_ROWS)
    fsync_dir(part.path)
    shutil.rmtree(staging, ignore_errors=True)
    return {"kind": kind, "day": part.day, "node": part.node, "output": name,
            "inputs": len(part.live), "rows": table.num_rows, "bytes_in": size_in,
            "bytes_out": size_out, "compacted_at": now}


Select = Callable[[Partition], Partition | None]
_READ_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, duckdb.Error)


def _selector(last: date, open_min_files: int) -> Select:
    """What to merge of a partition: all its live files on a closed day (two or more), its
    plain segments on an open day (``open_min_files`` or more; 0: none), else nothing."""
    def select(part: Partition) -> Partition | None:
        if part.day <= last:
            return part if len(part.live) >= 2 else None
        plain = tuple(n for n in part.live if not n.startswith(COMPACT_PREFIX))
        if open_min_files <= 0 or len(plain) < max(open_min_files, 2):
            return None
        if len(part.live) - len(plain) >= OPEN_MAX_TIERS:
            return part  # the second level: tiers and segments into one file
        return replace(part, live=plain)
    return select


def _compact_partition(store: Store, kind: str, part: Partition, now: datetime,
                       clock: Callable[[], float], select: Select) -> dict[str, Any] | None:
    """Merge ``part``; an input that cannot be read is quarantined (one warning line) and
    the partition listed, selected and merged again without it (None: nothing left to merge)."""
    _merge_errors = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OSError)
    while True:
        try:
            return _write_compacted(store, kind, part, now, clock)
        except _merge_errors as exc:
            found = qr.scan(store.root, [part.path / n for n in part.live], store.warn, full=True)
            if not found:
                if isinstance(exc, OSError):
                    raise  # e.g. a full disk: compact() reports it
                raise StoreError(
                    f"Sample files in {part.path} cannot be merged ({str(exc).splitlines()[0]}).",
                    "Run `gpulens store check`, then `gpulens store compact` again;"
                    " the other partitions are done.",
                ) from None
        fresh = next((p for p in partitions(store.samples, kind, part.day, part.day, warn=store.warn)
                      if p.node == part.node), None)
        chosen = select(fresh) if fresh is not None else None
        if chosen is None:
            return None
        part = chosen


def _row_from_file(kind: str, part: Partition, name: str) -> dict[str, Any]:
    """A lake_compactions row rebuilt from a committed file (a run killed before step 3)."""
    path = part.path / name
    md = pq.read_metadata(path)
    meta = md.metadata or {}
    created = meta.get(_CREATED_KEY)
    return {"kind": kind, "day": part.day, "node": part.node, "output": name,
            "inputs": len(compact_inputs(path) or ()), "rows": md.num_rows,
            "bytes_in": int(meta.get(_BYTES_IN_KEY, b"0")), "bytes_out": path.stat().st_size,
            "compacted_at": datetime.fromisoformat(created.decode()) if created else None}


def _created(path: Path) -> float | None:
    """When a compacted file was written (its run's clock, UTC seconds); None: gone."""
    try:
        meta = pq.read_metadata(path).metadata or {}
    except FileNotFoundError:
        return None
    text = meta.get(_CREATED_KEY)
    if not text:
        return None  # not written by compact(): never ripe
    return datetime.fromisoformat(text.decode()).replace(tzinfo=UTC).timestamp()


def deletion_order(ripe: set[str], present: set[str],
                   hides: Callable[[str], frozenset[str]]) -> list[str]:
    """The order to delete the ``ripe`` replaced files of a partition holding ``present``:
    plain segments first, then each compacted file once every file it ``hides`` (its inputs)
    is gone; one whose inputs must stay (not ripe) is left out.

    Names of compacted files sort by their run's second, then at random: deleted before one of
    its inputs, a compacted file would leave that input live next to the newer file that holds
    its rows and does not name it, and readers would count them twice (for good, if the run is
    killed between the two deletions)."""
    tiers = {n: hides(n) for n in ripe if n.startswith(COMPACT_PREFIX)}
    order = sorted(n for n in ripe if n not in tiers)
    while ready := sorted(n for n, inputs in tiers.items() if not inputs & (present - set(order))):
        order += ready
        for name in ready:
            del tiers[name]
    return order


def _delete_replaced(part: Partition, grace: float, now_s: float, report: CompactReport) -> None:
    """Step 4: delete the replaced files whose replacement is older than ``grace`` seconds
    (``now_s``: the clock when this partition is reached, not when the run began)."""
    if not part.replaced:
        return
    ripe: set[str] = set()
    for name in (*part.live, *part.replaced):
        if name.startswith(COMPACT_PREFIX):
            path = part.path / name
            created = _created(path)
            if created is not None and now_s - created >= grace:
                ripe |= (compact_inputs(path) or frozenset()) & set(part.replaced)
    order = deletion_order(ripe, set(part.live) | set(part.replaced),
                           lambda n: compact_inputs(part.path / n) or frozenset())
    for name in order:
        path = part.path / name
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            continue
        report.deleted_files += 1
        report.deleted_bytes += size
    report.pending_files += len(set(part.replaced) - set(order))


def _closed_through(now: datetime, settle: float) -> date:
    """The last day that ended at least ``settle`` seconds before ``now``."""
    return (now - timedelta(seconds=settle)).date() - timedelta(days=1)


def compact(
    store: Store,
    *,
    kinds: Sequence[str] | None = None,
    settle: float = 3600.0,
    grace: float = 900.0,
    clock: Callable[[], float] = time.time,
    progress: Callable[[str], None] | None = None,
    open_min_files: int = OPEN_MIN_FILES,
) -> CompactReport:
    """Compact every closed day of ``kinds`` (default: all) and the open days' segments in
    tiers of ``open_min_files`` (0: leave open days alone); delete replaced files past grace."""
    now_s = clock()
    now = datetime.fromtimestamp(now_s, UTC).replace(tzinfo=None)
    closed = _closed_through(now, settle)
    run = _Run(store, grace, clock, now, closed, _selector(closed, open_min_files), progress)
    with _run_lock(store):
        _remove_debris(store)
        try:
            for kind in kinds or list(SAMPLE_KINDS):
                run.compact_kind(kind)
        except OSError as exc:
            raise StoreError(
                f"Compaction of {store.samples} failed ({exc.strerror or exc}).",
                "Free disk space and run `gpulens store compact` again; nothing was lost.",
            ) from None
        finally:
            _record(store, run.rows)
    run.report.recorded = len(run.rows)
    run.report.days = sorted(run.days)
    return run.report


def _remove_debris(store: Store) -> None:
    """Step 1 of a killed run: remove its staging folders."""
    for pattern in ("compact-*", "rollup-*"):
        for debris in store.tmp.glob(pattern):
            shutil.rmtree(debris, ignore_errors=True)


@dataclass
class _Run:
    """One compaction run: its settings, report, lake_compactions rows and compacted days."""

    store: Store
    grace: float
    clock: Callable[[], float]
    now: datetime
    closed: date
    select: Select
    progress: Callable[[str], None] | None
    report: CompactReport = field(default_factory=CompactReport)
    rows: list[dict[str, Any]] = field(default_factory=list)
    days: set[str] = field(default_factory=set)

    def compact_kind(self, kind: str) -> None:
        """Every partition of ``kind``, then the rollups of its days."""
        seen: set[date] = set()
        for part in partitions(self.store.samples, kind, warn=self.store.warn):
            seen.add(part.day)
            self.compact_partition(kind, part)
        _refresh_rollups(self.store, kind, sorted(seen), self.closed, self.report, self.progress)

    def compact_partition(self, kind: str, part: Partition) -> None:
        """Delete ``part``'s ripe replaced files (the clock read as the partition is reached),
        then merge what is selected of it (each file's clock read as its write begins)."""
        _delete_replaced(part, self.grace, self.clock(), self.report)
        chosen = self.select(part)
        row = (_compact_partition(self.store, kind, chosen, self.now, self.clock, self.select)
               if chosen else None)
        if row is not None:
            self._count(kind, part, row)
        elif part.replaced:  # compacted by an earlier run, maybe never recorded
            self.rows += [_row_from_file(kind, part, n) for n in part.live
                          if n.startswith(COMPACT_PREFIX)]

    def _count(self, kind: str, part: Partition, row: dict[str, Any]) -> None:
        """Record a merged partition's row in the report and tell ``progress``."""
        self.rows.append(row)
        self.days.add(part.day.isoformat())
        report = self.report
        report.partitions += 1
        report.files_in += row["inputs"]
        report.bytes_in += row["bytes_in"]
        report.bytes_out += row["bytes_out"]
        report.rows += row["rows"]
        report.pending_files += row["inputs"]  # deleted by a later run
        if self.progress:
            self.progress(f"{kind} {part.day} {part.node}")


def _refresh_rollups(store: Store, kind: str, days: list[date], closed: date,
                     report: CompactReport, progress: Callable[[str], None] | None) -> None:
    """Step 5: bring the rollups of ``kind``'s days in line with their live files (rollups.py).

    A day whose files cannot be read is left without a rollup (one warning): analyses read
    its raw samples, which report the damage."""
    started = time.perf_counter()
    for name in (n for n, k in rollups.ROLLUP_KINDS.items() if k == kind):
        for day in days:
            try:
                size = rollups.refresh_day(store.root, store.tmp, name, day, closed=day <= closed,
                                           warn=store.warn, fsync_dir=fsync_dir)
            except _READ_ERRORS as exc:
                store.warn(f"The {name} rollup of {day} was not written ({str(exc).splitlines()[0]});"
                           " analyses read its raw samples. Run `gpulens store check`.")
                continue
            if size is not None:
                report.rollup_files += 1
                report.rollup_bytes += size
                if progress:
                    progress(f"rollup {name} {day}")
    report.rollup_seconds += time.perf_counter() - started


def _record(store: Store, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    schema = pa.schema([("kind", pa.string()), ("day", pa.date32()), ("node", pa.string()),
                        ("output", pa.string()), ("inputs", pa.int32()), ("rows", pa.int64()),
                        ("bytes_in", pa.int64()), ("bytes_out", pa.int64()),
                        ("compacted_at", pa.timestamp("us"))])
    with store.write() as con:
        replace_batch(con, "lake_compactions", pa.Table.from_pylist(rows, schema=schema), _KEY)

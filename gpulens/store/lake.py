"""Which sample files are live: the one listing every reader of the lake goes through.

The samples tree holds, per partition ``samples/kind=K/date=D/node=N/``, the segment
files agents and importers rename in, and the files ``gpulens store compact`` writes
(``compact-<id>.parquet``). A compacted file carries, in its Parquet key-value metadata
(``gpulens.compact.inputs``), the names of the files of its partition whose rows it
holds. Entering the tree by ``rename(2)`` is its commit: from then on those inputs are
*replaced*, and every listing here leaves them out, although they stay on disk for a
grace period (readers that listed before the commit may still be reading them) and are
deleted afterwards by the next compaction run.

So a reader sees, for each partition, either the old files or the compacted one, never
both and never neither: a listing that contains the compacted file hides its inputs
(whether or not the listing also caught some of them), and one that missed it (it
arrived after that directory was read) still finds every input, which is not deleted
before the grace period ends. Files an agent renames into a compacted partition later
are not inputs of anything and stay live.

The listing also applies the quarantine (:mod:`gpulens.store.quarantine`): a live file
that fails the cheap check (size, ``PAR1`` magic, footer length) is moved to
``quarantine/`` with a one-line warning and the partition is listed again, so a damaged
file is never listed (nor merged by a compaction). A damaged compacted file hides
nothing: once it is quarantined, the inputs it replaced (while still on disk) are live
again. Files this process could not move (a read-only data directory) are left out.

:func:`list_live` walks the tree. A reader connection's sample views read their files from a
function of the connection (:func:`attach_views`), which lists a kind when a query first reads
it and keeps that listing; :func:`live_files` re-lists for an open connection and re-points its
views.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from gpulens.errors import StoreError
from gpulens.store import quarantine as qr
from gpulens.store.samples import arrow_schema

__all__ = [
    "COMPACT_PREFIX",
    "FILES_FUNCTION",
    "INPUTS_KEY",
    "LakeListing",
    "Partition",
    "ROOT_VARIABLE",
    "SEED_NODE",
    "attach_views",
    "compact_inputs",
    "conform",
    "marked_name",
    "schema_mark",
    "list_live",
    "listings_pinned",
    "live_files",
    "partitions",
    "pinned_stat",
    "listed_stat",
    "plain_schema",
    "seed_file",
]

COMPACT_PREFIX = "compact-"
INPUTS_KEY = b"gpulens.compact.inputs"
SEED_NODE = "__seed__"
ROOT_VARIABLE = "gpulens_samples_dir"
_CACHE_MAX = 65_536
_inputs_cache: OrderedDict[str, frozenset[str]] = OrderedDict()


@functools.cache
def schema_mark(kind: str) -> str:
    """``s<hash>``: the mark in the name of a file whose columns are exactly ``kind``'s current ones.

    Views read marked files without merging every file's schema (DuckDB's ``union_by_name``
    reads the footer of every file it is given, at every bind: twice the connect time on
    141,696 segments; benchmarks/RESULTS.md ``## lake``); only unmarked files (an older or
    newer release's columns) go through the merge. A schema change changes the mark, so files of
    an older release are never taken for current ones.
    """
    fields = [(f.name, str(f.type)) for f in arrow_schema(kind, with_node=False)]
    return "s" + hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:8]


def plain_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with dictionary-encoded columns as their value type (Parquet and DuckDB read both
    alike: the simulator writes dictionary-encoded strings, compaction plain ones)."""
    return pa.schema([f.with_type(f.type.value_type if pa.types.is_dictionary(f.type) else f.type)
                      for f in schema], metadata=schema.metadata)


def _columns(schema: pa.Schema) -> list[tuple[str, pa.DataType]]:
    return [(f.name, f.type) for f in plain_schema(schema)]


def conform(table: pa.Table, kind: str) -> pa.Table:
    """``table`` in ``kind``'s current schema when its columns are a subset of it with the same
    types (the missing ones become NULL); else unchanged (a newer release's extra columns)."""
    schema = arrow_schema(kind, with_node=False)
    if not set(_columns(table.schema)) <= set(_columns(schema)):
        return table
    cols = [table.column(f.name).cast(f.type) if f.name in table.column_names
            else pa.nulls(table.num_rows, f.type) for f in schema]
    return pa.table(cols, schema=schema.with_metadata(table.schema.metadata))


def marked_name(kind: str, schema: pa.Schema, prefix: str, rest: str) -> str:
    """``<prefix>-<mark>-<rest>`` when ``schema`` is ``kind``'s current one (dictionary-encoded
    strings count as strings), else ``<prefix>-<rest>``."""
    if _columns(schema) == _columns(arrow_schema(kind, with_node=False)):
        return f"{prefix}-{schema_mark(kind)}-{rest}"
    return f"{prefix}-{rest}"


def _current(kind: str, path: str) -> bool:
    return f"-{schema_mark(kind)}-" in os.path.basename(path)


def compact_inputs(path: str | os.PathLike[str]) -> frozenset[str] | None:
    """The file names a compacted file replaces (None: the file is gone).

    Read once per path: compacted files are immutable.
    """
    key = os.fspath(path)
    hit = _inputs_cache.get(key)
    if hit is not None:
        _inputs_cache.move_to_end(key)
        return hit
    try:
        meta = pq.read_metadata(key).metadata or {}
        names = frozenset(json.loads(meta.get(INPUTS_KEY, b"[]")))
    except FileNotFoundError:
        return None  # deleted as a replaced input of a newer compaction
    except (OSError, pa.ArrowInvalid, ValueError):
        names = frozenset()  # unreadable footer: it hides nothing (the reader will report it)
    _inputs_cache[key] = names
    if len(_inputs_cache) > _CACHE_MAX:
        _inputs_cache.popitem(last=False)
    return names


@dataclass(frozen=True)
class Partition:
    """One ``date=D/node=N`` folder of a kind: its live files and the replaced ones."""

    kind: str
    day: date
    node: str
    path: Path
    live: tuple[str, ...]
    replaced: tuple[str, ...]

    @property
    def compacted(self) -> bool:
        return len(self.live) == 1 and self.live[0].startswith(COMPACT_PREFIX)


def _split(names: list[str], folder: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(live, replaced) names of one partition folder; None if it changed while read."""
    if len(names) < 2 or not any(n.startswith(COMPACT_PREFIX) for n in names):
        return tuple(sorted(names)), ()
    hidden: set[str] = set()
    for name in names:
        if name.startswith(COMPACT_PREFIX):
            inputs = compact_inputs(os.path.join(folder, name))
            if inputs is None:  # a compaction run deleted it just now: list again
                return None
            hidden |= inputs
    live = tuple(sorted(n for n in names if n not in hidden))
    return live, tuple(sorted(n for n in names if n in hidden))


def _quarantine_damaged(root: Path, folder: str, names: Iterable[str],
                        warn: Callable[[str], None]) -> bool:
    """Quarantine the files of ``names`` that fail the cheap check; True if any was found."""
    found = False
    for name in names:
        why = qr.check_segment(os.path.join(folder, name))
        if why is not None:
            rec = qr.quarantine(root, Path(folder, name), why)
            if rec is not None:
                warn(rec.warning())
            found = True
    return found


#: folder -> (its mtime, live, replaced): a listing reused while the folder is unchanged (one
#: stat instead of a listing; files enter and leave a partition by rename, which changes the
#: folder's mtime; damage inside a file is found when it is read, quarantine.py)
_listed: dict[str, tuple[int, tuple[str, ...], tuple[str, ...]]] = {}
_SETTLED_NS = 2_000_000_000  # a folder changed this recently is listed again (coarse mtimes)


def _remember(folder: str, mtime: int, split: tuple[tuple[str, ...], tuple[str, ...]]) -> None:
    if time.time_ns() - mtime < _SETTLED_NS:
        return
    _listed[folder] = (mtime, split[0], split[1])
    if len(_listed) > _CACHE_MAX:
        _listed.pop(next(iter(_listed)))


Split = tuple[tuple[str, ...], tuple[str, ...]]


def _list_partition(root: Path, key: str,
                    warn: Callable[[str], None]) -> tuple[int | None, Split]:
    """The folder's mtime from before it was listed (None: it is gone) and its (live, replaced)
    names: the earlier listing while that mtime is the one it was made at."""
    hit = _listed.get(key)
    if hit is not None and not qr.any_excluded():
        try:
            if os.stat(key).st_mtime_ns == hit[0]:
                return hit[0], (hit[1], hit[2])
        except OSError:
            pass
    changed = 0
    while changed < 5:
        try:
            mtime = os.stat(key).st_mtime_ns
        except FileNotFoundError:
            return None, ((), ())
        names = _parquet_names(key)
        if qr.any_excluded():
            names = [n for n in names if not qr.is_excluded(Path(key, n))]
        split = _split(names, key)
        if split is None:
            changed += 1
        elif not _quarantine_damaged(root, key, split[0], warn):
            _remember(key, mtime, split)
            return mtime, split
        # else: a damaged file left the folder (or this process's reads): list again
    raise StoreError(f"Sample partition {key} kept changing while it was listed.",
                     "Retry; if it persists, check that one `gpulens store compact` runs at a time.")


def _dirs(path: str, prefix: str) -> list[tuple[str, str]]:
    try:
        with os.scandir(path) as it:
            return [(e.name[len(prefix):], e.path) for e in it
                    if e.name.startswith(prefix) and e.is_dir()]
    except FileNotFoundError:
        return []


def _parquet_names(path: str) -> list[str]:
    try:
        with os.scandir(path) as it:
            return [e.name for e in it if e.name.endswith(".parquet") and e.is_file()]
    except FileNotFoundError:
        return []


Walked = tuple[date, str, str, tuple[str, ...], tuple[str, ...]]


def _walk(samples: Path, kind: str, first: date | None, last: date | None, seed: bool,
          warn: Callable[[str], None] | None,
          stamps: list[tuple[str, int | None]] | None = None) -> Iterable[Walked]:
    """(day, node, folder, live, replaced) of every partition of ``kind`` in ``[first, last]``.

    ``stamps`` gets (folder, mtime) of the kind folder, its day folders in range and their node
    folders, each stated before it was read (None: it vanished)."""
    root = samples.parent
    warn = warn or qr.warner(root)
    top = os.path.join(samples, f"kind={kind}")
    if stamps is not None:
        stamps.append((top, _mtime(top)))
    for day_text, day_dir in sorted(_dirs(top, "date=")):
        try:
            day = date.fromisoformat(day_text)
        except ValueError:
            if stamps is not None:
                stamps.append((day_dir, _mtime(day_dir)))
            continue
        if (first is not None and day < first) or (last is not None and day > last):
            continue
        if stamps is not None:
            stamps.append((day_dir, _mtime(day_dir)))
        for node, node_dir in sorted(_dirs(day_dir, "node=")):
            if node == SEED_NODE and not seed:
                if stamps is not None:
                    stamps.append((node_dir, _mtime(node_dir)))
                continue
            mtime, (live, replaced) = _list_partition(root, node_dir, warn)
            if stamps is not None:
                stamps.append((node_dir, mtime))
            if live or replaced:
                yield day, node, node_dir, live, replaced


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def partitions(
    samples: Path, kind: str, first: date | None = None, last: date | None = None,
    *, seed: bool = False, warn: Callable[[str], None] | None = None,
) -> Iterable[Partition]:
    """Every partition of ``kind`` with a date in ``[first, last]`` (None: unbounded).

    Damaged live files are quarantined on the way (``warn`` gets one line for each;
    default: the warner registered for the data directory, else stderr).
    """
    for day, node, folder, live, replaced in _walk(samples, kind, first, last, seed, warn):
        yield Partition(kind, day, node, Path(folder), live, replaced)


@dataclass(frozen=True)
class LakeListing:
    """The live files of one kind: (path, date) pairs and a fingerprint of the listing."""

    files: tuple[tuple[str, date], ...]
    signature: str

    @property
    def paths(self) -> list[str]:
        return [p for p, _ in self.files]


#: (samples, kind, first, last) -> (mtimes of the folders it walked, the listing): a listing
#: reused while none of those folders changed (a stat each: no per-partition work)
_whole: dict[tuple[str, str, date | None, date | None],
             tuple[tuple[tuple[str, int], ...], LakeListing]] = {}


def _settled(stamps: list[tuple[str, int | None]]) -> tuple[tuple[str, int], ...] | None:
    """The walk's stamps, or None when a folder vanished or one changed in the last 2 s (mtimes
    are coarse: list again next time)."""
    out = tuple((path, m) for path, m in stamps if m is not None)
    if len(out) < len(stamps) or not out:
        return None
    newest = max(m for _, m in out)
    return None if time.time_ns() - newest < _SETTLED_NS else out


def _unchanged(stamps: tuple[tuple[str, int], ...]) -> bool:
    try:
        return all(os.stat(path).st_mtime_ns == mtime for path, mtime in stamps)
    except OSError:
        return False


#: this thread's pinned listings (:func:`listings_pinned`): key -> (quarantine events, listing)
_pinned = threading.local()


@contextlib.contextmanager
def listings_pinned() -> Iterator[None]:
    """Within the block, in this thread, a listing once made (or checked) is reused as it is.

    Every analysis call re-lists the samples (a stat of every partition folder, 9,781 a kind on
    a month of 2,000 GPUs: 30-100 ms, and a walk when the open day's folders changed in the last
    2 s); one dashboard page run makes several calls, and in this block they share the first
    call's listing: a page's figures then come from one set of files, and files arriving during
    the run show up at the next run (the dashboard caches results longer than that anyway). A
    file this process quarantines or leaves out meanwhile ends the reuse (the next call lists
    again); replaced inputs of a compaction stay on disk for a grace period (see above), so a
    pinned listing stays readable. Nested blocks share the outermost one."""
    if getattr(_pinned, "listings", None) is not None:
        yield
        return
    _pinned.listings = {}
    _pinned.stats = {}
    try:
        yield
    finally:
        _pinned.listings = None
        _pinned.stats = None


def pinned_stat(path: str) -> tuple[int, int] | None:
    """(size, mtime_ns) of a live file as this thread's pinned block checked it while it listed
    (a saved listing's file is stated when the listing is taken), else None: inside a page run,
    a reader comparing the listed files with what a rollup summarised may take the listing's
    stat instead of stating every file again (the run reads the files as listed)."""
    stats: dict[str, tuple[int, int]] | None = getattr(_pinned, "stats", None)
    return None if stats is None else stats.get(path)


def listed_stat(path: str) -> tuple[int, int]:
    """(size, mtime_ns) of a live file as the pinned listing stated it (:func:`pinned_stat`), else
    stated now; OSError when the file is gone."""
    seen = pinned_stat(path)
    if seen is None:
        st = os.stat(path)
        seen = (st.st_size, st.st_mtime_ns)
    return seen


def list_live(
    samples: Path, kind: str, first: date | None = None, last: date | None = None,
    *, warn: Callable[[str], None] | None = None,
) -> LakeListing:
    """The live (not replaced, not damaged) sample files of ``kind``, seed files excluded.

    Reused while no folder it walked changed (files enter and leave by rename, which changes
    their folder's mtime; a new node or day folder changes its parent's), and as it is inside
    :func:`listings_pinned`. The whole listing (no date bounds) is also saved for the next
    process, folder by folder (:func:`_load_saved`)."""
    key = (str(samples), kind, first, last)
    pinned: dict[tuple[str, str, date | None, date | None], tuple[int, LakeListing]] | None = \
        getattr(_pinned, "listings", None)
    if pinned is None:
        return _list_live(samples, kind, first, last, warn)
    events = qr.events()
    hit = pinned.get(key)
    if hit is not None and hit[0] == events:
        return hit[1]
    listing = _list_live(samples, kind, first, last, warn)
    pinned[key] = (events, listing)
    return listing


def _list_live(samples: Path, kind: str, first: date | None, last: date | None,
               warn: Callable[[str], None] | None) -> LakeListing:
    key = (str(samples), kind, first, last)
    hit = _whole.get(key)
    if hit is not None and not qr.any_excluded() and _unchanged(hit[0]):
        return hit[1]
    whole = first is None and last is None
    first_load = (str(samples), kind) not in _saved_state  # a partial load seeds once
    saved = _load_saved(samples, kind) if whole and first_load and not qr.any_excluded() else None
    if saved is not None:
        _keep(key, saved)
        return saved[1]
    seen: list[tuple[str, int | None]] = []
    patched = _patch_saved(samples, kind, warn, seen) if whole else None
    if patched is None:
        seen.clear()
    walked = patched if patched is not None else \
        list(_walk(samples, kind, first, last, False, warn, seen))
    stamps = _settled(seen)
    listing = _listing([(os.path.join(folder, name), day)
                        for day, _, folder, live, _ in walked for name in live])
    if not qr.any_excluded():
        if stamps is not None:
            _keep(key, (stamps, listing))
        if whole:
            _save(samples, kind, stamps, walked, listing)
    return listing


def _listing(files: list[tuple[str, date]]) -> LakeListing:
    digest = hashlib.blake2b(digest_size=16)
    for path, _ in files:
        digest.update(path.encode("utf-8", "surrogateescape") + b"\0")
    return LakeListing(tuple(files), f"{len(files)}:{digest.hexdigest()}")


def _keep(key: tuple[str, str, date | None, date | None],
          value: tuple[tuple[tuple[str, int], ...], LakeListing]) -> None:
    _whole[key] = value
    if len(_whole) > 64:
        _whole.pop(next(iter(_whole)))


# ------------------------------------------------------------ the listing saved for the next process
#: A fresh process's first listing walks every partition (9,750 folders a kind on a month of 2,000
#: GPUs) and checks every file's magic bytes: about 0.4 s a kind. The listing of a kind is therefore
#: saved (JSON, ``tmp/listing-<kind>.json``, written atomically) folder by folder, each with what it
#: was derived from: the folder's mtime and the size and mtime of every live file when it passed the
#: magic check. Another process reuses a folder's entry only while all of those are unchanged, so it
#: is the listing a walk would give: a file entering or leaving a folder (rename, quarantine,
#: deletion) changes the folder's mtime, and a file changed in place (truncated, overwritten) its
#: own size or mtime; such a folder is listed and checked again (quarantine.py keeps the same rule
#: within a process). So on a live cluster, where the open day's folders change every minute, a
#: restart re-lists those folders only. When every folder above the partitions (the kind's and its
#: days') is unchanged too, the whole listing is taken as is (no walk). No folder changed in the last
#: 2 s is saved (coarse mtimes: it is listed afresh next time), and nothing by a process that left
#: files out (read-only data dir).
_SAVED_VERSION = 2
#: (samples, kind) -> (listing signature, folders saved): what this process last saved or loaded
#: (a kind in here is not loaded again: its unchanged folders are in the per-folder reuse)
_saved_state: dict[tuple[str, str], tuple[str, int]] = {}
#: (samples, kind) -> the entries (by folder) this process took from a saved listing that was not
#: whole: a save that would hold these and nothing else is skipped (:func:`_save`)
_taken: dict[tuple[str, str], dict[str, list]] = {}


def _saved_path(samples: Path, kind: str) -> Path:
    return samples.parent / "tmp" / f"listing-{kind}.json"


def _folder_entry(base: str, day: date, folder: str, live: tuple[str, ...],
                  replaced: tuple[str, ...]) -> list[object] | None:
    """One folder's saved entry, or None while it (or one of its files) is not settled."""
    hit = _listed.get(folder)
    if hit is None or hit[1] != live or hit[2] != replaced or not folder.startswith(base):
        return None
    now = time.time_ns()
    files = []
    for name in live:
        seen = qr.verified(os.path.join(folder, name))
        if seen is None or now - seen[1] < _SETTLED_NS:
            return None
        files.append([name, seen[0], seen[1]])
    return [folder[len(base):], day.isoformat(), hit[0], files, list(replaced)]


def _save(samples: Path, kind: str, stamps: tuple[tuple[str, int], ...] | None,
          walked: list[Walked], listing: LakeListing) -> None:
    base = str(samples) + os.sep
    taken = _taken.get((str(samples), kind)) or {}
    entries: list[list[object] | None] = []
    fresh = 0  # settled entries that are not one taken from the saved file as it was
    for day, _, folder, live, replaced in walked:
        old = taken.get(folder[len(base):]) if folder.startswith(base) else None
        hit = _listed.get(folder)
        if old is not None and hit == (old[2], live, replaced):
            entries.append(old)  # reused as loaded: its files were checked against it
            continue
        entry = _folder_entry(base, day, folder, live, replaced)
        entries.append(entry)
        fresh += entry is not None
    kept = [e for e in entries if e is not None]
    if not kept or _saved_state.get((str(samples), kind)) == (listing.signature, len(kept)):
        return  # nothing settled, or the same as what this process last saved or loaded
    whole = stamps is not None and len(kept) == len(entries) \
        and all(p.startswith(base) for p, _ in stamps)
    if _taken.pop((str(samples), kind), None) is not None and not whole and not fresh:
        # every settled folder's entry is in the saved file as it is (the others changed in the
        # last 2 s): the next process takes the same entries from it and lists the same others
        return
    doc = {"version": _SAVED_VERSION, "kind": kind,
           "stamps": [[p[len(base):], m] for p, m in stamps] if whole and stamps else [],
           "folders": kept}
    target = _saved_path(samples, kind)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        if not target.parent.is_dir():
            return
        tmp.write_text(json.dumps(doc, separators=(",", ":")))
        os.replace(tmp, target)
        _saved_state[(str(samples), kind)] = (listing.signature, len(kept))
    except OSError:  # a read-only data directory: every process lists for itself
        with contextlib.suppress(OSError):
            tmp.unlink()


def _entry_files(prefix: str, files: list) -> tuple[list[str], list[str]] | None:
    """The names and paths of a saved entry's live files (``prefix``: its folder and a
    separator) if every one still has the saved size and mtime (the folder's own mtime is
    compared by the caller's stamps, else by the walk's per-folder reuse); None otherwise."""
    stat = os.stat
    names: list[str] = []
    paths: list[str] = []
    try:
        for name, size, mtime in files:
            path = prefix + name
            st = stat(path)
            if st.st_size != size or st.st_mtime_ns != mtime:
                return None
            names.append(name)
            paths.append(path)
    except OSError:
        return None
    return names, paths


def _load_saved(samples: Path,
                kind: str) -> tuple[tuple[tuple[str, int], ...], LakeListing] | None:
    """The saved listing of ``kind`` if every folder and file it was derived from is unchanged.

    Otherwise None, and the entries of the folders that are unchanged (with their files) are
    taken into this process's per-folder reuse, so that the walk lists only the others."""
    base = str(samples) + os.sep
    try:
        doc = json.loads(_saved_path(samples, kind).read_bytes())
        if doc.get("version") != _SAVED_VERSION or doc.get("kind") != kind:
            return None
        stamps = tuple((base + str(rel), int(m)) for rel, m in doc["stamps"])
        folders = doc["folders"]
        changed = _changed(stamps) if stamps else None
        got = _take_entries(base, folders, dict(stamps) if changed == [] else {})
    except (OSError, ValueError, TypeError, KeyError, AttributeError, IndexError):
        return None  # missing, unreadable or of another format: list afresh
    key = (str(samples), kind)
    if not (changed == [] and got.entries_ok and got.stamped):
        _saved_state[key] = ("", 0)
        _taken[key] = got.taken
        if changed and got.entries_ok and all(map(_is_partition, changed)):
            _patchable[key] = (stamps, frozenset(changed))
        return None
    listing = _listing(got.files)
    _saved_state[key] = (listing.signature, len(folders))
    return stamps, listing


@dataclass
class _SavedEntries:
    """The entries of a saved listing whose files are unchanged on disk: their files (path,
    day) and the entries by folder; whether every entry's files were unchanged
    (``entries_ok``) and every such folder has its stamped mtime (``stamped``)."""

    files: list[tuple[str, date]] = field(default_factory=list)
    taken: dict[str, list] = field(default_factory=dict)
    entries_ok: bool = True
    stamped: bool = True


def _take_entries(base: str, folders: list, stamped: dict[str, int]) -> _SavedEntries:
    """Check each saved entry's files against the disk; take the unchanged ones into the
    per-folder reuse (and mark their files verified). ``stamped``: folder -> saved mtime ({}:
    the stamps do not hold). Raises what a malformed entry raises (the caller lists afresh)."""
    out = _SavedEntries()
    days: dict[str, date] = {}
    stats: dict[str, tuple[int, int]] | None = getattr(_pinned, "stats", None)
    for entry in folders:
        rel, day, mtime, saved, replaced = entry
        folder = base + rel
        checked = _entry_files(folder + os.sep, saved)
        if checked is None or type(mtime) is not int:
            out.entries_ok = False
            continue
        names, paths = checked
        out.stamped = out.stamped and stamped.get(folder) == mtime
        for path, (_, size, file_mtime) in zip(paths, saved, strict=True):
            qr.mark_verified(path, size, file_mtime)
            if stats is not None:
                stats[path] = (size, file_mtime)
        out.taken[rel] = entry
        _listed[folder] = (mtime, tuple(names), tuple(map(str, replaced)))
        d = days.get(day) or days.setdefault(day, date.fromisoformat(day))
        out.files += [(path, d) for path in paths]
    return out


#: (samples, kind) -> (the saved stamps, the partition folders among them that changed): set by
#: :func:`_load_saved` when only partition folders changed (no day or node folder came or went)
#: and every saved entry's files are unchanged; taken by :func:`_patch_saved`
_patchable: dict[tuple[str, str], tuple[tuple[tuple[str, int], ...], frozenset[str]]] = {}


def _changed(stamps: tuple[tuple[str, int], ...]) -> list[str] | None:
    """The stamped folders whose mtime is not the stamped one; None when one vanished."""
    stat = os.stat
    out: list[str] = []
    try:
        for path, mtime in stamps:
            if stat(path).st_mtime_ns != mtime:
                out.append(path)
    except OSError:
        return None
    return out


def _is_partition(folder: str) -> bool:
    """Whether ``folder`` is a node partition folder (``.../date=D/node=N``), not the seed's."""
    parent, _, name = folder.rpartition(os.sep)
    return name.startswith("node=") and name != f"node={SEED_NODE}" \
        and parent.rpartition(os.sep)[2].startswith("date=")


def _patch_saved(samples: Path, kind: str, warn: Callable[[str], None] | None,
                 seen: list[tuple[str, int | None]]) -> list[Walked] | None:
    """What a walk of ``kind`` gives (and its stamps into ``seen``) when the saved listing just
    loaded differs only in some partition folders (:data:`_patchable`): those folders are listed
    and checked again, every other one is taken from its saved entry (its mtime was compared by
    :func:`_load_saved`; a folder without one, e.g. empty, is listed), in the walk's order (the
    stamps are in it). This spares a restart on a
    live cluster, where the open day's folders change every minute, the walk of every folder
    (9,750 a kind on a month of 2,000 GPUs). None: not loaded that way (walk)."""
    got = _patchable.pop((str(samples), kind), None)
    if got is None:
        return None
    stamps, changed = got
    root = samples.parent
    warn = warn or qr.warner(root)
    walked: list[Walked] = []
    try:
        for folder, mtime in stamps:
            if not _is_partition(folder):
                seen.append((folder, mtime))
                continue
            hit = _listed.get(folder)
            if folder in changed or hit is None or hit[0] != mtime:
                now, (live, replaced) = _list_partition(root, folder, warn)
            else:
                now, live, replaced = hit
            seen.append((folder, now))
            if live or replaced:
                parent, _, name = folder.rpartition(os.sep)
                day = date.fromisoformat(parent.rpartition(os.sep)[2].removeprefix("date="))
                walked.append((day, name.removeprefix("node="), folder, live, replaced))
    except ValueError:
        return None
    return walked


def seed_file(samples: Path, kind: str) -> Path:
    return samples / f"kind={kind}" / "date=1970-01-01" / f"node={SEED_NODE}" / "seed.parquet"


#: the SQL function a store connection's sample views read their files from:
#: ``gpulens_files(kind, mixed)`` (:func:`attach_views`)
FILES_FUNCTION = "gpulens_files"
_LISTS_VARIABLE = "gpulens_view_lists"
#: token (the connection variable) -> the file lists of that connection's views
_view_lists: dict[str, _ViewLists] = {}


class _ViewLists:
    """The files behind one connection's sample views, each kind listed when a view of it is
    first read (a page that reads only GPU samples never lists the others: 0.15-0.2 s a kind in a
    fresh process on a month of 2,000 GPUs) and re-pointed by :func:`live_files`."""

    def __init__(self, samples: Path, warn: Callable[[str], None] | None) -> None:
        self.samples = samples
        self.warn = warn
        self.binding = False
        #: kind -> (listing signature, files in the current schema, the others), seed first
        self.lists: dict[str, tuple[str, list[str], list[str]]] = {}

    def files(self, kind: str, mixed: bool) -> list[str]:
        seed = str(seed_file(self.samples, kind))
        if self.binding:
            return [seed]
        lists = self.lists.get(kind)
        if lists is None:
            lists = self.point(kind, list_live(self.samples, kind, warn=self.warn))
        return lists[2] if mixed else lists[1]

    def point(self, kind: str, listing: LakeListing) -> tuple[str, list[str], list[str]]:
        """Point the views of ``kind`` at ``listing`` (the files in the current schema and the
        others, :func:`schema_mark`, each list led by the seed file: current, no rows)."""
        lists = self.lists.get(kind)
        if lists is not None and lists[0] == listing.signature:
            return lists
        seed = str(seed_file(self.samples, kind))
        current: list[str] = [seed]
        mixed: list[str] = [seed]
        for path in listing.paths:
            (current if _current(kind, path) else mixed).append(path)
        self.lists[kind] = lists = (listing.signature, current, mixed)
        return lists


def attach_views(con: duckdb.DuckDBPyConnection, samples: Path,
                 warn: Callable[[str], None] | None, create: Callable[[], object]) -> None:
    """Give ``con`` the function its sample views read their files from, ``FILES_FUNCTION(kind,
    mixed)`` (the live files of ``kind`` in the current schema, or the others), and run ``create``
    (the views' ``CREATE VIEW`` statements).

    A view is bound again at every query that reads it, and so calls the function: a kind is
    listed (:func:`list_live`, ``warn`` for its quarantine lines) at the first query of this
    connection that reads it, and that listing is kept until :func:`live_files` re-lists. While
    ``create`` runs every list is the seed file alone (it has the kind's columns): DuckDB stats
    every file of a list it binds (0.14 s of CPU on 9,750 files), and no kind is listed."""
    lists = _ViewLists(samples, warn)
    token = uuid.uuid4().hex
    _view_lists[token] = lists
    weakref.finalize(con, _view_lists.pop, token, None)
    varchar = duckdb.sqltype("VARCHAR")
    con.create_function(FILES_FUNCTION, lists.files, [varchar, duckdb.sqltype("BOOLEAN")],
                        duckdb.list_type(varchar))
    con.execute(f"SET VARIABLE {_LISTS_VARIABLE} = $t", {"t": token})
    lists.binding = True
    try:
        create()
    finally:
        lists.binding = False


def _lists_of(con: duckdb.DuckDBPyConnection) -> _ViewLists | None:
    try:
        row = con.execute(f"SELECT getvariable('{_LISTS_VARIABLE}')").fetchone()
    except duckdb.Error:
        return None
    return _view_lists.get(str(row[0])) if row and row[0] is not None else None


def live_files(con: duckdb.DuckDBPyConnection, kind: str) -> LakeListing | None:
    """Re-list ``kind`` for a reader connection of a store, and point its views at the listing.

    None when ``con`` was not opened by :meth:`Store.connect` (its views are not the lake's).
    """
    lists = _lists_of(con)
    if lists is None:
        return None
    listing = list_live(lists.samples, kind)
    lists.point(kind, listing)
    return listing

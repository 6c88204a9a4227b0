"""Quarantine of unreadable Parquet segments: one bad file never takes the store down.

A segment is checked cheaply (size, ``PAR1`` magic at both ends, a footer length that fits
the file) when a reader builds its file list; a segment that passes but fails while a query
reads it is caught from DuckDB's error, which names the file. Either way the file is moved
from ``samples/`` to ``quarantine/`` (same relative path) with a JSON record of why, a one-line
warning names it and the rows it held, and the read runs again without it. In a read-only
data directory the file cannot be moved: it is left out of this process's reads instead.

Segment file names carry their row count (``...-r<rows>.parquet``, see
``Store.stage_partitioned``; compacted files too: ``compact-<id>-r<rows>.parquet``), so the
rows a damaged file held are known even when its footer is gone.

The live-file listing (:mod:`gpulens.store.lake`) runs the cheap check on every file it
lists, so readers and compaction never see a file that fails it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import struct
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "QuarantineRecord",
    "check_segment",
    "count_quarantined",
    "events",
    "excluded",
    "is_excluded",
    "list_quarantined",
    "mark_verified",
    "quarantine",
    "rows_of",
    "quarantine_named_in_error",
    "any_excluded",
    "sample_file_in_error",
    "verified",
    "warner",
]

_MAGIC = b"PAR1"
_ROWS = re.compile(r"-r(\d+)\.parquet$")
_QUOTED = re.compile(r"""["']([^"']+\.parquet)["']""")
_SEGMENT = re.compile(r"^(?P<root>.+)/samples/kind=[^/]+/date=[^/]+/node=[^/]+/[^/]+\.parquet$")
#: files this process could not move (read-only data dir): left out of its reads
_EXCLUDED: set[str] = set()
#: data dirs whose segments this process reads
_ROOTS: set[Path] = set()
#: where warnings about a data dir's segments go (the reading Store's ``warn``)
_WARNERS: dict[Path, Callable[[str], None]] = {}
_DAMAGE = re.compile(r"corrupt|magic|decompress|payload|thrift|parquet|truncat|unexpected end|footer",
                     re.IGNORECASE)
_DUCK_READ_ERRORS = frozenset({"Error", "IOException", "InvalidInputException", "InternalException",
                               "SerializationException"})
#: files that passed the magic check: (size, mtime_ns), segments are immutable
_VERIFIED: dict[str, tuple[int, int]] = {}
#: how many files this process quarantined or left out (see :func:`events`)
_EVENTS = [0]


@dataclasses.dataclass(frozen=True)
class QuarantineRecord:
    file: str           # where the segment was, relative to the data dir
    moved_to: str | None  # relative to the data dir; None when it could not be moved
    reason: str
    rows: int | None    # rows it held (None: unknown)
    at: str             # UTC time of detection

    def warning(self) -> str:
        rows = f"{self.rows:,} rows" if self.rows is not None else "an unknown number of rows"
        where = f"moved to {self.moved_to}" if self.moved_to else "left out (data dir is read-only)"
        return f"{self.file} is unreadable ({self.reason}); {where}; its {rows} are left out."


def check_segment(path: Path | str) -> str | None:
    """Why ``path`` is not a readable Parquet file, or None. Reads 12 bytes at most."""
    try:
        key = os.fspath(path)
        st = os.stat(key)
        if _VERIFIED.get(key) == (st.st_size, st.st_mtime_ns):
            return None
        if st.st_size < 12:
            return f"{st.st_size} bytes: too small to be a Parquet file"
        with open(key, "rb") as fh:
            head = fh.read(4)
            fh.seek(-8, os.SEEK_END)
            tail = fh.read(8)
    except FileNotFoundError:
        return None  # moved by another reader meanwhile
    except OSError as exc:
        return f"cannot be read: {exc.strerror or exc}"
    if head != _MAGIC:
        return "no Parquet magic bytes at the start"
    if tail[4:] != _MAGIC:
        return "no Parquet magic bytes at the end (truncated?)"
    (footer,) = struct.unpack("<I", tail[:4])
    if footer + 12 > st.st_size:
        return "footer length larger than the file (truncated?)"
    _VERIFIED[key] = (st.st_size, st.st_mtime_ns)
    return None


def verified(path: str) -> tuple[int, int] | None:
    """(size, mtime_ns) of ``path`` when it passed :func:`check_segment` in this process."""
    return _VERIFIED.get(path)


def mark_verified(path: str, size: int, mtime_ns: int) -> None:
    """Record that ``path`` passed the check while it had this size and mtime (a listing saved by
    another process that checked it, gpulens.store.lake)."""
    _VERIFIED[path] = (size, mtime_ns)


def rows_of(path: Path) -> int | None:
    """Rows a segment holds: from its name, else from its footer, else None."""
    m = _ROWS.search(path.name)
    if m:
        return int(m.group(1))
    try:
        import pyarrow.parquet as pq

        return int(pq.read_metadata(path).num_rows)
    except Exception:  # the footer is what is damaged
        return None


def quarantine(root: Path, path: Path, reason: str) -> QuarantineRecord | None:
    """Move ``path`` (under ``root/samples``) to ``root/quarantine`` with a JSON record.

    Returns the record, or None when the file is already gone (another reader moved it).
    """
    rel = path.relative_to(root)
    rows = rows_of(path)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    dest = root / "quarantine" / rel
    moved_to: str | None = str(dest.relative_to(root))
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            dest = dest.with_name(f"{dest.stem}-{uuid.uuid4().hex[:6]}{dest.suffix}")
            moved_to = str(dest.relative_to(root))
        os.replace(path, dest)
    except FileNotFoundError:
        if not path.exists():
            return None
        moved_to = None
    except OSError:
        moved_to = None
    _VERIFIED.pop(str(path), None)
    _EVENTS[0] += 1
    record = QuarantineRecord(str(rel), moved_to, reason, rows, at)
    if moved_to is None:
        _EXCLUDED.add(str(path))
        return record
    try:
        tmp = dest.with_name(f".{dest.name}.json.tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(record), indent=1))
        os.replace(tmp, dest.with_name(dest.name + ".json"))
    except OSError:
        pass  # the moved file is the evidence; the record is a convenience
    return record


def events() -> int:
    """How many files this process has quarantined or left out so far: a listing made while it
    was another number may still hold one of them (gpulens.store.lake's pinned listings)."""
    return _EVENTS[0]


def excluded() -> set[str]:
    """Files this process left out because it could not move them."""
    return set(_EXCLUDED)


def any_excluded() -> bool:
    """True when this process left out some file it could not move."""
    return bool(_EXCLUDED)


def is_excluded(path: Path) -> bool:
    """True when this process left ``path`` out because it could not move it."""
    return bool(_EXCLUDED) and str(path) in _EXCLUDED


def count_quarantined(root: Path) -> int:
    qdir = root / "quarantine"
    return len(_quarantined_files(qdir)) if qdir.is_dir() else 0


def _quarantined_files(qdir: Path) -> list[Path]:
    """Segments (.parquet) and spool batches (.arrow) in quarantine/."""
    return sorted(f for pattern in ("*.parquet", "*.arrow") for f in qdir.rglob(pattern))


def list_quarantined(root: Path) -> list[dict[str, Any]]:
    """Records of every quarantined segment (a file without a record gets a minimal one)."""
    qdir = root / "quarantine"
    if not qdir.is_dir():
        return []
    out = []
    for f in _quarantined_files(qdir):
        rec: dict[str, Any] = {"file": None, "moved_to": str(f.relative_to(root)), "reason": None,
                               "rows": None, "at": None}
        try:
            rec.update(json.loads(f.with_name(f.name + ".json").read_text()))
        except (OSError, ValueError):
            pass
        out.append(rec)
    return out


def sample_file_in_error(exc: BaseException, samples: Path) -> Path | None:
    """The segment under ``samples`` that a DuckDB/Arrow error names, if any."""
    text = str(exc)
    base = str(samples.resolve()) + os.sep
    for m in _QUOTED.finditer(text):
        candidate = Path(m.group(1))
        try:
            resolved = str(candidate.resolve())
        except OSError:
            continue
        if resolved.startswith(base) or str(candidate).startswith(str(samples) + os.sep):
            return candidate
    return None


def register_root(root: Path, warn: Callable[[str], None] | None = None) -> None:
    """Remember a data dir whose segments this process reads (for errors that name no file),
    and where warnings about its segments go."""
    _ROOTS.add(root)
    if warn is not None:
        _WARNERS[root] = warn


def warner(root: Path) -> Callable[[str], None]:
    """Where warnings about ``root``'s segments go: its registered reader's, else stderr."""
    return _WARNERS.get(root, warn_stderr)


def looks_like_damage(exc: BaseException) -> bool:
    """An error from DuckDB/Arrow that a damaged file can cause (not a SQL mistake)."""
    mod = type(exc).__module__ or ""
    if mod.startswith(("duckdb", "_duckdb")) and type(exc).__name__ in _DUCK_READ_ERRORS:
        return True  # the Parquet reader's own errors (thrift, pages) are of these types
    if not (mod.startswith(("duckdb", "_duckdb", "pyarrow")) or isinstance(exc, OSError)):
        return False
    return bool(_DAMAGE.search(str(exc)))


def quarantine_named_in_error(exc: BaseException, warn: Callable[[str], None]) -> bool:
    """Quarantine the segment that an error names (or, when it names none but looks like
    damage, every segment that fails a full read in the data dirs this process reads).
    True when something was moved or left out, so the failed read can run again."""
    for m in _QUOTED.finditer(str(exc)):
        seg = _SEGMENT.match(m.group(1))
        if seg is None or m.group(1) in _EXCLUDED or not Path(m.group(1)).exists():
            continue
        rec = quarantine(Path(seg["root"]), Path(m.group(1)), str(exc).splitlines()[0][:300])
        if rec is not None:
            warn(rec.warning())
            return True
    if not looks_like_damage(exc):
        return False
    found = []
    for root in list(_ROOTS):
        files = sorted((root / "samples").glob("kind=*/*/*/*.parquet"))
        found += scan(root, files, warn, full=True)
    return bool(found)


def read_fully(path: Path) -> str | None:
    """Why decoding every page of ``path`` fails, or None."""
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(path) as pf:
            for _ in pf.iter_batches(batch_size=65_536):
                pass
    except FileNotFoundError:
        return None
    except Exception as exc:  # ArrowInvalid, OSError, thrift errors: all mean "unreadable"
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return None


def scan(root: Path, files: Iterable[Path], warn: Callable[[str], None], *,
         full: bool = False) -> list[QuarantineRecord]:
    """Magic-check ``files`` (``full``: read every page); quarantine (and warn about) the bad ones."""
    out = []
    for f in files:
        if str(f) in _EXCLUDED:
            continue
        why = check_segment(f)
        if why is None and full:
            why = read_fully(f)
        if why is None:
            continue
        rec = quarantine(root, f, why)
        if rec is not None:
            warn(rec.warning())
            out.append(rec)
    return out


def warn_stderr(line: str) -> None:
    print(f"gpulens: warning: {line}", file=sys.stderr)

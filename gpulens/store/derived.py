"""Derived tables saved for the next process: the analyses' per-day base (issue 26).

Every utilization-based analysis starts from the same base, the GPU-minutes of each
placement-hour (``gpulens.analysis.base``). Building it is the costliest step of a cold
dashboard page (1.5-2 s of CPU on a month of 2,000 GPUs), and for a closed day its rows do
not change until the placements overlapping that day, or the sample files of that day,
change. So the rows of each closed day are saved here, one Parquet file per day::

    derived/base/base-<YYYY-MM-DD>.parquet

each with, in its key-value metadata (``gpulens.derived.key``), the key of what it was built
from (the caller's business: ``gpulens.analysis.base`` hashes the placements' minute ranges
in the day, the rollup and sample files it read with their sizes and mtimes, and the code).
A reader uses a file only when the key it computes now is the one in the file; anything
else is rebuilt (and saved again). Parquet only (never pickle); a file is written under a
temporary name in its folder, fsynced and renamed over the old one, so a kill leaves the
old file or the new one, never half of one (readers that opened the old one keep it);
pages carry CRC checksums, verified on every read. A damaged file (unreadable footer,
a page whose checksum fails, other columns than expected) is
ignored with one warning line and rebuilt. A read-only data directory saves nothing.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from gpulens.store.segments import commit_parquet

__all__ = [
    "KEY",
    "SavedFile",
    "base_dir",
    "base_path",
    "clear_debris",
    "convergence_path",
    "describe",
    "load",
    "load_base",
    "save",
    "save_base",
    "saved_bases",
]

KEY = b"gpulens.derived.key"
_PREFIX = "base-"
_DEBRIS_S = 3600.0  # a temporary file older than this was left by a killed writer
#: (path, size, mtime) of damaged files already warned about in this process
_warned: set[tuple[str, int, int]] = set()


def base_dir(root: Path) -> Path:
    """The folder of the saved per-day bases of the data directory ``root``."""
    return root / "derived" / "base"


def base_path(root: Path, day: date) -> Path:
    return base_dir(root) / f"{_PREFIX}{day.isoformat()}.parquet"


def _stamp(path: Path) -> tuple[str, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return str(path), st.st_size, st.st_mtime_ns


def convergence_path(root: Path, what: str, name: str) -> Path:
    """The saved table ``what`` ("cv": convergence, "curve": curves) of ``name`` (a hex digest
    of the metric and tolerance)."""
    return root / "derived" / "convergence" / f"{what}-{name}.parquet"


def load_base(root: Path, day: date, key: str, schema: pa.Schema,
              warn: Callable[[str], None]) -> pa.Table | None:
    """The saved rows of ``day`` if the file's key is ``key`` (None: absent, of another key, or
    damaged; a damaged one gets one warning line per process)."""
    return load(base_path(root, day), key, schema, warn)


def load(path: Path, key: str, schema: pa.Schema,
         warn: Callable[[str], None]) -> pa.Table | None:
    """The saved table at ``path`` if its key is ``key`` (else None; one warning if damaged).

    The key and the rows are read through one open file (a file renamed over it meanwhile is
    read by the next call)."""
    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
    except FileNotFoundError:
        return None
    except (OSError, pa.ArrowException) as exc:
        _damaged(path, f"unreadable footer ({_first_line(exc)})", warn)
        return None
    with pf:
        if (pf.metadata.metadata or {}).get(KEY) != key.encode():
            return None  # built from other placements or samples: rebuilt, no warning
        try:
            table = pf.read()
        except (OSError, pa.ArrowException) as exc:
            _damaged(path, _first_line(exc), warn)
            return None
    table = table.replace_schema_metadata(None)
    if not table.schema.equals(schema):
        _damaged(path, f"columns {table.schema.names}, expected {schema.names}", warn)
        return None
    return table


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__


def _damaged(path: Path, why: str, warn: Callable[[str], None]) -> None:
    stamp = _stamp(path)
    if stamp is not None and stamp in _warned:
        return
    if stamp is not None:
        _warned.add(stamp)
    warn(f"saved table {path} is damaged ({why}); it is rebuilt (the same numbers, slower).")


def save_base(root: Path, day: date, table: pa.Table, key: str) -> int | None:
    """Save the rows of ``day`` under ``key`` (atomically); the bytes written, None when the
    data directory cannot be written (nothing is saved, nothing fails)."""
    return save(base_path(root, day), table, key)


def save(path: Path, table: pa.Table, key: str) -> int | None:
    """Save ``table`` at ``path`` under ``key`` (atomically); the bytes written, None when the
    folder cannot be written."""
    folder = path.parent
    tmp = folder / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        size = commit_parquet(table.replace_schema_metadata({KEY: key.encode()}), tmp, path,
                              compression="zstd", compression_level=3, write_page_checksum=True,
                              row_group_size=1 << 20)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None
    return size


def clear_debris(root: Path, now: float | None = None) -> int:
    """Remove temporary files that killed writers left in the saved-base folder; how many."""
    folder = base_dir(root)
    limit = (time.time() if now is None else now) - _DEBRIS_S
    gone = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for e in entries:
        if e.name.startswith(".") and e.name.endswith(".tmp"):
            with contextlib.suppress(OSError):
                if e.stat().st_mtime < limit:
                    os.unlink(e.path)
                    gone += 1
    return gone


@dataclass(frozen=True)
class SavedFile:
    """One saved per-day base as ``gpulens store info`` shows it."""

    day: date
    path: str
    bytes: int


def saved_bases(root: Path) -> list[SavedFile]:
    """Every saved per-day base of ``root``, by day."""
    out = []
    try:
        entries = list(os.scandir(base_dir(root)))
    except OSError:
        return []
    for e in entries:
        if not (e.name.startswith(_PREFIX) and e.name.endswith(".parquet")):
            continue
        try:
            day = date.fromisoformat(e.name[len(_PREFIX):-len(".parquet")])
            size = e.stat().st_size
        except (ValueError, OSError):
            continue
        out.append(SavedFile(day, e.path, size))
    return sorted(out, key=lambda f: f.day)


def describe(root: Path) -> dict[str, object]:
    """What ``gpulens store info`` shows of the saved tables: the per-day bases (files, bytes,
    first and last day) and the metric curves and convergence tables (files, bytes)."""
    bases = saved_bases(root)
    conv = []
    with contextlib.suppress(OSError):
        conv = [e.stat().st_size for e in os.scandir(root / "derived" / "convergence")
                if e.name.endswith(".parquet")]
    return {
        "base_files": len(bases), "base_bytes": sum(f.bytes for f in bases),
        "base_days": [str(bases[0].day), str(bases[-1].day)] if bases else [],
        "convergence_files": len(conv), "convergence_bytes": sum(conv),
    }

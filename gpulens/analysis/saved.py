"""The base's closed days, saved for the next process (issue 26: a cold dashboard in <= 2 s).

``ensure_base`` (base.py) builds the attempt-hours table AH: per job attempt and clock hour,
the allocated GPU-minutes and what the samples say of them. A day's rows are a function of

* the placements overlapping the day: each one's attempt and GPU and the minutes ``[lo, hi)``
  it covers in the day, and
* the GPU samples of the day's date partition: its live sample files (path, size, mtime). The
  rows are built from the day's ``gpu_hour`` rollup where it summarises those files and from
  the raw files otherwise; both give the same numbers (tests/analysis/test_rollups.py), so
  which of the two a build read is not part of the key, and keying a day costs no rollup
  reads (a fresh dashboard process keys ~30 days of 9,750 files from its listing's stats),
* and the code (the SQL of the build, the DuckDB version, a format number).

The *key* of a day hashes all of these (the placements as a count and an order-free sum of
64-bit hashes of (job, attempt, node, GPU, lo, hi)). A day's rows are saved
(gpulens.store.derived: one Parquet file per day, atomic, page checksums) once built, and a
later build, in this process or another, reads them instead of building the day when the
key it computes is the same. So a placement or attempt that changes in a day (its minutes
there, a new or removed one), a late segment, a re-compaction: each changes exactly the keys
of the days it touches, and only those days are built again (a rollup rewritten from the same
files, or quarantined, changes no number, and no key). A damaged file is ignored with one warning and rebuilt.

Which days: only those inside the analysis window as whole days (a window's edge days are
clipped: built each time) and before the newest sample partition (the open day, whose rows
change every minute, is always built). Not for a connection without the lake's listing (its
own ``gpu_samples`` view), nor when a sample file has no date partition.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa

from gpulens.store import derived
from gpulens.store import quarantine as qr
from gpulens.store.lake import listed_stat

if TYPE_CHECKING:
    from gpulens.analysis.base import SampleFiles

__all__ = ["AH_SCHEMA", "DayKeys", "DayStats", "code_digest", "keys", "load", "save"]

#: the columns of AH, as saved
AH_SCHEMA = pa.schema([
    ("job_id", pa.string()), ("attempt", pa.int32()), ("h", pa.timestamp("us")),
    ("alloc_min", pa.int64()), ("n", pa.int64()), ("su", pa.float64()), ("k", pa.int64()),
    ("busy_min", pa.float64()),
])
_FORMAT = 2  # 2: a day keyed by its live sample files, not by the rollup plan read


@dataclass(frozen=True)
class DayStats:
    """What a day's placements are: how many, and an order-free checksum of their attempt, GPU
    and minutes in the day."""

    placements: int
    checksum: str


@dataclass(frozen=True)
class DayKeys:
    """The key of each day that may be saved or loaded (``keys``), the data directory, the
    code's own digest."""

    keys: dict[date, str]
    root: Path | None
    code: str


def _rel(root: str, path: str) -> str:
    return path[len(root) + 1:] if path.startswith(root + os.sep) else path


def _day_files(root: Path, files: list[tuple[str, date]]) -> dict[date, list[list[object]]] | None:
    """Per day, its live sample files (path, size, mtime; the size and mtime as the page run's
    listing stated them, :func:`gpulens.store.lake.listed_stat`), sorted. None
    when a file vanished while stated (nothing is keyed)."""
    base = str(root)
    out: dict[date, list[list[object]]] = {}
    try:
        for path, day in files:
            seen = listed_stat(path)
            out.setdefault(day, []).append([_rel(base, path), seen[0], seen[1]])
    except OSError:
        return None
    for parts in out.values():
        parts.sort(key=lambda p: str(p[0]))
    return out


def _key(code: str, day: date, stats: DayStats, parts: list[list[object]]) -> str:
    text = json.dumps([code, day.isoformat(), stats.placements, stats.checksum, parts],
                      separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()


def code_digest(*texts: str) -> str:
    """The code's part of every key: the build's SQL, the DuckDB version, the format."""
    h = hashlib.blake2b(digest_size=12)
    for text in (str(_FORMAT), duckdb.__version__, str(AH_SCHEMA), *texts):
        h.update(text.encode() + b"\0")
    return h.hexdigest()


def _whole_days(days: dict[date, DayStats], newest: date, lo: datetime,
                hi: datetime) -> list[date]:
    return [d for d in days if d < newest and datetime.combine(d, time()) >= lo
            and datetime.combine(d + timedelta(days=1), time()) <= hi]


def keys(sf: SampleFiles, days: dict[date, DayStats], lo: datetime, hi: datetime,
         code: str) -> DayKeys:
    """The key of every day of ``days`` that may be saved or loaded (see the module's doc)."""
    newest = sf.newest
    if sf.view or sf.root is None or newest is None or any(d is None for _, d in sf.files):
        return DayKeys({}, None, code)
    wanted = set(_whole_days(days, newest, lo, hi))
    if not wanted:
        return DayKeys({}, None, code)
    root = Path(sf.root)
    files = [(p, d) for p, d in sf.files if d is not None and d in wanted]
    parts = _day_files(root, files)
    if parts is None:
        return DayKeys({}, None, code)
    return DayKeys({d: _key(code, d, days[d], parts.get(d, [])) for d in sorted(wanted)}, root, code)


def load(keyed: DayKeys) -> dict[date, pa.Table]:
    """The saved rows of every keyed day whose file holds that key."""
    if keyed.root is None:
        return {}
    warn = qr.warner(keyed.root)
    out = {}
    for day, key in keyed.keys.items():
        table = derived.load_base(keyed.root, day, key, AH_SCHEMA, warn)
        if table is not None:
            out[day] = table
    return out


def save(con: duckdb.DuckDBPyConnection, ah: str, keyed: DayKeys, fresh: set[date]) -> int:
    """Save the rows of ``ah`` of every keyed day built just now (``fresh``); how many."""
    todo = sorted(d for d in keyed.keys if d in fresh)
    if keyed.root is None or not todo:
        return 0
    with warnings.catch_warnings():  # DuckDB 2 warns of one copy (it is small)
        warnings.filterwarnings("ignore", "Arrow output on a DB-API result", UserWarning)
        got: pa.Table = con.execute(
            f"SELECT * FROM {ah} WHERE list_contains(CAST($days AS DATE[]), CAST(h AS DATE))"  # noqa: S608
            " ORDER BY h, job_id, attempt", {"days": todo}).to_arrow_table()
    table = got.cast(AH_SCHEMA)
    hours = table["h"].to_numpy()
    bounds = [np.datetime64(d) for d in todo] + [np.datetime64(todo[-1] + timedelta(days=1))]
    edges = np.searchsorted(hours, np.array(bounds, dtype=hours.dtype))
    done = 0
    for i, day in enumerate(todo):
        rows = table.slice(int(edges[i]), int(edges[i + 1] - edges[i]))
        if derived.save_base(keyed.root, day, rows, keyed.keys[day]) is None:
            break  # the data directory cannot be written
        done += 1
    if done:
        derived.clear_debris(keyed.root)
    return done

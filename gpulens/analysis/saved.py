"""The base's closed days, saved for the next process (issue 26: a cold dashboard in <= 2 s).

``ensure_base`` (base.py) builds the attempt-hours table AH: per job attempt and clock hour,
the allocated GPU-minutes and what the samples say of them. A day's rows are a function of

* the placements overlapping the day: each one's attempt and GPU and the minutes ``[lo, hi)``
  it covers in the day, and
* the GPU samples of the day's date partition, as read: the ``gpu_hour`` rollup file (path,
  size, mtime and the nodes whose rows are used) and the raw sample files (path, size, mtime)
  of the day's rollup plan (gpulens.store.rollups.plan),
* and the code (the SQL of the build, the DuckDB version, a format number).

The *key* of a day hashes all of these (the placements as a count and an order-free sum of
64-bit hashes of (job, attempt, node, GPU, lo, hi)). A day's rows are saved
(gpulens.store.derived: one Parquet file per day, atomic, page checksums) once built, and a
later build, in this process or another, reads them instead of building the day when the
key it computes is the same. So a placement or attempt that changes in a day (its minutes
there, a new or removed one), a late segment, a re-compaction, a rollup rewritten or
quarantined: each changes exactly the keys of the days it touches, and only those days are
built again. A damaged file is ignored with one warning and rebuilt.

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

from gpulens.store import derived, rollups
from gpulens.store import quarantine as qr

if TYPE_CHECKING:
    from gpulens.analysis.base import SampleFiles

__all__ = ["AH_SCHEMA", "DayKeys", "DayStats", "code_digest", "keys", "load", "save"]

#: the columns of AH, as saved
AH_SCHEMA = pa.schema([
    ("job_id", pa.string()), ("attempt", pa.int32()), ("h", pa.timestamp("us")),
    ("alloc_min", pa.int64()), ("n", pa.int64()), ("su", pa.float64()), ("k", pa.int64()),
    ("busy_min", pa.float64()),
])
_FORMAT = 1


@dataclass(frozen=True)
class DayStats:
    """What a day's placements are: how many, and an order-free checksum of their attempt, GPU
    and minutes in the day."""

    placements: int
    checksum: str


@dataclass(frozen=True)
class DayKeys:
    """The key of each day that may be saved or loaded (``keys``), the data directory, the
    code's own digest and the days' placement stats."""

    keys: dict[date, str]
    root: Path | None
    code: str
    stats: tuple[tuple[date, DayStats], ...] = ()


def _rel(root: str, path: str) -> str:
    return path[len(root) + 1:] if path.startswith(root + os.sep) else path


def _samples_parts(root: Path, plan: rollups.RollupPlan) -> dict[date, list[list[object]]] | None:
    """Per day, what the plan reads of it: rollups (path, size, mtime, nodes) and raw files
    (path, size, mtime). None when a file vanished while stated (nothing is keyed)."""
    base = str(root)
    out: dict[date, list[list[object]]] = {}
    try:
        for path, nodes in plan.rollups:
            day = date.fromisoformat(os.path.basename(os.path.dirname(path)).removeprefix("date="))
            st = os.stat(path)
            out.setdefault(day, []).append(["r", _rel(base, path), st.st_size, st.st_mtime_ns,
                                            None if nodes is None else sorted(nodes)])
        for path, day_or_none in plan.raw:
            if day_or_none is None:
                return None
            st = os.stat(path)
            out.setdefault(day_or_none, []).append(["f", _rel(base, path), st.st_size,
                                                    st.st_mtime_ns])
    except (OSError, ValueError):
        return None
    return {d: sorted(parts, key=lambda p: (str(p[0]), str(p[1]))) for d, parts in out.items()}


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
    files = [(p, d) for p, d in sf.files if d in wanted]
    parts = _samples_parts(root, rollups.plan(root, "gpu_hour", files, qr.warner(root)))
    if parts is None:
        return DayKeys({}, None, code)
    return DayKeys({d: _key(code, d, days[d], parts.get(d, [])) for d in sorted(wanted)}, root, code,
                   tuple((d, days[d]) for d in sorted(wanted)))


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


def save(con: duckdb.DuckDBPyConnection, ah: str, keyed: DayKeys, fresh: set[date],
         used: rollups.RollupPlan | None) -> int:
    """Save the rows of ``ah`` of every keyed day built just now (``fresh``), keyed by the plan
    that was read (``used``: a rollup quarantined during the build changed it); how many."""
    todo = sorted(d for d in keyed.keys if d in fresh)
    if keyed.root is None or used is None or not todo:
        return 0
    parts = _samples_parts(keyed.root, used)
    if parts is None:
        return 0
    stats = dict(keyed.stats)
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
        key = _key(keyed.code, day, stats[day], parts.get(day, []))
        if derived.save_base(keyed.root, day, rows, key) is None:
            break  # the data directory cannot be written
        done += 1
    if done:
        derived.clear_debris(keyed.root)
    return done

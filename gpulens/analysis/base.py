"""The shared first step of every utilization-based analysis: GPU-minutes per placement.

Definition (issue 4): a job's GPU-minutes are the whole minutes ``m`` with
``floor(start) <= m < end`` of each attempt, on each of the attempt's GPUs
(``placements``). A running attempt (``end_time`` NULL) runs up to the minute
after the newest GPU sample in the store, or to ``Filters.now`` when there are
no samples. A minute's utilization is the mean of the non-NULL, non-NaN
``util_gpu`` samples whose ``ts`` falls in that minute on that GPU; minutes
without such a sample count as allocated but not as busy (NA samples are
skipped, as the Philly notebook does).

How: placements are cut into placement-hours (``__gl_hours``: one row per
placement and clock hour it touches, with the minute range ``[lo_m, hi_m)`` it
covers in that hour; a few rows per placement). One scan of the samples joins
each sample to the placement-hours of its GPU and hour with a hash join on one
integer key, ``hash(node, gpu_index, epoch hour)``, and the residual range test
``lo_m <= minute < hi_m`` (a key collision across hours cannot match, since the
range lies inside the build row's hour), and aggregates per placement-hour:
count and sum of the non-NA samples and the minutes with one (a 60-bit mask, so
several samples in one minute, e.g. a 5 s collector, count as one minute, at
the hour's mean). Two placements on the same GPU and minute both get that
minute.

The live GPU sample files are listed once per call through the store
(``gpulens.store.lake.live_files``, which leaves out files replaced by a
compaction; the listing is the cache fingerprint) and read as an explicit list: only ``ts``,
``gpu_index``, ``util_gpu`` and the hive ``node``, only the date partitions
between the placements' first and last minute (and the filter window), no seed
file, and no ``union_by_name`` schema merge over every file. The placement-hours'
figures are summed per attempt and hour (``AH``: the analyses need no placement's own
hours). The results are cached in TEMP tables on the caller's connection (``cache_key``),
so running several analyses on one connection scans the samples once; the rows of whole
closed days are also saved for the next process and read back while the placements and
sample files they came from are unchanged (saved.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from gpulens.analysis import accounting as acc
from gpulens.analysis import saved
from gpulens.analysis.filters import FAR_PAST, Filters
from gpulens.store import quarantine as qr
from gpulens.store import rollups
from gpulens.store.lake import ROOT_VARIABLE, live_files

__all__ = [
    "ATT",
    "STATUS_CTES",
    "AH",
    "PL",
    "attempts_sql",
    "base_built",
    "base_days",
    "cache_key",
    "ensure_base",
    "SampleFiles",
    "gpu_sample_signature",
    "sample_files",
    "set_cache_key",
]

PL = "__gl_pl"  # placements: aid, job_id, attempt, node, gpu_index, s, e, ce, alloc_min
AH = "__gl_ah"  # per attempt and clock hour: job_id, attempt, h, alloc_min, n, su, k, busy_min
ATT = "__gl_att"  # per attempt: job_id, attempt, gpus, servers, first_minute, alloc_min, busy_min, k, n, su,
#                   st (status), lost (accounting.lost_sql)
_KEYS = "__gl_keys"  # cached TEMP table name -> the key it was built for
_HOURS = "__gl_hours"
_DAYS = "__gl_days"
_AIDS = "__gl_aids"  # aid -> job_id, attempt
_BUILD = "__gl_build"  # the _KEYS entry of the last build's days (base_days)
#: optimizers off for the placement-hour statement: the join sides are pinned (see ensure_base),
#: and statistics propagation is off because DuckDB 2.0.1 takes a Parquet column's min/max (which
#: leave NaN out, as the format says) as proof that it holds no NaN and folds the NaN test away
_PIN = ("join_order", "build_side_probe_side", "statistics_propagation")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_HIVE_TYPES = "{'kind': VARCHAR, 'date': DATE, 'node': VARCHAR}"


@dataclass(frozen=True)
class SampleFiles:
    """The GPU sample files behind the gpu_samples view, listed once.

    ``files`` are (path, date partition or None) of the non-seed files;
    ``signature`` fingerprints the whole listing (a new, removed or renamed
    file changes it); ``view`` is True when gpu_samples is not a Parquet view
    (then the view itself is read).
    """

    signature: str
    files: tuple[tuple[str, date | None], ...] = ()
    view: bool = False
    root: str | None = None

    @functools.cached_property
    def newest(self) -> date | None:
        return max((d for _, d in self.files if d is not None), default=None)

    def between(self, first: date | None, last: date | None) -> list[str]:
        """Paths whose date partition may hold samples in [first, last] (all if unknown)."""
        return [f for f, d in self.files if d is None
                or ((first is None or d >= first) and (last is None or d <= last))]


def sample_files(con: duckdb.DuckDBPyConnection) -> SampleFiles:
    """List the live GPU sample files once, through the store (gpulens.store.lake).

    Also points the connection's gpu_samples view at the new listing. A connection
    not opened by ``Store.connect`` has its own gpu_samples: it is read as a view.
    """
    listing = live_files(con, "gpu")
    if listing is None:
        return SampleFiles("view", view=True)
    row = con.execute(f"SELECT getvariable('{ROOT_VARIABLE}')").fetchone()
    root = str(Path(str(row[0])).parent) if row and row[0] else None
    return SampleFiles(listing.signature, listing.files, root=root)


def gpu_sample_signature(con: duckdb.DuckDBPyConnection) -> str:
    """Cheap fingerprint of the set of GPU sample files behind the gpu_samples view."""
    return sample_files(con).signature


def _source(sf: SampleFiles, first: date | None, last: date | None) -> tuple[str, dict[str, Any]]:
    """A FROM-clause source (and its parameters) of ts, node, gpu_index, util_gpu.

    Reads the listed Parquet files directly: only the date partitions in
    ``[first, last]``, no seed file, no ``union_by_name`` merge of every file's
    schema, only the four columns.
    """
    if sf.view:
        conds = []
        if first is not None:
            conds.append(f"date >= DATE '{first.isoformat()}'")
        if last is not None:
            conds.append(f"date <= DATE '{last.isoformat()}'")
        where = " AND ".join(conds) or "TRUE"
        return f"(SELECT ts, node, gpu_index, util_gpu FROM gpu_samples WHERE {where})", {}  # noqa: S608
    return _files_source(sf.between(first, last))


def _files_source(paths: list[str]) -> tuple[str, dict[str, Any]]:
    """``_source`` of an explicit list of GPU sample files."""
    if not paths:
        return ("(SELECT NULL::TIMESTAMP AS ts, NULL::VARCHAR AS node, NULL::SMALLINT AS gpu_index,"
                " NULL::FLOAT AS util_gpu WHERE false)"), {}
    return (
        "(SELECT ts, node, CAST(gpu_index AS SMALLINT) AS gpu_index, util_gpu"  # noqa: S608
        f" FROM read_parquet($files, hive_partitioning = true, hive_types = {_HIVE_TYPES}))",
        {"files": paths},
    )


def _open_end(con: duckdb.DuckDBPyConnection, f: Filters, sf: SampleFiles) -> datetime:
    running = con.execute(
        "SELECT count(*) FROM attempts WHERE end_time IS NULL AND start_time IS NOT NULL"
    ).fetchone()
    if not running or running[0] == 0:
        return f.clock()
    newest = sf.newest
    src, params = _source(sf, newest, newest)  # the newest date partition only
    found = con.execute(f"SELECT max(ts) FROM {src}", params).fetchone()  # noqa: S608
    if (not found or found[0] is None) and newest is not None:
        src, params = _source(sf, None, None)
        found = con.execute(f"SELECT max(ts) FROM {src}", params).fetchone()  # noqa: S608
    if found and found[0] is not None:
        last: datetime = found[0]
        return last.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return f.clock()


def cache_key(con: duckdb.DuckDBPyConnection, name: str) -> str | None:
    """The key the cached TEMP table ``name`` was built for on this connection (None: not built)."""
    try:
        row = con.execute(f"SELECT k FROM {_KEYS} WHERE name = ?", [name]).fetchone()  # noqa: S608
    except duckdb.CatalogException:
        return None
    return str(row[0]) if row else None


def set_cache_key(con: duckdb.DuckDBPyConnection, name: str, key: str) -> None:
    con.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_KEYS} (name VARCHAR PRIMARY KEY, k VARCHAR)")
    con.execute(f"INSERT OR REPLACE INTO {_KEYS} VALUES (?, ?)", [name, key])  # noqa: S608


def _base_key(f: Filters, sf: SampleFiles) -> str:
    lo, hi = f.window()
    return f"{lo.isoformat()}|{hi.isoformat()}|{(f.now or '')}|{sf.signature}"


def base_built(con: duckdb.DuckDBPyConnection, filters: Filters | None) -> bool:
    """Whether this connection holds the base of ``filters`` for the current sample files (then
    :func:`ensure_base` builds nothing)."""
    return cache_key(con, AH) == _base_key(filters or Filters(), sample_files(con))


def base_days(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """How this connection's last base build got its days: ``loaded`` (read from the saved
    base), ``built`` (from rollups and samples) and ``saved`` (how many it saved); {} if none."""
    text = cache_key(con, _BUILD)
    return json.loads(text) if text else {}


def ensure_base(con: duckdb.DuckDBPyConnection, filters: Filters | None) -> str:
    """Build (or reuse) the TEMP tables PL, AH and ATT for this connection and window.

    Returns the key they were built for (tables derived from them key on it).
    State tables are a fixed snapshot per connection; the samples are not, so
    the key includes a fingerprint of the sample files. The rows of whole closed days
    are read from the saved base when it was built from the same placements and
    sample files (saved.py), and saved when built.
    """
    f = filters or Filters()
    lo, hi = f.window()
    sf = sample_files(con)
    key = _base_key(f, sf)
    if cache_key(con, AH) == key:
        return key
    _build_placements(con, lo, hi, _open_end(con, f, sf))
    days = _placement_days(con)
    keyed = saved.keys(sf, days, lo, hi, _code())
    loaded = saved.load(keyed)
    fresh = _build_unsaved_hours(con, sf, set(days) - set(loaded), sorted(loaded))
    _insert_saved(con, loaded)
    stored = saved.save(con, AH, keyed, fresh)
    set_cache_key(con, _BUILD, json.dumps({"loaded": sorted(map(str, loaded)),
                                           "built": sorted(map(str, fresh)), "saved": stored}))
    con.execute(f"CREATE OR REPLACE TEMP TABLE {ATT} AS {_ATTEMPTS}")
    con.execute(f"DROP TABLE {_AIDS}")
    set_cache_key(con, AH, key)
    return key


def _build_placements(con: duckdb.DuckDBPyConnection, lo: datetime, hi: datetime,
                      open_end: datetime) -> None:
    """The TEMP tables PL (placements clipped to [lo, hi), open ones ending at ``open_end``)
    and _AIDS (their attempts)."""
    con.execute(_PL_SQL, {"lo": lo, "hi": hi, "open_end": open_end})
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_AIDS} AS"  # noqa: S608
                f" SELECT DISTINCT aid, job_id, attempt FROM {PL}")


def _placement_days(con: duckdb.DuckDBPyConnection) -> dict[date, saved.DayStats]:
    """The TEMP table _DAYS (placements per UTC day) and each day's placement statistics."""
    con.execute(_DAYS_SQL)
    return {d: saved.DayStats(*rest) for d, *rest in con.execute(_DAY_STATS).fetchall()}


def _build_unsaved_hours(con: duckdb.DuckDBPyConnection, sf: SampleFiles, fresh: set[date],
                         skip: list[date]) -> set[date]:
    """Fill AH with the placement-hours of every day but ``skip`` (the saved ones), reading
    the sample files of the ``fresh`` days; drops _DAYS and _HOURS. Returns ``fresh``."""
    con.execute(_HOURS_SQL, {"skip": skip})
    con.execute(f"DROP TABLE {_DAYS}")
    files = [(p, d) for p, d in sf.files if d is None or d in fresh]
    first, last = (min(fresh), max(fresh)) if fresh else (FAR_PAST.date(), FAR_PAST.date())
    # One scan of the samples, hash-joined to the placement-hours of the same GPU
    # and hour, with the minute range as a residual condition. The hash table
    # must be built on the placement-hours (the right side as written): DuckDB
    # estimates a direct Parquet scan from its first file (the store's one-row
    # seed file), so the join sides are pinned for this one statement.
    with _pinned_join_sides(con):
        _build_ah_rolled(con, sf, files, first, last)
    con.execute(f"DROP TABLE {_HOURS}")
    return fresh


def _insert_saved(con: duckdb.DuckDBPyConnection, loaded: dict[date, pa.Table]) -> None:
    """Append the saved days' rows to AH."""
    if loaded:
        con.register("__gl_saved", pa.concat_tables(loaded.values()))
        con.execute(f"INSERT INTO {AH} SELECT * FROM __gl_saved")  # noqa: S608
        con.unregister("__gl_saved")


#: placements clipped to the window; ``aid`` numbers their attempts (one per (job_id, attempt),
#: the attempts table's key; no sort)
_PL_SQL = f"""
    CREATE OR REPLACE TEMP TABLE {PL} AS
    WITH p AS (
        SELECT a.aid, p.job_id, p.attempt, p.node, CAST(p.gpu_index AS SMALLINT) AS gpu_index,
               greatest(date_trunc('minute', coalesce(p.start_time, a.start_time)), $lo) AS s,
               least(coalesce(p.end_time, a.end_time, $open_end), $hi) AS e
        FROM placements p
        JOIN (SELECT *, CAST(row_number() OVER () AS INTEGER) AS aid FROM attempts) a
          USING (job_id, attempt)
        WHERE coalesce(p.start_time, a.start_time) IS NOT NULL
    ), c AS (
        SELECT *, CASE WHEN e = date_trunc('minute', e) THEN e
                       ELSE date_trunc('minute', e) + INTERVAL 1 MINUTE END AS ce
        FROM p
    )
    SELECT aid, job_id, attempt, node, gpu_index, s, e, ce,
           {acc.alloc_minutes_sql("s", "ce")} AS alloc_min
    FROM c WHERE ce > s
"""  # noqa: S608 - identifiers are module constants

#: per placement and UTC day it touches: the minutes [lo, hi) it covers in that day, and a
#: 64-bit hash of what the day's rows depend on (its attempt, GPU and those minutes)
_DAYS_SQL = f"""
    CREATE OR REPLACE TEMP TABLE {_DAYS} AS
    SELECT aid, node, gpu_index, CAST(d AS DATE) AS d, greatest(s, d) AS lo,
           least(ce, d + INTERVAL 1 DAY) AS hi,
           hash(job_id, attempt, node, gpu_index, greatest(s, d), least(ce, d + INTERVAL 1 DAY)) AS ck
    FROM (SELECT aid, job_id, attempt, node, gpu_index, s, ce,
                 unnest(generate_series(date_trunc('day', s), ce - INTERVAL 1 MINUTE,
                                        INTERVAL 1 DAY)) AS d
          FROM {PL})
"""  # noqa: S608 - identifiers are module constants

#: per day: placements and an order-free checksum of them (a sum of 64-bit hashes)
_DAY_STATS = f"SELECT d, count(*), CAST(sum(ck) AS VARCHAR) FROM {_DAYS} GROUP BY d"  # noqa: S608

# Placement-hours: the minutes [lo_m, hi_m) (epoch minutes) each placement covers in each
# clock hour it touches, keyed by integers (GPU hash, epoch hour); none of the days in $skip
# (their rows were saved).
_HOURS_SQL = f"""
    CREATE OR REPLACE TEMP TABLE {_HOURS} AS
    SELECT CAST(row_number() OVER () AS INTEGER) AS hid, aid,
           hash(node, gpu_index, epoch_us(h) // 3600000000) AS gh, h,
           epoch_us(h) // 3600000000 AS hk,
           CAST(epoch_us(greatest(lo, h)) // 60000000 AS INTEGER) AS lo_m,
           CAST(epoch_us(least(hi, h + INTERVAL 1 HOUR)) // 60000000 AS INTEGER) AS hi_m
    FROM (SELECT aid, node, gpu_index, lo, hi,
                 unnest(generate_series(date_trunc('hour', lo), hi - INTERVAL 1 MINUTE,
                                        INTERVAL 1 HOUR)) AS h
          FROM {_DAYS} WHERE NOT list_contains(CAST($skip AS DATE[]), d))
"""  # noqa: S608 - identifiers are module constants


@contextmanager
def _pinned_join_sides(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Disable join reordering, build-side flipping and statistics propagation, then restore
    the setting."""
    row = con.execute("SELECT current_setting('disabled_optimizers')").fetchone()
    before = str(row[0]) if row and row[0] else ""
    names = [n for n in before.split(",") if n.strip()]
    pinned = ",".join([*names, *(n for n in _PIN if n not in names)])
    con.execute(f"SET disabled_optimizers = {_literal(pinned)}")
    try:
        yield
    finally:
        con.execute(f"SET disabled_optimizers = {_literal(before)}")


def _build_ah_rolled(con: duckdb.DuckDBPyConnection, sf: SampleFiles,
                     files: list[tuple[str, date | None]], first: date | None,
                     last: date | None) -> None:
    """AH from the gpu_hour rollups of the rolled ``files`` and raw samples of the rest (the
    connection's own gpu_samples view: days ``first`` to ``last``); a rollup that fails while it
    is read is quarantined (one warning) and its day read raw."""
    if sf.view or sf.root is None:
        _build_ah(con, *_source(sf, first, last), None)
        return
    root = Path(sf.root)
    while True:
        plan = rollups.plan(root, "gpu_hour", files, qr.warner(root))
        try:
            raw = [p for p, _ in plan.raw]
            _build_ah(con, *_files_source(raw), _rollup_sources(plan), raw=bool(raw))
            return
        except duckdb.Error as exc:
            bad = _damaged_rollups(plan, exc)
            if not bad:
                raise
            for path, why in bad:
                rollups.damaged(root, Path(path), why, qr.warner(root))


def _damaged_rollups(plan: rollups.RollupPlan, exc: duckdb.Error) -> list[tuple[str, str]]:
    """The rollup files of ``plan`` that a failed read names, else those that fail a full read."""
    named = [(p, str(exc).splitlines()[0][:200]) for p, _ in plan.rollups if p in str(exc)]
    if named:
        return named
    found = ((p, qr.read_fully(Path(p))) for p, _ in plan.rollups)
    return [(p, why) for p, why in found if why is not None]


_FLAT = "node, gpu_index, hk, n, su, mask"
_LISTS = "node, gpu_index, hk, mask, nm, sm"


def _rollup_sources(plan: rollups.RollupPlan) -> tuple[str, str, dict[str, Any]] | None:
    """FROM-clause sources of the rollup rows a plan uses: (flat columns, list columns, params)."""
    if not plan.rollups:
        return None
    parts: list[str] = []
    params: dict[str, Any] = {}
    whole = [p for p, nodes in plan.rollups if nodes is None]
    if whole:
        parts.append("SELECT {cols} FROM read_parquet($rfull)")
        params["rfull"] = whole
    for i, (path, nodes) in enumerate((p, n) for p, n in plan.rollups if n is not None):
        parts.append(f"SELECT {{cols}} FROM read_parquet($rp{i})"  # noqa: S608 - i is an int
                     f" WHERE list_contains($rn{i}, node)")
        params[f"rp{i}"], params[f"rn{i}"] = path, list(nodes)
    union = " UNION ALL ".join(parts)
    return f"({union.format(cols=_FLAT)})", f"({union.format(cols=_LISTS)})", params


_RAW_USED = """
    SELECT x.hid, count(smp.util_gpu) AS n, sum(smp.util_gpu) AS su,
           bit_or(CASE WHEN smp.util_gpu IS NOT NULL
                       THEN CAST(1 AS UBIGINT) << CAST(smp.m % 60 AS UBIGINT)
                       ELSE CAST(0 AS UBIGINT) END) AS mask
    FROM (SELECT hash(node, gpu_index, epoch_us(ts) // 3600000000) AS gh,
                 CAST(epoch_us(ts) // 60000000 AS INTEGER) AS m,
                 nullif(util_gpu, CAST('nan' AS FLOAT)) AS util_gpu
          FROM {src}) smp
    JOIN {hours} x ON x.gh = smp.gh AND smp.m >= x.lo_m AND smp.m < x.hi_m
    GROUP BY x.hid
"""

# whole placement-hours: the hour's row as it is; part of an hour: its minutes [lo_m, hi_m),
# which lie in the hour hk (so lo_m % 60 is the first one's place in the hour's lists)
_ROLL_USED = """
    SELECT x.hid, r.n, r.su, CAST(r.mask AS UBIGINT) AS mask
    FROM (SELECT hash(node, gpu_index, hk) AS gh, hk, n, su, mask FROM {flat}) r
    JOIN {hours} x ON x.gh = r.gh AND x.hk = r.hk AND x.hi_m - x.lo_m = 60
    UNION ALL
    SELECT hid,
           CASE WHEN nm IS NULL THEN bit_count(mask & rm)
                ELSE coalesce(list_sum(list_slice(nm, a + 1, b)), 0) END,
           coalesce(list_sum(list_slice(sm, a + 1, b)), 0.0), mask & rm
    FROM (SELECT x.hid, r.nm, r.sm, CAST(r.mask AS UBIGINT) AS mask,
                 x.lo_m % 60 AS a, x.lo_m % 60 + x.hi_m - x.lo_m AS b,
                 ((CAST(1 AS UBIGINT) << CAST(x.hi_m - x.lo_m AS UBIGINT)) - CAST(1 AS UBIGINT))
                   << CAST(x.lo_m % 60 AS UBIGINT) AS rm
          FROM (SELECT hash(node, gpu_index, hk) AS gh, hk, mask, nm, sm FROM {lists}) r
          JOIN {hours} x ON x.gh = r.gh AND x.hk = r.hk AND x.hi_m - x.lo_m < 60)
"""


def _build_ah(con: duckdb.DuckDBPyConnection, src: str, params: dict[str, Any],
              roll: tuple[str, str, dict[str, Any]] | None, *, raw: bool = True) -> None:
    """AH: the raw samples of ``src`` and the rollup rows of ``roll`` (flat, lists, params)
    joined to the placement-hours; counts, sums and minute masks add up across the two, and
    the placement-hours' figures add up to their attempt's hour.

    ``raw=False`` (``src`` holds no file): a placement-hour gets at most one rollup row (one
    per GPU and hour), taken as it is instead of grouped (0.2 s of CPU on 1.4 M rows)."""
    parts = [_RAW_USED.format(src=src, hours=_HOURS)] if raw or roll is None else []
    if roll is not None:
        parts.append(_ROLL_USED.format(flat=roll[0], lists=roll[1], hours=_HOURS))
        params = {**params, **roll[2]}
    if not raw and roll is not None:
        params = {k: v for k, v in params.items() if k != "files"}
        used = f"""SELECT hid, CAST(n AS BIGINT) AS n, CAST(su AS DOUBLE) AS su, bit_count(mask) AS k
            FROM ({parts[0]})"""  # noqa: S608 - fragments are module constants
    else:
        used = f"""SELECT hid, CAST(sum(n) AS BIGINT) AS n, CAST(sum(su) AS DOUBLE) AS su,
                   bit_count(bit_or(mask)) AS k
            FROM ({" UNION ALL ".join(parts)}) GROUP BY hid"""  # noqa: S608
    con.execute(_AH_SQL.format(used=used), params)


#: per placement-hour (``ph``): allocated minutes, samples, their sum, sampled minutes and busy
#: minutes; summed per attempt and hour (the analyses never need a placement's own hours)
_AH_SQL = f"""
    CREATE OR REPLACE TEMP TABLE {AH} AS
    WITH used AS ({{used}}),
    ph AS (
        SELECT x.aid, x.h, x.hi_m - x.lo_m AS alloc_min, coalesce(used.n, 0) AS n,
               coalesce(used.su, 0.0) AS su, coalesce(used.k, 0) AS k,
               {acc.busy_minutes_sql("used.n", "used.su", "used.k")} AS busy_min
        FROM {_HOURS} x LEFT JOIN used USING (hid)
    ),
    g AS (
        SELECT aid, h, CAST(sum(alloc_min) AS BIGINT) AS alloc_min, CAST(sum(n) AS BIGINT) AS n,
               CAST(sum(su) AS DOUBLE) AS su, CAST(sum(k) AS BIGINT) AS k,
               CAST(sum(busy_min) AS DOUBLE) AS busy_min
        FROM ph GROUP BY aid, h
    )
    SELECT a.job_id, a.attempt, g.h, g.alloc_min, g.n, g.su, g.k, g.busy_min
    FROM g JOIN {_AIDS} a USING (aid)
"""  # noqa: S608 - identifiers are module constants; paths are parameters


#: CTEs ``x`` and ``s`` over a CTE ``agg`` of per-attempt sums: each attempt's status
#: (accounting.attempt_status_sql) and failure key, for accounting.lost_sql. Shared with
#: the Spark engine (spark.py), whose SQL reads it alike.
STATUS_CTES = f"""x AS (
        SELECT job_id, attempt, status, max(attempt) OVER (PARTITION BY job_id) AS last_attempt
        FROM attempts
    ),
    s AS (
        SELECT agg.*,
               {acc.attempt_status_sql("x.status", "agg.attempt", "x.last_attempt", "j.status")} AS st,
               fl.job_id AS failure_key
        FROM agg JOIN x ON x.job_id = agg.job_id AND x.attempt = agg.attempt
        LEFT JOIN jobs j ON j.job_id = agg.job_id
        LEFT JOIN (SELECT DISTINCT job_id, attempt FROM failures) fl
          ON fl.job_id = agg.job_id AND fl.attempt = agg.attempt
    )"""  # noqa: S608 - no user values are formatted in

_ATTEMPTS = f"""
    WITH agg AS (
        SELECT a.job_id, a.attempt, p.gpus, p.servers, p.first_minute,
               ah.alloc_min, ah.busy_min, ah.k, ah.n, ah.su
        FROM (SELECT aid, count(DISTINCT (node, gpu_index)) AS gpus,
                     count(DISTINCT node) AS servers, min(s) AS first_minute
              FROM {PL} GROUP BY aid) p
        JOIN {_AIDS} a USING (aid)
        JOIN (SELECT job_id, attempt, sum(alloc_min) AS alloc_min, sum(busy_min) AS busy_min,
                     sum(k) AS k, sum(n) AS n, sum(su) AS su
              FROM {AH} GROUP BY job_id, attempt) ah
          ON ah.job_id = a.job_id AND ah.attempt = a.attempt
    ),
    {STATUS_CTES}
    SELECT * EXCLUDE (failure_key), {acc.lost_sql("st", "failure_key")} AS lost FROM s
"""  # noqa: S608 - identifiers are module constants


@functools.cache
def _code() -> str:
    """The code's part of the saved days' keys (saved.py): every statement that makes AH."""
    return saved.code_digest(_PL_SQL, _DAYS_SQL, _HOURS_SQL, _RAW_USED, _ROLL_USED, _AH_SQL)


def attempts_sql() -> str:
    """Per-attempt aggregate over PL/AH (a SQL subquery; no parameters; after ensure_base)."""
    return f"SELECT * FROM {ATT}"  # noqa: S608 - a module constant

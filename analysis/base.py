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
each sample to the placement-hours of its GPU and hour with a hash join on two
integer keys (``hash(node, gpu_index)``, epoch hour) and the residual range
test ``lo_m <= minute < hi_m``, and aggregates per placement-hour: sample
count, util sum and the minutes with samples (a 60-bit mask, so several
samples in one minute, e.g. a 5 s collector, count as one minute, at the
hour's mean). Two placements on the same GPU and minute both get that minute.

The samples are read straight from their Parquet files (only ``ts``,
``gpu_index``, ``util_gpu`` and the hive ``node``/``date``; no
``union_by_name`` schema merge over every file), and the date partitions
outside the placements' time span (and the filter window) are pruned. The
result is cached in TEMP tables on the caller's connection, keyed by the time
window and the list of sample files, so running several analyses on one
connection scans the samples once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from typing import Any

import duckdb

from analysis.filters import FAR_FUTURE, FAR_PAST, Filters

__all__ = ["PH", "PL", "attempts_sql", "ensure_base", "gpu_sample_signature", "gpu_sample_source"]

PL = "__gl_pl"  # placements: pid, job_id, attempt, node, gpu_index, s, e, ce, alloc_min
PH = "__gl_ph"  # per placement and hour: pid, h, alloc_min, n, su, k, busy_min
_KEY = "__gl_key"
_HOURS = "__gl_hours"
_SEED_NODE = "__seed__"
_PIN = ("join_order", "build_side_probe_side")


def _sample_glob(con: duckdb.DuckDBPyConnection) -> str | None:
    """The Parquet glob behind the gpu_samples view (None if it is not a Parquet view)."""
    sql = con.execute(
        "SELECT sql FROM duckdb_views() WHERE view_name = 'gpu_samples' AND NOT internal"
    ).fetchone()
    if not sql:
        return None
    text = str(sql[0])
    start = text.find("read_parquet('")
    if start < 0:
        return None
    start += len("read_parquet('")
    end = start
    while True:  # the literal ends at a quote that is not doubled
        end = text.find("'", end)
        if end < 0:
            return None
        if text[end + 1 : end + 2] == "'":
            end += 2
            continue
        return text[start:end].replace("''", "'")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def gpu_sample_source(
    con: duckdb.DuckDBPyConnection, first: date | None = None, last: date | None = None
) -> str:
    """A FROM-clause source of the GPU samples with columns ts, node, gpu_index, util_gpu.

    Reads the Parquet files behind the ``gpu_samples`` view directly (no
    ``union_by_name`` merge of every file's schema at each bind), without the
    store's seed file, and prunes the ``date`` partitions outside
    ``[first, last]`` (date literals, so DuckDB skips those files unopened).
    Falls back to the view when it is not a Parquet view.
    """
    conds = []
    if first is not None:
        conds.append(f"date >= DATE '{first.isoformat()}'")
    if last is not None:
        conds.append(f"date <= DATE '{last.isoformat()}'")
    pattern = _sample_glob(con)
    if pattern is None:
        where = " AND ".join(conds) or "TRUE"
        return f"(SELECT ts, node, gpu_index, util_gpu FROM gpu_samples WHERE {where})"  # noqa: S608
    conds.append(f"node <> '{_SEED_NODE}'")
    return (
        "(SELECT ts, node, CAST(gpu_index AS SMALLINT) AS gpu_index, util_gpu"  # noqa: S608
        f" FROM read_parquet({_literal(pattern)}, hive_partitioning = true,"
        " hive_types = {'kind': VARCHAR, 'date': DATE, 'node': VARCHAR})"
        f" WHERE {' AND '.join(conds)})"
    )


def _file_scan(con: duckdb.DuckDBPyConnection, pattern: str | None) -> tuple[str, date | None]:
    """(fingerprint of the GPU sample files, newest date partition) from one file listing."""
    if pattern is None:
        return "none", None
    row = con.execute(
        "SELECT count(*), coalesce(sum(hash(file)), 0),"
        " max(TRY_CAST(regexp_extract(file, 'date=([0-9]{4}-[0-9]{2}-[0-9]{2})', 1) AS DATE))"
        "   FILTER (WHERE file NOT LIKE ?)"
        " FROM glob(?)",
        [f"%node={_SEED_NODE}%", pattern],
    ).fetchone()
    if not row:
        return "none", None
    return f"{row[0]}:{row[1]}", row[2]


def gpu_sample_signature(con: duckdb.DuckDBPyConnection) -> str:
    """Cheap fingerprint of the set of GPU sample files behind the gpu_samples view."""
    return _file_scan(con, _sample_glob(con))[0]


def _open_end(con: duckdb.DuckDBPyConnection, f: Filters, newest: date | None) -> datetime:
    running = con.execute(
        "SELECT count(*) FROM attempts WHERE end_time IS NULL AND start_time IS NOT NULL"
    ).fetchone()
    if not running or running[0] == 0:
        return f.clock()
    # the newest date partition only (a date literal: the other files are not opened)
    found = con.execute(
        f"SELECT max(ts) FROM {gpu_sample_source(con, newest, newest)}"  # noqa: S608
    ).fetchone()
    if found and found[0] is not None:
        last: datetime = found[0]
        return last.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return f.clock()


def ensure_base(con: duckdb.DuckDBPyConnection, filters: Filters | None) -> None:
    """Build (or reuse) the TEMP tables PL and PH for this connection and window."""
    f = filters or Filters()
    lo, hi = f.window()
    pattern = _sample_glob(con)
    sig, newest = _file_scan(con, pattern)
    key = f"{lo.isoformat()}|{hi.isoformat()}|{(f.now or '')}|{sig}"
    try:
        row = con.execute(f"SELECT k FROM {_KEY}").fetchone()  # noqa: S608 - our own names
        if row and row[0] == key:
            return
    except duckdb.CatalogException:
        pass
    open_end = _open_end(con, f, newest)
    params: dict[str, Any] = {"lo": lo, "hi": hi, "open_end": open_end}
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {PL} AS
        WITH p AS (
            SELECT p.job_id, p.attempt, p.node, CAST(p.gpu_index AS SMALLINT) AS gpu_index,
                   greatest(date_trunc('minute', coalesce(p.start_time, a.start_time)), $lo) AS s,
                   least(coalesce(p.end_time, a.end_time, $open_end), $hi) AS e
            FROM placements p JOIN attempts a USING (job_id, attempt)
            WHERE coalesce(p.start_time, a.start_time) IS NOT NULL
        ), c AS (
            SELECT *, CASE WHEN e = date_trunc('minute', e) THEN e
                           ELSE date_trunc('minute', e) + INTERVAL 1 MINUTE END AS ce
            FROM p
        )
        SELECT CAST(row_number() OVER (ORDER BY job_id, attempt, node, gpu_index, s) AS INTEGER) AS pid,
               job_id, attempt, node, gpu_index, s, e, ce,
               CAST(date_diff('minute', s, ce) AS BIGINT) AS alloc_min
        FROM c WHERE ce > s
        """,  # noqa: S608 - identifiers are module constants
        params,
    )
    # Placement-hours: the minutes [lo_m, hi_m) (epoch minutes) each placement
    # covers in each clock hour it touches, keyed by integers (GPU hash, epoch hour).
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {_HOURS} AS
        SELECT CAST(row_number() OVER () AS INTEGER) AS hid, pid,
               hash(node, gpu_index, epoch_us(h) // 3600000000) AS gh, h,
               epoch_us(greatest(s, h)) // 60000000 AS lo_m,
               epoch_us(least(ce, h + INTERVAL 1 HOUR)) // 60000000 AS hi_m
        FROM (SELECT pid, node, gpu_index, s, ce,
                     unnest(generate_series(date_trunc('hour', s), ce - INTERVAL 1 MINUTE,
                                            INTERVAL 1 HOUR)) AS h
              FROM {PL})
        """  # noqa: S608 - identifiers are module constants
    )
    span = con.execute(f"SELECT min(s), max(ce) FROM {PL}").fetchone()  # noqa: S608
    if span and span[0] is not None:
        # only the date partitions the placements touch (samples are in UTC days)
        first, last = span[0].date(), span[1].date()
    else:
        first = last = FAR_PAST.date()
    if lo > FAR_PAST:
        first = max(first, lo.date())
    if hi < FAR_FUTURE:
        last = min(last, hi.date())
    src = gpu_sample_source(con, first, last)
    # One scan of the samples, hash-joined to the placement-hours of the same GPU
    # and hour, with the minute range as a residual condition. The hash table
    # must be built on the placement-hours (the right side as written): DuckDB
    # estimates a direct Parquet scan from its first file (the store's one-row
    # seed file), so the join sides are pinned for this one statement.
    with _pinned_join_sides(con):
        _build_ph(con, src)
    con.execute(f"DROP TABLE {_HOURS}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_KEY} AS SELECT CAST(? AS VARCHAR) AS k", [key])


@contextmanager
def _pinned_join_sides(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Disable join reordering and build-side flipping, then restore the setting."""
    row = con.execute("SELECT current_setting('disabled_optimizers')").fetchone()
    before = str(row[0]) if row and row[0] else ""
    names = [n for n in before.split(",") if n.strip()]
    pinned = ",".join([*names, *(n for n in _PIN if n not in names)])
    con.execute(f"SET disabled_optimizers = {_literal(pinned)}")
    try:
        yield
    finally:
        con.execute(f"SET disabled_optimizers = {_literal(before)}")


def _build_ph(con: duckdb.DuckDBPyConnection, src: str) -> None:
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {PH} AS
        WITH smp AS (
            SELECT hash(node, gpu_index, epoch_us(ts) // 3600000000) AS gh,
                   epoch_us(ts) // 60000000 AS m, util_gpu
            FROM {src}
            WHERE util_gpu IS NOT NULL AND NOT isnan(util_gpu)
        ),
        used AS (
            SELECT x.hid, count(*) AS n, sum(smp.util_gpu) AS su,
                   bit_count(bit_or(CAST(1 AS UBIGINT) << CAST(smp.m % 60 AS UBIGINT))) AS k
            FROM smp JOIN {_HOURS} x
              ON x.gh = smp.gh AND smp.m >= x.lo_m AND smp.m < x.hi_m
            GROUP BY x.hid
        )
        SELECT x.pid, x.h, x.hi_m - x.lo_m AS alloc_min,
               coalesce(used.n, 0) AS n, coalesce(used.su, 0.0) AS su, coalesce(used.k, 0) AS k,
               CASE WHEN used.n > 0 THEN used.su / used.n * used.k / 100.0 ELSE 0.0 END AS busy_min
        FROM {_HOURS} x LEFT JOIN used USING (hid)
        """  # noqa: S608 - identifiers are module constants; dates are formatted by us
    )


def attempts_sql() -> str:
    """Per-attempt aggregate over PL/PH (a SQL subquery; no parameters)."""
    return f"""
        SELECT pl.job_id, pl.attempt,
               count(DISTINCT (pl.node, pl.gpu_index)) AS gpus,
               count(DISTINCT pl.node) AS servers,
               min(pl.s) AS first_minute,
               sum(ph.alloc_min) AS alloc_min, sum(ph.busy_min) AS busy_min,
               sum(ph.k) AS k, sum(ph.n) AS n, sum(ph.su) AS su
        FROM {PL} pl JOIN (
            SELECT pid, sum(alloc_min) AS alloc_min, sum(busy_min) AS busy_min,
                   sum(k) AS k, sum(n) AS n, sum(su) AS su
            FROM {PH} GROUP BY pid
        ) ph USING (pid)
        GROUP BY pl.job_id, pl.attempt
    """  # noqa: S608 - identifiers are module constants

"""The shared first step of every utilization-based analysis: GPU-minutes per placement.

Definition (issue 4): a job's GPU-minutes are the whole minutes ``m`` with
``floor(start) <= m < end`` of each attempt, on each of the attempt's GPUs
(``placements``). A running attempt (``end_time`` NULL) runs up to the minute
after the newest GPU sample in the store, or to ``Filters.now`` when there are
no samples. A minute's utilization is the mean of the non-NULL, non-NaN
``util_gpu`` samples whose ``ts`` falls in that minute on that GPU; minutes
without such a sample count as allocated but not as busy (NA samples are
skipped, as the Philly notebook does).

Samples are aggregated per (GPU, hour); a placement takes the aggregates of
the hours it covers entirely and, for its partly covered first and last hour,
the samples of those GPU-hours filtered to its minutes. Everything is per
placement and hour (minutes with samples counted exactly with a 60-bit mask,
so several samples in one minute, e.g. a 5 s collector, count once at their
mean). Two placements on the same GPU and minute both get that minute. The result is cached in TEMP tables on the caller's
connection, keyed by the time window and the list of sample files, so running
several analyses on one connection scans the samples once.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import duckdb

from analysis.filters import Filters

__all__ = ["PH", "PL", "attempts_sql", "ensure_base", "gpu_sample_signature"]

PL = "__gl_pl"  # placements: pid, job_id, attempt, node, gpu_index, s, e, ce, alloc_min
PH = "__gl_ph"  # per placement and hour: pid, h, alloc_min, n, su, k, busy_min
_KEY = "__gl_key"
_HOURS = "__gl_hours"


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
    return text[start : text.find("'", start)].replace("''", "'")


def gpu_sample_signature(con: duckdb.DuckDBPyConnection) -> str:
    """Cheap fingerprint of the set of GPU sample files behind the gpu_samples view."""
    pattern = _sample_glob(con)
    if pattern is None:
        return "none"
    row = con.execute("SELECT count(*), coalesce(sum(hash(file)), 0) FROM glob(?)", [pattern]).fetchone()
    return f"{row[0]}:{row[1]}" if row else "none"


def _open_end(con: duckdb.DuckDBPyConnection, f: Filters) -> datetime:
    running = con.execute(
        "SELECT count(*) FROM attempts WHERE end_time IS NULL AND start_time IS NOT NULL"
    ).fetchone()
    if not running or running[0] == 0:
        return f.clock()
    pattern = _sample_glob(con)
    newest = None
    if pattern:
        dates = con.execute(
            "SELECT max(regexp_extract(file, 'date=([0-9-]+)', 1)) FROM glob(?)"
            " WHERE file NOT LIKE '%node=__seed__%'", [pattern]
        ).fetchone()
        newest = dates[0] if dates else None
    if newest and re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(newest)):
        # a literal (validated above), so DuckDB prunes the hive partitions to one day
        row = con.execute(
            f"SELECT max(ts) FROM gpu_samples WHERE date = DATE '{newest}'"  # noqa: S608
        ).fetchone()
    else:
        row = con.execute("SELECT max(ts) FROM gpu_samples").fetchone()
    if row and row[0] is not None:
        last: datetime = row[0]
        return last.replace(second=0, microsecond=0) + timedelta(minutes=1)
    return f.clock()


def ensure_base(con: duckdb.DuckDBPyConnection, filters: Filters | None) -> None:
    """Build (or reuse) the TEMP tables PL and PH for this connection and window."""
    f = filters or Filters()
    lo, hi = f.window()
    sig = gpu_sample_signature(con)
    key = f"{lo.isoformat()}|{hi.isoformat()}|{(f.now or '')}|{sig}"
    try:
        row = con.execute(f"SELECT k FROM {_KEY}").fetchone()  # noqa: S608 - our own names
        if row and row[0] == key:
            return
    except duckdb.CatalogException:
        pass
    open_end = _open_end(con, f)
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
    # Per placement and hour: allocated minutes, and the samples in those minutes.
    # Hours a placement covers entirely take a per-(GPU, hour) aggregate of the
    # samples; the (at most two) partly covered edge hours of each placement
    # take the samples of that GPU-hour filtered to the covered minutes. Both
    # join on integer keys (hash(node, gpu_index), epoch hour); minutes with
    # samples are counted exactly with a 60-bit mask.
    smp = """
        SELECT hash(node, gpu_index) AS g, epoch_us(ts) // 3600000000 AS hidx,
               epoch_us(ts) // 60000000 AS m, util_gpu
        FROM gpu_samples
        WHERE util_gpu IS NOT NULL AND NOT isnan(util_gpu)
          AND ts >= $lo AND ts < $hi
          AND date >= CAST($lo AS DATE) AND date <= CAST($hi AS DATE)
    """
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {_HOURS} AS
        SELECT pid, hash(node, gpu_index) AS g, h, epoch_us(h) // 3600000000 AS hidx,
               epoch_us(greatest(s, h)) // 60000000 AS lo_m,
               epoch_us(least(ce, h + INTERVAL 1 HOUR)) // 60000000 AS hi_m
        FROM (SELECT pid, node, gpu_index, s, ce,
                     unnest(generate_series(date_trunc('hour', s), ce - INTERVAL 1 MINUTE,
                                            INTERVAL 1 HOUR)) AS h
              FROM {PL})
        """  # noqa: S608 - identifiers are module constants
    )
    # One scan of the samples: grouped per (GPU, hour), except in edge GPU-hours
    # (found by a probe into the small set of edge keys), grouped per minute.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {PH} AS
        WITH edge_keys AS (
            SELECT DISTINCT g, hidx FROM {_HOURS} WHERE hi_m - lo_m < 60
        ),
        grouped AS (
            SELECT smp.g, smp.hidx, CASE WHEN ek.g IS NULL THEN -1 ELSE smp.m END AS m,
                   count(*) AS n, sum(smp.util_gpu) AS su,
                   bit_or(CAST(1 AS UBIGINT) << CAST(smp.m % 60 AS UBIGINT)) AS bits
            FROM ({smp}) smp LEFT JOIN edge_keys ek ON ek.g = smp.g AND ek.hidx = smp.hidx
            GROUP BY ALL
        ),
        used AS (
            SELECT x.pid, x.hidx, sum(gr.n) AS n, sum(gr.su) AS su,
                   bit_count(bit_or(gr.bits)) AS k
            FROM {_HOURS} x JOIN grouped gr ON gr.g = x.g AND gr.hidx = x.hidx
            WHERE (x.hi_m - x.lo_m = 60 AND gr.m = -1)
               OR (x.hi_m - x.lo_m < 60 AND gr.m >= x.lo_m AND gr.m < x.hi_m)
            GROUP BY x.pid, x.hidx
        )
        SELECT x.pid, x.h, x.hi_m - x.lo_m AS alloc_min,
               coalesce(used.n, 0) AS n, coalesce(used.su, 0.0) AS su, coalesce(used.k, 0) AS k,
               CASE WHEN used.n > 0 THEN used.su / used.n * used.k / 100.0 ELSE 0.0 END AS busy_min
        FROM {_HOURS} x LEFT JOIN used ON used.pid = x.pid AND used.hidx = x.hidx
        """,  # noqa: S608 - identifiers are module constants
        {"lo": lo, "hi": hi},
    )
    con.execute(f"DROP TABLE {_HOURS}")
    con.execute(f"CREATE OR REPLACE TEMP TABLE {_KEY} AS SELECT CAST(? AS VARCHAR) AS k", [key])


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

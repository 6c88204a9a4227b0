"""Effective GPU utilization per job, user, vc, day, cluster, and as a time series."""

from __future__ import annotations

from typing import Literal

import duckdb
import pandas as pd

from gpulens.analysis import accounting as acc
from gpulens.analysis.base import AH, attempts_sql, cache_key, ensure_base, set_cache_key
from gpulens.analysis.filters import Filters, job_filter_params, job_filter_sql

__all__ = ["ensure_jobs", "job_utilization", "jobs_sql", "utilization", "utilization_timeseries"]


JOBS = "__gl_jobs"  # per job, all jobs (filters are applied by jobs_sql)

_JOBS = f"""
    WITH att AS ({attempts_sql()}),
    main AS (
        SELECT * FROM att
        QUALIFY row_number() OVER (PARTITION BY job_id ORDER BY alloc_min DESC, attempt DESC) = 1
    ),
    tot AS (
        SELECT job_id, sum(alloc_min) AS alloc_min, sum(busy_min) AS busy_min, sum(k) AS k,
               coalesce(sum(alloc_min) FILTER (WHERE NOT lost), 0) AS kept_alloc_min,
               coalesce(sum(busy_min) FILTER (WHERE NOT lost), 0) AS kept_busy_min
        FROM att GROUP BY job_id
    ),
    times AS (
        SELECT job_id, min(start_time) AS start_time,
               CASE WHEN bool_or(end_time IS NULL AND start_time IS NOT NULL) THEN NULL
                    ELSE max(end_time) END AS end_time
        FROM attempts GROUP BY job_id
    ),
    fail AS (
        SELECT job_id, arg_max(category, attempt) AS failure_category,
               arg_max(origin, attempt) AS failure_origin
        FROM failures GROUP BY job_id
    )
    SELECT j.job_id, j."user", j.vc, j.status, j.submitted,
           coalesce(main.gpus, j.requested_gpus) AS gpus,
           main.servers,
           times.start_time, times.end_time,
           coalesce(tot.alloc_min, 0) AS tot_alloc_min,
           {acc.hours_sql("tot.alloc_min")} AS allocated_gpu_hours,
           {acc.hours_sql("tot.busy_min")} AS busy_gpu_hours,
           {acc.util_pct_sql("tot.busy_min", "tot.k")} AS mean_util,
           fail.failure_category, fail.failure_origin,
           main.attempt AS main_attempt,
           {acc.hours_sql("main.alloc_min")} AS main_allocated_gpu_hours,
           {acc.util_pct_sql("main.busy_min", "main.k")} AS main_util,
           coalesce(tot.kept_alloc_min, 0) AS kept_alloc_min,
           coalesce(tot.kept_busy_min, 0) AS kept_busy_min
    FROM jobs j
    LEFT JOIN tot USING (job_id)
    LEFT JOIN main USING (job_id)
    LEFT JOIN times USING (job_id)
    LEFT JOIN fail USING (job_id)
"""  # noqa: S608 - identifiers are module constants


def ensure_jobs(con: duckdb.DuckDBPyConnection, filters: Filters | None) -> None:
    """Build (or reuse) the per-job TEMP table for this connection and window."""
    key = ensure_base(con, filters)
    if cache_key(con, JOBS) != key:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {JOBS} AS {_JOBS}")
        set_cache_key(con, JOBS, key)


def jobs_sql() -> str:
    """Per-job aggregate (a SQL subquery using $vcs, $users, $windowed, $lo, $hi;
    after ``ensure_jobs``).

    ``gpus``/``servers``/``main_*`` describe the job's main attempt: the one with
    the most allocated GPU-minutes (the latest on a tie). ``kept_alloc_min`` and
    ``kept_busy_min`` are the GPU-minutes of the attempts that are not lost
    (see :mod:`gpulens.analysis.accounting`).
    """
    return f"""
        SELECT * EXCLUDE (submitted, tot_alloc_min) FROM {JOBS} j
        WHERE {job_filter_sql("j")}
          AND (NOT $windowed OR j.tot_alloc_min > 0
               OR (j.submitted >= $lo AND j.submitted < $hi))
    """  # noqa: S608 - no user values are formatted in


def _job_params(filters: Filters | None) -> dict[str, object]:
    f = filters or Filters()
    lo, hi = f.window()
    return {
        **job_filter_params(f),
        "windowed": f.start is not None or f.end is not None,
        "lo": lo,
        "hi": hi,
    }


def job_utilization(con: duckdb.DuckDBPyConnection, filters: Filters | None = None) -> pd.DataFrame:
    """One row per job: allocated and busy GPU-hours, mean utilization (0-100), and the diagnosis
    of its last diagnosed failed attempt (failure category and origin; None when none)."""
    ensure_jobs(con, filters)
    sql = f"""
        SELECT job_id, "user", vc, status, gpus, servers, start_time, end_time,
               allocated_gpu_hours, busy_gpu_hours, mean_util, failure_category, failure_origin
        FROM ({jobs_sql()}) ORDER BY allocated_gpu_hours DESC, job_id
    """  # noqa: S608
    return con.execute(sql, _job_params(filters)).df()


_BY = {
    "cluster": ("", ""),
    "user": ('j."user" AS "user", ', 'j."user"'),
    "vc": ("j.vc AS vc, ", "j.vc"),
    "day": ("CAST(ph.h AS DATE) AS day, ", "CAST(ph.h AS DATE)"),
}


def utilization(
    con: duckdb.DuckDBPyConnection,
    filters: Filters | None = None,
    by: Literal["cluster", "user", "vc", "day"] | str = "cluster",
) -> pd.DataFrame:
    """Allocated and busy GPU-hours and mean utilization, cluster-wide or grouped."""
    if by not in _BY:
        raise ValueError(f"by must be one of {sorted(_BY)}, not {by!r}")
    ensure_base(con, filters)
    select, group = _BY[by]
    group_clause = f"GROUP BY {group} ORDER BY {group}" if group else ""
    sql = f"""
        SELECT {select}
               {acc.sum_hours_sql("ph.alloc_min")} AS allocated_gpu_hours,
               {acc.sum_hours_sql("ph.busy_min")} AS busy_gpu_hours,
               {acc.util_pct_sql("sum(ph.busy_min)", "sum(ph.k)")} AS mean_util,
               count(DISTINCT ph.job_id) AS jobs
        FROM {AH} ph JOIN jobs j ON j.job_id = ph.job_id
        WHERE {job_filter_sql("j")}
        {group_clause}
    """  # noqa: S608 - fragments are module constants chosen by `by`
    return con.execute(sql, job_filter_params(filters)).df()


def utilization_timeseries(
    con: duckdb.DuckDBPyConnection,
    filters: Filters | None = None,
    freq: Literal["hour", "day"] | str = "hour",
) -> pd.DataFrame:
    """Per hour or day: GPUs in the cluster, mean allocated GPUs, mean busy GPUs."""
    if freq not in ("hour", "day"):
        raise ValueError(f"freq must be 'hour' or 'day', not {freq!r}")
    ensure_base(con, filters)
    total = con.execute("SELECT count(*) FROM gpus").fetchone()
    total_gpus = int(total[0]) if total else 0
    if total_gpus == 0:
        row = con.execute("SELECT count(*) FROM (SELECT DISTINCT node, gpu_index FROM placements)").fetchone()
        total_gpus = int(row[0]) if row else 0
    sql = f"""
        SELECT date_trunc('{freq}', ph.h) AS ts,
               CAST($total AS BIGINT) AS total_gpus,
               {acc.mean_gpus_sql("sum(ph.alloc_min)", freq)} AS allocated_gpus,
               {acc.mean_gpus_sql("sum(ph.busy_min)", freq)} AS busy_gpus
        FROM {AH} ph JOIN jobs j ON j.job_id = ph.job_id
        WHERE {job_filter_sql("j")}
        GROUP BY 1 ORDER BY 1
    """  # noqa: S608 - freq is validated against a fixed set
    return con.execute(sql, {**job_filter_params(filters), "total": total_gpus}).df()

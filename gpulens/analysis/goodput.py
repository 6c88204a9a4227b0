"""The goodput waterfall and the cost of failures."""

from __future__ import annotations

from typing import Literal

import duckdb
import pandas as pd

from gpulens.analysis.base import attempts_sql, ensure_base
from gpulens.analysis.early_stop import CV, _params, ensure_convergence
from gpulens.analysis.filters import Filters, job_filter_sql

__all__ = ["STAGES", "failure_cost", "goodput", "waterfall_long"]

#: waterfall stages, in order: allocated minus each loss equals effective
STAGES = ("allocated", "idle", "failed_or_killed", "post_convergence", "effective")

_KEYS = {None: ("", ""), "vc": ("j.vc", "vc"), "user": ('j."user"', "user")}


def goodput(
    con: duckdb.DuckDBPyConnection,
    filters: Filters | None = None,
    by: Literal["vc", "user"] | None = None,
    metric: str = "accuracy",
    tolerance: float = 0.001,
) -> pd.DataFrame:
    """Allocated GPU-hours, then what is lost at each stage, then effective GPU-hours.

    - idle: allocated minus busy (1 - utilization; unmeasured minutes count as idle)
    - failed_or_killed: busy GPU-hours of attempts that failed or were killed
    - post_convergence: busy GPU-hours of the other attempts after the job's
      hindsight convergence epoch (``early_stop`` with ``metric``/``tolerance``)
    - effective: what is left. ``allocated = idle + failed_or_killed +
      post_convergence + effective``.
    """
    if by not in _KEYS:
        raise ValueError("by must be None, 'vc' or 'user'")
    params = _params(filters, metric, tolerance)
    ensure_base(con, filters)
    ensure_convergence(con, metric, tolerance)
    expr, name = _KEYS[by]
    key_sel = f"{expr} AS {name}, " if by else ""
    key_grp = "GROUP BY 1" if by else ""
    sql = f"""
        WITH att AS ({attempts_sql()}),
        cv AS (SELECT * FROM {CV}),
        a AS (
            SELECT att.*, j.vc, j."user",
                   coalesce(x.status, CASE WHEN att.attempt = (SELECT max(attempt) FROM attempts y
                                                               WHERE y.job_id = att.job_id)
                                           THEN j.status ELSE 'failed' END) AS st,
                   cv.fraction_epochs
            FROM att JOIN jobs j USING (job_id)
            LEFT JOIN attempts x ON x.job_id = att.job_id AND x.attempt = att.attempt
            LEFT JOIN cv ON cv.job_id = att.job_id
            WHERE {job_filter_sql("j")}
        ),
        g AS (
            SELECT {key_sel}
                   coalesce(sum(alloc_min), 0) / 60.0 AS allocated,
                   coalesce(sum(alloc_min - busy_min), 0) / 60.0 AS idle,
                   coalesce(sum(busy_min) FILTER (WHERE st IN ('failed', 'killed')), 0) / 60.0
                       AS failed_or_killed,
                   coalesce(sum(busy_min * (1 - fraction_epochs))
                            FILTER (WHERE st NOT IN ('failed', 'killed') AND fraction_epochs IS NOT NULL),
                            0) / 60.0 AS post_convergence
            FROM a j {key_grp}
        )
        SELECT *, allocated - idle - failed_or_killed - post_convergence AS effective FROM g
    """  # noqa: S608 - fragments are module constants chosen by `by`
    for unused in ("windowed", "lo", "hi", "metric", "sign", "tol"):
        params.pop(unused)
    return waterfall_long(con.execute(sql, params).df(), by)


def waterfall_long(wide: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """One row per (key and) stage from the wide per-key sums (shared by the Spark engine)."""
    name = _KEYS[by][1]
    id_vars = [name] if by else []
    long = wide.melt(id_vars=id_vars, value_vars=list(STAGES), var_name="stage",
                     value_name="gpu_hours")
    long["stage"] = pd.Categorical(long["stage"], categories=list(STAGES), ordered=True)
    long = long.sort_values([*id_vars, "stage"]).reset_index(drop=True)
    long["stage"] = long["stage"].astype(str)
    return long[[*id_vars, "stage", "gpu_hours"]]


def failure_cost(con: duckdb.DuckDBPyConnection, filters: Filters | None = None) -> pd.DataFrame:
    """GPU-hours and runtime-to-failure by failure category and origin.

    Counts every attempt that failed (its own status, or the job's for the last
    attempt; earlier attempts of a retried job count as failed) or that has a
    row in ``failures``. Category/origin come from ``failures`` (written by
    ``gpulens diagnose``); an undiagnosed failure is 'undiagnosed'/'unknown'.
    With a time window, failures whose attempt ended inside it are counted.
    """
    f = filters or Filters()
    ensure_base(con, f)
    lo, hi = f.window()
    sql = f"""
        WITH att AS ({attempts_sql()}),
        a AS (
            SELECT x.job_id, x.attempt, x.start_time, x.end_time,
                   coalesce(x.status, CASE WHEN x.attempt = max(x.attempt) OVER (PARTITION BY x.job_id)
                                           THEN j.status ELSE 'failed' END) AS st
            FROM attempts x JOIN jobs j USING (job_id)
            WHERE {job_filter_sql("j")}
        )
        SELECT coalesce(fl.category, 'undiagnosed') AS category,
               coalesce(fl.origin, 'unknown') AS origin,
               count(*) AS failures,
               coalesce(sum(att.alloc_min), 0) / 60.0 AS gpu_hours,
               avg(date_diff('second', a.start_time, a.end_time)) / 3600.0
                   AS mean_runtime_to_failure_hours,
               median(date_diff('second', a.start_time, a.end_time)) / 3600.0
                   AS median_runtime_to_failure_hours
        FROM a
        LEFT JOIN failures fl ON fl.job_id = a.job_id AND fl.attempt = a.attempt
        LEFT JOIN att ON att.job_id = a.job_id AND att.attempt = a.attempt
        WHERE (a.st = 'failed' OR fl.job_id IS NOT NULL)
          AND (NOT $windowed OR (a.end_time >= $lo AND a.end_time < $hi))
        GROUP BY 1, 2
        ORDER BY gpu_hours DESC, failures DESC, category, origin
    """  # noqa: S608
    params = {
        "vcs": list(f.vcs),
        "users": list(f.users),
        "windowed": f.start is not None or f.end is not None,
        "lo": lo,
        "hi": hi,
    }
    return con.execute(sql, params).df()

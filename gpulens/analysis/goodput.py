"""The goodput waterfall and the cost of failures."""

from __future__ import annotations

from typing import Any, Literal

import duckdb
import pandas as pd

from gpulens.analysis import accounting as acc
from gpulens.analysis.base import attempts_sql, ensure_base
from gpulens.analysis.early_stop import CV, _params, ensure_convergence
from gpulens.analysis.filters import Filters, job_filter_sql

__all__ = ["STAGES", "failure_cost", "goodput", "waterfall_long", "waterfall_sql"]

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

    One row per stage (and key): ``stage``, ``basis`` (accounting.STAGE_BASIS)
    and ``gpu_hours``; every stage is a part of the allocated GPU-hours.

    - idle: allocated minus busy (1 - utilization; unmeasured minutes count as idle)
    - failed_or_killed: busy GPU-hours of lost attempts (failed, killed or
      diagnosed; accounting.lost_sql) = ``failure_cost``'s busy GPU-hours
    - post_convergence: busy GPU-hours of the other attempts after the job's
      hindsight convergence epoch (``early_stop`` with ``metric``/``tolerance``)
      = ``early_stop``'s saveable busy GPU-hours
    - effective: what is left. ``allocated = idle + failed_or_killed +
      post_convergence + effective``.
    """
    if by not in _KEYS:
        raise ValueError("by must be None, 'vc' or 'user'")
    params = _params(filters, metric, tolerance)
    ensure_base(con, filters)
    ensure_convergence(con, metric, tolerance)
    sql = _goodput_sql(by)
    for unused in ("windowed", "lo", "hi", "metric", "sign", "tol"):
        params.pop(unused)
    return waterfall_long(con.execute(sql, params).df(), by)


def _goodput_sql(by: Literal["vc", "user"] | None) -> str:
    """The waterfall's wide sums per ``by`` key over the filtered jobs' attempts."""
    expr, name = _KEYS[by]
    key_sel = f"{expr} AS {name}, " if by else ""
    key_grp = "GROUP BY 1" if by else ""
    return f"""
        WITH a AS (
            SELECT att.*, j.vc, j."user", cv.fraction_epochs
            FROM ({attempts_sql()}) att JOIN jobs j USING (job_id)
            LEFT JOIN {CV} cv ON cv.job_id = att.job_id
            WHERE {job_filter_sql("j")}
        ),
        {waterfall_sql(key_sel, key_grp)}
    """  # noqa: S608 - fragments are module constants chosen by `by`


def waterfall_sql(key_sel: str, key_grp: str) -> str:
    """The waterfall's wide sums over a CTE ``a`` of attempts (alloc_min, busy_min, lost,
    fraction_epochs): a CTE ``g`` and the final SELECT (shared by the Spark engine)."""
    return f"""g AS (
            SELECT {key_sel}
                   {acc.sum_hours_sql("alloc_min")} AS allocated,
                   {acc.sum_hours_sql(acc.idle_minutes_sql("alloc_min", "busy_min"))} AS idle,
                   {acc.sum_hours_sql("busy_min", "lost")} AS failed_or_killed,
                   {acc.sum_hours_sql(acc.saveable_minutes_sql("busy_min", "fraction_epochs"),
                                      "NOT lost AND fraction_epochs IS NOT NULL")}
                       AS post_convergence
            FROM a j {key_grp}
        )
        SELECT *, {acc.effective_hours_sql("allocated", "idle", "failed_or_killed",
                                           "post_convergence")} AS effective FROM g
    """  # noqa: S608 - key_sel/key_grp are module constants chosen by `by`


def waterfall_long(wide: pd.DataFrame, by: str | None) -> pd.DataFrame:
    """One row per (key and) stage from the wide per-key sums (shared by the Spark engine)."""
    name = _KEYS[by][1]
    id_vars = [name] if by else []
    long = wide.melt(id_vars=id_vars, value_vars=list(STAGES), var_name="stage",
                     value_name="gpu_hours")
    long["stage"] = pd.Categorical(long["stage"], categories=list(STAGES), ordered=True)
    long = long.sort_values([*id_vars, "stage"]).reset_index(drop=True)
    long["stage"] = long["stage"].astype(str)
    long["basis"] = long["stage"].map(acc.STAGE_BASIS)
    return long[[*id_vars, "stage", "basis", "gpu_hours"]]


def failure_cost(con: duckdb.DuckDBPyConnection, filters: Filters | None = None) -> pd.DataFrame:
    """Allocated and busy GPU-hours and runtime-to-failure by failure category and origin.

    Counts every lost attempt (accounting.lost_sql: failed or killed by its own
    status, or the job's for the last attempt, earlier attempts of a retried job
    counting as failed; or with a row in ``failures``), so the busy GPU-hours sum
    to the goodput waterfall's ``failed_or_killed`` stage. Category/origin come
    from ``failures`` (written by ``gpulens diagnose``); an undiagnosed one is
    'undiagnosed'/'unknown', or 'killed'/'unknown' when it was killed. With a time window, an attempt counts when it held
    GPUs inside the window (its GPU-hours clipped to it) or ended inside it.
    """
    f = filters or Filters()
    ensure_base(con, f)
    return con.execute(_failure_cost_sql(), _failure_cost_params(f)).df()


def _failure_cost_sql() -> str:
    """Per category and origin, the lost attempts' count, GPU-hours and runtimes (parameters:
    :func:`_failure_cost_params`)."""
    status = acc.attempt_status_sql("x.status", "x.attempt",
                                    "max(x.attempt) OVER (PARTITION BY x.job_id)", "j.status")
    return f"""
        WITH a AS (
            SELECT x.job_id, x.attempt, x.start_time, x.end_time, {status} AS st
            FROM attempts x JOIN jobs j USING (job_id)
            WHERE {job_filter_sql("j")}
        )
        SELECT coalesce(fl.category, CASE WHEN a.st = 'killed' THEN 'killed' ELSE 'undiagnosed' END)
                   AS category,
               coalesce(fl.origin, 'unknown') AS origin,
               count(*) AS failures,
               {acc.sum_hours_sql("att.alloc_min")} AS allocated_gpu_hours,
               {acc.sum_hours_sql("att.busy_min")} AS busy_gpu_hours,
               {acc.runtime_hours_sql("avg(date_diff('second', a.start_time, a.end_time))")}
                   AS mean_runtime_to_failure_hours,
               {acc.runtime_hours_sql("median(date_diff('second', a.start_time, a.end_time))")}
                   AS median_runtime_to_failure_hours
        FROM a
        LEFT JOIN failures fl ON fl.job_id = a.job_id AND fl.attempt = a.attempt
        LEFT JOIN ({attempts_sql()}) att ON att.job_id = a.job_id AND att.attempt = a.attempt
        WHERE {acc.lost_sql("a.st", "fl.job_id")}
          AND (NOT $windowed OR att.alloc_min > 0 OR (a.end_time >= $lo AND a.end_time < $hi))
        GROUP BY 1, 2
        ORDER BY allocated_gpu_hours DESC, failures DESC, category, origin
    """  # noqa: S608


def _failure_cost_params(f: Filters) -> dict[str, Any]:
    """The job filter and the time window of :func:`_failure_cost_sql`."""
    lo, hi = f.window()
    return {
        "vcs": list(f.vcs),
        "users": list(f.users),
        "windowed": f.start is not None or f.end is not None,
        "lo": lo,
        "hi": hi,
    }

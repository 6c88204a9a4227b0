"""Drill-down views: one job, one node."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from gpulens.analysis.base import base_built
from gpulens.analysis.early_stop import lower_is_better
from gpulens.analysis.filters import Filters
from gpulens.analysis.utilization import job_utilization
from gpulens.store.scan import node_source

__all__ = ["JobDetail", "job_detail", "node_timeline"]


@dataclass
class JobDetail:
    """Everything known about one job (DataFrames are empty when there is nothing)."""

    job: dict[str, Any]
    attempts: pd.DataFrame
    placements: pd.DataFrame
    gpu_timeline: pd.DataFrame
    metrics: pd.DataFrame
    converged_epoch: int | None
    failures: pd.DataFrame
    extra: dict[str, Any] = field(default_factory=dict)


def job_detail(
    con: duckdb.DuckDBPyConnection, job_id: str, *, tolerance: float = 0.001
) -> JobDetail | None:
    """The job's row, attempts, placements, per-GPU utilization timeline, metric
    curves, hindsight convergence epoch and diagnosed failures; None if unknown."""
    jobs = con.execute('SELECT * FROM jobs WHERE job_id = ?', [job_id]).df()
    if jobs.empty:
        return None
    job = _job_row(jobs)
    attempts = con.execute(
        "SELECT * FROM attempts WHERE job_id = ? ORDER BY attempt", [job_id]
    ).df()
    placements = con.execute(
        "SELECT p.*, coalesce(p.start_time, a.start_time) AS s, coalesce(p.end_time, a.end_time) AS e"
        " FROM placements p JOIN attempts a USING (job_id, attempt)"
        " WHERE p.job_id = ? ORDER BY p.attempt, p.node, p.gpu_index",
        [job_id],
    ).df()
    timeline = _gpu_timeline(con, job_id, placements)
    metrics = con.execute(
        "SELECT step, metric, value FROM job_metrics WHERE job_id = ? ORDER BY metric, step", [job_id]
    ).df()
    converged = _converged_epoch(metrics, tolerance)
    failures = con.execute(
        "SELECT * FROM failures WHERE job_id = ? ORDER BY attempt", [job_id]
    ).df()
    _add_utilization(job, _utilization_row(con, job_id, placements))
    return JobDetail(job, attempts, placements.drop(columns=["s", "e"]), timeline, metrics,
                     converged, failures)


def _job_row(jobs: pd.DataFrame) -> dict[str, Any]:
    """The first row of ``jobs`` as a dict, missing values as None."""
    job: dict[str, Any] = {}
    for k, v in jobs.iloc[0].to_dict().items():
        # List columns (inputs) arrive as numpy arrays: pd.isna() of an array is not a bool.
        if isinstance(v, np.ndarray):
            v = v.tolist()
        job[str(k)] = v if isinstance(v, list | tuple) or not pd.isna(v) else None
    return job


def _gpu_timeline(con: duckdb.DuckDBPyConnection, job_id: str, placements: pd.DataFrame) -> pd.DataFrame:
    """The raw GPU samples (ts, node, gpu_index, util_gpu) of the job's GPUs inside its
    placements' minutes; empty when no placement has a start."""
    if placements.empty or not placements["s"].notna().any():
        return pd.DataFrame(columns=["ts", "node", "gpu_index", "util_gpu"])
    lo = pd.Timestamp(placements["s"].min()).floor("min").to_pydatetime()
    ends = placements["e"]
    hi = (pd.Timestamp(ends.max()).to_pydatetime() if ends.notna().all()
          else datetime(2200, 1, 1))
    nodes = sorted(set(placements["node"]))
    # the job's nodes' files of its days only (store.scan), as raw samples: the point here
    src, files = node_source(con, "gpu", nodes, lo.date(), (hi + timedelta(minutes=1)).date())
    return con.execute(
        _timeline_sql(src),
        {"job": job_id, "nodes": nodes, "lo": lo, "hi": hi + timedelta(minutes=1), **files},
    ).df()


def _timeline_sql(src: str) -> str:
    """The timeline query over the sample source ``src`` (store.scan's)."""
    return f"""
            SELECT s.ts, s.node, s.gpu_index, s.util_gpu
            FROM {src} s
            JOIN (SELECT DISTINCT p.node, p.gpu_index, date_trunc('minute', p.s) AS s, p.e
                  FROM (SELECT node, gpu_index,
                               coalesce(p.start_time, a.start_time) AS s,
                               coalesce(p.end_time, a.end_time) AS e
                        FROM placements p JOIN attempts a USING (job_id, attempt)
                        WHERE p.job_id = $job) p) p
              ON s.node = p.node AND s.gpu_index = p.gpu_index
             AND date_trunc('minute', s.ts) >= p.s AND (p.e IS NULL OR date_trunc('minute', s.ts) < p.e)
            WHERE list_contains($nodes, s.node) AND s.ts >= $lo AND s.ts < $hi
              AND s.date >= CAST($lo AS DATE) AND s.date <= CAST($hi AS DATE)
            ORDER BY s.ts, s.node, s.gpu_index
            """  # noqa: S608 - src is store.scan's source; values are parameters


def _converged_epoch(metrics: pd.DataFrame, tolerance: float) -> int | None:
    """The first step whose value of the main metric (accuracy, else the first by name) is
    within ``tolerance`` of its best; None without metrics."""
    if metrics.empty:
        return None
    names = set(metrics["metric"])
    name = "accuracy" if "accuracy" in names else sorted(names)[0]
    curve = metrics[metrics["metric"] == name].groupby("step")["value"].mean().dropna()
    if curve.empty:
        return None
    sign = -1.0 if lower_is_better(name) else 1.0
    v = curve * sign
    best = v.max()
    ok = v[v >= best - tolerance * abs(best)]
    return int(ok.index[0])


def _add_utilization(job: dict[str, Any], row: pd.DataFrame) -> None:
    """Copy the job's utilization figures from its :func:`job_utilization` row into ``job``."""
    if row.empty:
        return
    for col in ("allocated_gpu_hours", "busy_gpu_hours", "mean_util", "gpus", "servers"):
        val = row.iloc[0][col]
        job[col] = None if pd.isna(val) else val


def _utilization_row(con: duckdb.DuckDBPyConnection, job_id: str, placements: pd.DataFrame) -> pd.DataFrame:
    """The job's row of :func:`job_utilization` (the whole store's).

    Read from the whole store's table when this connection holds it (a dashboard session that
    opened the Overview); else from the base of the job's own time span, which holds every
    placement-minute of the job and so the same row (a job's figures are sums over its own
    placement-hours; its status reads the state tables): the base of one job's hours, not of the
    store's month. A job that held no GPU-minute is read from the whole store's table.
    """
    starts = placements["s"].dropna() if not placements.empty else pd.Series(dtype=object)
    if not base_built(con, None) and len(starts):
        ends = placements["e"]
        window = Filters(start=pd.Timestamp(starts.min()).floor("min").to_pydatetime(),
                         end=None if ends.isna().any() else pd.Timestamp(ends.max()).to_pydatetime())
        util = job_utilization(con, window)
        row = util[util["job_id"] == job_id]
        if not row.empty:
            return row
    util = job_utilization(con, None)
    return util[util["job_id"] == job_id]


def node_timeline(
    con: duckdb.DuckDBPyConnection, node: str, filters: Filters | None = None
) -> pd.DataFrame:
    """Per minute on one node: mean GPU utilization, summed PCIe traffic, new network
    errors (increase of rx+tx error counters) and XID events."""
    f = filters or Filters()
    lo, hi = f.window()
    params = {"node": node, "lo": lo, "hi": hi}
    sql = """
        WITH g AS (
            SELECT date_trunc('minute', ts) AS ts, avg(util_gpu) AS util_gpu,
                   sum(pcie_tx_bps) AS pcie_tx_bps, sum(pcie_rx_bps) AS pcie_rx_bps
            FROM gpu_samples
            WHERE node = $node AND ts >= $lo AND ts < $hi
            GROUP BY 1
        ), n0 AS (
            SELECT date_trunc('minute', ts) AS ts, device,
                   max(coalesce(rx_errors_total, 0) + coalesce(tx_errors_total, 0)) AS errs
            FROM net_samples
            WHERE node = $node AND ts >= $lo AND ts < $hi
            GROUP BY 1, 2
        ), n AS (
            SELECT ts, sum(greatest(errs - coalesce(prev, errs), 0)) AS net_errors
            FROM (SELECT *, lag(errs) OVER (PARTITION BY device ORDER BY ts) AS prev FROM n0)
            GROUP BY 1
        ), x AS (
            SELECT date_trunc('minute', ts) AS ts, count(*) AS xid_count
            FROM xid_events
            WHERE node = $node AND ts >= $lo AND ts < $hi
            GROUP BY 1
        )
        SELECT ts, g.util_gpu, g.pcie_tx_bps, g.pcie_rx_bps,
               coalesce(n.net_errors, 0) AS net_errors, coalesce(x.xid_count, 0) AS xid_count
        FROM g FULL OUTER JOIN n USING (ts) FULL OUTER JOIN x USING (ts)
        ORDER BY ts
    """
    return con.execute(sql, params).df()

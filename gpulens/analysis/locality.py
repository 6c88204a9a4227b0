"""Locality impact: utilization by GPUs and servers spanned, and GPU-hours lost to spreading."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd

from gpulens.analysis import accounting as acc
from gpulens.analysis.filters import Filters
from gpulens.analysis.utilization import _job_params, ensure_jobs, jobs_sql

__all__ = ["bootstrap_ci", "gpus_per_server", "locality", "locality_loss", "locality_loss_table",
           "locality_table", "locality_units"]


def locality_units(con: duckdb.DuckDBPyConnection, filters: Filters | None = None) -> pd.DataFrame:
    """One row per job with samples: gpus, servers, allocated GPU-hours and utilization
    of its main attempt."""
    ensure_jobs(con, filters)
    sql = f"""
        SELECT job_id, "user", vc, gpus, servers, main_allocated_gpu_hours AS allocated_gpu_hours,
               main_util AS util
        FROM ({jobs_sql()})
        WHERE main_util IS NOT NULL AND gpus >= 1 AND servers >= 1
        ORDER BY job_id
    """  # noqa: S608 - job order makes the seeded bootstrap reproducible
    return con.execute(sql, _job_params(filters)).df()


def bootstrap_ci(
    values: np.ndarray, n_boot: int, rng: np.random.Generator, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean (memory-bounded)."""
    n = len(values)
    if n == 0:
        return (float("nan"), float("nan"))
    if n == 1 or n_boot <= 0:
        v = float(values.mean())
        return (v, v)
    means = np.empty(n_boot)
    chunk = max(1, 4_000_000 // n)
    for i in range(0, n_boot, chunk):
        b = min(chunk, n_boot - i)
        idx = rng.integers(0, n, size=(b, n))
        means[i : i + b] = values[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    return (float(np.quantile(means, alpha)), float(np.quantile(means, 1.0 - alpha)))


def locality(
    con: duckdb.DuckDBPyConnection,
    filters: Filters | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """The Philly table: per GPU count and servers spanned, job count, mean/median
    utilization of the jobs (each job weighs one) and a 95% bootstrap CI of the mean."""
    return locality_table(locality_units(con, filters), n_boot, seed)


def locality_table(units: pd.DataFrame, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """The locality table from :func:`locality_units` rows (shared by the Spark engine)."""
    cols = ["gpus", "servers", "jobs", "mean_util", "median_util", "ci_low", "ci_high"]
    if units.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in cols})
    rng = np.random.default_rng(seed)
    rows = []
    for key, grp in units.groupby(["gpus", "servers"], sort=True):
        gpus, servers = (int(x) for x in key)  # type: ignore[call-overload]
        vals = grp["util"].to_numpy(dtype="float64")
        lo, hi = bootstrap_ci(vals, n_boot, rng)
        rows.append(
            {
                "gpus": gpus,
                "servers": servers,
                "jobs": len(vals),
                "mean_util": float(vals.mean()),
                "median_util": float(np.median(vals)),
                "ci_low": lo,
                "ci_high": hi,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def gpus_per_server(con: duckdb.DuckDBPyConnection) -> int:
    """GPUs of the largest server: from the nodes table, else from placements."""
    row = con.execute(
        "SELECT greatest(coalesce((SELECT max(gpus) FROM nodes), 0),"
        " coalesce((SELECT max(gpu_index) + 1 FROM placements), 0),"
        " coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM gpus GROUP BY node)), 0))"
    ).fetchone()
    return max(1, int(row[0])) if row and row[0] else 1


def locality_loss(con: duckdb.DuckDBPyConnection, filters: Filters | None = None) -> pd.DataFrame:
    """Busy GPU-hours lost to relaxed locality, one row per spread job.

    A job is spread when it spans more servers than ``ceil(gpus / gpus_per_server)``.
    ``consolidated_util`` is the mean utilization of the jobs of the same GPU count
    that ran on the minimum number of servers; ``lost_busy_gpu_hours`` is
    ``(consolidated_util - actual_util) / 100 * allocated_gpu_hours`` of the main
    attempt (accounting.locality_lost_busy_hours; negative when the spread job
    did better). Jobs of a size with no consolidated peer get NULL.
    """
    units = locality_units(con, filters)
    return locality_loss_table(units, gpus_per_server(con) if not units.empty else 1)


def locality_loss_table(units: pd.DataFrame, gps: int) -> pd.DataFrame:
    """Spread jobs from :func:`locality_units` rows and the GPUs of the largest server
    (shared by the Spark engine)."""
    cols = ["job_id", "user", "vc", "gpus", "servers", "min_servers", "allocated_gpu_hours",
            "actual_util", "consolidated_util", "lost_busy_gpu_hours"]
    if units.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in cols})
    units = units.assign(min_servers=-(-units["gpus"] // gps))
    base = (
        units[units["servers"] == units["min_servers"]]
        .groupby("gpus")["util"].mean().rename("consolidated_util")
    )
    spread = units[units["servers"] > units["min_servers"]].join(base, on="gpus")
    spread = spread.rename(columns={"util": "actual_util"})
    spread["lost_busy_gpu_hours"] = acc.locality_lost_busy_hours(
        spread["allocated_gpu_hours"], spread["consolidated_util"], spread["actual_util"])
    spread = spread.sort_values(["lost_busy_gpu_hours", "job_id"], ascending=[False, True],
                                na_position="last")
    return spread[cols].reset_index(drop=True)

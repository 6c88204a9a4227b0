"""GPU-hour accounting, defined once: the bases and the arithmetic every figure comes from.

Every analysis, the cluster exporter, the dashboard and the CLI take their
GPU-hours from the expressions and functions here (a test,
``tests/analysis/test_accounting.py``, fails on GPU-hour arithmetic anywhere
else). docs/accounting.md has the definitions with a worked example.

Units
    A *GPU-minute* is one whole clock minute ``m`` on one GPU of a placement,
    with ``floor(start) <= m < end`` (a partial first or last minute counts
    whole; several placements on one GPU and minute each count it). A job on
    *n* GPUs holds *n* GPU-minutes per minute. GPU-hours = GPU-minutes / 60.

Bases
    ``allocated``  every GPU-minute held by an attempt, used or not.
    ``busy``       per GPU-minute with at least one utilization sample, the
                   mean sample / 100 (a 50 % minute is half a busy minute);
                   unmeasured minutes count as allocated, not busy.
    ``idle``       allocated - busy.
    ``effective``  busy GPU-minutes of attempts that neither failed nor were
                   killed, before the job's hindsight convergence: busy -
                   failed_or_killed - post_convergence.

Attempts and jobs
    Each basis is computed per attempt (base.py's per-placement-hour minutes
    summed over the attempt's placements) and a job's figure is the sum of its
    attempts. An attempt is *lost* (:data:`LOST_STATUSES`) when its status,
    or for an attempt without one the job's status on its last attempt
    (earlier attempts of a retried job count as failed), is failed or killed,
    or when ``gpulens diagnose`` wrote a failure for it. Every GPU-minute
    falls in exactly one waterfall stage, so early-stop savings count only
    attempts that are not lost (a lost attempt's GPU-hours are failure cost).

Engines
    The SQL expressions are shared by the DuckDB analyses and the Spark engine
    (spark.py): their constants are written as DOUBLE casts (``60.0`` would be a
    DECIMAL in Spark SQL, which rounds quotients to 6 places) and the one
    function that differs in syntax, :func:`alloc_minutes_sql`, takes a
    ``dialect``.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import numpy as np
import pandas as pd

__all__ = [
    "BASES",
    "Dialect",
    "LOST_STATUSES",
    "MINUTES_PER_HOUR",
    "STAGE_BASIS",
    "alloc_minutes_sql",
    "attempt_status_sql",
    "busy_minutes_sql",
    "effective_hours_sql",
    "gpu_hours_sql",
    "hours",
    "hours_sql",
    "idle_minutes_sql",
    "locality_lost_busy_hours",
    "lost_sql",
    "mean_gpus_sql",
    "runtime_hours",
    "runtime_hours_sql",
    "saveable_minutes_sql",
    "share",
    "sum_hours_sql",
    "util_pct_sql",
]

MINUTES_PER_HOUR: Final = 60.0
_SECONDS_PER_HOUR: Final = 3600.0
_MINUTES_PER_FREQ: Final = {"hour": MINUTES_PER_HOUR, "day": 24 * MINUTES_PER_HOUR}

#: the bases a GPU-hour figure can be on (its field name starts with one of them)
BASES: Final[tuple[str, ...]] = ("allocated", "busy", "idle", "effective")

#: attempt statuses whose GPU-hours are a loss (the waterfall's failed_or_killed stage)
LOST_STATUSES: Final[tuple[str, ...]] = ("failed", "killed")

#: basis of each goodput waterfall stage (all stages are parts of the allocated GPU-hours)
STAGE_BASIS: Final[dict[str, str]] = {
    "allocated": "allocated",
    "idle": "idle",
    "failed_or_killed": "busy",
    "post_convergence": "busy",
    "effective": "busy",
}


#: SQL engines the expressions are written for
Dialect = Literal["duckdb", "spark"]


def _dbl(value: float) -> str:
    """A DOUBLE constant in both DuckDB and Spark SQL."""
    return f"CAST({float(value)!r} AS DOUBLE)"


_HOUR_SQL: Final = _dbl(MINUTES_PER_HOUR)
_PCT_SQL: Final = _dbl(100.0)


# ------------------------------------------------------------------ GPU-minutes
def alloc_minutes_sql(start: str, end: str, dialect: Dialect = "duckdb") -> str:
    """Allocated GPU-minutes of one placement from its first minute to its rounded-up end
    (clock-minute boundaries crossed, as DuckDB's ``date_diff('minute', ...)`` counts)."""
    if dialect == "spark":
        def epoch_minute(ts: str) -> str:
            return f"CAST(floor(unix_micros({ts}) / 60000000) AS BIGINT)"
        return f"({epoch_minute(end)} - {epoch_minute(start)})"
    return f"CAST(date_diff('minute', {start}, {end}) AS BIGINT)"


def busy_minutes_sql(n: str, su: str, k: str) -> str:
    """Busy GPU-minutes of a placement-hour: the mean of its ``n`` samples (sum ``su``,
    0-100) times its ``k`` sampled minutes, / 100 (exact for one sample per minute)."""
    return f"CASE WHEN {n} > 0 THEN {su} / {n} * {k} / {_PCT_SQL} ELSE {_dbl(0)} END"


def idle_minutes_sql(alloc: str, busy: str) -> str:
    """Idle GPU-minutes: allocated minus busy."""
    return f"({alloc} - {busy})"


# ----------------------------------------------------------------- to GPU-hours
def hours_sql(minutes: str) -> str:
    """GPU-hours of a GPU-minute expression (NULL counts as 0)."""
    return f"coalesce({minutes}, 0) / {_HOUR_SQL}"


def sum_hours_sql(minutes: str, where: str | None = None) -> str:
    """GPU-hours of an aggregate ``sum(minutes)``, optionally ``FILTER (WHERE where)``."""
    filt = f" FILTER (WHERE {where})" if where else ""
    return hours_sql(f"sum({minutes}){filt}")


def saveable_minutes_sql(minutes: str, fraction_needed: str) -> str:
    """The GPU-minutes after a job's stop point, epochs assumed equally long."""
    return f"{minutes} * (1 - {fraction_needed})"


def mean_gpus_sql(minutes: str, freq: str) -> str:
    """Mean GPUs held over a period of ``freq`` ('hour' or 'day') from its GPU-minutes."""
    return f"{minutes} / {_dbl(_MINUTES_PER_FREQ[freq])}"


def gpu_hours_sql(gpus: str, hours: str) -> str:
    """Allocated GPU-hours of ``gpus`` GPUs held for ``hours`` wall-clock hours."""
    return f"{gpus} * {hours}"


def runtime_hours_sql(seconds: str) -> str:
    """Wall-clock hours (not GPU-hours) of a duration in seconds."""
    return f"{seconds} / {_SECONDS_PER_HOUR}"


def util_pct_sql(busy_minutes: str, sampled_minutes: str) -> str:
    """Mean utilization (0-100) over the sampled minutes: busy / sampled * 100 (NULL if none)."""
    return f"CASE WHEN {sampled_minutes} > 0 THEN {_PCT_SQL} * {busy_minutes} / {sampled_minutes} END"


def effective_hours_sql(allocated: str, *losses: str) -> str:
    """The effective stage: allocated GPU-hours minus every loss stage."""
    return " - ".join([allocated, *losses])


def hours(minutes: float) -> float:
    """GPU-hours of a number of GPU-minutes (Python side)."""
    return float(minutes) / MINUTES_PER_HOUR


def runtime_hours(seconds: Any) -> Any:
    """Wall-clock hours of seconds (a number or a pandas Series); not GPU-hours."""
    return seconds / _SECONDS_PER_HOUR


def share(part: Any, whole: float) -> Any:
    """``part / whole`` of two figures on one basis (a number or a Series); NaN if whole is 0."""
    return part / whole if whole else part * float("nan")


# --------------------------------------------------------------------- attempts
def attempt_status_sql(status: str, attempt: str, last_attempt: str, job_status: str) -> str:
    """An attempt's status: its own, else the job's on the last attempt, else 'failed'."""
    return (f"coalesce({status}, CASE WHEN {attempt} = {last_attempt} "
            f"THEN {job_status} ELSE 'failed' END)")


def lost_sql(status: str, failure_key: str) -> str:
    """Whether an attempt's GPU-hours are lost: failed or killed, or diagnosed as a failure."""
    statuses = ", ".join(f"'{s}'" for s in LOST_STATUSES)
    return f"(coalesce({status} IN ({statuses}), false) OR {failure_key} IS NOT NULL)"


# ------------------------------------------------------------------- locality
def locality_lost_busy_hours(
    allocated_hours: pd.Series, consolidated_util: pd.Series, actual_util: pd.Series
) -> pd.Series:
    """Busy GPU-hours a spread job missed against consolidated jobs of its size:
    ``(consolidated_util - actual_util) / 100 * allocated GPU-hours`` (utilizations 0-100)."""
    gap = consolidated_util.astype("float64") - actual_util.astype("float64")
    return pd.Series(np.asarray(gap / 100.0 * allocated_hours.astype("float64")),
                     index=allocated_hours.index)

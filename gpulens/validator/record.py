"""Validations in the store: one row per run, and the summary operators read."""

from __future__ import annotations

import getpass
import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpulens.errors import StoreError

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

__all__ = ["DEFAULT_FAILURE_HOURS", "record_validation", "validation_summary"]

#: Hours a prevented failure would have held each requested GPU when the store
#: has no failure history for its category (validate.failure_hours).
DEFAULT_FAILURE_HOURS = 0.5


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def record_validation(store: Any, result: Any, *, user: str | None = None) -> int:
    """Insert ``result`` (a ValidationResult) into ``validations``; returns its id."""
    import duckdb

    try:
        with store.write() as con:
            row = con.execute(
                'INSERT INTO validations (ts, "user", command, verdict, category, origin,'
                " steps_completed, seconds, peak_memory_bytes, device, requested_gpus, gpu_type,"
                " evidence) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
                [
                    datetime.now(UTC).replace(tzinfo=None),
                    user or _user(),
                    result.command,
                    result.verdict,
                    result.category,
                    result.origin,
                    result.steps_completed,
                    result.seconds,
                    result.peak_memory_bytes,
                    result.device,
                    result.requested_gpus,
                    result.gpu_type,
                    list(result.evidence),
                ],
            ).fetchone()
    except duckdb.Error as exc:
        raise StoreError(
            f"Cannot record the validation in {store.root} ({str(exc).splitlines()[0]}).",
            "Check the data directory; the verdict itself is unaffected.",
        ) from None
    return int(row[0]) if row else 0


def validation_summary(
    con: duckdb.DuckDBPyConnection,
    filters: Any = None,
    *,
    default_hours: float = DEFAULT_FAILURE_HOURS,
) -> pd.DataFrame:
    """verdict, category, count, allocated_gpu_hours_saved over the recorded validations.

    ``allocated_gpu_hours_saved`` (failed validations only): for each prevented failure,
    the requested GPUs times the median hours a failed attempt of the same
    category ran on the cluster (failures joined with attempts), or
    ``default_hours`` when the store has no such history. ``filters`` is an
    ``analysis.Filters``-like object (``start``, ``end``, ``users`` are used).
    """
    start = getattr(filters, "start", None)
    end = getattr(filters, "end", None)
    users = list(getattr(filters, "users", ()) or ())
    df = con.execute(_summary_sql(), [default_hours, start, start, end, end, users, users]).fetchdf()
    df["count"] = df["count"].astype("int64")
    df["allocated_gpu_hours_saved"] = df["allocated_gpu_hours_saved"].astype("float64")
    return df


def _summary_sql() -> str:
    """The summary query; binds default hours, start (twice), end (twice), users (twice)."""
    from gpulens.analysis import accounting as acc

    return f"""
        WITH hist AS (
            SELECT f.category,
                   median({acc.runtime_hours_sql("epoch(a.end_time - a.start_time)")}) AS hours
            FROM failures f JOIN attempts a USING (job_id, attempt)
            WHERE a.end_time IS NOT NULL AND a.start_time IS NOT NULL
              AND a.end_time >= a.start_time
            GROUP BY f.category
        )
        SELECT v.verdict, v.category, count(*) AS count,
               coalesce(sum(CASE WHEN v.verdict = 'fail'
                        THEN {acc.gpu_hours_sql("coalesce(v.requested_gpus, 1)", "coalesce(h.hours, ?)")}
                        ELSE 0 END), 0) AS allocated_gpu_hours_saved
        FROM validations v LEFT JOIN hist h ON h.category = v.category
        WHERE (CAST(? AS TIMESTAMP) IS NULL OR v.ts >= CAST(? AS TIMESTAMP))
          AND (CAST(? AS TIMESTAMP) IS NULL OR v.ts < CAST(? AS TIMESTAMP))
          AND (len(CAST(? AS VARCHAR[])) = 0 OR list_contains(CAST(? AS VARCHAR[]), v."user"))
        GROUP BY v.verdict, v.category
        ORDER BY CASE v.verdict WHEN 'fail' THEN 0 WHEN 'inconclusive' THEN 1 ELSE 2 END,
                 count DESC, v.category
    """  # noqa: S608 - the fragments are gpulens.analysis.accounting's; values are bound

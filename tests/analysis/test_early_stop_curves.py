"""Early stop's metric curves, built in one sorted pass (early_stop._curves), are the rows of the
SQL definition (early_stop._curves_sql, and the running best of the points before each one)."""

from __future__ import annotations

import math

import duckdb
import pandas as pd
import pytest

from gpulens.analysis.early_stop import _curves, _curves_sql

_PREV = """
    SELECT *, max(v) OVER (PARTITION BY job_id ORDER BY rn
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_best
    FROM ({curves})
"""


def _points() -> list[tuple[str, int, str, float | None]]:
    rows: list[tuple[str, int, str, float | None]] = []
    # out of order, repeated steps (their mean), NULL / NaN / infinite values left out,
    # negative steps, a job with one point, another metric alongside
    for step, value in [(3, 0.5), (1, 0.2), (2, 0.45), (2, 0.47), (5, 0.49), (4, None),
                        (6, math.nan), (7, math.inf), (-1, 0.1), (8, 0.5), (8, 0.51)]:
        rows.append(("job-b", step, "accuracy", value))
        rows.append(("job-b", step, "loss", None if value is None else 1 - value))
    rows += [("job-a", 10, "accuracy", 0.9), ("job-c", 1, "accuracy", -math.inf)]
    rows += [("job-d", s, "accuracy", 0.1 * ((s * 7) % 5)) for s in range(40, 0, -1)]
    return rows


@pytest.mark.parametrize(("metric", "sign"), [("accuracy", 1.0), ("loss", -1.0), ("none", 1.0)])
def test_curves_are_the_sql_definition(metric: str, sign: float) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE job_metrics (job_id VARCHAR, step INTEGER, metric VARCHAR, value DOUBLE)")
    con.executemany("INSERT INTO job_metrics VALUES (?, ?, ?, ?)", _points())
    want = con.execute(_PREV.format(curves=_curves_sql()) + " ORDER BY job_id, step",
                       {"metric": metric, "sign": sign}).df()
    got = _curves(con, metric, sign).to_pandas().sort_values(["job_id", "step"])
    assert list(got.columns) == list(want.columns)
    if metric != "none":
        assert len(want) == (47 if metric == "accuracy" else 6)
        assert want["prev_best"].isna().sum() == want["job_id"].nunique()
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True),
                                  check_dtype=False, check_exact=True)

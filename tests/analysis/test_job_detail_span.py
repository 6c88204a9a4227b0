"""``job_detail`` on a connection without the whole store's base reads the job's figures from the
base of the job's own time span (issue 26: a cold Job page opened first builds one job's hours, not
the month's): the same allocated and busy GPU-hours, mean utilization, GPUs and servers as the
whole store's ``job_utilization`` row, job by job."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gpulens import analysis
from gpulens.analysis.base import base_built
from gpulens.store import Store
from gpulens.store.compact import compact
from tests.analysis.builders import insert_rows, write_gpu_samples
from tests.analysis.test_handbuilt import hand, t  # noqa: F401 - hand: the fixture
from tests.analysis.test_rollups import NOON3, segmented_copy

FIGURES = ("allocated_gpu_hours", "busy_gpu_hours", "mean_util", "gpus", "servers")


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None or pd.isna(a) or pd.isna(b):
        return (a is None or pd.isna(a)) and (b is None or pd.isna(b))
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def _check(store: Store, jobs: list[str]) -> int:
    """Compare every job's figures; returns how many came from the job's own span."""
    con = store.connect()
    whole = analysis.job_utilization(con).set_index("job_id")
    con.close()
    spans = 0
    for job in jobs:
        con = store.connect()
        try:
            assert not base_built(con, None)
            detail = analysis.job_detail(con, job)
            assert detail is not None
            spans += not base_built(con, None)  # the whole store's base was not built
        finally:
            con.close()
        for col in FIGURES:
            want = whole.loc[job, col] if job in whole.index else None
            assert _same(detail.job.get(col), want), (job, col, detail.job.get(col), want)
    return spans


def test_job_figures_from_the_jobs_span_are_the_whole_stores(hand: Store) -> None:  # noqa: F811
    # G: a failed attempt, then one still running (its minutes run to the newest sample)
    insert_rows(hand, "jobs", ["job_id", "user", "vc", "status", "requested_gpus", "source"],
                [("G", "gus", "vc2", "running", 1, "test")])
    insert_rows(hand, "attempts", ["job_id", "attempt", "start_time", "end_time", "status"],
                [("G", 0, t(9, 58, 15), t(9, 59, 30), "failed"), ("G", 1, t(10, 0, 5), None, "running")])
    insert_rows(hand, "placements", ["job_id", "attempt", "node", "gpu_index"],
                [("G", 0, "n4", 1), ("G", 1, "n4", 1)])
    write_gpu_samples(hand, [(t(9, 59), "n4", 1, 70.0), (t(10, 2), "n4", 1, 90.0),
                             (t(10, 4, 20), "n4", 1, 10.0)])
    con = hand.connect()
    jobs = [r[0] for r in con.execute("SELECT job_id FROM jobs ORDER BY job_id").fetchall()]
    con.close()
    assert _check(hand, jobs) >= len(jobs) - 1, "all but the job that never ran read their span"


@pytest.mark.slow
def test_job_figures_from_the_jobs_span_on_a_rolled_up_simulated_store(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    store = segmented_copy(tmp_path_factory, tmp_path / "d")
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    con = store.connect()
    jobs = [r[0] for r in con.execute(
        "SELECT job_id FROM jobs ORDER BY hash(job_id) LIMIT 16").fetchall()]
    con.close()
    assert _check(store, jobs) > 12  # a fixed pseudo-random sample of the jobs (each opens a fresh connection)

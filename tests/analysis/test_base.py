"""The shared GPU-minute computation (gpulens/analysis/base.py) and the cached tables built on it.

Hand-computed cases the six-job store of test_handbuilt does not cover: a placement
across midnight (samples in two date partitions), two jobs sharing a GPU in the same
hour, several samples per minute, a window that prunes date partitions, new sample
files arriving on an open connection, and the online stopping rule against a
direct Python transcription of its definition.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from gpulens import analysis
from gpulens.analysis import Filters
from gpulens.store import Store
from tests.analysis.builders import insert_rows, write_gpu_samples


def t(d: int, h: int, m: int, s: int = 0) -> datetime:
    return datetime(2024, 3, d, h, m, s)


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-9, abs=1e-12)


@pytest.fixture
def cases(store: Store) -> Store:
    """
    job M  n1:0  1 23:58:30 - 2 00:02:00   minutes 23:58, 23:59, 00:00, 00:01 (2 days)
           samples 23:58 10, 23:59 20, 00:00 30, 00:01 40; 00:02 99 (after the end)
           -> 4 GPU-min, busy 1.0, mean 25
    job P  n2:0  1 10:00 - 10:03           minutes 10:00-10:02
    job Q  n2:0  1 10:02 - 10:05           minutes 10:02-10:04 (10:02 shared with P)
           samples n2:0 10:00 10, 10:01 20, 10:02 30, 10:03 40, 10:04 50
           -> P busy 0.6 (mean 20), Q busy 1.2 (mean 40); minute 10:02 counts for both
    job R  n3:0  1 11:00 - 11:02           two samples in each minute (a 30 s collector)
           11:00:00 40, 11:00:30 60, 11:01:00 10, 11:01:30 30
           -> 2 GPU-min, busy 0.5 + 0.2 = 0.7, mean 35
    """
    insert_rows(store, "jobs", ["job_id", "user", "vc", "status", "requested_gpus", "source"],
                [(j, "u", "vc", "passed", 1, "test") for j in "MPQR"])
    insert_rows(store, "attempts", ["job_id", "attempt", "start_time", "end_time", "status"], [
        ("M", 0, t(1, 23, 58, 30), t(2, 0, 2), "passed"),
        ("P", 0, t(1, 10, 0), t(1, 10, 3), "passed"),
        ("Q", 0, t(1, 10, 2), t(1, 10, 5), "passed"),
        ("R", 0, t(1, 11, 0), t(1, 11, 2), "passed"),
    ])
    insert_rows(store, "placements", ["job_id", "attempt", "node", "gpu_index"], [
        ("M", 0, "n1", 0), ("P", 0, "n2", 0), ("Q", 0, "n2", 0), ("R", 0, "n3", 0),
    ])
    write_gpu_samples(store, [
        (t(1, 23, 58), "n1", 0, 10.0), (t(1, 23, 59), "n1", 0, 20.0),
        (t(2, 0, 0), "n1", 0, 30.0), (t(2, 0, 1), "n1", 0, 40.0), (t(2, 0, 2), "n1", 0, 99.0),
        *[(t(1, 10, i), "n2", 0, 10.0 * (i + 1)) for i in range(5)],
        (t(1, 11, 0), "n3", 0, 40.0), (t(1, 11, 0, 30), "n3", 0, 60.0),
        (t(1, 11, 1), "n3", 0, 10.0), (t(1, 11, 1, 30), "n3", 0, 30.0),
    ])
    return store


@pytest.mark.slow
def test_hand_computed(cases: Store) -> None:
    df = analysis.job_utilization(cases.connect()).set_index("job_id")
    expected = {"M": (4, 1.0, 25.0), "P": (3, 0.6, 20.0), "Q": (3, 1.2, 40.0), "R": (2, 0.7, 35.0)}
    for job, (minutes, busy, mean) in expected.items():
        assert df.loc[job, "allocated_gpu_hours"] == approx(minutes / 60), job
        assert df.loc[job, "busy_gpu_hours"] == approx(busy / 60), job
        assert df.loc[job, "mean_util"] == approx(mean), job


@pytest.mark.slow
def test_across_midnight_by_day_and_window(cases: Store) -> None:
    con = cases.connect()
    day = analysis.utilization(con, by="day").set_index("day")
    # day 1: M 23:58, 23:59 (busy 0.3) + P + Q + R; day 2: M 00:00, 00:01 (busy 0.7)
    assert day.loc[pd.Timestamp("2024-03-02"), "allocated_gpu_hours"] == approx(2 / 60)
    assert day.loc[pd.Timestamp("2024-03-02"), "busy_gpu_hours"] == approx(0.7 / 60)
    assert day.loc[pd.Timestamp("2024-03-01"), "allocated_gpu_hours"] == approx(10 / 60)
    # a window on day 2 only reads that day's partition and clips M to 00:00-00:01
    w = analysis.utilization(con, Filters(start=t(2, 0, 0), end=t(3, 0, 0))).iloc[0]
    assert w["allocated_gpu_hours"] == approx(2 / 60)
    assert w["mean_util"] == approx(35.0)
    # back to no window on the same connection: the full numbers again
    assert analysis.utilization(con).iloc[0]["allocated_gpu_hours"] == approx(12 / 60)


@pytest.mark.slow
def test_new_samples_seen_by_open_connection(cases: Store) -> None:
    con = cases.connect()
    assert analysis.job_utilization(con).set_index("job_id").loc["M", "busy_gpu_hours"] \
        == approx(1.0 / 60)
    write_gpu_samples(cases, [(t(1, 10, 0), "n9", 0, 50.0)])  # another GPU: no effect
    write_gpu_samples(cases, [(t(1, 23, 58, 40), "n1", 0, 30.0)])  # 23:58 now 10, 30 -> 20
    df = analysis.job_utilization(con).set_index("job_id")
    # M, hour 23: samples 10, 30 (23:58) and 20 (23:59): (10 + 30 + 20) / 3 * 2 minutes = 40;
    # hour 0: 30 + 40 = 70 (the hour's mean sample times its sampled minutes)
    assert df.loc["M", "busy_gpu_hours"] == approx((40.0 + 70.0) / 100 / 60)


@pytest.mark.slow
def test_join_settings_restored(cases: Store) -> None:
    con = cases.connect()
    con.execute("SET disabled_optimizers = 'statistics_propagation'")
    analysis.utilization(con)
    row = con.execute("SELECT current_setting('disabled_optimizers')").fetchone()
    assert row is not None and str(row[0]) == "statistics_propagation"


def _online_stop_reference(values: list[float], patience: int, min_delta: float) -> int | None:
    """The rule as documented, one epoch at a time (1-based stop position or None)."""
    best: float | None = None
    last_imp = 1
    for rn, v in enumerate(values, start=1):
        if best is None or v > best + min_delta * abs(best):
            last_imp = rn
        elif rn - last_imp >= patience:
            return rn
        best = v if best is None else max(best, v)
    return None


@pytest.mark.slow
def test_online_stop_matches_reference(store: Store) -> None:
    rng = np.random.default_rng(7)
    jobs, metrics, curves = [], [], {}
    start = datetime(2024, 5, 1)
    for i in range(60):
        n = int(rng.integers(1, 30))
        noise = rng.normal(0, 0.02, n)
        plateau = rng.uniform(0.5, 0.95)
        vals = list(plateau * (1 - np.exp(-np.arange(1, n + 1) / rng.uniform(1, 8))) + noise)
        if i % 7 == 0:
            vals = [0.5] * n  # flat: never improves after epoch 1
        job = f"j{i:02d}"
        jobs.append(job)
        curves[job] = vals
        metrics += [(job, e + 1, "accuracy", float(v)) for e, v in enumerate(vals)]
    insert_rows(store, "jobs", ["job_id", "user", "vc", "status", "requested_gpus", "source"],
                [(j, "u", "vc", "passed", 1, "test") for j in jobs])
    insert_rows(store, "attempts", ["job_id", "attempt", "start_time", "end_time", "status"],
                [(j, 0, start, start + timedelta(hours=1), "passed") for j in jobs])
    insert_rows(store, "placements", ["job_id", "attempt", "node", "gpu_index"],
                [(j, 0, "n1", k % 8) for k, j in enumerate(jobs)])
    insert_rows(store, "job_metrics", ["job_id", "step", "metric", "value"], metrics)
    con = store.connect()
    for patience, min_delta in ((1, 0.0), (2, 0.001), (3, 0.01), (5, 0.0), (40, 0.0)):
        got = analysis.online_stop(con, patience=patience, min_delta=min_delta).set_index("job_id")
        fired = got["stop_epoch"].notna()
        for job, vals in curves.items():
            ref = _online_stop_reference(vals, patience, min_delta)
            if ref is None:
                assert not fired[job] and got.loc[job, "saved_allocated_gpu_hours"] == 0, (job, patience)
                continue
            assert fired[job] and got.loc[job, "stop_epoch"] == ref, (job, patience, min_delta)
            assert got.loc[job, "saved_allocated_gpu_hours"] == approx((len(vals) - ref) / len(vals))
            assert got.loc[job, "accuracy_given_up"] == approx(max(vals) - max(vals[:ref]))

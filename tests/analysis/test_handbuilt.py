"""Analyses on a tiny hand-built store whose answers are computed by hand.

Timeline (all on 2024-01-01, t(h, m, s)); minutes m counted when floor(start) <= m < end.

job A  alice/vc1 passed   attempt 0 10:00:30-10:03:00 on n1:0, n1:1    -> minutes 10:00-10:02, 6 GPU-min
       samples n1:0 50, 60, NA (10:02), 99 at 10:03 (outside); n1:1 20, 20, 20
       busy = 0.5 + 0.6 + 0.6 = 1.7 GPU-min over 5 sampled minutes -> mean 34
job B  bob/vc2 retried    attempt 0 10:00:00-10:01:30 n2:0 failed       -> 2 GPU-min, util 100, 100
                          attempt 1 10:02:10-10:04:00 n2:0 + n3:0 passed -> 4 GPU-min
       samples n2:0 40, 40; n3:0 80, NA; n2:0 at 10:04:20 is after the end
       busy = 2.0 + 1.6 = 3.6 over 5 sampled minutes -> mean 72; main attempt = 1 (2 GPUs, 2 servers)
job C  carol/vc1 killed   attempt 0 10:00-10:02 n4:0, no samples          -> 2 GPU-min, busy 0, mean NULL
job D  dave/vc2 queued    no attempts                                       -> 0
job E  erin/vc1 running   attempt 0 10:01:00-NULL n1:2; newest sample 10:04:20 -> end 10:05
       minutes 10:01-10:04 = 4 GPU-min; samples 10, 30 -> busy 0.4, mean 20
job F  alice/vc1 failed   attempt 0 10:00:00-10:00:45 n5:0, no samples   -> 1 GPU-min

cluster: allocated 19 GPU-min, busy 5.7, sampled minutes 12 -> mean 47.5
"""

from __future__ import annotations

import math
from datetime import datetime

import pandas as pd
import pytest

from gpulens import analysis
from gpulens.analysis import Filters
from gpulens.store import Store
from tests.analysis.builders import insert_rows, write_gpu_samples


def t(h: int, m: int, s: int = 0) -> datetime:
    return datetime(2024, 1, 1, h, m, s)


@pytest.fixture
def hand(store: Store) -> Store:
    insert_rows(store, "nodes", ["node", "gpus", "source"],
                [(n, 4, "test") for n in ("n1", "n2", "n3", "n4", "n5")])
    insert_rows(store, "jobs", ["job_id", "user", "vc", "status", "requested_gpus", "source"], [
        ("A", "alice", "vc1", "passed", 2, "test"),
        ("B", "bob", "vc2", "passed", 2, "test"),
        ("C", "carol", "vc1", "killed", 1, "test"),
        ("D", "dave", "vc2", "queued", 4, "test"),
        ("E", "erin", "vc1", "running", 1, "test"),
        ("F", "alice", "vc1", "failed", 1, "test"),
    ])
    insert_rows(store, "attempts", ["job_id", "attempt", "start_time", "end_time", "status"], [
        ("A", 0, t(10, 0, 30), t(10, 3), "passed"),
        ("B", 0, t(10, 0), t(10, 1, 30), "failed"),
        ("B", 1, t(10, 2, 10), t(10, 4), "passed"),
        ("C", 0, t(10, 0), t(10, 2), "killed"),
        ("E", 0, t(10, 1), None, "running"),
        ("F", 0, t(10, 0), t(10, 0, 45), "failed"),
    ])
    insert_rows(store, "placements", ["job_id", "attempt", "node", "gpu_index"], [
        ("A", 0, "n1", 0), ("A", 0, "n1", 1),
        ("B", 0, "n2", 0), ("B", 1, "n2", 0), ("B", 1, "n3", 0),
        ("C", 0, "n4", 0), ("E", 0, "n1", 2), ("F", 0, "n5", 0),
    ])
    write_gpu_samples(store, [
        (t(10, 0), "n1", 0, 50.0), (t(10, 1), "n1", 0, 60.0), (t(10, 2), "n1", 0, None),
        (t(10, 3), "n1", 0, 99.0),
        (t(10, 0), "n1", 1, 20.0), (t(10, 1), "n1", 1, 20.0), (t(10, 2), "n1", 1, 20.0),
        (t(10, 0), "n2", 0, 100.0), (t(10, 1, 45), "n2", 0, 100.0),
        (t(10, 2), "n2", 0, 40.0), (t(10, 3), "n2", 0, 40.0), (t(10, 4, 20), "n2", 0, 5.0),
        (t(10, 2), "n3", 0, 80.0), (t(10, 3), "n3", 0, float("nan")),
        (t(10, 1), "n1", 2, 10.0), (t(10, 2), "n1", 2, 30.0),
    ])
    insert_rows(store, "job_metrics", ["job_id", "step", "metric", "value"],
                [("A", i + 1, "accuracy", v) for i, v in enumerate([0.5, 0.8, 0.9, 0.8995, 0.9])]
                + [("B", i + 1, "loss", v) for i, v in enumerate([2.0, 1.0, 0.5004, 0.5, 0.6])])
    insert_rows(store, "failures", ["job_id", "attempt", "category", "origin"],
                [("B", 0, "cuda_oom", "user")])
    return store


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-9, abs=1e-12)


@pytest.mark.slow
def test_job_utilization(hand: Store) -> None:
    df = analysis.job_utilization(hand.connect()).set_index("job_id")
    assert set(df.index) == {"A", "B", "C", "D", "E", "F"}
    assert df.loc["A", "allocated_gpu_hours"] == approx(6 / 60)
    assert df.loc["A", "busy_gpu_hours"] == approx(1.7 / 60)
    assert df.loc["A", "mean_util"] == approx(34.0)
    assert (df.loc["A", "gpus"], df.loc["A", "servers"]) == (2, 1)
    assert df.loc["B", "allocated_gpu_hours"] == approx(6 / 60)
    assert df.loc["B", "busy_gpu_hours"] == approx(3.6 / 60)
    assert df.loc["B", "mean_util"] == approx(72.0)
    assert (df.loc["B", "gpus"], df.loc["B", "servers"]) == (2, 2)
    assert df.loc["B", "failure_category"] == "cuda_oom"
    assert df.loc["C", "allocated_gpu_hours"] == approx(2 / 60)
    assert df.loc["C", "busy_gpu_hours"] == 0
    assert math.isnan(df.loc["C", "mean_util"])
    assert df.loc["D", "allocated_gpu_hours"] == 0
    assert df.loc["E", "allocated_gpu_hours"] == approx(4 / 60)
    assert df.loc["E", "mean_util"] == approx(20.0)
    assert df.loc["F", "allocated_gpu_hours"] == approx(1 / 60)


@pytest.mark.slow
def test_utilization_cluster_and_groups(hand: Store) -> None:
    con = hand.connect()
    c = analysis.utilization(con).iloc[0]
    assert c["allocated_gpu_hours"] == approx(19 / 60)
    assert c["busy_gpu_hours"] == approx(5.7 / 60)
    assert c["mean_util"] == approx(47.5)
    vc = analysis.utilization(con, by="vc").set_index("vc")
    assert vc.loc["vc1", "allocated_gpu_hours"] == approx(13 / 60)
    assert vc.loc["vc1", "mean_util"] == approx(100 * 2.1 / 7)
    assert vc.loc["vc2", "mean_util"] == approx(72.0)
    day = analysis.utilization(con, by="day")
    assert len(day) == 1 and day.iloc[0]["allocated_gpu_hours"] == approx(19 / 60)
    only = analysis.utilization(con, Filters(vcs=("vc2",)))
    assert only.iloc[0]["allocated_gpu_hours"] == approx(6 / 60)
    alice = analysis.utilization(con, Filters(users=("alice",))).iloc[0]
    assert alice["allocated_gpu_hours"] == approx(7 / 60)


@pytest.mark.slow
def test_time_window_clips_minutes(hand: Store) -> None:
    con = hand.connect()
    w = analysis.utilization(con, Filters(start=t(10, 2), end=t(10, 3))).iloc[0]
    # minute 10:02 only: A (2 GPUs: NA, 20), B att1 (n2 40, n3 80), E (30)
    assert w["allocated_gpu_hours"] == approx(5 / 60)
    assert w["busy_gpu_hours"] == approx((0.2 + 0.4 + 0.8 + 0.3) / 60)
    jobs = analysis.job_utilization(con, Filters(start=t(10, 2), end=t(10, 3)))
    assert set(jobs["job_id"]) == {"A", "B", "E"}


@pytest.mark.slow
def test_timeseries(hand: Store) -> None:
    ts = analysis.utilization_timeseries(hand.connect(), freq="hour")
    assert len(ts) == 1
    row = ts.iloc[0]
    assert row["total_gpus"] == 7
    assert row["allocated_gpus"] == approx(19 / 60)
    assert row["busy_gpus"] == approx(5.7 / 60)


@pytest.mark.slow
def test_locality(hand: Store) -> None:
    con = hand.connect()
    loc = analysis.locality(con, n_boot=200).set_index(["gpus", "servers"])
    assert loc.loc[(1, 1), "jobs"] == 1 and loc.loc[(1, 1), "mean_util"] == approx(20.0)
    assert loc.loc[(2, 1), "mean_util"] == approx(34.0)
    assert loc.loc[(2, 2), "mean_util"] == approx(100 * 1.6 / 3)
    assert loc.loc[(2, 2), "ci_low"] == approx(100 * 1.6 / 3)
    loss = analysis.locality_loss(con)
    assert list(loss["job_id"]) == ["B"]
    assert loss.iloc[0]["min_servers"] == 1
    assert loss.iloc[0]["lost_busy_gpu_hours"] == approx((34.0 - 100 * 1.6 / 3) / 100 * 4 / 60)


@pytest.mark.slow
def test_early_stop(hand: Store) -> None:
    con = hand.connect()
    es = analysis.early_stop(con).set_index("job_id")
    assert list(es.index) == ["A"]
    assert es.loc["A", "epochs"] == 5
    assert es.loc["A", "best_epoch"] == 3
    assert es.loc["A", "converged_epoch"] == 3
    assert es.loc["A", "fraction_epochs"] == approx(0.6)
    assert es.loc["A", "saveable_allocated_gpu_hours"] == approx(0.4 * 6 / 60)
    assert es.loc["A", "saveable_busy_gpu_hours"] == approx(0.4 * 1.7 / 60)
    loss = analysis.early_stop(con, metric="loss").set_index("job_id")
    # best loss 0.5 at epoch 4; 0.5004 is within 0.1% -> epoch 3
    assert loss.loc["B", "best_epoch"] == 4 and loss.loc["B", "converged_epoch"] == 3
    strict = analysis.early_stop(con, metric="loss", tolerance=0.0).set_index("job_id")
    assert strict.loc["B", "converged_epoch"] == 4
    summary = analysis.early_stop_summary(con)
    assert summary.jobs == 1 and summary.pct_epochs == approx(60.0)
    assert "75% of jobs reach within 0.1% of their best accuracy using <= 60% of their epochs" \
        in summary.sentence


@pytest.mark.slow
def test_online_stop(hand: Store) -> None:
    con = hand.connect()
    o = analysis.online_stop(con, patience=1).set_index("job_id")
    assert o.loc["A", "stop_epoch"] == 4
    assert o.loc["A", "converged_epoch"] == 3
    assert o.loc["A", "saved_allocated_gpu_hours"] == approx(6 / 60 / 5)
    assert o.loc["A", "saved_busy_gpu_hours"] == approx(1.7 / 60 / 5)
    assert o.loc["A", "accuracy_given_up"] == approx(0.0)
    never = analysis.online_stop(con, patience=5).set_index("job_id")
    assert pd.isna(never.loc["A", "stop_epoch"]) and never.loc["A", "saved_allocated_gpu_hours"] == 0
    # loss of B: 2.0, 1.0, 0.5004, 0.5 (not a 0.1% improvement), 0.6 -> stops at epoch 4
    lo = analysis.online_stop(con, patience=1, metric="loss").set_index("job_id")
    assert lo.loc["B", "stop_epoch"] == 4
    assert lo.loc["B", "accuracy_given_up"] == approx(0.0)


@pytest.mark.slow
def test_goodput(hand: Store) -> None:
    g = analysis.goodput(hand.connect())
    assert list(g["stage"]) == list(analysis.STAGES)
    v = dict(zip(g["stage"], g["gpu_hours"], strict=True))
    assert v["allocated"] == approx(19 / 60)
    assert v["idle"] == approx((19 - 5.7) / 60)
    assert v["failed_or_killed"] == approx(2.0 / 60)
    assert v["post_convergence"] == approx(1.7 * 0.4 / 60)
    assert v["effective"] == approx((5.7 - 2.0 - 0.68) / 60)
    by = analysis.goodput(hand.connect(), by="vc")
    vc2 = by[by["vc"] == "vc2"].set_index("stage")["gpu_hours"]
    assert vc2["allocated"] == approx(6 / 60) and vc2["effective"] == approx(1.6 / 60)


@pytest.mark.slow
def test_failure_cost(hand: Store) -> None:
    fc = analysis.failure_cost(hand.connect()).set_index(["category", "origin"])
    assert fc.loc[("cuda_oom", "user"), "failures"] == 1
    assert fc.loc[("cuda_oom", "user"), "allocated_gpu_hours"] == approx(2 / 60)
    assert fc.loc[("cuda_oom", "user"), "busy_gpu_hours"] == approx(2.0 / 60)
    assert fc.loc[("cuda_oom", "user"), "mean_runtime_to_failure_hours"] == approx(90 / 3600)
    assert fc.loc[("undiagnosed", "unknown"), "failures"] == 1
    assert fc.loc[("undiagnosed", "unknown"), "allocated_gpu_hours"] == approx(1 / 60)
    assert fc.loc[("undiagnosed", "unknown"), "median_runtime_to_failure_hours"] == approx(45 / 3600)
    # the killed job C counts too (2 GPU-min, no samples), under its own heading
    assert fc.loc[("killed", "unknown"), "failures"] == 1
    assert fc.loc[("killed", "unknown"), "allocated_gpu_hours"] == approx(2 / 60)
    assert fc.loc[("killed", "unknown"), "busy_gpu_hours"] == 0
    assert len(fc) == 3
    # the busy basis is the waterfall's failed_or_killed stage
    g = analysis.goodput(hand.connect()).set_index("stage")["gpu_hours"]
    assert fc["busy_gpu_hours"].sum() == approx(g["failed_or_killed"])


@pytest.mark.slow
def test_job_detail_and_node_timeline(hand: Store) -> None:
    con = hand.connect()
    d = analysis.job_detail(con, "A")
    assert d is not None
    assert d.converged_epoch == 3
    assert len(d.attempts) == 1 and len(d.placements) == 2
    # samples inside A's minutes: n1:0 10:00, 10:01, 10:02(NA); n1:1 x3
    assert len(d.gpu_timeline) == 6
    assert d.job["mean_util"] == approx(34.0)
    assert analysis.job_detail(con, "nope") is None
    nt = analysis.node_timeline(con, "n1")
    assert list(nt["util_gpu"].round(6))[:2] == [35.0, 30.0]


def test_no_data_at_all(store: Store) -> None:
    con = store.connect()
    assert analysis.utilization(con).iloc[0]["allocated_gpu_hours"] == 0
    assert analysis.job_utilization(con).empty
    assert analysis.locality(con).empty
    assert analysis.early_stop_summary(con).jobs == 0
    assert analysis.failure_cost(con).empty

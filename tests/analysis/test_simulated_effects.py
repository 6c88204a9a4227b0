"""The analyses recover the effects `gpulens simulate` plants (Philly, ATC'19).

One 512-GPU x 5-day cluster (seed 3, ~3.7 M samples). Tolerances, stated:
- locality: every (gpus, servers) group with >= 20 jobs has a mean utilization
  within 6 points of the planted model; 16-GPU jobs on 2 servers are within 6
  points of 43.66% and on 8 servers within 8 points of 28.56%, and the 2-server
  mean is at least 8 points above the 8-server mean;
- early stop: the share of jobs converged (0.1%) within 40% of their epochs is
  75% +- 5 points, and the 75th-percentile fraction of epochs is 40% +- 5 points;
- the goodput waterfall adds up and utilization is the same however it is grouped.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest

from gpulens import analysis
from gpulens.store import Store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    from gpulens.ingest.simulate import SimParams, simulate

    store = Store.open(tmp_path_factory.mktemp("sim") / "data")
    simulate(store, gpus=512, days=5, seed=3, start=datetime(2026, 1, 1), params=SimParams())
    yield store


def test_locality_recovered(sim: Store) -> None:
    from gpulens.ingest.simulate import SimParams, planted_util

    params = SimParams()
    con = sim.connect()
    loc = analysis.locality(con, n_boot=200)
    gps = 8
    checked = 0
    for row in loc.itertuples():
        if row.jobs < 20:
            continue
        planted = planted_util(params, int(row.gpus), int(row.servers), -(-int(row.gpus) // gps))
        assert abs(row.mean_util - planted) <= 6.0, (row, planted)
        checked += 1
    assert checked >= 5
    t = loc.set_index(["gpus", "servers"])
    two, eight = t.loc[(16, 2), "mean_util"], t.loc[(16, 8), "mean_util"]
    assert abs(two - 43.66) <= 6.0
    assert abs(eight - 28.56) <= 8.0
    assert two - eight >= 8.0
    loss = analysis.locality_loss(con)
    assert (loss["servers"] > loss["min_servers"]).all()
    assert loss["lost_busy_gpu_hours"].fillna(0).sum() > 0


def test_early_stop_recovered(sim: Store) -> None:
    s = analysis.early_stop_summary(sim.connect())
    assert s.jobs > 500
    assert abs(s.cdf[40] - 75.0) <= 5.0
    assert abs(s.pct_epochs - 40.0) <= 5.0
    assert s.sentence.startswith("75% of jobs reach within 0.1% of their best accuracy")
    online = analysis.online_stop(sim.connect(), patience=5)
    assert (online["accuracy_given_up"] >= -1e-12).all()
    assert online["saved_allocated_gpu_hours"].sum() > 0


def test_goodput_and_groupings_consistent(sim: Store) -> None:
    con = sim.connect()
    g = analysis.goodput(con).set_index("stage")["gpu_hours"]
    assert g["allocated"] == pytest.approx(
        g["idle"] + g["failed_or_killed"] + g["post_convergence"] + g["effective"])
    assert min(g) >= 0
    total = analysis.utilization(con).iloc[0]
    for by in ("vc", "user", "day"):
        part = analysis.utilization(con, by=by)
        assert part["allocated_gpu_hours"].sum() == pytest.approx(total["allocated_gpu_hours"])
        assert part["busy_gpu_hours"].sum() == pytest.approx(total["busy_gpu_hours"])
    jobs = analysis.job_utilization(con)
    assert jobs["allocated_gpu_hours"].sum() == pytest.approx(total["allocated_gpu_hours"])
    fc = analysis.failure_cost(con)
    assert fc["failures"].sum() > 0

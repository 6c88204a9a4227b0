"""End to end on the simulator: batch diagnosis, then blacklist and bad-node logic
must find what the simulator planted (gpulens.ingest.simulate, sim_planted / sim_truth)."""

from __future__ import annotations

import pytest

from gpulens.diagnosis import blacklist as bl
from gpulens.diagnosis import nodes as nd
from gpulens.diagnosis.jobs import diagnose_all
from gpulens.store import Store
from tests.conftest import require_module


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_finds_planted_bad_nodes_and_corrupted_inputs(store: Store, seed: int) -> None:
    for mod in ("pgmpy", "sklearn"):
        require_module(mod)
    from gpulens.diagnosis.origin import default_model
    from gpulens.ingest.simulate import simulate

    summary = simulate(store, gpus=64, days=2, seed=seed)
    n = diagnose_all(store, model=default_model())  # real classifier on the simulator's logs
    assert n == summary.failed_attempts

    con = store.connect()
    try:
        planted = dict(con.execute("SELECT kind, list(key) FROM sim_planted GROUP BY kind").fetchall())
        # attempts that failed because of a planted bad node are blamed on the infrastructure
        infra = con.execute(
            "SELECT avg((f.origin = 'infrastructure')::INT), count(*) FROM sim_truth t "
            "JOIN failures f USING (job_id, attempt) WHERE t.node_fault"
        ).fetchone()
        assert infra is not None
        if infra[1]:
            assert infra[0] >= 0.8
        # and what the corrupted inputs broke, on the data
        data = con.execute(
            "SELECT avg((f.origin = 'data')::INT) FROM sim_truth t JOIN failures f USING (job_id, attempt) "
            "WHERE t.planted = 'corrupt_input'"
        ).fetchone()
        assert data is not None and data[0] >= 0.6
    finally:
        con.close()

    changes = bl.update_from_failures(store, k=2)
    blacklisted = {c.input for c in changes if c.new_state == "blacklisted"}
    assert blacklisted, "no corrupted input found"
    assert blacklisted <= set(planted["corrupted_input"])  # no healthy dataset blacklisted

    flagged = nd.flag_nodes(store)
    assert set(flagged["node"]) == set(planted["bad_node"])

    assert nd.score_anomalies(store) > 0
    con = store.connect()
    try:
        worst = nd.anomaly_scores(con).groupby("node")["score"].max()
    finally:
        con.close()
    for node in planted["bad_node"]:
        assert worst[node] > worst.median()

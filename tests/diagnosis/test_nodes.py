"""Bad nodes: flagging rules with evidence, clearing, the CLI, and the One-Class SVM scores."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from gpulens.diagnosis import nodes as nd
from gpulens.store import Store, arrow_schema
from tests.conftest import require_module
from tests.diagnosis.test_jobs import T0, add_job, add_xids


def infra_failure(store: Store, job: str, nodes: list[str], minute: int = 0, user: str = "u") -> None:
    add_job(store, job, [{"status": "failed", "nodes": nodes, "start": minute, "minutes": 60}], user=user)
    with store.write() as con:
        con.execute("INSERT INTO failures (job_id, attempt, category, origin, method) "
                    "VALUES (?, 0, 'gpu_hardware', 'infrastructure', 'rule+bn')", [job])


def flags(store: Store, include_cleared: bool = False) -> dict[str, dict]:
    con = store.connect()
    try:
        df = nd.flagged_nodes(con, include_cleared=include_cleared)
    finally:
        con.close()
    return {r["node"]: r for r in df.to_dict("records")}


def test_repeated_infrastructure_failures_flag_a_node(store: Store) -> None:
    infra_failure(store, "j1", ["bad"], 0)
    infra_failure(store, "j2", ["bad"], 500)
    infra_failure(store, "j3", ["once"], 0)  # one job only
    # two multi-node failures sharing 'm1': it gets 2 x 1/2, the others 1/2 each
    infra_failure(store, "m1", ["m1", "m2"], 0)
    infra_failure(store, "m2", ["m1", "m3"], 100)
    out = nd.flag_nodes(store)
    assert set(out["node"]) == {"bad"}
    f = flags(store)["bad"]
    ev = json.loads(f["evidence"])
    assert ev["jobs"] == ["j1", "j2"]
    assert {x["job_id"] for x in ev["infra_failures"]} == {"j1", "j2"}
    assert "infrastructure failures of 2 job(s)" in f["reason"]
    assert f["active"] and f["score"] == pytest.approx(2.0)
    # threshold 1: the node the two multi-node failures share reaches 2 x 1/2; m2, m3 stay at 1/2
    out = nd.flag_nodes(store, min_jobs=1)
    assert set(out["node"]) == {"bad", "once", "m1"}


def test_hardware_xids_across_jobs_and_on_their_own(store: Store) -> None:
    for i, job in enumerate(["a", "b"]):
        add_job(store, job, [{"status": "passed", "nodes": ["xid-node"], "start": 200 * i, "minutes": 60}])
    add_xids(store, [("xid-node", 30, 79), ("xid-node", 230, 48)])  # during a and during b
    add_xids(store, [("lonely", 10, 94), ("lonely", 20, 94), ("lonely", 30, 63)])  # no jobs at all
    add_xids(store, [("app-node", 10, 13), ("app-node", 20, 31), ("app-node", 30, 43), ("app-node", 40, 13)])
    add_job(store, "c", [{"status": "passed", "nodes": ["app-node"], "start": 0, "minutes": 60}])
    out = nd.flag_nodes(store)
    assert set(out["node"]) == {"xid-node", "lonely"}
    ev = json.loads(flags(store)["xid-node"]["evidence"])
    assert ev["hardware_jobs"] == ["a", "b"]
    assert ev["xids"] == {"79": 1, "48": 1}
    assert json.loads(flags(store)["lonely"]["evidence"])["xids"] == {"94": 2, "63": 1}


def test_reflagging_updates_in_place_and_clearing_needs_new_evidence(store: Store) -> None:
    infra_failure(store, "j1", ["bad"], 0)
    infra_failure(store, "j2", ["bad"], 500)
    nd.flag_nodes(store)
    out = nd.flag_nodes(store)
    assert list(out["new"]) == [False]
    assert len(flags(store, include_cleared=True)) == 1
    con = store.connect()
    assert con.execute("SELECT count(*) FROM node_flags").fetchone() == (1,)
    con.close()

    assert nd.clear_flag(store, "bad", "ops-lee", "GPU 3 replaced") == 1
    assert flags(store) == {}
    cleared = flags(store, include_cleared=True)["bad"]
    assert json.loads(cleared["evidence"])["cleared"]["by"] == "ops-lee"
    assert nd.flag_nodes(store).empty  # same evidence: stays cleared
    infra_failure(store, "j3", ["bad"], 900)
    assert nd.flag_nodes(store).empty  # one new job is not enough
    infra_failure(store, "j4", ["bad"], 1300)
    out = nd.flag_nodes(store)
    assert list(out["node"]) == ["bad"] and list(out["new"]) == [True]
    with pytest.raises(Exception, match="no active flag"):
        nd.clear_flag(store, "nobody", "ops", "x")


def test_nodes_cli_flag_and_list(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from gpulens.cli.main import main as gpulens_main

    def main(argv: list[str]) -> None:
        try:
            gpulens_main(argv)
        except SystemExit as exc:  # main() exits with the command's code
            assert not exc.code, exc.code

    for key in [k for k in os.environ if k.startswith("GPULENS_")]:
        monkeypatch.delenv(key)
    data = tmp_path / "d"
    store = Store.open(data)
    infra_failure(store, "j1", ["bad"], 0)
    infra_failure(store, "j2", ["bad"], 500)
    capsys.readouterr()
    main(["--data-dir", str(data), "nodes", "flag", "--json"])
    flagged = json.loads(capsys.readouterr().out)
    assert [f["node"] for f in flagged] == ["bad"]
    main(["--data-dir", str(data), "nodes", "list", "--json"])
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["node"] == "bad" and listed[0]["evidence"]["jobs"] == ["j1", "j2"]
    main(["--data-dir", str(data), "nodes", "list"])
    assert "bad" in capsys.readouterr().out


# ---------------------------------------------------------------- anomalies
def gpu_samples(nodes: list[str], hours: int, bad: str, bad_hours: range, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    schema = arrow_schema("gpu")
    cols: dict[str, list] = {n: [] for n in schema.names}
    ecc = {}
    for node in nodes:
        for g in range(2):
            ecc[(node, g)] = 0
            for m in range(0, hours * 60, 10):
                h = m // 60
                sick = node == bad and h in bad_hours
                if sick:
                    ecc[(node, g)] += 1
                row = {
                    "ts": T0 + timedelta(minutes=m), "node": node, "gpu_index": g, "uuid": f"{node}-{g}",
                    "model": "P40", "util_gpu": float(rng.uniform(40, 60)), "util_mem": 30.0,
                    "mem_used_bytes": int(8e9), "mem_total_bytes": int(24e9),
                    "pcie_tx_bps": float(rng.uniform(1e9, 2e9)), "pcie_rx_bps": float(rng.uniform(1e9, 2e9)),
                    "power_w": float(rng.uniform(150, 170)),
                    "temp_c": float(rng.uniform(93, 97) if sick else rng.uniform(60, 66)),
                    "sm_clock_mhz": float(900 if sick else rng.uniform(1400, 1500)),
                    "ecc_corrected_total": 0, "ecc_uncorrected_total": ecc[(node, g)],
                    "pcie_replay_total": 0, "xid_count": 1 if sick else 0,
                }
                for name in schema.names:
                    cols[name].append(row.get(name))
    return pa.table(cols, schema=schema)


def test_one_class_svm_scores_the_sick_hours_highest(store: Store) -> None:
    require_module("sklearn")
    nodes = [f"n{i}" for i in range(6)]
    store.write_samples("gpu", gpu_samples(nodes, 24, bad="n3", bad_hours=range(10, 13)))
    n = nd.score_anomalies(store)
    assert n == 6 * 24
    con = store.connect()
    try:
        scores = nd.anomaly_scores(con)
        assert len(scores) == n
        top = scores.sort_values("score", ascending=False).head(3)
        assert set(top["node"]) == {"n3"}
        rel = ((scores["hour"] - T0) / timedelta(hours=1)).astype(int)
        assert sorted(rel[top.index]) == [10, 11, 12]
        sick = scores[(scores["node"] == "n3") & rel.between(10, 12)]["score"]
        normal = scores[scores["node"] != "n3"]["score"]
        assert sick.min() > 0.5 > normal.median()  # 0.5: the normal region's boundary

        class Window:
            start = T0 + timedelta(hours=10)
            end = T0 + timedelta(hours=12)

        windowed = nd.anomaly_scores(con, Window(), node="n3")
        assert len(windowed) == 2 and set(windowed["node"]) == {"n3"}
    finally:
        con.close()
    # scoring again replaces the hours instead of duplicating them
    assert nd.score_anomalies(store) == n
    con = store.connect()
    try:
        assert con.execute("SELECT count(*) FROM node_anomaly").fetchone() == (n,)
    finally:
        con.close()


def test_features_are_zero_filled_and_empty_store_scores_nothing(store: Store) -> None:
    require_module("sklearn")
    con = store.connect()
    try:
        assert nd.hourly_features(con).empty
    finally:
        con.close()
    assert nd.score_anomalies(store) == 0
    add_xids(store, [("x1", 5, 79), ("x2", 70, 79)])
    con = store.connect()
    try:
        f = nd.hourly_features(con)
    finally:
        con.close()
    assert list(f.columns) == ["node", "hour", *nd.FEATURES]
    assert f["xids"].tolist() == [1.0, 1.0]
    assert (f["util_mean"] == 0).all()


def test_anomaly_score_is_a_probability_like_scale() -> None:
    reference = np.array([-0.5, 0.2, 0.4, 1.0, 2.0])
    s = nd.anomaly_score(np.array([0.0, 5.0, -5.0, -1e9, 1e9]), reference)
    assert s[0] == pytest.approx(0.5)  # the boundary of the learned normal region
    assert 0.0 <= s.min() and s.max() <= 1.0
    assert s[1] < 0.5 < s[2]  # inside is below one half, outside above
    assert s[3] == pytest.approx(1.0) and s[4] == pytest.approx(0.0)
    # 0.8, the alert threshold, is about 1.4 typical distances outside the boundary.
    typical = float(np.median(np.abs(reference)))
    assert nd.anomaly_score(np.array([-1.386 * typical]), reference)[0] == pytest.approx(0.8, abs=1e-3)

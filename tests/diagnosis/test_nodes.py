"""Bad nodes: flagging rules with evidence, clearing, the CLI, and the One-Class SVM scores."""

from __future__ import annotations

import json
import math
import os
from datetime import timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from gpulens.diagnosis import badnodes as bn
from gpulens.diagnosis import nodes as nd
from gpulens.errors import InputError
from gpulens.store import Store, arrow_schema
from tests.conftest import require_module
from tests.diagnosis.test_jobs import T0, add_job, add_xids


def infra_failure(store: Store, job: str, nodes: list[str], minute: int = 0, user: str = "u") -> None:
    add_job(store, job, [{"status": "failed", "nodes": nodes, "start": minute, "minutes": 60}], user=user)
    with store.write() as con:
        con.execute("INSERT INTO failures (job_id, attempt, category, origin, method) "
                    "VALUES (?, 0, 'gpu_hardware', 'infrastructure', 'rule+bn')", [job])


def cluster(store: Store, jobs: dict[str, tuple[int, int]], *, hours: int = 2, multi: int = 0) -> None:
    """Per node: (jobs run, of which failed with infrastructure origin), single-node attempts of
    ``hours`` each, spread over a week; written in one transaction. ``multi`` extra 2-node jobs
    over consecutive node pairs pass, so every node also shares jobs."""
    rows_j, rows_a, rows_p, rows_f = [], [], [], []
    names = sorted(jobs)
    for node, (n, failed) in sorted(jobs.items()):
        for i in range(n):
            job = f"{node}-{i:04d}"
            start = T0 + timedelta(minutes=(i * 7919) % (7 * 1440))
            end = start + timedelta(hours=hours)
            status = "failed" if i < failed else "passed"
            rows_j.append([job, status])
            rows_a.append([job, start, end, status])
            rows_p.append([job, node, start, end])
            if i < failed:
                rows_f.append([job])
    for i in range(multi):
        a, b = names[i % len(names)], names[(i + 1) % len(names)]
        job = f"multi-{i:04d}"
        start = T0 + timedelta(minutes=(i * 4001) % (7 * 1440))
        end = start + timedelta(hours=hours)
        rows_j.append([job, "passed"])
        rows_a.append([job, start, end, "passed"])
        rows_p += [[job, a, start, end], [job, b, start, end]]
    with store.write() as con:
        con.executemany("INSERT INTO nodes (node, gpus, source) VALUES (?, 8, 'test')", [[n] for n in names])
        con.executemany("INSERT INTO jobs (job_id, \"user\", vc, name, submitted, status, requested_gpus, inputs, "
                        "source) VALUES (?, 'u', 'vc1', 'x', TIMESTAMP '2026-11-01', ?, 1, [], 'test')", rows_j)
        con.executemany("INSERT INTO attempts (job_id, attempt, start_time, end_time, status, exit_code)"
                        " VALUES (?, 0, ?, ?, ?, 1)", rows_a)
        con.executemany("INSERT INTO placements VALUES (?, 0, ?, 0, ?, ?)", rows_p)
        if rows_f:
            con.executemany("INSERT INTO failures (job_id, attempt, category, origin, method) "
                            "VALUES (?, 0, 'gpu_hardware', 'infrastructure', 'rule+bn')", rows_f)


def flags(store: Store, include_cleared: bool = False) -> dict[str, dict]:
    con = store.connect()
    try:
        df = nd.flagged_nodes(con, include_cleared=include_cleared)
    finally:
        con.close()
    return {r["node"]: r for r in df.to_dict("records")}


# ---------------------------------------------------------------- statistics
def test_poisson_tail_matches_the_poisson_sum_and_is_continuous() -> None:
    for k in (1, 2, 3, 7, 20, 60):
        for mu in (0.05, 0.5, 1.0, 4.0, 15.0, 55.0):
            exact = 1.0 - sum(math.exp(-mu) * mu**i / math.factorial(i) for i in range(k))
            assert bn.poisson_tail(k, mu) == pytest.approx(exact, rel=1e-9, abs=1e-14)
    assert bn.poisson_tail(0, 3.0) == 1.0 and bn.poisson_tail(2, 0.0) == 0.0
    assert bn.poisson_tail(2, 1.0) > bn.poisson_tail(2.5, 1.0) > bn.poisson_tail(3, 1.0)
    assert 0 < bn.poisson_tail(80, 0.1) < 1e-100  # tiny tails stay positive and finite


def test_benjamini_hochberg_adjusts_in_input_order() -> None:
    q = bn.benjamini_hochberg([0.04, 0.001, 0.03, 0.5])
    assert q == pytest.approx([0.04 * 4 / 3, 0.004, 0.04 * 4 / 3, 0.5])
    assert bn.benjamini_hochberg([]) == []


# ---------------------------------------------------------------- blame
def failure(nodes: list[str], passed_on: tuple[str, ...] = ()) -> bn.InfraFailure:
    return bn.InfraFailure("j", 0, "comm_error", T0, T0 + timedelta(hours=1), nodes, set(passed_on))


def sig(minute: int, kind: str = "xid", weight: float = 1.0) -> bn.Signal:
    return bn.Signal(T0 + timedelta(minutes=minute), kind, "XID 79", weight)


def test_the_node_with_hardware_signals_takes_the_blame() -> None:
    shares = bn.share_blame(failure(["a", "b", "c"]), {"b": [sig(30)], "c": [sig(600)]}, 300)
    assert {n: s for n, (s, _, _) in shares.items()} == {"a": 0.0, "b": 1.0, "c": 0.0}  # c's XID is hours later
    assert [x.ts for x in shares["b"][2]] == [T0 + timedelta(minutes=30)]
    # two nodes with signals share in proportion (XID 79 weighs double)
    shares = bn.share_blame(failure(["a", "b"]), {"a": [sig(10, weight=2.0)], "b": [sig(20)]}, 300)
    assert shares["a"][0] == pytest.approx(2 / 3) and shares["b"][0] == pytest.approx(1 / 3)
    # an hourly ECC signal covers its hour, and a signal within the margin after the end counts
    shares = bn.share_blame(failure(["a", "b"]), {"a": [bn.Signal(T0 - timedelta(minutes=30), "ecc", "", 1.0)],
                                                  "b": [sig(64)]}, 300)
    assert shares["a"][0] == pytest.approx(0.5) and shares["b"][0] == pytest.approx(0.5)


def test_a_retry_that_passed_elsewhere_is_evidence_against_the_node_it_left() -> None:
    shares = bn.share_blame(failure(["x", "y"], passed_on=("y", "z")), {}, 300)
    assert shares["x"][0] == 1.0 and shares["y"][0] == 0.0
    assert "passed on this node" in shares["y"][1]
    even = bn.share_blame(failure(["x", "y", "w"]), {}, 300)  # nothing known: even split
    assert [s for s, _, _ in even.values()] == [pytest.approx(1 / 3)] * 3
    same = bn.share_blame(failure(["x", "y"], passed_on=("x", "y")), {}, 300)  # passed on all of them
    assert same["x"][0] == same["y"][0] == 0.5
    assert bn.share_blame(failure(["solo"]), {}, 300)["solo"][0] == 1.0


# ---------------------------------------------------------------- flagging
@pytest.mark.slow
def test_busy_healthy_nodes_are_not_flagged_a_node_failing_above_the_cluster_rate_is(store: Store) -> None:
    jobs = {f"h{i:02d}": (40, 1) for i in range(12)}
    jobs["busy"] = (240, 6)  # six times the work, six times the failures: the cluster's rate
    jobs["bad"] = (20, 6)  # fewer failures than 'busy' in count, 15x the rate
    cluster(store, jobs)
    out = nd.flag_nodes(store)
    assert list(out["node"]) == ["bad"]
    f = flags(store)["bad"]
    ev = json.loads(f["evidence"])
    assert f["confidence"] > 0.99 and ev["confidence"] == pytest.approx(f["confidence"], abs=1e-6)
    rate = ev["rate"]
    assert rate["infra_failures_per_1000_node_hours"] == pytest.approx(1000 * 6 / 40)
    assert rate["cluster_per_1000_node_hours"] == pytest.approx(1000 * (12 + 6 + 0.5) / (12 * 80 + 480), abs=1e-4)
    assert ev["jobs"] == [f"bad-{i:04d}" for i in range(6)] and ev["node_hours"] == pytest.approx(40)
    assert "per 1000 node-hours vs cluster" in f["reason"]
    con = store.connect()
    try:
        tests = {t.node: t for t in nd.node_evidence(con)}
    finally:
        con.close()
    assert tests["busy"].blame >= tests["bad"].blame and tests["busy"].q_value > 0.5


@pytest.mark.slow
def test_hardware_events_flag_a_node_the_application_xids_do_not(store: Store) -> None:
    cluster(store, {f"h{i}": (10, 0) for i in range(8)}, multi=0)
    for i, job in enumerate(["a", "b"]):
        add_job(store, job, [{"status": "passed", "nodes": ["xid-node"], "start": 200 * i, "minutes": 60}])
    add_xids(store, [("xid-node", 30, 79), ("xid-node", 230, 48), ("xid-node", 300, 79)])
    add_xids(store, [("lonely", m, x) for m, x in ((10, 94), (20, 94), (30, 63), (90, 92), (95, 94))])  # no jobs
    add_xids(store, [("app-node", 10, 13), ("app-node", 20, 31), ("app-node", 30, 43), ("app-node", 40, 13)])
    add_xids(store, [("h1", 10, 48)])  # one stray event: not enough
    out = nd.flag_nodes(store)
    assert set(out["node"]) == {"xid-node", "lonely"}
    ev = json.loads(flags(store)["xid-node"]["evidence"])
    assert ev["xids"] == {"79": 2, "48": 1} and ev["hw_events"] == 3
    assert [s["ts"] for s in ev["signals"]] == [str(T0 + timedelta(minutes=m)) for m in (30, 230, 300)]
    assert "fell off the bus" in ev["signals"][0]["detail"]
    assert json.loads(flags(store)["lonely"]["evidence"])["xids"] == {"94": 3, "63": 1, "92": 1}


@pytest.mark.slow
def test_one_bad_node_does_not_raise_the_baseline_another_is_tested_against(store: Store) -> None:
    cluster(store, {f"h{i:02d}": (10, 0) for i in range(20)})
    events = [(node, 10 * k, 48) for node in ("bad1", "bad2") for k in range(50)]
    events += [("mid", 100 * k, 94) for k in range(6)]  # few events, but far above the healthy nodes' none
    add_xids(store, events)
    out = nd.flag_nodes(store)
    assert set(out["node"]) == {"bad1", "bad2", "mid"}
    ev = json.loads(flags(store)["mid"]["evidence"])
    # the baseline is the healthy peers (half a pseudo-event over 22 nodes), not the bad nodes' 100 events
    assert ev["rate"]["cluster_hardware_events_per_day"] < 0.01


@pytest.mark.slow
def test_multi_node_failures_blame_the_node_with_xids_not_its_neighbours(store: Store) -> None:
    cluster(store, {f"h{i:02d}": (30, 0) for i in range(10)})
    for i in range(8):  # 8-node jobs failing on 'culprit' + 7 healthy nodes each
        peers = [f"h{(i + k) % 10:02d}" for k in range(7)]
        infra_failure(store, f"m{i}", ["culprit", *peers], 600 * i)
    add_xids(store, [("culprit", 600 * i + 50, 79) for i in range(8)])
    out = nd.flag_nodes(store)
    assert list(out["node"]) == ["culprit"]
    ev = json.loads(flags(store)["culprit"]["evidence"])
    assert ev["blame"] == pytest.approx(8.0)
    assert all(f["why"] == "hardware signals during the attempt" for f in ev["infra_failures"])
    con = store.connect()
    try:
        tests = {t.node: t for t in nd.node_evidence(con)}
    finally:
        con.close()
    assert all(tests[f"h{i:02d}"].blame == 0 for i in range(10))


@pytest.mark.slow
def test_ecc_row_remap_and_anomaly_signals_are_read_from_the_store_and_share_blame(store: Store) -> None:
    infra_failure(store, "m-ecc", ["a", "b"], 0)  # 60 minutes from T0
    infra_failure(store, "m-anom", ["c", "d"], 600)
    schema = arrow_schema("gpu")
    rows = [{"ts": T0 + timedelta(minutes=m), "node": "a", "gpu_index": 0, "ecc_uncorrected_total": ecc,
             "row_remap_failures": rr} for m, ecc, rr in ((0, 4, 0), (30, 6, 1), (50, 6, 1))]
    store.write_samples("gpu", pa.Table.from_pylist(rows, schema=schema))
    with store.write() as con:
        con.execute("INSERT INTO node_anomaly VALUES ('d', ?, 0.93), ('c', ?, 0.2)",
                    [T0 + timedelta(hours=10), T0 + timedelta(hours=10)])
    con = store.connect()
    try:
        tests = {t.node: t for t in nd.node_evidence(con)}
    finally:
        con.close()
    assert (tests["a"].blame, tests["b"].blame, tests["c"].blame, tests["d"].blame) == (1.0, 0.0, 0.0, 1.0)
    kinds = {s.kind: s.detail for s in tests["a"].signals}
    assert kinds == {"ecc": "2 uncorrectable ECC error(s) on GPU 0", "row_remap": "1 row-remap failure(s) on GPU 0"}
    assert tests["a"].hw_events == 2 and tests["d"].hw_events == 0  # an anomaly is a signal, not an event
    assert tests["d"].failures[0]["signals"][0]["detail"] == "anomaly score 0.93"


@pytest.mark.slow
def test_reflagging_updates_in_place_and_clearing_needs_new_evidence(store: Store) -> None:
    cluster(store, {f"h{i:02d}": (40, 0) for i in range(10)})
    for i in range(4):
        infra_failure(store, f"j{i}", ["bad"], 300 * i)
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
    infra_failure(store, "j8", ["bad"], 1900)
    assert nd.flag_nodes(store).empty  # one new job is not enough
    infra_failure(store, "j9", ["bad"], 2300)
    out = nd.flag_nodes(store)
    assert list(out["node"]) == ["bad"] and list(out["new"]) == [True]
    with pytest.raises(Exception, match="no active flag"):
        nd.clear_flag(store, "nobody", "ops", "x")
    with pytest.raises(InputError, match="false-discovery"):
        nd.flag_nodes(store, fdr=1.5)


@pytest.mark.slow
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
    cluster(store, {f"h{i:02d}": (40, 0) for i in range(10)})
    for i in range(3):
        infra_failure(store, f"j{i}", ["bad"], 500 * i)
    capsys.readouterr()
    main(["--data-dir", str(data), "nodes", "flag", "--fdr", "0.001", "--json"])
    flagged = json.loads(capsys.readouterr().out)
    assert [f["node"] for f in flagged] == ["bad"]
    main(["--data-dir", str(data), "nodes", "list", "--json"])
    listed = json.loads(capsys.readouterr().out)
    assert listed[0]["node"] == "bad" and listed[0]["evidence"]["jobs"] == ["j0", "j1", "j2"]
    assert listed[0]["confidence"] > 0.99 and listed[0]["evidence"]["rate"]["cluster_per_1000_node_hours"] > 0
    main(["--data-dir", str(data), "nodes", "list"])
    text = capsys.readouterr().out
    assert "bad" in text and "confidence" in text and "j0 (" in text


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


@pytest.mark.slow
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


@pytest.mark.slow
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

"""The live straggler detector (issue 25): detector, simulated faults, agents' /metrics, the
watcher's store rows, `nodes live`, the exporter's metric and the cross-job node flags."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest

from gpulens.cli.main import cli, main
from gpulens.collectors.agent import Agent
from gpulens.collectors.gpu.fake import FakeBackend
from gpulens.config import LiveConfig
from gpulens.diagnosis import live as lv
from gpulens.diagnosis.nodes import flag_nodes, flagged_nodes
from gpulens.diagnosis.straggler import DetectorParams, JobDetector
from gpulens.diagnosis.straggler_eval import run_job, summarize
from gpulens.errors import StoreError
from gpulens.exporters.agent import render_text
from gpulens.exporters.cluster import ClusterCollector
from gpulens.ingest.simulate.live import FAULT_KINDS, LiveFault, LiveJob, simulate_job
from gpulens.store import Store


def _raw(n: int, clock: list[float], util: float = 0.95, gpus: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(len(clock) * 7 + n)
    return {
        "gpu_util": np.clip(util + rng.normal(0, 0.01, (n, gpus)), 0, 1),
        "sm_clock": np.array(clock)[:, None] + rng.normal(0, 5, (n, gpus)),
        "power": np.full((n, gpus), 600.0) + rng.normal(0, 5, (n, gpus)),
        "xid": np.zeros(n), "ecc": np.zeros(n), "link_errors": np.zeros(n),
    }


def _run(clocks: Any, n: int = 4, p: DetectorParams | None = None, util: Any = None) -> JobDetector:
    det = JobDetector("j", [f"n{i}" for i in range(n)], p or DetectorParams())
    for k in range(len(clocks)):
        det.update(1000.0 + 5 * k, _raw(n, list(clocks[k]), 0.95 if util is None else util[k]))
    return det


def test_throttled_machine_is_named_after_onset_and_cleared() -> None:
    ticks = 200  # 1,000 s; onset at tick 100 (500 s), end at tick 160
    clocks = np.full((ticks, 4), 1980.0)
    clocks[100:160, 2] = 1100.0
    det = JobDetector("j", ["n0", "n1", "n2", "n3"])
    opened: dict[str, float] = {}
    for k in range(ticks):
        for s in det.update(1000.0 + 5 * k, _raw(4, list(clocks[k]))):
            opened.setdefault(s.node, 1000.0 + 5 * k)
            if k == 130:  # how far, while it lasts: 1100 vs 1980 MHz
                assert s.deviations["sm_clock"] == pytest.approx(-0.444, abs=0.02)
    assert list(opened) == ["n2"]
    assert 0 < opened["n2"] - 1500.0 <= 60
    assert det.open == {}
    [closed] = det.closed
    assert closed.signals == ["sm_clock"]
    assert 1500.0 - 5 <= closed.since <= opened["n2"]
    assert closed.until is not None and closed.until > 1000.0 + 5 * 160


@pytest.mark.slow
def test_job_wide_pause_stable_offsets_and_ramps_are_not_flagged() -> None:
    ticks = 240
    clocks = np.full((ticks, 4), 1980.0)
    clocks[:, 1] = 1900.0  # a stable per-machine offset (under the threshold's share after baseline)
    clocks[150:170, :] = 600.0  # everyone idles together
    util = np.full(ticks, 0.95)
    util[150:170] = 0.02
    det = _run(clocks, util=util)
    assert det.open == {} and det.closed == []
    # a start-up ramp inside the grace period: one machine at idle clocks for 60 s
    clocks = np.full((ticks, 4), 1980.0)
    clocks[:12, 3] = 500.0
    det = _run(clocks)
    assert det.open == {} and det.closed == []


def test_two_machine_job_names_the_slow_one() -> None:
    clocks = np.full((160, 2), 1980.0)
    clocks[90:, 0] = 1200.0
    det = _run(clocks, n=2)
    assert list(det.open) == ["n0"]


@pytest.mark.slow
def test_every_simulated_fault_kind_is_found_on_its_machine() -> None:
    outcomes = []
    for i, kind in enumerate(FAULT_KINDS):
        variant = {"nic_degraded": "errors", "xid_storm": "xid", "clock_throttle": "half"}.get(kind, "")
        job = LiveJob(f"t{i}", 4, 1500.0, seed=100 + i, fault=LiveFault(kind, 1, 600.0, None, variant))
        outcomes.append(run_job(job))
    s = summarize(outcomes)
    assert s["by_kind"].keys() == set(FAULT_KINDS)
    assert s["true_positives"] == len(FAULT_KINDS), s
    assert s["false_positive_pairs"] == 0, s
    # a healthy job with every normal asymmetry
    healthy = run_job(LiveJob("h", 8, 2 * 3600.0, seed=7, pipeline=True))
    assert healthy.opened == []


def test_simulated_truth_and_asymmetries_are_what_the_docs_say() -> None:
    job = LiveJob("x", 4, 1800.0, seed=3, fault=LiveFault("gpu_hang", 2, 900.0))
    a = simulate_job(job)
    t = a["t"] - a["t"][0]
    after = t >= 905
    assert (a["gpu_util"][after, 2].min(axis=1) < 0.1).all()
    assert (a["gpu_util"][(t > 300) & (t < 890), 2].min(axis=1) > 0.05).mean() > 0.5


# ------------------------------------------------------------------ agents' /metrics
def _agent(node: str, scenario: dict[str, Any], t0: list[float]) -> Agent:
    return Agent(node=node, backend=FakeBackend(scenario), net=None, resolver=None, sink=None,
                 clock=lambda: t0[0], wall=lambda: t0[0])


def _scenario(slow: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"devices": [{"index": i, "values": {"util_gpu": 95, "sm_clock_mhz": 1980,
                                                                  "power_w": 600, "util_mem": 40}}
                                        for i in range(2)],
                            "xids": [{"tick": 3, "gpu": 1, "xid": 79, "count": 2}]}
    if slow:
        spec["phases"] = [{"from_tick": 40, "until_tick": 80, "gpus": [0], "values": {"sm_clock_mhz": 990}}]
    return spec


def test_parse_agent_metrics_reads_gauges_counters_and_skips_loopback() -> None:
    now = [1.8e9]
    agent = _agent("a1", _scenario(False), now)
    for _ in range(5):
        agent.tick()
        now[0] += 5
    r = lv.parse_agent_metrics(render_text(agent.snapshot).decode()
                               + 'gpulens_network_speed_bytes{node="a1",device="lo"} 9e9\n'
                               + 'gpulens_network_speed_bytes{node="a1",device="eth0"} 3.125e9\n')
    assert r.gpu["sm_clock"] == {0: 1980.0, 1: 1980.0}
    assert r.gpu["gpu_util"] == pytest.approx({0: 0.95, 1: 0.95})
    assert r.speed == 3.125e9
    assert r.sampled_at == agent.snapshot.last_sample
    xids = [v for (sig, _), v in r.counters.items() if sig == "xid"]
    assert xids == [2.0]


def _plant(store: Store, job: str, nodes: list[str], *, ended: bool = False) -> None:
    now = datetime(2027, 1, 1)
    with store.write() as con:
        con.execute("INSERT INTO jobs (job_id, status) VALUES (?, 'running')", [job])
        con.execute("INSERT INTO attempts (job_id, attempt, start_time, end_time, status) VALUES (?, 0, ?, ?, ?)",
                    [job, now, now + timedelta(hours=1) if ended else None, "passed" if ended else "running"])
        for n in nodes:
            con.execute("INSERT INTO placements (job_id, attempt, node, gpu_index, start_time) VALUES (?, 0, ?, 0, ?)",
                        [job, n, now])


@pytest.mark.slow
def test_watcher_stores_the_suspect_and_readers_show_it(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    nodes = ["w1", "w2", "w3", "w4"]
    _plant(store, "job-w", nodes)
    _plant(store, "job-single", ["w9"])  # one machine: nothing to compare
    now = [1.8e9]
    agents = {n: _agent(n, _scenario(n == "w3"), now) for n in nodes}
    cfg = LiveConfig(interval=5.0)
    watcher = lv.LiveWatcher(store, cfg, wall=lambda: now[0],
                             fetch=lambda url: render_text(agents[url.split("/")[2].split(":")[0]].snapshot).decode())
    first_seen = None
    for k in range(120):
        for a in agents.values():
            a.tick()
        sus = watcher.step()
        if sus and first_seen is None:
            first_seen = k
            assert [s.node for s in sus] == ["w3"]
        if k == 60:  # the suspicion is in the store while it lasts
            con = store.connect(samples=False)
            cur = lv.current_suspects(con, now=datetime.fromtimestamp(now[0], UTC).replace(tzinfo=None))
            con.close()
            assert cur[["job_id", "node"]].values.tolist() == [["job-w", "w3"]]
            assert list(cur["signals"][0]) == ["sm_clock"]
        now[0] += 5
    assert watcher.jobs.keys() == {"job-w"}
    assert first_seen is not None and 40 < first_seen <= 40 + 12
    con = store.connect(samples=False)
    hist = lv.detection_history(con)
    assert hist[["job_id", "node"]].values.tolist() == [["job-w", "w3"]]
    assert hist["until_ts"].notna().all()  # cleared after tick 80
    assert lv.current_suspects(con).empty
    con.close()


@pytest.mark.slow
def test_nodes_live_cli_and_exporter_metric(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = Store.open(data)
    now = datetime.now(UTC).replace(tzinfo=None)
    with store.write() as con:
        con.execute("INSERT INTO straggler_detections VALUES ('job-a', 0, 'n3', ?, ?, ?, NULL, ['sm_clock', 'power'],"
                    " 3.2, ?, 8, 'live')", [now - timedelta(minutes=3), now - timedelta(minutes=2), now,
                                             json.dumps({"sm_clock": {"score": 3.2, "deviation": -0.41},
                                                         "power": {"score": 1.1, "deviation": -0.33}})])
        # left open by a watcher that stopped long ago: not current
        con.execute("INSERT INTO straggler_detections VALUES ('job-b', 0, 'n5', ?, ?, ?, NULL, ['xid'], 2.0, '{}',"
                    " 4, 'live')", [now - timedelta(hours=3)] * 3)
    runner = CliRunner()
    out = runner.invoke(cli, ["--data-dir", str(data), "nodes", "live", "--json"])
    assert out.exit_code == 0, out.output
    recs = json.loads(out.output)
    assert [(r["job_id"], r["node"], r["signals"]) for r in recs] == [("job-a", "n3", ["sm_clock", "power"])]
    assert recs[0]["deviations"] == {"sm_clock": -0.41, "power": -0.33}
    human = runner.invoke(cli, ["--data-dir", str(data), "nodes", "live"])
    assert "n3" in human.output and "sm_clock -41%" in human.output and "other 7 machines" in human.output
    assert "n5" not in human.output
    reg = CollectorRegistry()
    ClusterCollector(lambda: store, registry=reg)
    text = generate_latest(reg).decode()
    lines = sorted(ln for ln in text.splitlines() if ln.startswith("gpulens_job_node_suspect{"))
    assert lines == ['gpulens_job_node_suspect{job_id="job-a",node="n3",signal="power"} 1.0',
                     'gpulens_job_node_suspect{job_id="job-a",node="n3",signal="sm_clock"} 1.0']
    assert 'gpulens_cluster_exporter_section_up{section="stragglers"} 1.0' in text


@pytest.mark.slow
def test_a_node_straggling_in_several_jobs_is_flagged(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    nodes = [f"c{i:02d}" for i in range(16)]
    t0 = datetime(2027, 1, 1)
    with store.write() as con:
        for i in range(16):
            con.execute("INSERT INTO nodes (node, gpus) VALUES (?, 8)", [nodes[i]])
        for j in range(24):  # 24 four-node jobs, each node in six
            job = f"job{j:02d}"
            start = t0 + timedelta(hours=j)
            con.execute("INSERT INTO attempts (job_id, attempt, start_time, end_time, status, exit_code, signal, log_path) VALUES (?, 0, ?, ?, 'passed', 0, NULL, NULL)",
                        [job, start, start + timedelta(hours=1)])
            members = [nodes[(j * 4 + k) % 16] for k in range(4)]
            for n in members:
                con.execute("INSERT INTO placements VALUES (?, 0, ?, 0, ?, ?)", [job, n, start, start])
            if "c05" in members:  # c05 slowed every job it ran in
                con.execute("INSERT INTO straggler_detections VALUES (?, 0, 'c05', ?, ?, ?, ?, ['sm_clock'], 4.0,"
                            " '{}', 4, 'live')", [job, start, start, start, start + timedelta(minutes=30)])
        con.execute("INSERT INTO straggler_detections VALUES ('job03', 0, 'c14', ?, ?, ?, ?, ['pcie'], 1.2, '{}',"
                    " 4, 'live')", [t0, t0, t0, t0])
    df = flag_nodes(store)
    assert df["node"].tolist() == ["c05"]
    assert "straggler in 6 job(s)" in df["reason"][0]
    con = store.connect(samples=False)
    flags = flagged_nodes(con)
    con.close()
    ev = json.loads(flags["evidence"][0])
    assert ev["straggler_jobs"] == 6 and len(ev["stragglers"]) == 6
    out = CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "data"), "nodes", "list"])
    assert "straggler in (first 5 of 6 in the evidence; --json lists them): job" in out.output


@pytest.mark.parametrize("bad", ['{"n1": 3}', "not json"])
def test_bad_agents_file_is_one_line_exit_2(tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "agents.json"
    f.write_text(bad)
    with pytest.raises(SystemExit) as exc:
        main(["--data-dir", str(tmp_path / "d"), "nodes", "live", "--watch", "--agents-file", str(f)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "agents.json" in err and "Traceback" not in err


def test_fake_backend_phases_script_gauges_and_counter_steps() -> None:
    fb = FakeBackend({"devices": [{"index": 0, "values": {"sm_clock_mhz": 1980},
                                   "counters": {"pcie_tx_bytes": {"start": 0, "step": 10}}},
                                  {"index": 1, "values": {"sm_clock_mhz": 1980}}],
                      "phases": [{"from_tick": 2, "until_tick": 4, "gpus": [0],
                                  "values": {"sm_clock_mhz": 900}, "counters": {"pcie_tx_bytes": {"step": 5}}}]})
    polls = [fb.poll().samples for _ in range(6)]
    assert [p[0].sm_clock_mhz for p in polls] == [1980, 1980, 900, 900, 1980, 1980]
    assert [p[1].sm_clock_mhz for p in polls] == [1980] * 6
    assert [p[0].pcie_tx_bytes for p in polls] == [0, 10, 20, 25, 30, 40]


class _FlakyStore:
    """A store whose first writes fail like a full disk; reads go through."""

    def __init__(self, store: Store, failures: int) -> None:
        self.store, self.failures = store, failures

    def connect(self, **kw: Any) -> Any:
        return self.store.connect(**kw)

    def write(self) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise StoreError("Cannot write the state file: No space left on device.")
        return self.store.write()


@pytest.mark.slow
def test_watcher_keeps_detecting_when_the_store_cannot_be_written(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    nodes = ["w1", "w2", "w3"]
    _plant(store, "job-f", nodes)
    now = [1.8e9]
    agents = {n: _agent(n, _scenario(n == "w2"), now) for n in nodes}
    flaky = _FlakyStore(store, failures=3)
    watcher = lv.LiveWatcher(flaky, LiveConfig(), wall=lambda: now[0],  # type: ignore[arg-type]
                             fetch=lambda url: render_text(agents[url.split("/")[2].split(":")[0]].snapshot).decode())
    for _ in range(70):
        for a in agents.values():
            a.tick()
        watcher.step()
        now[0] += 5
    assert watcher.write_errors == 3 and flaky.failures == 0
    con = store.connect(samples=False)
    hist = lv.detection_history(con)
    con.close()
    assert hist[["job_id", "node"]].values.tolist() == [["job-f", "w2"]]

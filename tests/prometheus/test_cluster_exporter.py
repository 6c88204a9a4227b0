"""The cluster exporter: values computed from a small hand-built store, bounds, cache and health."""

from __future__ import annotations

import time
import urllib.request
from datetime import datetime, timedelta

import pyarrow as pa
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

from gpulens.analysis.accounting import STAGE_BASIS
from gpulens.cli.main import cli
from gpulens.config import DiagnoseConfig, ExporterConfig
from gpulens.errors import StoreError
from gpulens.exporters.cluster import METRIC_NAMES, ClusterCollector, ExporterServer
from gpulens.store import Store, arrow_schema

NOW = datetime(2026, 11, 22, 12, 0, 0)
T0 = NOW - timedelta(hours=3)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _fill(store: Store) -> None:
    with store.write() as con:
        for node in ("n1", "n2"):
            con.execute("INSERT INTO nodes (node, gpus) VALUES (?, 2)", [node])
            for g in (0, 1):
                con.execute("INSERT INTO gpus (node, gpu_index) VALUES (?, ?)", [node, g])
        jobs = [
            # job, user, vc, status, inputs
            ("j-a", "alice", "vcA", "passed", ["/data/ok"]),
            ("j-b", "bob", "vcB", "failed", ["/data/ok"]),
            ("j-c", "carol", "vcC", "running", ["/data/bad", "/data/bad2", "/data/ok"]),
            ("j-d", "dave", "vcC", "queued", ["/data/sus"]),
            ("j-e", "erin", "vcC", "passed", ["/data/bad"]),  # finished: not alerted
        ]
        for job, user, vc, status, inputs in jobs:
            con.execute(
                'INSERT INTO jobs (job_id, "user", vc, status, inputs, submitted) VALUES (?, ?, ?, ?, ?, ?)',
                [job, user, vc, status, inputs, T0],
            )
        attempts = [
            ("j-a", 0, T0, T0 + timedelta(hours=1), "passed"),
            ("j-b", 0, T0, NOW - timedelta(minutes=130), "failed"),  # 2h10m ago: 24h window only
            ("j-b", 1, NOW - timedelta(minutes=120), NOW - timedelta(minutes=30), "failed"),
            ("j-c", 0, NOW - timedelta(minutes=60), None, "running"),
        ]
        for job, att, start, end, status in attempts:
            con.execute(
                "INSERT INTO attempts (job_id, attempt, start_time, end_time, status) VALUES (?, ?, ?, ?, ?)",
                [job, att, start, end, status],
            )
        placements = [
            ("j-a", 0, "n1", 0, T0, T0 + timedelta(hours=1)),
            ("j-a", 0, "n1", 1, T0, T0 + timedelta(hours=1)),
            ("j-b", 0, "n2", 1, T0, NOW - timedelta(minutes=130)),
            ("j-c", 0, "n2", 0, NOW - timedelta(minutes=60), None),
        ]
        for row in placements:
            con.execute("INSERT INTO placements VALUES (?, ?, ?, ?, ?, ?)", list(row))
        con.execute(
            "INSERT INTO failures (job_id, attempt, category, origin) VALUES "
            "('j-b', 0, 'gpu_oom', 'user'), ('j-b', 1, 'gpu_oom', 'user')"
        )
        for inp, state in (("/data/bad", "blacklisted"), ("/data/bad2", "blacklisted"),
                           ("/data/sus", "suspected"), ("/data/old", "cleared")):
            con.execute("INSERT INTO blacklist (input, state) VALUES (?, ?)", [inp, state])
        con.execute(
            "INSERT INTO node_flags (node, flagged_at, active, confidence) VALUES "
            "('n1', ?, TRUE, 0.995), ('n2', ?, FALSE, 0.999)",
            [NOW, NOW - timedelta(days=1)],
        )
        for i in range(30):  # 30 nodes scored; the newest hour is NOW
            con.execute("INSERT INTO node_anomaly VALUES (?, ?, ?)",
                        [f"x{i:02d}", NOW, i / 100])
        # an old high score outside the latest 6 hours does not count
        con.execute("INSERT INTO node_anomaly VALUES ('x00', ?, 0.99)", [NOW - timedelta(hours=7)])
        con.execute(
            "INSERT INTO validations (ts, verdict, category) VALUES "
            "(?, 'pass', NULL), (?, 'fail', 'gpu_oom'), (?, 'fail', 'gpu_oom')",
            [NOW, NOW, NOW],
        )
    # j-a ran at 50% on both GPUs for its hour
    rows = [
        {"ts": T0 + timedelta(minutes=m, seconds=30), "node": "n1", "gpu_index": g, "util_gpu": 50.0}
        for m in range(60) for g in (0, 1)
    ]
    store.write_samples("gpu", pa.Table.from_pylist(rows, schema=arrow_schema("gpu")))


def _registry(store: Store, clock: Clock | None = None, **cfg: float) -> tuple[CollectorRegistry, ClusterCollector]:
    registry = CollectorRegistry(auto_describe=False)
    config = ExporterConfig(**cfg)  # type: ignore[arg-type]
    collector = ClusterCollector(lambda: store, config, registry=registry,
                                 monotonic=clock or Clock(), now=lambda: NOW)
    return registry, collector


@pytest.mark.slow
def test_the_alert_confidence_comes_from_the_diagnose_config(store: Store) -> None:
    _fill(store)
    registry = CollectorRegistry(auto_describe=False)
    ClusterCollector(lambda: store, ExporterConfig(), registry=registry, monotonic=Clock(), now=lambda: NOW,
                     diagnose=DiagnoseConfig(node_alert_confidence=0.9999))
    assert registry.get_sample_value("gpulens_cluster_node_flag_alert_confidence") == 0.9999


@pytest.mark.slow
def test_values_from_the_store(store: Store) -> None:
    _fill(store)
    reg, _ = _registry(store, top_n=5)
    v = reg.get_sample_value
    assert v("gpulens_cluster_exporter_up") == 1
    assert v("gpulens_cluster_gpus", {"state": "total"}) == 4
    assert v("gpulens_cluster_gpus", {"state": "allocated"}) == 1
    assert v("gpulens_cluster_jobs", {"status": "passed"}) == 2
    # blacklist
    assert v("gpulens_cluster_blacklist_entries", {"state": "blacklisted"}) == 2
    assert v("gpulens_cluster_blacklist_entries", {"state": "cleared"}) == 1
    assert v("gpulens_cluster_job_flagged_inputs",
             {"job_id": "j-c", "user": "carol", "vc": "vcC", "state": "blacklisted"}) == 2
    assert v("gpulens_cluster_job_flagged_inputs",
             {"job_id": "j-d", "user": "dave", "vc": "vcC", "state": "suspected"}) == 1
    assert v("gpulens_cluster_job_flagged_inputs",
             {"job_id": "j-e", "user": "erin", "vc": "vcC", "state": "blacklisted"}) is None
    assert v("gpulens_cluster_jobs_with_flagged_inputs", {"state": "blacklisted"}) == 1
    # failures
    assert v("gpulens_cluster_failures_total", {"category": "gpu_oom", "origin": "user"}) == 2
    # the GPU-hours of failed attempts are exported per category and origin
    # on both bases; the busy sum is the waterfall's failed_or_killed stage
    labels = {"category": "gpu_oom", "origin": "user"}
    assert v("gpulens_cluster_failure_allocated_gpu_hours", labels) is not None
    assert v("gpulens_cluster_failure_busy_gpu_hours", labels) is not None
    assert v("gpulens_cluster_failure_busy_gpu_hours", labels) <= v(
        "gpulens_cluster_failure_allocated_gpu_hours", labels)
    assert v("gpulens_cluster_recent_failures", {"category": "gpu_oom", "window": "1h"}) == 1
    assert v("gpulens_cluster_recent_failures", {"category": "gpu_oom", "window": "24h"}) == 2
    # nodes
    assert v("gpulens_cluster_flagged_nodes") == 1
    assert v("gpulens_cluster_node_flagged", {"node": "n1"}) == 1
    assert v("gpulens_cluster_node_flagged", {"node": "n2"}) == 0
    assert v("gpulens_cluster_node_flag_confidence", {"node": "n1"}) == pytest.approx(0.995)
    assert v("gpulens_cluster_node_flag_confidence", {"node": "n2"}) is None  # cleared: no confidence
    assert v("gpulens_cluster_node_flag_alert_confidence") == DiagnoseConfig().node_alert_confidence
    assert v("gpulens_cluster_node_anomaly_score", {"node": "x29"}) == pytest.approx(0.29)
    assert v("gpulens_cluster_node_anomaly_score", {"node": "x00"}) is None  # old 0.99 ignored, not top 5
    # validations
    assert v("gpulens_cluster_validations_total", {"verdict": "fail", "category": "gpu_oom"}) == 2
    assert v("gpulens_cluster_validations_total", {"verdict": "pass", "category": "none"}) == 1
    # goodput: j-a held 2 GPUs for 1 h at 50% -> 2 allocated, 1 idle, 1 effective
    assert v("gpulens_cluster_vc_gpu_hours", {"vc": "vcA", "stage": "allocated", "basis": "allocated"}) == pytest.approx(2.0)
    assert v("gpulens_cluster_vc_gpu_hours", {"vc": "vcA", "stage": "idle", "basis": "idle"}) == pytest.approx(1.0)
    assert v("gpulens_cluster_vc_effective_utilization_ratio", {"vc": "vcA"}) == pytest.approx(0.5)
    stages = {s: v("gpulens_cluster_goodput_gpu_hours", {"stage": s, "basis": b}) or 0.0
              for s, b in STAGE_BASIS.items()}
    assert stages["allocated"] == pytest.approx(
        stages["idle"] + stages["failed_or_killed"] + stages["post_convergence"] + stages["effective"])


def _series(reg: CollectorRegistry, name: str) -> list[dict[str, str]]:
    return [s.labels for m in reg.collect() for s in m.samples if s.name == name]


@pytest.mark.slow
def test_cardinality_is_bounded(store: Store) -> None:
    _fill(store)
    reg, _ = _registry(store, top_n=1)
    assert len(_series(reg, "gpulens_cluster_node_anomaly_score")) == 1
    # vcA (2 GPU-hours) is kept, vcB (50 GPU-minutes) goes into "other"
    vcs = {lab["vc"] for lab in _series(reg, "gpulens_cluster_vc_gpu_hours")}
    assert vcs == {"vcA", "other"}
    other = {"vc": "other", "stage": "allocated", "basis": "allocated"}
    assert reg.get_sample_value("gpulens_cluster_vc_gpu_hours", other) == pytest.approx(50 / 60)
    # only the blacklisted job is listed; the count still covers every job
    assert _series(reg, "gpulens_cluster_job_flagged_inputs") == [
        {"job_id": "j-c", "user": "carol", "vc": "vcC", "state": "blacklisted"}]
    assert reg.get_sample_value("gpulens_cluster_jobs_with_flagged_inputs", {"state": "suspected"}) == 1
    for name in ("gpulens_cluster_failures_total", "gpulens_cluster_validations_total"):
        assert all(set(lab) <= {"category", "origin", "verdict"} for lab in _series(reg, name))


@pytest.mark.slow
def test_every_emitted_name_is_declared(store: Store) -> None:
    _fill(store)
    reg, _ = _registry(store)
    emitted = {s.name for m in reg.collect() for s in m.samples}
    assert emitted <= set(METRIC_NAMES), emitted - set(METRIC_NAMES)
    text = generate_latest(reg).decode()
    assert "cached 15 s" in text  # the TTL is stated in HELP


@pytest.mark.slow
def test_cache_ttl(store: Store) -> None:
    clock = Clock()
    reg, collector = _registry(store, clock, cache_seconds=15)
    assert reg.get_sample_value("gpulens_cluster_blacklist_entries", {"state": "blacklisted"}) == 0
    with store.write() as con:
        con.execute("INSERT INTO blacklist (input, state) VALUES ('/x', 'blacklisted')")
    clock.t += 10
    assert reg.get_sample_value("gpulens_cluster_blacklist_entries", {"state": "blacklisted"}) == 0
    assert collector.refreshes == 1
    clock.t += 6
    assert reg.get_sample_value("gpulens_cluster_blacklist_entries", {"state": "blacklisted"}) == 1
    assert reg.get_sample_value("gpulens_cluster_exporter_refreshes_total") == 2


def test_unreadable_store_reports_down(tmp_path: object) -> None:
    def broken() -> Store:
        raise StoreError("Store /nowhere has not been initialised.")

    reg = CollectorRegistry(auto_describe=False)
    ClusterCollector(broken, registry=reg)
    assert reg.get_sample_value("gpulens_cluster_exporter_up") == 0
    assert reg.get_sample_value("gpulens_cluster_exporter_refresh_errors_total") == 1
    assert reg.get_sample_value("gpulens_cluster_blacklist_entries", {"state": "blacklisted"}) is None


class NodesBroken(ClusterCollector):
    """A collector whose nodes section fails (a test double, not a patch)."""

    def _section_nodes(self, con: object) -> list[Metric]:
        raise RuntimeError("boom")


def test_failing_section_is_isolated(store: Store) -> None:
    reg = CollectorRegistry(auto_describe=False)
    NodesBroken(lambda: store, registry=reg)
    assert reg.get_sample_value("gpulens_cluster_exporter_up") == 0
    assert reg.get_sample_value("gpulens_cluster_exporter_section_up", {"section": "nodes"}) == 0
    assert reg.get_sample_value("gpulens_cluster_exporter_section_up", {"section": "blacklist"}) == 1
    assert reg.get_sample_value("gpulens_cluster_flagged_nodes") is None
    assert reg.get_sample_value("gpulens_cluster_blacklist_entries", {"state": "cleared"}) == 0


@pytest.mark.slow
def test_http_server_serves_metrics(store: Store) -> None:
    reg, collector = _registry(store)
    server = ExporterServer(collector, reg, "127.0.0.1", 0)
    try:
        assert server.port > 0
        with urllib.request.urlopen(server.url, timeout=10) as resp:
            body = resp.read().decode()
        assert resp.status == 200
        assert "gpulens_cluster_exporter_up 1.0" in body
    finally:
        server.close()


def test_cli_once(tmp_path: object) -> None:
    runner = CliRunner()
    result = runner.invoke(cli, ["--data-dir", str(tmp_path), "exporter", "--once", "--top-n", "3"])
    assert result.exit_code == 0, result.output
    assert "gpulens_cluster_exporter_up 1.0" in result.output
    assert "top 3" in result.output


def test_cli_rejects_bad_settings(tmp_path: object) -> None:
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "exporter", "--once", "--top-n", "0"])
    assert result.exit_code != 0


class CountingGoodput(ClusterCollector):
    """Counts goodput computations (a test double around the real section)."""

    goodput_calls = 0

    def _section_goodput(self, con: object) -> list[Metric]:
        type(self).goodput_calls += 1
        return super()._section_goodput(con)  # type: ignore[arg-type]


@pytest.mark.slow
def test_slow_section_has_its_own_ttl(store: Store) -> None:
    clock = Clock()
    reg = CollectorRegistry(auto_describe=False)
    CountingGoodput.goodput_calls = 0
    c = CountingGoodput(lambda: store, ExporterConfig(cache_seconds=10, slow_cache_seconds=100),
                        registry=reg, monotonic=clock, now=lambda: NOW)
    assert reg.get_sample_value("gpulens_cluster_exporter_up") == 1
    assert CountingGoodput.goodput_calls == 1
    clock.t += 11
    reg.get_sample_value("gpulens_cluster_exporter_up")
    assert c.refreshes == 2 and CountingGoodput.goodput_calls == 1  # fast sections only
    assert reg.get_sample_value("gpulens_cluster_goodput_gpu_hours",
                                {"stage": "allocated", "basis": "allocated"}) == 0
    clock.t += 100
    reg.get_sample_value("gpulens_cluster_exporter_up")
    assert CountingGoodput.goodput_calls == 2
    assert "cached 100 s" in generate_latest(reg).decode()


@pytest.mark.slow
def test_background_refresh_never_blocks_a_scrape(store: Store) -> None:
    clock = Clock()
    reg = CollectorRegistry(auto_describe=False)
    c = ClusterCollector(lambda: store, ExporterConfig(cache_seconds=15), registry=reg,
                         background=True, monotonic=clock, now=lambda: NOW)
    assert reg.get_sample_value("gpulens_cluster_exporter_up") == 1
    assert c.refreshes == 1  # the first scrape waits for the first snapshot
    with store.write() as con:
        con.execute("INSERT INTO blacklist (input, state) VALUES ('/x', 'blacklisted')")
    clock.t += 20
    # stale: this scrape gets the previous snapshot and starts a refresh in the background
    assert reg.get_sample_value("gpulens_cluster_blacklist_entries", {"state": "blacklisted"}) == 0
    deadline = time.monotonic() + 30
    while c.refreshes < 2 or c._lock.locked():
        assert time.monotonic() < deadline, "background refresh did not finish"
        time.sleep(0.05)
    assert reg.get_sample_value("gpulens_cluster_blacklist_entries", {"state": "blacklisted"}) == 1

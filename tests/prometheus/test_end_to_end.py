"""End to end: a real Prometheus scrapes a running agent (fake GPUs) and the cluster
exporter, evaluates the gpulens rules, and a real Alertmanager delivers the alerts
to a webhook receiver started by this test. Everything runs on 127.0.0.1 with free
ports and temporary directories, and is torn down afterwards.

Planted conditions: job ``job-idle`` holds two GPUs at 0% utilization (agent,
fake backend), and a running job in the store reads a blacklisted input (cluster
exporter). Rule ``for:`` durations are shortened to 2 s in a test copy of the real
rule files; expressions and thresholds are the real ones.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpulens.store import Store
from tests.conftest import require_tool
from tests.prometheus.promserver import start_all, stop_all, wait_for

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 75.0

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(150)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read().decode())


class Hook(http.server.BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # http.server API name
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).received.append(json.loads(body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


def test_rules_rendered_for_the_test_keep_expressions(tmp_path: Path) -> None:
    out = _fast_rules(tmp_path)
    real = yaml.safe_load((ROOT / "rules" / "gpulens-alerts.yml").read_text())
    fast = yaml.safe_load(out[1].read_text())
    for g_real, g_fast in zip(real["groups"], fast["groups"], strict=True):
        for r_real, r_fast in zip(g_real["rules"], g_fast["rules"], strict=True):
            assert r_real["expr"] == r_fast["expr"]
            assert r_fast["for"] == "2s"


def _fast_rules(tmp: Path) -> tuple[Path, Path]:
    """Copies of the real rule files with every `for:` set to 2s."""
    rec = tmp / "gpulens-recording.yml"
    rec.write_text((ROOT / "rules" / "gpulens-recording.yml").read_text())
    doc = yaml.safe_load((ROOT / "rules" / "gpulens-alerts.yml").read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = "2s"
    alerts = tmp / "gpulens-alerts.yml"
    alerts.write_text(yaml.safe_dump(doc, sort_keys=False))
    return rec, alerts


def _plant_store(data: Path) -> None:
    store = Store.open(data)
    now = datetime.now(UTC).replace(tzinfo=None)
    with store.write() as con:
        con.execute(
            'INSERT INTO jobs (job_id, "user", vc, status, inputs, submitted) '
            "VALUES ('job-bad-input', 'alice', 'vc1', 'running', ['/datasets/corrupt'], ?)",
            [now],
        )
        con.execute(
            "INSERT INTO blacklist (input, state, reason, updated_at) "
            "VALUES ('/datasets/corrupt', 'blacklisted', 'planted by the test', ?)",
            [now],
        )


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    prometheus = require_tool("prometheus")
    alertmanager = require_tool("prometheus-alertmanager")
    ports = {k: free_port() for k in ("agent", "exporter", "prom", "am", "hook")}
    data = tmp_path / "data"
    _plant_store(data)

    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({
        "devices": [
            {"index": 0, "values": {"util_gpu": 0}},
            {"index": 1, "values": {"util_gpu": 0}},
            {"index": 2, "values": {"util_gpu": 85}},
        ],
        # the agent process itself plays the job's processes on GPUs 0 and 1
        "processes": [{"gpu": 0, "pid": "self", "used_memory_bytes": 1e9},
                      {"gpu": 1, "pid": "self", "used_memory_bytes": 1e9}],
    }))
    rec, alerts = _fast_rules(tmp_path)
    prom_cfg = tmp_path / "prometheus.yml"
    prom_cfg.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rec), str(alerts)],
        "alerting": {"alertmanagers": [
            {"static_configs": [{"targets": [f"127.0.0.1:{ports['am']}"]}]}]},
        "scrape_configs": [
            {"job_name": "gpulens-agent",  # default honor_labels: the docs need no more
             "static_configs": [{"targets": [f"127.0.0.1:{ports['agent']}"]}]},
            {"job_name": "gpulens-cluster",
             "static_configs": [{"targets": [f"127.0.0.1:{ports['exporter']}"]}]},
        ],
    }))
    am_cfg = tmp_path / "alertmanager.yml"
    am_cfg.write_text(yaml.safe_dump({
        "route": {"receiver": "hook", "group_by": ["alertname", "job_id"], "group_wait": "1s",
                  "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "hook", "webhook_configs": [
            {"url": f"http://127.0.0.1:{ports['hook']}/alerts", "send_resolved": False}]}],
    }))

    Hook.received = []
    hook = http.server.ThreadingHTTPServer(("127.0.0.1", ports["hook"]), Hook)
    hook_thread = threading.Thread(target=hook.serve_forever, daemon=True)
    hook_thread.start()

    gl = [sys.executable, "-m", "gpulens", "--quiet", "--data-dir", str(data)]
    env = {**os.environ, "GPULENS_JOB_ID": "job-idle"}
    env.pop("GPULENS_CONFIG", None)
    logs = tmp_path / "logs"
    logs.mkdir()
    cmds = {
        "agent": [*gl, "collect", "--backend", "fake", "--fake-scenario", str(scenario),
                  "--interval", "1", "--node", "e2e-node", "--port", str(ports["agent"])],
        "exporter": [*gl, "exporter", "--port", str(ports["exporter"]), "--cache-seconds", "1"],
        "prometheus": [prometheus, f"--config.file={prom_cfg}",
                       f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                       f"--web.listen-address=127.0.0.1:{ports['prom']}",
                       "--rules.alert.resend-delay=1s", "--log.level=warn"],
        "alertmanager": [alertmanager, f"--config.file={am_cfg}",
                         f"--storage.path={tmp_path / 'am'}",
                         f"--web.listen-address=127.0.0.1:{ports['am']}",
                         "--cluster.listen-address=", "--log.level=warn"],
    }
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        start_all(cmds, logs, procs, env=env, cwd=tmp_path)
        yield {"ports": ports, "procs": procs, "logs": logs}
    finally:
        stop_all(procs)
        hook.shutdown()
        hook.server_close()


def _logs(stack: dict[str, Any]) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}"
                     for p in sorted(stack["logs"].iterdir()))


def test_idle_job_alert_fires_and_is_delivered(stack: dict[str, Any]) -> None:
    ports = stack["ports"]
    procs = list(stack["procs"].values())
    deadline = time.monotonic() + DEADLINE_S
    prom = f"http://127.0.0.1:{ports['prom']}"
    try:
        wait_for("Prometheus ready", lambda: urllib.request.urlopen(f"{prom}/-/ready", timeout=2).status == 200,
                 deadline, procs)
        wait_for("Alertmanager ready", lambda: urllib.request.urlopen(
            f"http://127.0.0.1:{ports['am']}/-/ready", timeout=2).status == 200, deadline, procs)

        def targets_up() -> bool:
            active = get_json(f"{prom}/api/v1/targets")["data"]["activeTargets"]
            health = {t["labels"]["job"]: t["health"] for t in active}
            return health == {"gpulens-agent": "up", "gpulens-cluster": "up"}

        wait_for("both targets up", targets_up, deadline, procs)

        def query(q: str) -> list[dict[str, Any]]:
            url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            result: list[dict[str, Any]] = get_json(url)["data"]["result"]
            return result

        # the recording rule sees the planted job at 0% and only that job
        per_job = wait_for("per-job utilization recorded",
                           lambda: query("job_id:gpulens_gpu_utilization_ratio:avg"), deadline, procs)
        assert [(r["metric"]["job_id"], float(r["value"][1])) for r in per_job] == [("job-idle", 0.0)]
        assert float(query("gpulens_cluster_exporter_up")[0]["value"][1]) == 1.0

        def firing(name: str) -> list[dict[str, Any]]:
            alerts = get_json(f"{prom}/api/v1/alerts")["data"]["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == name and a["state"] == "firing"]

        idle = wait_for("GpulensJobGpusIdle firing in Prometheus",
                        lambda: firing("GpulensJobGpusIdle"), deadline, procs)
        assert len(idle) == 1
        assert idle[0]["labels"]["job_id"] == "job-idle"
        assert idle[0]["labels"]["severity"] == "warning"
        assert idle[0]["annotations"]["summary"] == "Job job-idle holds GPUs that are idle"
        assert idle[0]["annotations"]["runbook_url"] == "docs/runbooks/GpulensJobGpusIdle.md"

        bad = wait_for("GpulensBlacklistedInputUsed firing in Prometheus",
                       lambda: firing("GpulensBlacklistedInputUsed"), deadline, procs)
        assert [a["labels"]["job_id"] for a in bad] == ["job-bad-input"]

        def delivered(name: str) -> list[dict[str, Any]]:
            return [a for msg in list(Hook.received) for a in msg["alerts"]
                    if a["labels"]["alertname"] == name and a["status"] == "firing"]

        got = wait_for("GpulensJobGpusIdle delivered to the webhook",
                       lambda: delivered("GpulensJobGpusIdle"), deadline, procs)
        assert got[0]["labels"]["job_id"] == "job-idle"
        assert "job-idle" in got[0]["annotations"]["description"]
        got_bad = wait_for("GpulensBlacklistedInputUsed delivered to the webhook",
                           lambda: delivered("GpulensBlacklistedInputUsed"), deadline, procs)
        assert got_bad[0]["labels"]["user"] == "alice"
        # the busy GPU (85%) belongs to no job and nothing else about it alerts
        assert not firing("GpulensJobSpreadLowUtilization")
        assert not firing("GpulensAgentDown")

        # every Grafana dashboard query runs on this Prometheus without error
        from tests.prometheus.test_grafana import concrete, load, queries

        with_data = 0
        for expr in queries(load()):
            url = f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": concrete(expr)})
            answer = get_json(url)
            assert answer["status"] == "success", (expr, answer)
            with_data += bool(answer["data"]["result"])
        assert with_data >= 15, f"only {with_data} dashboard queries returned data"
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_logs(stack)}") from None

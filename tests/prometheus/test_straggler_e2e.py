"""End to end: four real agents (fake GPUs, one per node name) serve one running job; one node's
GPUs throttle part-way. The live watcher (`gpulens nodes live --watch`) must name that node and
only it within 60 s of the onset; the cluster exporter's `gpulens_job_node_suspect` and the
`GpulensJobNodeStraggling` alert (real Prometheus, the real rule with `for:` shortened) follow;
when the throttling stops, the suspicion clears.

Agents sample every second and the detector's windows are shortened accordingly (grace 3 s,
baseline 4 s, smoothing 3 s, continuity 3 s, clear 4 s) so the test takes about a minute; the
production windows are the same code with 5 s ticks (docs/straggler.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
from tests.prometheus.promserver import free_port, start_all, stop_all, wait_for

ROOT = Path(__file__).resolve().parents[2]
NODES = ("s1", "s2", "s3", "s4")
SLOW = "s3"
ONSET_TICK, END_TICK = 22, 50

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(240)]


def _scenario(slow: bool) -> dict[str, Any]:
    values = {"util_gpu": [93, 95, 94, 96], "util_mem": [40, 42, 41], "sm_clock_mhz": [1975, 1980, 1970],
              "power_w": [610, 620, 615], "temp_c": 60}
    spec: dict[str, Any] = {"devices": [{"index": i, "values": values} for i in range(2)]}
    if slow:  # thermal slowdown of both GPUs from tick 22 to tick 50
        spec["phases"] = [{"from_tick": ONSET_TICK, "until_tick": END_TICK,
                           "values": {"sm_clock_mhz": [1005, 995, 1000], "power_w": [400, 410, 405]}}]
    return spec


def _plant_job(data: Path) -> None:
    store = Store.open(data)
    now = datetime.now(UTC).replace(tzinfo=None)
    with store.write() as con:
        con.execute("INSERT INTO jobs (job_id, status, requested_gpus, source) VALUES ('job-s', 'running', 8, 'slurm')")
        con.execute("INSERT INTO attempts (job_id, attempt, start_time, status) VALUES ('job-s', 0, ?, 'running')",
                    [now])
        for node in NODES:
            for gpu in range(2):
                con.execute("INSERT INTO placements (job_id, attempt, node, gpu_index, start_time)"
                            " VALUES ('job-s', 0, ?, ?, ?)", [node, gpu, now])


def _rules(tmp: Path) -> Path:
    doc = yaml.safe_load((ROOT / "rules" / "gpulens-alerts.yml").read_text())
    rules = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") == "GpulensJobNodeStraggling"]
    assert len(rules) == 1
    rules[0]["for"] = "2s"
    out = tmp / "straggler-rules.yml"
    out.write_text(yaml.safe_dump({"groups": [{"name": "straggler", "interval": "1s", "rules": rules}]}))
    return out


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=3) as resp:
        return resp.read().decode()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    prometheus = require_tool("prometheus")
    data = tmp_path / "data"
    _plant_job(data)
    ports = {n: free_port() for n in (*NODES, "exporter", "prom")}
    agents = {n: f"http://127.0.0.1:{ports[n]}/metrics" for n in NODES}
    (tmp_path / "agents.json").write_text(json.dumps(agents))
    prom_cfg = tmp_path / "prometheus.yml"
    prom_cfg.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(_rules(tmp_path))],
        "scrape_configs": [{"job_name": "gpulens-cluster",
                            "static_configs": [{"targets": [f"127.0.0.1:{ports['exporter']}"]}]}],
    }))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env.update({"GPULENS_LIVE_GRACE_S": "3", "GPULENS_LIVE_LEARN_S": "4", "GPULENS_LIVE_SMOOTH_S": "3",
                "GPULENS_LIVE_COUNT_S": "5", "GPULENS_LIVE_HARD_WINDOW_S": "3", "GPULENS_LIVE_MEDIUM_WINDOW_S": "4",
                "GPULENS_LIVE_SOFT_WINDOW_S": "10", "GPULENS_LIVE_CLEAR_S": "4", "GPULENS_LIVE_JOBS_EVERY_S": "2",
                "GPULENS_LIVE_HEARTBEAT_S": "2", "GPULENS_LIVE_STALE_S": "10"})
    gl = [sys.executable, "-m", "gpulens", "--quiet", "--data-dir", str(data)]
    cmds: dict[str, list[str]] = {}
    for node in NODES:
        sc = tmp_path / f"{node}.json"
        sc.write_text(json.dumps(_scenario(node == SLOW)))
        cmds[node] = [*gl, "collect", "--backend", "fake", "--fake-scenario", str(sc), "--no-store",
                      "--interval", "1", "--node", node, "--port", str(ports[node])]
    cmds["watcher"] = [*gl, "nodes", "live", "--watch", "--interval", "1", "--agents-file", str(tmp_path / "agents.json")]
    cmds["exporter"] = [*gl, "exporter", "--port", str(ports["exporter"]), "--cache-seconds", "1"]
    cmds["prometheus"] = [prometheus, f"--config.file={prom_cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                          f"--web.listen-address=127.0.0.1:{ports['prom']}", "--log.level=warn"]
    logs = tmp_path / "logs"
    logs.mkdir()
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        start_all(cmds, logs, procs, env=env, cwd=tmp_path)
        yield {"ports": ports, "procs": procs, "logs": logs, "gl": gl, "env": env, "agents": agents}
    finally:
        stop_all(procs)


def _clock(url: str) -> float:
    """The slow node's lowest SM clock on its /metrics (MHz)."""
    lines = [ln for ln in _get(url).splitlines() if ln.startswith("gpulens_gpu_sm_clock_hertz{")]
    return min(float(ln.rsplit(" ", 1)[1]) for ln in lines) / 1e6


def _live(stack: dict[str, Any]) -> list[dict[str, Any]]:
    r = subprocess.run([*stack["gl"], "nodes", "live", "--json"], capture_output=True, text=True, timeout=30,
                       env=stack["env"])
    assert r.returncode == 0, r.stderr
    out: list[dict[str, Any]] = json.loads(r.stdout)
    return out


def test_throttled_node_is_named_alerted_and_cleared(stack: dict[str, Any]) -> None:
    procs = stack["procs"]
    prom = f"http://127.0.0.1:{stack['ports']['prom']}"
    slow_url = stack["agents"][SLOW]
    deadline = time.monotonic() + 200
    try:
        running = list(procs.values())
        wait_for("every agent serving", lambda: all(_get(u) for u in stack["agents"].values()), deadline, running)
        # nothing is suspected before the fault
        onset = wait_for("the throttling on the slow agent", lambda: _clock(slow_url) < 1500 and time.time(),
                       deadline, running)
        seen: set[str] = set()
        while True:
            recs = _live(stack)
            seen |= {r["node"] for r in recs}
            if recs:
                break
            assert time.time() - onset < 60, "the throttled node was not named within 60 s of the onset"
            time.sleep(0.5)
        named_after = time.time() - onset
        assert [(r["job_id"], r["node"]) for r in recs] == [("job-s", SLOW)]
        assert "sm_clock" in recs[0]["signals"]
        assert recs[0]["deviations"]["sm_clock"] < -0.3
        assert named_after < 60

        def query(q: str) -> list[dict[str, Any]]:
            body = json.loads(_get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": q})))
            result: list[dict[str, Any]] = body["data"]["result"]
            return result

        metric = wait_for("gpulens_job_node_suspect in Prometheus", lambda: query("gpulens_job_node_suspect"),
                        deadline, running)
        assert {(m["metric"]["job_id"], m["metric"]["node"]) for m in metric} == {("job-s", SLOW)}

        def firing() -> list[dict[str, Any]]:
            alerts = json.loads(_get(f"{prom}/api/v1/alerts"))["data"]["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "GpulensJobNodeStraggling"
                    and a["state"] == "firing"]

        alert = wait_for("GpulensJobNodeStraggling firing", firing, deadline, running)
        assert [(a["labels"]["job_id"], a["labels"]["node"]) for a in alert] == [("job-s", SLOW)]

        # the degradation stops: the suspicion clears, and nothing else was ever named
        wait_for("the slow agent back at full clock", lambda: _clock(slow_url) > 1500, deadline, running)

        def cleared() -> bool:
            recs = _live(stack)
            seen.update(r["node"] for r in recs)
            return not recs

        wait_for("the suspicion cleared", cleared, deadline, running)
        wait_for("gpulens_job_node_suspect gone", lambda: not query("gpulens_job_node_suspect"), deadline, running)
        assert seen == {SLOW}
    except AssertionError:
        for p in sorted(stack["logs"].iterdir()):
            sys.stderr.write(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}\n")
        raise

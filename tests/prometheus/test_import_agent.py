"""A real Prometheus scrapes a running gpulens agent (fake GPUs); importing that history
reproduces what the agent stored itself, within rounding.

The agent (``gpulens collect --backend fake``) samples four GPUs with constant
gauges (different per GPU, so a mix-up shows), a PCIe counter, an XID and a job on
GPUs 0-1. Prometheus scrapes it every second; ``gpulens import prometheus --source
gpulens`` reads the history into a second store and the two are compared.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpulens.ingest.importers.prometheus import PromImport, import_prometheus
from gpulens.store import Store
from tests.prometheus.promserver import free_port, prometheus

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(150)]

NODE = "agent-node"
GAUGES = ("util_gpu", "util_mem", "mem_used_bytes", "mem_total_bytes", "power_w", "temp_c",
          "sm_clock_mhz", "mem_clock_mhz", "uuid", "model")
WANT_SCRAPES = 10


def _scenario(path: Path) -> None:
    devices = [{"index": i, "uuid": f"GPU-00000000-0000-4000-8000-00000000000{i}",
                "model": "NVIDIA A100-SXM4-80GB", "memory_total_bytes": 85899345920,
                "values": {"util_gpu": 10 + 20 * i, "util_mem": 5 + 7 * i, "mem_used_bytes": (i + 1) * 2**30,
                           "power_w": 100 + 50 * i, "temp_c": 40 + i, "sm_clock_mhz": 1400 + 10 * i,
                           "mem_clock_mhz": 1593},
                "counters": {"pcie_tx_bytes": {"start": 0, "step": 1e9 * (i + 1)},
                             "pcie_rx_bytes": {"start": 0, "step": 5e8}}}
               for i in range(4)]
    path.write_text(json.dumps({
        "devices": devices,
        "processes": [{"gpu": 0, "pid": "self", "used_memory_bytes": 1e9},
                      {"gpu": 1, "pid": "self", "used_memory_bytes": 1e9}],
        "xids": [{"tick": 8, "gpu": 2, "xid": 48, "count": 1}],
    }))


def _count(prom: str) -> int:
    q = urllib.parse.urlencode({"query": f'count_over_time(gpulens_gpu_utilization_ratio{{gpu="0",node="{NODE}"}}[5m])'})
    with urllib.request.urlopen(f"{prom}/api/v1/query?{q}", timeout=5) as resp:
        result = json.loads(resp.read())["data"]["result"]
    return int(float(result[0]["value"][1])) if result else 0


def _agent_rows(data: Path) -> tuple[list[dict[str, Any]], list[tuple[Any, ...]], list[tuple[Any, ...]],
                                    list[tuple[Any, ...]]]:
    con = Store(data).connect()
    try:
        gpu = con.execute("SELECT * FROM gpu_samples ORDER BY gpu_index, ts").df().to_dict("records")
        xid = con.execute("SELECT gpu_index, xid FROM xid_events").fetchall()
        jobs = con.execute("SELECT DISTINCT job_id, gpu_index FROM gpu_process_samples"
                           " WHERE job_id IS NOT NULL ORDER BY 2").fetchall()
        net = con.execute("SELECT DISTINCT device, port FROM net_samples ORDER BY 1, 2").fetchall()
    finally:
        con.close()
    return gpu, [tuple(r) for r in xid], [tuple(r) for r in jobs], [tuple(r) for r in net]


def test_import_reproduces_what_the_agent_stored(tmp_path: Path) -> None:
    agent_port = free_port()
    data = tmp_path / "agent-data"
    scen = tmp_path / "scenario.json"
    _scenario(scen)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env["GPULENS_JOB_ID"] = "job-agent"
    scrape = [{"job_name": "gpulens-agent", "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}]}]
    with prometheus(tmp_path, scrape=scrape) as prom:
        log = (tmp_path / "agent.log").open("wb")
        agent = subprocess.Popen(
            [sys.executable, "-m", "gpulens", "--quiet", "--data-dir", str(data), "collect", "--backend",
             "fake", "--fake-scenario", str(scen), "--interval", "1", "--node", NODE, "--port",
             str(agent_port)], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 90
            while _count(prom) < WANT_SCRAPES:
                assert agent.poll() is None, (tmp_path / "agent.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "Prometheus did not scrape the agent in time"
                time.sleep(0.5)
        finally:
            agent.terminate()
            agent.wait(timeout=30)
            log.close()
        gpu, xid, jobs, net = _agent_rows(data)
        t0 = min(r["ts"] for r in gpu).to_pydatetime().replace(tzinfo=UTC)
        t1 = datetime.now(UTC)
        store = Store.open(tmp_path / "imported")
        res = import_prometheus(store, PromImport(prom, t0, t1, 1.0, "auto"))
    assert res.kind == "prometheus:gpulens"
    con = store.connect()
    try:
        got = con.execute("SELECT * FROM gpu_samples ORDER BY gpu_index, ts").df().to_dict("records")
        got_xid = [tuple(r) for r in con.execute("SELECT gpu_index, xid FROM xid_events").fetchall()]
        got_jobs = [tuple(r) for r in con.execute(
            "SELECT job_id, gpu_index FROM placements WHERE node = ? ORDER BY 2", [NODE]).fetchall()]
        got_net = [tuple(r) for r in con.execute(
            "SELECT DISTINCT device, port FROM net_samples WHERE node = ? ORDER BY 1, 2", [NODE]).fetchall()]
    finally:
        con.close()
    assert len(got) >= 4 * (WANT_SCRAPES // 2)  # late scrapes on a busy machine drop a few steps
    for i in range(4):
        mine = [r for r in gpu if r["gpu_index"] == i]
        theirs = [r for r in got if r["gpu_index"] == i]
        assert len({r["ts"] for r in theirs}) == len(theirs)  # one row per step
        for col in GAUGES:
            want = {mine[0][col]}
            assert {r[col] for r in mine} == want, col  # the scenario's constants
            if isinstance(mine[0][col], float):
                assert {round(r[col], 3) for r in theirs} == {round(mine[0][col], 3)}, (i, col)
            else:
                assert {r[col] for r in theirs} == want, (i, col)
        for col in ("pcie_tx_bps", "pcie_rx_bps"):
            a = statistics.median(r[col] for r in mine if r[col] == r[col] and r[col] is not None)
            b = statistics.median(r[col] for r in theirs if r[col] == r[col] and r[col] is not None)
            assert b == pytest.approx(a, rel=0.2), (i, col)
    assert got_xid == xid == [(2, 48)]
    assert got_net == net  # the same interfaces (and InfiniBand ports, where the host has any)
    assert got_jobs == [(job, gpu) for job, gpu in jobs] == [("job-agent", 0), ("job-agent", 1)]

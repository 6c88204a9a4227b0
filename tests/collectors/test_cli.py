from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpulens.cli.main import cli
from gpulens.store import Store
from tests.conftest import require_tool

ROOT = Path(__file__).resolve().parents[2]


def run_cli(data_dir: Path, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, ["--data-dir", str(data_dir), "collect", *args], catch_exceptions=False)
    return res.exit_code, res.stdout, res.stderr


def lo_proc_net_dev() -> tuple[int, int]:
    """lo rx/tx bytes read independently of gpulens."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            f = rest.split()
            return int(f[0]), int(f[8])
    raise AssertionError("no lo in /proc/net/dev")


def loopback_traffic(nbytes: int) -> None:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as c:
            conn, _ = srv.accept()
            with conn:
                chunk = b"x" * 65536
                sent = got = 0
                while sent < nbytes:
                    c.sendall(chunk)
                    sent += len(chunk)
                    while got < sent:
                        got += len(conn.recv(1 << 20))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def node_exporter() -> Iterator[Callable[[], float]]:
    """Debian's prometheus-node-exporter on 127.0.0.1:<free port>, netdev collector only, lo included."""
    exe = require_tool("prometheus-node-exporter")
    port = free_port()
    proc = subprocess.Popen(
        [exe, f"--web.listen-address=127.0.0.1:{port}", "--collector.disable-defaults",
         "--collector.netdev", "--collector.netdev.device-exclude=^$"],  # Debian default excludes lo
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/metrics"

    def lo_rx() -> float:
        body = urllib.request.urlopen(url, timeout=10).read().decode()
        m = re.search(r'^node_network_receive_bytes_total\{device="lo"\} (\S+)$', body, re.M)
        assert m, "node_exporter did not report lo"
        return float(m.group(1))

    try:
        for _ in range(100):
            try:
                lo_rx()
                break
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError(f"node_exporter exited: {proc.stderr.read().decode() if proc.stderr else ''}") from None
                time.sleep(0.1)
        yield lo_rx
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.server
def test_once_records_real_lo_counters_matching_proc_and_node_exporter(
    tmp_path: Path, node_exporter: Callable[[], float]
) -> None:
    data = tmp_path / "data"

    def once() -> tuple[int, float, float, tuple[int, int], tuple[int, int]]:
        ne_before, p_before = node_exporter(), lo_proc_net_dev()
        code, out, err = run_cli(data, "--once", "--backend", "none", "--json", "--node", "testnode")
        assert code == 0, err
        p_after, ne_after = lo_proc_net_dev(), node_exporter()
        rx = next(r["rx_bytes_total"] for r in json.loads(out)["net"] if r["device"] == "lo")
        return rx, ne_before, ne_after, p_before, p_after

    rx0, ne0a, ne0b, p0a, p0b = once()
    traffic = 8 * 1024 * 1024
    loopback_traffic(traffic)
    rx1, ne1a, ne1b, p1a, p1b = once()
    # each agent reading lies between independent reads taken just before and after it
    assert p0a[0] <= rx0 <= p0b[0] and p1a[0] <= rx1 <= p1b[0]
    assert ne0a <= rx0 <= ne0b and ne1a <= rx1 <= ne1b
    delta = rx1 - rx0
    assert delta >= traffic
    assert p1a[0] - p0b[0] <= delta <= p1b[0] - p0a[0]
    assert ne1a - ne0b <= delta <= ne1b - ne0a
    con = Store(data).connect()
    stored = con.execute("SELECT rx_bytes_total FROM net_samples WHERE device = 'lo' AND node = 'testnode'"
                         " ORDER BY ts").fetchall()
    assert [r[0] for r in stored] == [rx0, rx1]


def test_once_network_only_without_nvml_says_so(tmp_path: Path) -> None:
    code, out, err = run_cli(tmp_path / "d", "--once", "--backend", "auto")
    assert code == 0
    assert "No GPU backend" in err and "network" in err
    assert re.search(r"sampled .* \d+ network rows \(stored\)", out)


@pytest.mark.slow
def test_require_gpu_exits_2_without_nvml(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"missing_library": True}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-m", "gpulens.cli.main", "--data-dir", str(tmp_path / "d"), "collect", "--once",
         "--backend", "fake", "--fake-scenario", str(missing), "--require-gpu"],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert "NVML" in res.stderr and "Traceback" not in res.stderr
    # without --require-gpu the same machine runs network-only
    code, _, err = run_cli(tmp_path / "d2", "--once", "--backend", "fake", "--fake-scenario", str(missing))
    assert code == 0 and "network" in err


@pytest.mark.slow
def test_bad_scenario_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run(
        [sys.executable, "-m", "gpulens.cli.main", "--data-dir", str(tmp_path / "d"), "collect", "--once",
         "--backend", "fake", "--fake-scenario", str(tmp_path / "nope.json")],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert res.returncode == 2 and "nope.json" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_sigterm_flushes_and_exits_0(tmp_path: Path) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({"devices": [{"index": 0}, {"index": 1}],
                                    "xids": [{"tick": 1, "gpu": 0, "xid": 48, "count": 3}]}))
    data = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GPULENS_COLLECT_FLUSH_SECONDS": "3600"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpulens.cli.main", "--data-dir", str(data), "collect", "--backend", "fake",
         "--fake-scenario", str(scenario), "--interval", "0.2", "--port", "0", "--node", "sigterm-node"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        assert proc.stderr is not None
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            m = re.search(r"metrics: http://127\.0\.0\.1:(\d+)/metrics", line)
            if m:
                port = int(m.group(1))
        assert port, "agent did not announce its metrics port"
        body = ""
        while time.monotonic() < deadline:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            if 'gpulens_gpu_xid_errors_total{' in body:
                break
            time.sleep(0.2)
        assert re.search(r'gpulens_gpu_xid_errors_total\{.*xid="48"\} 3\.0', body)
        assert 'gpulens_agent_gpu_backend_info{backend="fake",node="sigterm-node"} 1.0' in body
        # nothing is flushed yet (flush period is an hour); SIGTERM must flush it
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 0, rest
    assert "stopped after" in rest
    con = Store(data).connect()
    n_ticks = con.execute("SELECT count(DISTINCT ts) FROM gpu_samples WHERE node = 'sigterm-node'").fetchone()
    assert n_ticks is not None and n_ticks[0] >= 2
    assert con.execute("SELECT count(*) FROM xid_events WHERE xid = 48").fetchone() == (3,)
    assert con.execute("SELECT count(*) FROM net_samples WHERE device = 'lo'").fetchone() == n_ticks

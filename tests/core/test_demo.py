"""`gpulens demo` as `make demo` runs it: data, servers, URLs, clean Ctrl-C, reuse."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.server]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_demo_serves_everything_and_stops_cleanly(tmp_path: Path) -> None:
    ports = {"DASHBOARD": _free_port(), "EXPORTER": _free_port(), "COLLECT": _free_port()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    env.update({f"GPULENS_{k}_PORT": str(v) for k, v in ports.items()})
    env["GPULENS_COLLECT_INTERVAL"] = "1"
    data = tmp_path / "data"
    argv = [sys.executable, "-m", "gpulens", "--data-dir", str(data), "demo", "--gpus", "16",
            "--days", "0.5", "--seed", "3"]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)
    lines: list[str] = []
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "Press Ctrl-C" in line:
                break
        text = "".join(lines)
        assert "Press Ctrl-C" in text, text
        urls = re.findall(r"http://127\.0\.0\.1:\d+/\S*", text)
        assert len(urls) == 3, text
        for url in urls:
            with urllib.request.urlopen(url, timeout=30) as resp:
                body = resp.read().decode("utf-8", "replace")
                assert resp.status == 200
            if url.endswith("/metrics") and f":{ports['COLLECT']}/" in url:
                assert "gpulens_network_receive_bytes_total" in body  # a real collector
            elif url.endswith("/metrics"):
                assert "gpulens_cluster_" in body
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        gone, alive = psutil.wait_procs(children, timeout=15)
        assert not alive, f"left running: {[p.cmdline() for p in alive]}"
        for port in ports.values():
            assert not _listening(port)
    finally:
        if proc.poll() is None:
            proc.kill()
    # A second run reuses the data: no new simulation.
    again = subprocess.run([*argv, "--no-serve"], env=env, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    assert "reusing the cluster" in again.stderr and "reusing earlier diagnoses" in again.stderr
    # savings and losses on both bases (issue 19), every GPU-hour line naming its basis
    out = " ".join(again.stderr.split())
    assert re.search(r"failed or killed runs held [\d,]+ allocated GPU-hours, [\d,]+ of them busy",
                     out), out
    assert re.search(r"saved [\d,.]+ allocated GPU-hours \([\d,.]+ busy GPU-hours\)", out), out
    for stage in ("allocated", "idle", "failed_or_killed", "post_convergence", "effective"):
        assert re.search(rf"{stage} +[\d,]+ GPU-hours \((allocated|idle|busy)\)", out), stage
    assert not re.search(r"\b1 jobs\b", out), out


def test_demo_counts_read_as_english() -> None:
    from gpulens.cli.demo import _n

    assert (_n(1, "job"), _n(2, "job"), _n(1234, "job")) == ("1 job", "2 jobs", "1,234 jobs")
    assert _n(1, "failed attempt") == "1 failed attempt"

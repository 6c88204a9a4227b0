"""A real Prometheus (Debian package) on 127.0.0.1 for tests: started, awaited, stopped."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import require_tool


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], Any], deadline: float,
             procs: Iterable[subprocess.Popen[bytes]]) -> Any:
    last: BaseException | None = None
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{p.args!r} exited with {p.returncode} while waiting for {what}")
        try:
            result = check()
            if result:
                return result
        except (OSError, ValueError, KeyError) as exc:  # not up yet
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


def start_all(cmds: dict[str, list[str]], logs: Path, procs: dict[str, subprocess.Popen[bytes]], *,
              env: dict[str, str], cwd: Path) -> None:
    """Start each command in its own session, output to ``logs/<name>.log``; fills ``procs``."""
    for name, cmd in cmds.items():
        out = (logs / f"{name}.log").open("wb")
        procs[name] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                       start_new_session=True)


def stop_all(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    """SIGTERM every process still running, wait 10 s, then SIGKILL."""
    for p in procs.values():
        if p.poll() is None:
            p.terminate()
    for p in procs.values():
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)


def backfill(openmetrics: Path, tsdb: Path) -> None:
    """`promtool tsdb create-blocks-from openmetrics` into ``tsdb``."""
    promtool = require_tool("promtool")
    r = subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(tsdb)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


@contextmanager
def prometheus(workdir: Path, *, tsdb: Path | None = None, scrape: list[dict[str, Any]] | None = None,
               interval: str = "1s") -> Iterator[str]:
    """Run Prometheus (retention 100 years: backfilled history is never deleted); yields its URL."""
    binary = require_tool("prometheus")
    port = free_port()
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump({"global": {"scrape_interval": interval, "evaluation_interval": interval},
                                   "scrape_configs": scrape or []}))
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={cfg}", f"--storage.tsdb.path={tsdb or workdir / 'tsdb'}",
         "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (workdir / "prometheus.log").read_text()[-2000:]
            try:
                if urllib.request.urlopen(f"{url}/-/ready", timeout=1).status == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "Prometheus did not become ready in 30 s"
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()

"""``gpulens demo``: the main job of a fresh checkout.

1. Build a simulated cluster into the data directory (skipped when it already has jobs).
2. Diagnose every failed attempt, update the input blacklist, flag bad nodes, score anomalies
   (skipped when done before).
3. Print the headline analyses.
4. Start the dashboard, the cluster exporter and a real collector for this node on 127.0.0.1,
   print their URLs and wait; Ctrl-C (or SIGTERM) stops them all.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click
import psutil

from gpulens.cliapp import App, pass_app, stage_progress
from gpulens.store import Store

__all__ = ["demo"]


@dataclass
class Service:
    name: str
    argv: list[str]
    url: str
    ready_url: str
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _pick_port(host: str, wanted: int) -> int:
    if wanted and _port_free(host, wanted):
        return wanted
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status < 500:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.3)
    return False


def _stop(services: list[Service]) -> None:
    """SIGTERM every service and everything it started (even in other sessions), then SIGKILL."""
    procs: list[psutil.Process] = []
    for svc in services:
        if svc.proc is None:
            continue
        with contextlib.suppress(psutil.Error):
            top = psutil.Process(svc.proc.pid)
            procs += [top, *top.children(recursive=True)]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(procs, timeout=10)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    for svc in services:
        if svc.proc is not None:
            svc.proc.wait()


def _count(store: Store, table: str) -> int:
    con = store.connect()
    try:
        row = con.execute(f"SELECT count(*) FROM {table}").fetchone()  # noqa: S608 - our table names
        return int(row[0]) if row else 0
    finally:
        con.close()


def _simulate(app: App, store: Store, gpus: int, days: float, seed: int) -> None:
    from gpulens.ingest.simulate import simulate

    console = app.console
    console.print(f"[bold]1/4[/] simulating a cluster of {gpus} GPUs over {days:g} days (seed {seed})")
    with stage_progress(console) as report:
        summary = simulate(store, gpus=gpus, days=days, seed=seed, progress=report)
    console.print(
        f"    {_n(summary.jobs, 'job')}, {_n(summary.attempts, 'attempt')} "
        f"({summary.failed_attempts:,} failed), {_n(summary.gpu_samples, 'GPU sample')} "
        f"on {_n(summary.nodes, 'server')} in {summary.elapsed_s:.0f} s"
    )


def _diagnose(app: App, store: Store) -> None:
    from gpulens.diagnosis import blacklist, jobs, nodes

    console = app.console
    console.print("[bold]2/4[/] diagnosing failed attempts, blacklisting inputs, flagging nodes")
    with stage_progress(console) as report:
        n = jobs.diagnose_all(store, progress=report)
    console.print(f"    diagnosed {_n(n, 'failed attempt')}")
    blacklist.update_from_failures(store, k=app.config.diagnose.blacklist_min_jobs)
    scored = nodes.score_anomalies(store, config=app.config.diagnose)  # anomaly hours are blame signals
    flagged = nodes.flag_nodes(store, config=app.config.diagnose)
    console.print(f"    flagged {_n(len(flagged), 'node')}; {_n(scored, 'node-hour')} scored for "
                  "anomalies")


def _headlines(app: App, store: Store) -> None:
    from gpulens import analysis

    console = app.console
    console.print("[bold]3/4[/] where the GPU-hours went (docs/accounting.md)")
    con = store.connect()
    try:
        waterfall = analysis.goodput(con)
        for row in waterfall.itertuples():
            console.print(f"    {row.stage:<18} {row.gpu_hours:>12,.0f} GPU-hours ({row.basis})")
        cost = analysis.failure_cost(con)
        console.print(
            f"    failed or killed runs held {cost['allocated_gpu_hours'].sum():,.0f} allocated "
            f"GPU-hours, {cost['busy_gpu_hours'].sum():,.0f} of them busy"
        )
        console.print(f"    {analysis.early_stop_summary(con).sentence}")
        loc = analysis.locality(con, n_boot=200)
        sixteen = loc[loc["gpus"] == 16]
        for rec in sixteen.to_dict("records"):
            console.print(
                f"    16-GPU jobs on {rec['servers']} servers: {rec['mean_util']:.1f}% mean "
                f"utilization ({_n(int(rec['jobs']), 'job')})"
            )
    finally:
        con.close()


def _n(n: int, noun: str) -> str:
    """``1 job``, ``2 jobs``, ``1,234 jobs``."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


@click.command()
@click.option("--gpus", default=256, show_default=True, help="Size of the simulated cluster.")
@click.option("--days", default=7.0, show_default=True, help="Simulated period.")
@click.option("--seed", default=0, show_default=True)
@click.option("--no-serve", is_flag=True, help="Prepare the data and exit without starting servers.")
@click.option("--exit-after", type=float, default=None, hidden=True,
              help="Stop the servers after this many seconds (for tests).")
@pass_app
def demo(app: App, gpus: int, days: float, seed: int, no_serve: bool,
         exit_after: float | None) -> None:
    """Simulate a cluster, analyse and diagnose it, start the dashboard and endpoints."""
    store = app.store()
    console = app.console
    console.print(f"data directory: {store.root}")
    if _count(store, "jobs") == 0:
        _simulate(app, store, gpus, days, seed)
    else:
        console.print("[bold]1/4[/] reusing the cluster already in the data directory")
    if _count(store, "failures") == 0:
        _diagnose(app, store)
    else:
        console.print("[bold]2/4[/] reusing earlier diagnoses")
    _headlines(app, store)
    if no_serve:
        return
    _serve(app, store, exit_after)


def _services(app: App, store: Store) -> list[Service]:
    """The dashboard, the cluster exporter and a node agent on free ports (the configured ones
    when free)."""
    cfg = app.config
    base = [sys.executable, "-m", "gpulens", "--data-dir", str(store.root)]
    dash_port = _pick_port(cfg.dashboard.host, cfg.dashboard.port)
    exp_port = _pick_port(cfg.exporter.host, cfg.exporter.port)
    agent_port = _pick_port(cfg.collect.host, cfg.collect.port)
    return [
        Service("dashboard", [*base, "dashboard", "--port", str(dash_port)],
                f"http://{cfg.dashboard.host}:{dash_port}/",
                f"http://{cfg.dashboard.host}:{dash_port}/_stcore/health"),
        Service("cluster metrics", [*base, "exporter", "--port", str(exp_port)],
                f"http://{cfg.exporter.host}:{exp_port}/metrics",
                f"http://{cfg.exporter.host}:{exp_port}/metrics"),
        Service("node agent", [*base, "collect", "--port", str(agent_port)],
                f"http://{cfg.collect.host}:{agent_port}/metrics",
                f"http://{cfg.collect.host}:{agent_port}/metrics"),
    ]


@contextlib.contextmanager
def _stop_on_signals(stop: dict[str, bool]) -> Iterator[None]:
    """Set ``stop["now"]`` on SIGINT and SIGTERM while inside; the old handlers after."""

    def on_signal(signum: int, frame: object) -> None:
        stop["now"] = True

    old_int = signal.signal(signal.SIGINT, on_signal)
    old_term = signal.signal(signal.SIGTERM, on_signal)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


def _start(services: list[Service], logs: Path) -> None:
    """Start every service in its own session, its output appended to its log in ``logs``."""
    for svc in services:
        svc.log = logs / f"{svc.name.replace(' ', '-')}.log"
        with open(svc.log, "ab") as fh:
            svc.proc = subprocess.Popen(
                svc.argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, env={**os.environ, **svc.extra_env},
            )


def _wait_ready(app: App, services: list[Service]) -> None:
    """Print each service's URL once it answers; exit 1 when any did not start."""
    failed = []
    for svc in services:
        assert svc.proc is not None
        if _wait_http(svc.ready_url, svc.proc, timeout=90):
            app.console.print(f"    {svc.name:<16} {svc.url}")
        else:
            failed.append(svc)
            app.console.print(f"    [red]{svc.name} did not start[/]; see {svc.log}")
    if failed:
        raise click.exceptions.Exit(1)


def _watch(app: App, services: list[Service], stop: dict[str, bool],
           exit_after: float | None) -> None:
    """Wait until a signal, ``exit_after`` seconds, or a service exiting (said so)."""
    started = time.monotonic()
    while not stop["now"]:
        if exit_after is not None and time.monotonic() - started > exit_after:
            break
        for svc in services:
            if svc.proc is not None and svc.proc.poll() is not None:
                app.console.print(f"[red]{svc.name} exited ({svc.proc.returncode})[/]; see {svc.log}")
                stop["now"] = True
        time.sleep(0.2)


def _serve(app: App, store: Store, exit_after: float | None) -> None:
    console = app.console
    services = _services(app, store)
    console.print("[bold]4/4[/] starting servers on 127.0.0.1")
    logs = store.root / "logs" / "demo"
    logs.mkdir(parents=True, exist_ok=True)
    stop = {"now": False}
    with _stop_on_signals(stop):
        try:
            _start(services, logs)
            _wait_ready(app, services)
            console.print("Press Ctrl-C to stop.")
            _watch(app, services, stop, exit_after)
        finally:
            _stop(services)
    console.print("stopped.")

"""``gpulens collect``: the node agent command."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import click

from gpulens.cliapp import App, emit, json_option, pass_app
from gpulens.collectors.agent import Agent, register_node
from gpulens.collectors.attribution import JobResolver
from gpulens.collectors.gpu import GpuBackend, open_backend
from gpulens.collectors.net import NetReader
from gpulens.collectors.sink import SampleSink, StoreSink
from gpulens.config import CollectConfig
from gpulens.errors import BackendUnavailableError, InputError, StoreError
from gpulens.exporters.agent import serve_agent
from gpulens.store import Store

__all__ = ["collect"]

log = logging.getLogger("gpulens.collectors")


def _open_gpu(kind: str, scenario: str | None) -> tuple[GpuBackend | None, str | None]:
    """The GPU backend and, if there is none, why not; raises only when ``nvml`` was asked for."""
    if kind == "none":
        return None, "GPU backend disabled (--backend none)"
    try:
        return open_backend(kind, scenario), None
    except BackendUnavailableError as exc:
        if kind == "nvml":
            raise
        return None, exc.message
    from gpulens.collectors.gpu.nvml import NvmlBackend

    try:
        return NvmlBackend(), None
    except BackendUnavailableError as exc:
        if kind == "nvml":
            raise
        return None, exc.message


def _setup_logging(quiet: bool) -> None:
    root = logging.getLogger("gpulens")
    if not any(getattr(h, "_gpulens_collect", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("gpulens collect: %(levelname)s: %(message)s"))
        handler._gpulens_collect = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(logging.ERROR if quiet else logging.INFO)


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@click.command()
@click.option("--once", is_flag=True, help="Take one sample, write it, print a summary and exit.")
@click.option("--interval", type=float, default=None, help="Seconds between samples (default 5, collect.interval).")
@click.option("--backend", type=click.Choice(["auto", "nvml", "fake", "none"]), default=None,
              help="GPU backend: auto (NVML if present, else network only), nvml, fake, none.")
@click.option("--fake-scenario", type=click.Path(dir_okay=False), default=None,
              help="JSON scenario for --backend fake (format in docs/collectors.md).")
@click.option("--require-gpu", is_flag=True, default=False, help="Exit with status 2 when no GPU backend is available.")
@click.option("--host", default=None, help="Address for /metrics (default 127.0.0.1).")
@click.option("--port", type=int, default=None, help="Port for /metrics (default 9847; 0 picks a free port).")
@click.option("--node", default=None, help="Node name for samples and labels (default: hostname).")
@click.option("--no-store", is_flag=True, help="Do not write samples to the store; only serve /metrics.")
@click.option("--proc-root", default=None, help="procfs root (default /proc; /host/proc in a container).")
@click.option("--sysfs-root", default=None, help="sysfs root (default /sys).")
@json_option
@pass_app
def collect(
    app: App,
    once: bool,
    interval: float | None,
    backend: str | None,
    fake_scenario: str | None,
    require_gpu: bool,
    host: str | None,
    port: int | None,
    node: str | None,
    no_store: bool,
    proc_root: str | None,
    sysfs_root: str | None,
    as_json: bool,
) -> None:
    """Run the node agent: sample GPUs, network and InfiniBand; write to the store; serve /metrics."""
    cfg = app.config.collect
    interval = _interval(cfg, interval)
    kind, scenario = _backend_kind(cfg, backend, fake_scenario)
    node = node or cfg.node
    proc = cfg.proc_root if proc_root is None else proc_root
    _setup_logging(app.quiet)
    gpu = _announce_gpu(app, kind, scenario, require_gpu or cfg.require_gpu)
    net = _announce_net(app, proc, cfg.sysfs_root if sysfs_root is None else sysfs_root)
    store, sink = (None, None) if no_store else _open_sink(app, node, gpu)
    if no_store:
        app.console.print("store: off (--no-store)")
    agent = Agent(
        node=node, backend=gpu, net=net, resolver=JobResolver(proc, env_key=cfg.job_env_key),
        sink=sink, flush_seconds=cfg.flush_seconds, segment_seconds=cfg.segment_seconds,
        max_buffer_rows=cfg.max_buffer_rows,
    )
    if once:
        _run_once(agent, node, gpu, store, as_json)
        return
    _serve(app, agent, cfg.host if host is None else host, cfg.port if port is None else port, interval)


def _interval(cfg: CollectConfig, interval: float | None) -> float:
    """Seconds between samples: the option, else the configured; an InputError unless positive."""
    interval = cfg.interval if interval is None else interval
    if interval <= 0:
        raise InputError(f"--interval {interval} is not positive.", "Pass a number of seconds such as 5.")
    return interval


def _backend_kind(cfg: CollectConfig, backend: str | None, fake_scenario: str | None
                  ) -> tuple[str, str | None]:
    """The GPU backend kind and fake scenario asked for (a scenario makes "auto" fake)."""
    kind = backend or cfg.backend
    scenario = fake_scenario or cfg.fake_scenario or None
    if scenario and kind == "auto":
        kind = "fake"
    return kind, scenario

def _announce_gpu(app: App, kind: str, scenario: str | None, require_gpu: bool) -> GpuBackend | None:
    gpu, why = _open_gpu(kind, scenario)
    if gpu is None:
        if require_gpu:
            raise BackendUnavailableError(
                f"No GPU backend: {why}", "Drop --require-gpu to collect network counters only."
            )
        app.console.print(f"[yellow]No GPU backend[/] ({(why or '').rstrip('.')}): collecting network"
                          " and InfiniBand counters only.")
    else:
        devs = gpu.devices()
        app.console.print(f"GPU backend [bold]{gpu.name}[/]: {len(devs)} GPU(s)"
                          + (f" ({devs[0].model})" if devs else ""))
    return gpu


def _announce_net(app: App, proc_root: str, sysfs_root: str) -> NetReader:
    net = NetReader(proc_root, sysfs_root, exclude=app.config.collect.net_exclude or None)
    ifaces, ports = net.interfaces(), net.infiniband()
    app.console.print(f"network: {len(ifaces)} interface(s) ({', '.join(n.device for n in ifaces) or 'none'}),"
                      f" {len(ports)} InfiniBand port(s)")
    return net


def _open_sink(app: App, node: str, gpu: GpuBackend | None) -> tuple[Store, SampleSink]:
    cfg = app.config.collect
    store = app.store()
    app.console.print(f"store: {store.root} (flush every {cfg.flush_seconds:g} s, Parquet segments"
                      f" every {cfg.segment_seconds:g} s)")
    try:
        register_node(store, node, gpu.devices() if gpu else [], datetime.now(UTC).replace(tzinfo=None))
    except StoreError as exc:
        log.warning("could not record node %s in the state tables: %s", node, exc)
    return store, StoreSink(store, node)


def _run_once(agent: Agent, node: str, gpu: GpuBackend | None, store: Store | None, as_json: bool) -> None:
    try:
        result = agent.tick()
    finally:
        agent.close()
    summary: dict[str, Any] = {
        "node": node,
        "backend": gpu.name if gpu else "none",
        "ts": result.ts,
        "rows": {k: result.count(k) for k in ("gpu", "proc", "xid", "net")},
        "stored": store is not None and agent.store_writable,
        "data_dir": str(store.root) if store else None,
        "sample_seconds": round(result.duration, 6),
        "net": [{"device": r["device"], "rx_bytes_total": r["rx_bytes_total"],
                 "tx_bytes_total": r["tx_bytes_total"]} for r in result.rows["net"]],
    }

    def human() -> None:
        rows = summary["rows"]
        click.echo(f"sampled {node} at {result.ts:%Y-%m-%d %H:%M:%S} UTC in {result.duration * 1000:.1f} ms:"
                   f" {rows['gpu']} GPU, {rows['proc']} process, {rows['xid']} XID, {rows['net']} network rows"
                   + (" (stored)" if summary["stored"] else " (not stored)"))
        for r in summary["net"]:
            click.echo(f"  {r['device']:<16} rx {r['rx_bytes_total']:>16,} B   tx {r['tx_bytes_total']:>16,} B")

    emit(summary, as_json, human)


def _serve(app: App, agent: Agent, host: str, port: int, interval: float) -> None:
    say = app.console.print
    try:
        server = serve_agent(lambda: agent.snapshot, host, port)
    except OSError as exc:
        agent.close()
        raise InputError(f"Cannot serve /metrics on {host}:{port} ({exc.strerror}).",
                         "Pick another --port, or stop the process using it.") from None
    say(f"metrics: http://{host}:{server.port}/metrics")
    say(f"sampling every {interval:g} s; SIGTERM or Ctrl-C flushes and stops")
    stop = threading.Event()
    ticks = 0
    try:
        with _stop_on_signals(stop):
            ticks = agent.run(interval, stop)
    finally:
        server.stop()
        agent.close()
    say(f"stopped after {ticks} sample(s); {agent.rows_written} row(s) written"
        + ("" if agent.store_writable else " (store was not writable at the end)"))

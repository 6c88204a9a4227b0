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

from collectors.agent import Agent, register_node
from collectors.attribution import JobResolver
from collectors.gpu.base import GpuBackend
from collectors.net import NetReader
from collectors.sink import SampleSink, StoreSink
from gpulens.cli.common import App, emit, json_option, pass_app
from gpulens.errors import BackendUnavailableError, GpulensError, InputError, StoreError

__all__ = ["collect", "open_backend"]

log = logging.getLogger("gpulens.collectors")


def open_backend(kind: str, scenario: str | None) -> tuple[GpuBackend | None, str | None]:
    """The GPU backend for ``kind`` (auto|nvml|fake|none) and, if there is none, why not.

    Raises BackendUnavailableError only when ``nvml`` was asked for explicitly.
    """
    if kind == "none":
        return None, "GPU backend disabled (--backend none)"
    if kind == "fake":
        from collectors.gpu.fake import FakeBackend

        try:
            return (FakeBackend.from_file(scenario) if scenario else FakeBackend()), None
        except BackendUnavailableError as exc:
            return None, exc.message
    from collectors.gpu.nvml import NvmlBackend

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
    interval = cfg.interval if interval is None else interval
    if interval <= 0:
        raise InputError(f"--interval {interval} is not positive.", "Pass a number of seconds such as 5.")
    kind = backend or cfg.backend
    scenario = fake_scenario or cfg.fake_scenario or None
    if scenario and kind == "auto":
        kind = "fake"
    require_gpu = require_gpu or cfg.require_gpu
    node = node or cfg.node
    _setup_logging(app.quiet)
    say = app.console.print

    gpu, why = open_backend(kind, scenario)
    if gpu is None:
        if require_gpu:
            raise BackendUnavailableError(
                f"No GPU backend: {why}", "Drop --require-gpu to collect network counters only."
            )
        say(f"[yellow]No GPU backend[/] ({(why or '').rstrip('.')}): collecting network and InfiniBand"
            " counters only.")
    else:
        devs = gpu.devices()
        say(f"GPU backend [bold]{gpu.name}[/]: {len(devs)} GPU(s)"
            + (f" ({devs[0].model})" if devs else ""))
    net = NetReader(cfg.proc_root if proc_root is None else proc_root,
                    cfg.sysfs_root if sysfs_root is None else sysfs_root,
                    exclude=cfg.net_exclude or None)
    ifaces, ports = net.interfaces(), net.infiniband()
    say(f"network: {len(ifaces)} interface(s) ({', '.join(n.device for n in ifaces) or 'none'}),"
        f" {len(ports)} InfiniBand port(s)")
    resolver = JobResolver(cfg.proc_root if proc_root is None else proc_root, env_key=cfg.job_env_key)

    sink: SampleSink | None = None
    store = None
    if not no_store:
        store = app.store()
        sink = StoreSink(store, node)
        say(f"store: {store.root} (flush every {cfg.flush_seconds:g} s, Parquet segments every"
            f" {cfg.segment_seconds:g} s)")
        try:
            register_node(store, node, gpu.devices() if gpu else [], datetime.now(UTC).replace(tzinfo=None))
        except StoreError as exc:
            log.warning("could not record node %s in the state tables: %s", node, exc)
    else:
        say("store: off (--no-store)")

    agent = Agent(
        node=node, backend=gpu, net=net, resolver=resolver, sink=sink,
        flush_seconds=cfg.flush_seconds, segment_seconds=cfg.segment_seconds,
        max_buffer_rows=cfg.max_buffer_rows,
    )
    if once:
        try:
            result = agent.tick()
        finally:
            agent.close()
        summary: dict[str, Any] = {
            "node": node,
            "backend": gpu.name if gpu else "none",
            "ts": result.ts,
            "rows": {k: result.count(k) for k in ("gpu", "proc", "xid", "net")},
            "stored": not no_store and agent.store_writable,
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
        return

    from collectors.exporter import serve_agent

    h = cfg.host if host is None else host
    p = cfg.port if port is None else port
    try:
        server = serve_agent(lambda: agent.snapshot, h, p)
    except OSError as exc:
        agent.close()
        raise InputError(f"Cannot serve /metrics on {h}:{p} ({exc.strerror}).",
                         "Pick another --port, or stop the process using it.") from None
    say(f"metrics: http://{h}:{server.port}/metrics")
    say(f"sampling every {interval:g} s; SIGTERM or Ctrl-C flushes and stops")
    stop = threading.Event()
    ticks = 0
    try:
        with _stop_on_signals(stop):
            ticks = agent.run(interval, stop)
    except GpulensError:
        raise
    finally:
        server.stop()
        agent.close()
    say(f"stopped after {ticks} sample(s); {agent.rows_written} row(s) written"
        + ("" if agent.store_writable else " (store was not writable at the end)"))

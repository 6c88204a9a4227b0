"""``gpulens nodes live``: the straggling or faulty machines of running jobs, now (docs/straggler.md)."""

from __future__ import annotations

import json
import signal
import threading
from typing import Any

import click
import pandas as pd

from gpulens.cliapp import App, emit, json_option, pass_app
from gpulens.diagnosis import live as lv
from gpulens.errors import InputError

__all__ = ["live"]


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for r in df.to_dict("records"):
        detail = r.get("detail")
        detail = json.loads(detail) if isinstance(detail, str) else (detail or {})
        out.append({
            "job_id": r["job_id"], "attempt": None if pd.isna(r["attempt"]) else int(r["attempt"]),
            "node": r["node"], "signals": list(r["signals"]), "score": float(r["score"]),
            "deviations": {k: v.get("deviation") for k, v in detail.items()},
            "since": r["since"], "detected_at": r["detected_at"], "last_seen": r["last_seen"],
            "job_nodes": None if pd.isna(r["nodes"]) else int(r["nodes"]),
        })
    return out


def _how_far(rec: dict[str, Any]) -> str:
    parts = []
    for sig, dev in rec["deviations"].items():
        if dev is None:
            continue
        if sig in ("link_errors", "xid", "ecc"):
            parts.append(f"{sig} +{dev:.1f}/min")
        elif sig == "gpu_idle_gap":
            parts.append(f"{sig} +{dev * 100:.0f} pts")
        else:
            parts.append(f"{sig} {dev * 100:+.0f}%")
    return ", ".join(parts)


@click.command("live")
@click.option("--watch", is_flag=True,
              help="Run the detector: scrape the running jobs' agents every live.interval seconds and store suspects.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=None, help="Seconds between scrapes (live.interval).")
@click.option("--agent-url", default=None, help="Agent /metrics URL with {node} (live.agent_url).")
@click.option("--agents-file", default=None, help='JSON {"node": "url"} naming each agent (live.agents_file).')
@click.option("--stale", type=click.FloatRange(min=1), default=None,
              help="Suspects not refreshed for this many seconds are not current (live.stale_s).")
@json_option
@pass_app
def live(app: App, watch: bool, interval: float | None, agent_url: str | None, agents_file: str | None,
         stale: float | None, as_json: bool) -> None:
    """Machines of running multi-node jobs whose telemetry deviates from the job's others.

    Without --watch: print the current suspects (job, node, signals, how far from the job's
    other machines, since when) that a running watcher stored.
    """
    cfg = app.config.live
    if interval is not None:
        cfg.interval = interval
    if agent_url is not None:
        cfg.agent_url = agent_url
    if agents_file is not None:
        cfg.agents_file = agents_file
    if stale is not None:
        cfg.stale_s = stale
    if watch:
        _watch(app)
        return
    con = app.store().connect(samples=False)
    try:
        recs = _records(lv.current_suspects(con, stale_s=cfg.stale_s))
    finally:
        con.close()

    def human() -> None:
        if not recs:
            click.echo("no suspect machine in any running job (is `gpulens nodes live --watch` running?)")
        for r in recs:
            click.echo(f"{r['job_id']:<16} {r['node']:<16} score {r['score']:.1f}  since {r['since']}  "
                       f"{_how_far(r)} (vs the job's other {max((r['job_nodes'] or 2) - 1, 1)} machines)")

    emit(recs, as_json, human)


def _watch(app: App) -> None:
    store = app.store()
    watcher = lv.LiveWatcher(store, app.config.live)
    stop = threading.Event()

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    app.console.print(f"watching running multi-node jobs every {app.config.live.interval:g} s; "
                      "SIGTERM or Ctrl-C stops")
    try:
        ticks = watcher.run(stop)
    except InputError:
        raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    app.console.print(f"stopped after {ticks} tick(s)")

"""``gpulens nodes``: flag bad nodes (drain candidates) and score node anomalies."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import click

from gpulens.cliapp import App, emit, fmt_time, json_option, pass_app, progress
from gpulens.diagnosis import nodes as nd
from gpulens.diagnosis.blacklist import default_actor
from gpulens.diagnosis.live_cli import live

__all__ = ["nodes"]


@click.group()
def nodes() -> None:
    """Bad nodes from failures and hardware signals; telemetry anomaly scores."""


@nodes.command("flag")
@click.option("--min-jobs", type=click.IntRange(min=1), default=None,
              help="Implicating jobs that flag a node (default: diagnose.node_min_jobs).")
@click.option("--fdr", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="False-discovery rate of the flags (default: diagnose.node_fdr, 0.01).")
@json_option
@pass_app
def flag(app: App, min_jobs: int | None, fdr: float | None, as_json: bool) -> None:
    """Flag nodes whose infrastructure failures or hardware errors run above the cluster's rate."""
    df = nd.flag_nodes(app.store(), min_jobs=min_jobs, fdr=fdr, config=app.config.diagnose)

    def human() -> None:
        if df.empty:
            click.echo("no node meets the flagging rule")
        for r in df.to_dict("records"):
            click.echo(f"{'NEW ' if r['new'] else ''}{r['node']}  confidence {r['confidence']:.3f}: {r['reason']}")

    emit(df, as_json, human)


@nodes.command("list")
@click.option("--all", "include_cleared", is_flag=True, help="Include cleared flags.")
@json_option
@pass_app
def list_(app: App, include_cleared: bool, as_json: bool) -> None:
    """Show flagged nodes (drain candidates) with their evidence."""
    con = app.store().connect()
    try:
        df = nd.flagged_nodes(con, include_cleared=include_cleared)
    finally:
        con.close()
    if not df.empty:
        df["evidence"] = [json.loads(e) if isinstance(e, str) else e for e in df["evidence"]]

    def human() -> None:
        if df.empty:
            click.echo("no flagged node")
        for r in df.to_dict("records"):
            for line in _explain_lines(r):
                click.echo(line)

    emit(df, as_json, human)


def _explain_lines(r: Mapping[Any, Any]) -> list[str]:
    """A flag in a few lines: state, confidence, reason, the blamed jobs and the signals with times."""
    ev = r["evidence"] or {}
    state = "active" if r["active"] else "cleared"
    conf = r.get("confidence")
    conf_text = f"confidence {float(conf):.3f}" if conf is not None and conf == conf else "confidence ?"
    lines = [f"{r['node']:<16} {state:<8} {conf_text}  since {fmt_time(r['flagged_at'])}: {r['reason']}"]
    failures, signals = ev.get("infra_failures", []), ev.get("signals", [])
    jobs = [f"{f['job_id']} ({f['share']:.2f}, {f['why']})" for f in failures[:5]]
    if jobs:
        lines.append(f"{'':<16} failed attempts{_of(5, len(failures))}: {'; '.join(jobs)}")
    sigs = [f"{fmt_time(s['ts'])} {s['detail']}" for s in signals[:5]]
    if sigs:
        lines.append(f"{'':<16} signals{_of(5, len(signals))}: {'; '.join(sigs)}")
    stragglers = ev.get("stragglers", [])
    strag = [f"{d['job_id']} ({', '.join(d['signals'])}, {fmt_time(d['since'])})" for d in stragglers[:5]]
    if strag:
        lines.append(f"{'':<16} straggler in{_of(5, len(stragglers))}: {'; '.join(strag)}")
    return lines


def _of(shown: int, total: int) -> str:
    return f" (first {shown} of {total} in the evidence; --json lists them)" if total > shown else ""


@nodes.command("clear")
@click.argument("node")
@click.option("--reason", required=True, help="Why (e.g. 'GPU 3 replaced').")
@click.option("--actor", default=None, help="Who (default: $GPULENS_ACTOR or your login name).")
@json_option
@pass_app
def clear(app: App, node: str, reason: str, actor: str | None, as_json: bool) -> None:
    """Clear NODE's active flag after repair."""
    n = nd.clear_flag(app.store(), node, actor or default_actor(), reason)
    emit({"node": node, "cleared": n}, as_json, lambda: click.echo(f"cleared {n} flag(s) on {node}"))


@nodes.command("anomalies")
@click.option("--top", type=click.IntRange(min=1), default=20, help="Show the N most anomalous node-hours.")
@click.option("--node", default=None, help="Only this node.")
@click.option("--no-refresh", is_flag=True, help="Show stored scores without refitting the model.")
@json_option
@pass_app
def anomalies(app: App, top: int, node: str | None, no_refresh: bool, as_json: bool) -> None:
    """Score every node-hour with a One-Class SVM on telemetry; show the strangest."""
    store = app.store()
    if not no_refresh:
        with progress(app.console) as bar:
            task = bar.add_task("scoring node-hours", total=None)
            n = nd.score_anomalies(store, config=app.config.diagnose)
            bar.update(task, total=max(n, 1), completed=max(n, 1))
    con = store.connect()
    try:
        df = nd.anomaly_scores(con, node=node)
    finally:
        con.close()
    df = df.sort_values("score", ascending=False).head(top).reset_index(drop=True)

    def human() -> None:
        if df.empty:
            click.echo("no anomaly scores (no GPU telemetry in the store?)")
            return
        width = max(16, *(len(str(n)) for n in df["node"]))
        click.echo(f"{'node':<{width}} {'hour (UTC)':<19}  {'score':>6}  (> 0: outside normal)")
        for r in df.to_dict("records"):
            mark = "  <- outside normal" if r['score'] > 0 else ""
            click.echo(f"{r['node']:<{width}} {fmt_time(r['hour']):<19}  {r['score']:+.3f}{mark}")

    emit(df, as_json, human)


nodes.add_command(live)  # `nodes live`: the straggler watcher and its current suspects (live_cli.py)

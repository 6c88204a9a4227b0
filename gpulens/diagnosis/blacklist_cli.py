"""``gpulens blacklist``: list, add, remove, check and update blacklisted inputs."""

from __future__ import annotations

import sys

import click

from gpulens.cliapp import App, emit, fmt_time, json_option, pass_app
from gpulens.diagnosis import blacklist as bl

__all__ = ["blacklist"]


def _actor_option(func: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        "--actor",
        default=None,
        help="Who makes the change (default: $GPULENS_ACTOR or your login name).",
    )(func)


@click.group()
def blacklist() -> None:
    """Inputs that keep breaking jobs: suspected -> blacklisted, with an audit log."""


@blacklist.command("list")
@click.option("--state", type=click.Choice(bl.STATES), default=None, help="Only entries in this state.")
@click.option("--audit", is_flag=True, help="Show the audit log (who/when/why) instead.")
@click.option("--input", "input_", default=None, help="With --audit: only this input's changes.")
@json_option
@pass_app
def list_(app: App, state: str | None, audit: bool, input_: str | None, as_json: bool) -> None:
    """Show blacklist entries (or, with --audit, every change)."""
    con = app.store().connect(samples=False)
    try:
        df = bl.audit_log(con, input_) if audit else bl.list_entries(con, state)
    finally:
        con.close()

    def human() -> None:
        if df.empty:
            click.echo("no audit entries" if audit else "blacklist is empty")
            return
        if audit:
            for r in df.to_dict("records"):
                click.echo(f"{fmt_time(r['ts'])}  {r['input']}  {r['old_state'] or '-'} -> "
                           f"{r['new_state']}  by {r['actor']}: {r['reason']}")
            return
        for r in df.to_dict("records"):
            click.echo(f"{r['state']:<12} {r['input']}")
            if r["reason"]:
                click.echo(f"{'':<12} {r['reason']}")
            jobs = _as_list(r["evidence_jobs"])
            if jobs:
                click.echo(f"{'':<12} evidence jobs ({len(jobs)}): {', '.join(jobs)}")

    emit(df, as_json, human)


def _as_list(value: object) -> list[str]:
    """A list column read back from DuckDB (a numpy array, a list or None) as a list of str."""
    if value is None or isinstance(value, float):
        return []
    return [str(v) for v in value]  # type: ignore[attr-defined]


@blacklist.command("add")
@click.argument("input_", metavar="INPUT")
@click.option("--reason", required=True, help="Why the input is blacklisted.")
@_actor_option
@json_option
@pass_app
def add(app: App, input_: str, reason: str, actor: str | None, as_json: bool) -> None:
    """Blacklist INPUT by hand."""
    who = actor or bl.default_actor()
    old = bl.add(app.store(), input_, who, reason)
    name = bl.normalize_input(input_)
    data = {"input": name, "old_state": old or None, "new_state": "blacklisted", "actor": who}
    emit(data, as_json, lambda: click.echo(f"blacklisted {name} (was {old or 'not listed'})"))


@blacklist.command("remove")
@click.argument("input_", metavar="INPUT")
@click.option("--reason", required=True, help="Why the input is cleared (e.g. 're-uploaded').")
@_actor_option
@json_option
@pass_app
def remove(app: App, input_: str, reason: str, actor: str | None, as_json: bool) -> None:
    """Clear INPUT (its entry and audit history are kept, state 'cleared')."""
    who = actor or bl.default_actor()
    old = bl.remove(app.store(), input_, who, reason)
    name = bl.normalize_input(input_)
    data = {"input": name, "old_state": old, "new_state": "cleared", "actor": who}
    emit(data, as_json, lambda: click.echo(f"cleared {name} (was {old})"))


@blacklist.command("check")
@click.argument("inputs", nargs=-1, required=True)
@json_option
@pass_app
def check(app: App, inputs: tuple[str, ...], as_json: bool) -> None:
    """Exit 1 when any INPUT is blacklisted (for job submission scripts)."""
    con = app.store().connect(samples=False)
    try:
        hits = bl.check(con, inputs)
    finally:
        con.close()
    data = {"blacklisted": hits, "checked": list(inputs)}

    def human() -> None:
        for i in inputs:
            click.echo(f"{'BLACKLISTED' if i in hits else 'ok':<12} {i}")

    emit(data, as_json, human)
    if hits:
        # SystemExit, not ctx.exit(): gpulens runs click with standalone_mode=False,
        # where ctx.exit(1) only becomes a return value
        sys.stdout.flush()
        raise SystemExit(1)


@blacklist.command("update")
@click.option("--min-jobs", "k", type=click.IntRange(min=1), default=None,
              help="Evidence needed to blacklist (default: diagnose.blacklist_min_jobs).")
@json_option
@pass_app
def update(app: App, k: int | None, as_json: bool) -> None:
    """Suspect / blacklist inputs from the diagnosed failures (run `diagnose --all` first)."""
    cfg = app.config.diagnose
    changes = bl.update_from_failures(
        app.store(), k if k is not None else cfg.blacklist_min_jobs, user_weight=cfg.blacklist_user_weight
    )

    def human() -> None:
        if not changes:
            click.echo("no changes")
        for c in changes:
            click.echo(f"{c.old_state or '-'} -> {c.new_state}  {c.input}: {c.reason}")

    emit(changes, as_json, human)

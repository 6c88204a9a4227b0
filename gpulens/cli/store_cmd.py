"""``gpulens store``: inspect the data directory."""

from __future__ import annotations

from typing import Any

import click

from gpulens.cliapp import App, emit, json_option, pass_app
from gpulens.store import VIEW_NAMES, Store, latest_version
from gpulens.store.integrity import read_marker
from gpulens.store.quarantine import list_quarantined
from gpulens.store.schema import current_version

__all__ = ["store"]


@click.group()
def store() -> None:
    """Inspect and maintain the data directory."""


@store.command("info")
@json_option
@pass_app
def info(app: App, as_json: bool) -> None:
    """Show schema version, snapshot generation and row counts."""
    st = app.store()
    con = st.connect()
    try:
        counts = {
            name: int(con.execute(f"SELECT count(*) FROM {name}").fetchone()[0])  # type: ignore[index]  # noqa: S608
            for name in ("jobs", "attempts", "failures", "job_metrics", *VIEW_NAMES.values())
        }
        quarantined = list_quarantined(st.root)
        data: dict[str, Any] = {
            "data_dir": str(st.root),
            "quarantined": quarantined,
            "schema_version": current_version(con, "state"),
            "code_schema_version": latest_version(),
            "generation": st.generation(),
            "rows": counts,
        }
    finally:
        con.close()

    def human() -> None:
        click.echo(f"data dir:        {data['data_dir']}")
        click.echo(f"schema version:  {data['schema_version']}")
        click.echo(f"snapshot gen:    {data['generation']}")
        for name, n in counts.items():
            click.echo(f"  {name:<22} {n:>12,}")
        _echo_quarantined(quarantined)

    emit(data, as_json, human)


def _echo_quarantined(records: list[dict[str, Any]]) -> None:
    click.echo(f"quarantined:     {len(records)} segment(s)")
    for r in records:
        rows = "?" if r.get("rows") is None else f"{r['rows']:,}"
        click.echo(f"  {r['moved_to']}  rows={rows}  {r.get('reason') or ''}")


@store.command("check")
@json_option
@pass_app
def check(app: App, as_json: bool) -> int:
    """Read every segment and the newest snapshot fully; quarantine unreadable segments.
    Exit 1 if anything is damaged."""
    st = Store(app.config.data_dir)
    found = st.check_segments(full=True)
    quarantined = list_quarantined(st.root)
    damaged = read_marker(st.root)
    newest = st.last_good_snapshot()
    data: dict[str, Any] = {
        "data_dir": str(st.root),
        "state_damaged": damaged,
        "last_good_snapshot": str(newest) if newest else None,
        "segments_checked": len(st.segment_files()),
        "newly_quarantined": [r.file for r in found if r.moved_to],
        "left_out_read_only": [r.file for r in found if not r.moved_to],
        "quarantined": quarantined,
    }

    def human() -> None:
        click.echo(f"data dir:        {data['data_dir']}")
        click.echo(f"segments read:   {data['segments_checked']} (all readable)")
        _echo_quarantined(quarantined)
        click.echo(f"last good snapshot: {data['last_good_snapshot']}")
        if damaged:
            click.echo(f"state DAMAGED:   {damaged.get('reason')} (run `gpulens store restore`)")

    emit(data, as_json, human)
    return 1 if found or quarantined or damaged or newest is None else 0


@store.command("restore")
@click.option("--generation", type=int, default=None,
              help="Snapshot generation to restore (default: the newest that reads end to end).")
@json_option
@pass_app
def restore(app: App, generation: int | None, as_json: bool) -> None:
    """Replace a damaged state file by the last good snapshot (stop writers first)."""
    st = Store(app.config.data_dir)
    data = st.restore(generation)

    def human() -> None:
        click.echo(f"restored {data['restored_from']} (generation {data['restored_generation']}) "
                   f"as {st.state_db}")
        if data["damaged_file_kept_as"]:
            click.echo(f"the previous state file is kept as {data['damaged_file_kept_as']}")
        click.echo(f"published generation {data['published_generation']}; state written after "
                   f"generation {data['restored_generation']} is gone: re-run imports made since then")

    emit(data, as_json, human)

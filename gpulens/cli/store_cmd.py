"""``gpulens store``: inspect the data directory."""

from __future__ import annotations

import click

from gpulens.cliapp import App, emit, json_option, pass_app
from gpulens.store import VIEW_NAMES, latest_version
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
        data = {
            "data_dir": str(st.root),
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

    emit(data, as_json, human)

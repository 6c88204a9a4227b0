"""``gpulens store``: inspect the data directory."""

from __future__ import annotations

import click

from gpulens.cliapp import App, emit, json_option, pass_app
from gpulens.store import SAMPLE_KINDS, VIEW_NAMES, Store, latest_version
from gpulens.store.lake import partitions
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
        files = _file_stats(st)
        data: dict[str, object] = {
            "data_dir": str(st.root),
            "schema_version": current_version(con, "state"),
            "code_schema_version": latest_version(),
            "generation": st.generation(),
            "rows": counts,
            "files": files,
            "compacted_files": int(con.execute(  # type: ignore[index]
                "SELECT count(*) FROM lake_compactions").fetchone()[0]),
        }
    finally:
        con.close()

    def human() -> None:
        click.echo(f"data dir:        {data['data_dir']}")
        click.echo(f"schema version:  {data['schema_version']}")
        click.echo(f"snapshot gen:    {data['generation']}")
        for name, n in counts.items():
            click.echo(f"  {name:<22} {n:>12,}")
        click.echo("sample files:    live (bytes)  /  replaced, awaiting deletion (bytes)")
        for kind, f in files.items():
            click.echo(f"  {kind:<6} {f['live_files']:>10,} ({f['live_bytes']:>15,})"
                       f"  / {f['replaced_files']:>8,} ({f['replaced_bytes']:>13,})")
        click.echo(f"compacted files recorded: {data['compacted_files']:,}")

    emit(data, as_json, human)


def _file_stats(st: Store) -> dict[str, dict[str, int]]:
    """Per kind: live files and bytes, and files replaced by compaction not yet deleted."""
    out: dict[str, dict[str, int]] = {}
    for kind in SAMPLE_KINDS:
        stats = {"live_files": 0, "live_bytes": 0, "replaced_files": 0, "replaced_bytes": 0}
        for part in partitions(st.samples, kind):
            for group, names in (("live", part.live), ("replaced", part.replaced)):
                for name in names:
                    try:
                        size = (part.path / name).stat().st_size
                    except FileNotFoundError:
                        continue
                    stats[f"{group}_files"] += 1
                    stats[f"{group}_bytes"] += size
        out[kind] = stats
    return out


@store.command("compact")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(sorted(SAMPLE_KINDS)),
              help="Only this sample kind (repeatable; default: all).")
@click.option("--settle", type=click.FloatRange(min=0), default=3600.0, show_default=True,
              help="Seconds after midnight UTC before a day counts as closed.")
@click.option("--grace", type=click.FloatRange(min=0), default=900.0, show_default=True,
              help="Seconds replaced files stay on disk for readers that listed them.")
@json_option
@pass_app
def compact_cmd(app: App, kinds: tuple[str, ...], settle: float, grace: float,
                as_json: bool) -> None:
    """Merge each closed day's segments into one sorted file per kind and node."""
    from gpulens.store.compact import compact

    st = app.store()
    with app.console.status("compacting ...") as status:
        report = compact(st, kinds=kinds or None, settle=settle, grace=grace,
                         progress=lambda what: status.update(f"compacting {what} ..."))

    def human() -> None:
        click.echo(f"compacted {report.partitions:,} partitions: {report.files_in:,} files "
                   f"({report.bytes_in:,} bytes) -> {report.partitions:,} files "
                   f"({report.bytes_out:,} bytes), {report.rows:,} rows")
        click.echo(f"deleted {report.deleted_files:,} replaced files "
                   f"({report.deleted_bytes:,} bytes); {report.pending_files:,} wait out the "
                   f"{grace:g} s grace period")

    emit(report.as_dict(), as_json, human)


@store.command("export")
@click.argument("dest", required=False, type=click.Path(file_okay=False))
@json_option
@pass_app
def export_cmd(app: App, dest: str | None, as_json: bool) -> None:
    """Write the state tables of the newest snapshot as Parquet (for Spark, Trino, ...)."""
    from gpulens.store.export import export_state

    folder = export_state(app.store(), dest)
    tables = sorted(p.stem for p in folder.glob("*.parquet"))
    emit({"folder": str(folder), "tables": tables}, as_json,
         lambda: click.echo(f"exported {len(tables)} state tables to {folder}"))

"""``gpulens store``: inspect the data directory."""

from __future__ import annotations

from typing import Any

import click

from gpulens.cliapp import App, emit, json_option, pass_app
from gpulens.store import SAMPLE_KINDS, VIEW_NAMES, Store, derived, latest_version
from gpulens.store import quarantine as qr
from gpulens.store.integrity import read_marker
from gpulens.store.lake import partitions
from gpulens.store.quarantine import list_quarantined
from gpulens.store.rollups import ROLLUP_KINDS, describe, rollup_files
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
    data = _info(st)
    emit(data, as_json, lambda: _echo_info(data))


#: The tables whose rows ``store info`` counts.
_COUNTED = ("jobs", "attempts", "failures", "job_metrics", *VIEW_NAMES.values())


def _info(st: Store) -> dict[str, Any]:
    """What ``store info`` reports: versions, generation, row counts, files, rollups, saved."""
    con = st.connect()
    try:
        counts = {
            name: int(con.execute(f"SELECT count(*) FROM {name}").fetchone()[0])  # type: ignore[index]  # noqa: S608
            for name in _COUNTED
        }
        quarantined = list_quarantined(st.root)
        files = _file_stats(st)
        return {
            "data_dir": str(st.root),
            "quarantined": quarantined,
            "schema_version": current_version(con, "state"),
            "code_schema_version": latest_version(),
            "generation": st.generation(),
            "rows": counts,
            "files": files,
            "compacted_files": int(con.execute(  # type: ignore[index]
                "SELECT count(*) FROM lake_compactions").fetchone()[0]),
            "rollups": _rollup_stats(st),
            "saved": derived.describe(st.root),
        }
    finally:
        con.close()


def _echo_info(data: dict[str, Any]) -> None:
    click.echo(f"data dir:        {data['data_dir']}")
    click.echo(f"schema version:  {data['schema_version']}")
    click.echo(f"snapshot gen:    {data['generation']}")
    for name, n in data["rows"].items():
        click.echo(f"  {name:<22} {n:>12,}")
    click.echo("sample files:    live (bytes)  /  replaced, awaiting deletion (bytes)")
    for kind, f in data["files"].items():
        click.echo(f"  {kind:<6} {f['live_files']:>10,} ({f['live_bytes']:>15,})"
                   f"  / {f['replaced_files']:>8,} ({f['replaced_bytes']:>13,})")
    click.echo(f"compacted files recorded: {data['compacted_files']:,}")
    _echo_rollups(data["rollups"])
    _echo_saved(data["saved"])
    _echo_quarantined(data["quarantined"])

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
    rollups = rollup_files(st.root)
    found += qr.scan(st.root, rollups, st.warn, full=True)  # a damaged one: its days read raw
    quarantined = list_quarantined(st.root)
    damaged = read_marker(st.root)
    newest = st.last_good_snapshot()
    data: dict[str, Any] = {
        "data_dir": str(st.root),
        "state_damaged": damaged,
        "last_good_snapshot": str(newest) if newest else None,
        "segments_checked": len(st.segment_files()),
        "rollups_checked": len(rollups),
        "newly_quarantined": [r.file for r in found if r.moved_to],
        "left_out_read_only": [r.file for r in found if not r.moved_to],
        "quarantined": quarantined,
    }

    def human() -> None:
        click.echo(f"data dir:        {data['data_dir']}")
        click.echo(f"segments read:   {data['segments_checked']} (all readable)")
        click.echo(f"rollups read:    {data['rollups_checked']} (a damaged one is quarantined; "
                   "its days are read from raw samples)")
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


def _rollup_stats(st: Store) -> dict[str, dict[str, Any]]:
    """Per rollup kind: files, bytes, days, how many are current / partial / stale / unusable,
    the days with samples but no usable rollup (read raw), and every file's state."""
    files = describe(st.root, lambda kind: st.sample_files(kind).files, st.warn)
    out: dict[str, dict[str, Any]] = {}
    for name, kind in ROLLUP_KINDS.items():
        mine = [f for f in files if f.kind == name]
        usable = {f.day for f in mine if f.state != "unusable"}
        sample_days = {day for _, day in st.sample_files(kind).files}
        out[name] = {
            "files": len(mine), "bytes": sum(f.bytes for f in mine),
            "days": sorted({str(f.day) for f in mine if f.day is not None}),
            **{state: sum(f.state == state for f in mine)
               for state in ("current", "partial", "stale", "unusable")},
            "days_not_rolled": sorted(str(d) for d in sample_days - usable),
            "by_file": [{"day": None if f.day is None else str(f.day), "path": f.path, "bytes": f.bytes,
                         "state": f.state, "nodes": f.nodes, "stale_nodes": f.stale_nodes,
                         "raw_files": f.raw_files} for f in mine],
        }
    for f in files:  # a kind this release does not know (a newer one's)
        if f.kind not in ROLLUP_KINDS:
            other = out.setdefault(f.kind, {"files": 0, "bytes": 0, "days": [], "unusable": 0,
                                            "current": 0, "partial": 0, "stale": 0,
                                            "days_not_rolled": [], "by_file": []})
            other["files"] += 1
            other["bytes"] += f.bytes
            other["unusable"] += 1
    return out


def _echo_rollups(rollups: dict[str, dict[str, Any]]) -> None:
    click.echo("rollups:         files (bytes), days: current / partial / stale / unusable; days read raw")
    for name, r in rollups.items():
        click.echo(f"  {name:<10} {r['files']:>6,} ({r['bytes']:>13,}), {len(r['days']):>4} days: "
                   f"{r['current']} / {r['partial']} / {r['stale']} / {r['unusable']}; "
                   f"{len(r['days_not_rolled'])} day(s) without one")
        for f in r["by_file"]:
            if f["state"] in ("stale", "unusable"):
                more = f" ({f['stale_nodes']} of {f['nodes']} nodes read raw)" if f["state"] == "stale" else ""
                click.echo(f"    {f['state']}: {f['path']}{more}")
    if any(r["stale"] or r["unusable"] or r["days_not_rolled"] for r in rollups.values()):
        click.echo("  (`gpulens store compact` rewrites stale and unusable rollups; until then those "
                   "days are read from raw samples: the same numbers, slower)")


def _echo_saved(saved: dict[str, Any]) -> None:
    days = " to ".join(saved["base_days"]) or "none"
    click.echo(f"saved tables:    {saved['base_files']:,} closed days of the analyses' base "
               f"({saved['base_bytes']:,} bytes; {days}), {saved['convergence_files']:,} "
               f"metric curve/convergence table(s) ({saved['convergence_bytes']:,} bytes); "
               "rebuilt when stale")


def _file_stats(st: Store) -> dict[str, dict[str, int]]:
    """Per kind: live files and bytes, and files replaced by compaction not yet deleted."""
    out: dict[str, dict[str, int]] = {}
    for kind in SAMPLE_KINDS:
        stats = {"live_files": 0, "live_bytes": 0, "replaced_files": 0, "replaced_bytes": 0}
        for part in partitions(st.samples, kind, warn=st.warn):
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
@click.option("--open-min-files", type=click.IntRange(min=0), default=12, show_default=True,
              help="Merge an open day's partition once it holds this many segments (0: closed days only).")
@json_option
@pass_app
def compact_cmd(app: App, kinds: tuple[str, ...], settle: float, grace: float,
                open_min_files: int, as_json: bool) -> None:
    """Merge each closed day's segments into one sorted file per kind and node, and the open
    day's segments in tiers (one file per --open-min-files segments)."""
    from gpulens.store.compact import compact

    st = app.store()
    with app.console.status("compacting ...") as status:
        report = compact(st, kinds=kinds or None, settle=settle, grace=grace,
                         open_min_files=open_min_files,
                         progress=lambda what: status.update(f"compacting {what} ..."))

    def human() -> None:
        click.echo(f"compacted {report.partitions:,} partitions: {report.files_in:,} files "
                   f"({report.bytes_in:,} bytes) -> {report.partitions:,} files "
                   f"({report.bytes_out:,} bytes), {report.rows:,} rows")
        click.echo(f"deleted {report.deleted_files:,} replaced files "
                   f"({report.deleted_bytes:,} bytes); {report.pending_files:,} wait out the "
                   f"{grace:g} s grace period")
        if report.rollup_files:
            click.echo(f"rolled up {report.rollup_files:,} day files ({report.rollup_bytes:,} bytes) "
                       f"in {report.rollup_seconds:.1f} s")

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

"""`gpulens import philly|slurm|metrics|prometheus|kubernetes`."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from gpulens.cliapp import App, emit, json_option, pass_app, print_table, stage_progress
from gpulens.ingest.importers.common import ImportResult

__all__ = ["import_"]


def _human(res: ImportResult) -> None:
    c = Console()
    t = Table(title=f"Imported ({res.kind})", header_style="bold")
    t.add_column("table")
    t.add_column("rows", justify="right")
    for k, v in res.rows.items():
        t.add_row(k, f"{v:,}")
    print_table(t, c)
    for path, quirks in res.quirks.items():
        if quirks:
            q = Table(title=f"Quirks in {path} (counted, not fatal)", header_style="bold")
            q.add_column("quirk")
            q.add_column("count", justify="right")
            for k, v in quirks.items():
                q.add_row(k, f"{v:,}")
            print_table(q, c)


@click.group("import")
def import_() -> None:
    """Import Philly, Slurm, Kubernetes, metric-curve traces or Prometheus history into the store."""


@import_.command()
@click.argument("directory", type=click.Path(path_type=Path), required=False)
@click.option("--job-log", type=click.Path(path_type=Path), help="cluster_job_log (JSON list).")
@click.option("--gpu-util", type=click.Path(path_type=Path), help="cluster_gpu_util (CSV).")
@click.option("--machine-list", type=click.Path(path_type=Path), help="cluster_machine_list (CSV).")
@click.option("--cpu-util", type=click.Path(path_type=Path), help="cluster_cpu_util (validated only).")
@click.option("--mem-util", type=click.Path(path_type=Path), help="cluster_mem_util (validated only).")
@json_option
@pass_app
def philly(app: App, directory: Path | None, job_log: Path | None, gpu_util: Path | None,
           machine_list: Path | None, cpu_util: Path | None, mem_util: Path | None,
           as_json: bool) -> None:
    """Import the Philly public trace from DIRECTORY (or the files given as options)."""
    from gpulens.ingest.importers.philly import PhillyFiles, find_files, import_philly

    files = find_files(directory) if directory else PhillyFiles()
    for name, val in (("job_log", job_log), ("gpu_util", gpu_util), ("machine_list", machine_list),
                      ("cpu_util", cpu_util), ("mem_util", mem_util)):
        if val is not None:
            setattr(files, name, val)
    if not files.paths():
        raise click.UsageError("Pass the trace DIRECTORY or at least one of --job-log, --gpu-util.")
    store = app.store()
    with stage_progress(app.console) as report:
        res = import_philly(store, files, progress=None if app.quiet else report)
    emit(res, as_json, lambda: _human(res))


@import_.command()
@click.argument("path", type=click.Path(path_type=Path))
@json_option
@pass_app
def slurm(app: App, path: Path, as_json: bool) -> None:
    """Import `sacct --parsable2` or `sacct --json` output (see docs/analysis.md for --format)."""
    from gpulens.ingest.importers.slurm import import_slurm

    res = import_slurm(app.store(), path)
    emit(res, as_json, lambda: _human(res))


@import_.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--job", "job_id", default=None, help="Job id for TensorBoard event files.")
@json_option
@pass_app
def metrics(app: App, path: Path, job_id: str | None, as_json: bool) -> None:
    """Import metric curves: CSV/JSONL (job, step|epoch, metric, value) or TensorBoard events."""
    from gpulens.ingest.importers.metrics import import_metrics

    res = import_metrics(app.store(), path, job_id=job_id)
    emit(res, as_json, lambda: _human(res))


def _utc(value: str, name: str) -> datetime:
    from gpulens.errors import InputError

    try:
        t = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"--{name} {value!r} is not an ISO time.",
                         "Use e.g. 2026-01-05 or 2026-01-05T12:00:00Z (UTC unless an offset is given).") from None
    return t.astimezone(UTC) if t.tzinfo else t.replace(tzinfo=UTC)


@import_.command()
@click.option("--url", required=True, help="Prometheus base URL, e.g. http://prometheus:9090.")
@click.option("--start", required=True, help="First time to import (ISO, UTC unless an offset is given).")
@click.option("--end", required=True, help="Last time to import (ISO; 'now' for now).")
@click.option("--step", default="60s", show_default=True, help="Resolution of the imported samples.")
@click.option("--source", type=click.Choice(["auto", "dcgm", "nvidia_gpu_exporter", "gpulens"]),
              default="auto", show_default=True, help="Which exporter's series to read.")
@click.option("--match", "match", default="", help='Extra label matchers, e.g. \'{cluster="prod"}\'.')
@json_option
@pass_app
def prometheus(app: App, url: str, start: str, end: str, step: str, source: str, match: str,
               as_json: bool) -> None:
    """Import GPU history (and job placements from exporter labels) from Prometheus."""
    from gpulens.ingest.importers.prometheus import PromImport, import_prometheus, parse_duration

    t1 = datetime.now(UTC) if end.strip() == "now" else _utc(end, "end")
    req = PromImport(url, _utc(start, "start"), t1, parse_duration(step), source, match)
    store = app.store()
    with stage_progress(app.console) as report:
        res = import_prometheus(store, req, progress=None if app.quiet else report)
    emit(res, as_json, lambda: _human(res))


@import_.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--logs", "logs", multiple=True, type=click.Path(path_type=Path),
              help="Container logs to attach: the kubelet's /var/log/pods (on a node, as root) or "
                   "`kubectl logs [--previous]` dumps named NAMESPACE_POD[_CONTAINER][.previous].log. "
                   "Repeatable.")
@json_option
@pass_app
def kubernetes(app: App, paths: tuple[Path, ...], logs: tuple[Path, ...], as_json: bool) -> None:
    """Import `kubectl get pods -A -o json` (and `kubectl get events -A -o json`) files, with the
    pods' container logs (docs/kubernetes.md)."""
    from gpulens.ingest.importers.kubernetes import import_kubernetes

    res = import_kubernetes(app.store(), list(paths), list(logs))
    emit(res, as_json, lambda: _human(res))

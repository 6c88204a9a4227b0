"""`gpulens import philly|slurm|metrics`."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from gpulens.cliapp import App, emit, json_option, pass_app, stage_progress
from gpulens.ingest.importers.common import ImportResult

__all__ = ["import_"]


def _human(res: ImportResult) -> None:
    c = Console()
    t = Table(title=f"Imported ({res.kind})", header_style="bold")
    t.add_column("table")
    t.add_column("rows", justify="right")
    for k, v in res.rows.items():
        t.add_row(k, f"{v:,}")
    c.print(t)
    for path, quirks in res.quirks.items():
        if quirks:
            q = Table(title=f"Quirks in {path} (counted, not fatal)", header_style="bold")
            q.add_column("quirk")
            q.add_column("count", justify="right")
            for k, v in quirks.items():
                q.add_row(k, f"{v:,}")
            c.print(q)


@click.group("import")
def import_() -> None:
    """Import Philly, Slurm or metric-curve traces into the store (one transaction each)."""


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

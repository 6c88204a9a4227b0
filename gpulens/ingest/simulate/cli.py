"""``gpulens simulate``: build a simulated cluster into the data directory."""

from __future__ import annotations

from datetime import datetime

import click
from rich.table import Table

from gpulens.cliapp import App, emit, json_option, pass_app, print_table, stage_progress
from gpulens.errors import InputError

__all__ = ["simulate"]


def _parse_start(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise InputError(
            f"--start {value!r} is not a date.", "Pass it as YYYY-MM-DD or YYYY-MM-DDTHH:MM."
        ) from None


@click.command("simulate")
@click.option("--gpus", type=int, default=256, show_default=True, help="GPUs in the cluster (>= 8).")
@click.option("--days", type=float, default=7.0, show_default=True, help="Length of the period in days.")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (same seed, same data).")
@click.option("--start", "start", default=None, help="UTC start (YYYY-MM-DD); default: ends at last midnight.")
@click.option("--force", is_flag=True, help="Replace a simulation already in the data directory.")
@json_option
@pass_app
def simulate(app: App, gpus: int, days: float, seed: int, start: str | None, force: bool,
             as_json: bool) -> None:
    """Simulate a Philly-like GPU cluster: jobs, failures, logs and per-minute GPU samples."""
    from gpulens.ingest.simulate.core import simulate as run
    from gpulens.ingest.simulate.core import validate_args

    validate_args(gpus, days, seed)  # before the data directory is created
    start_dt = _parse_start(start)
    store = app.store()
    with stage_progress(app.console) as report:
        summary = run(store, gpus=gpus, days=days, seed=seed, start=start_dt, progress=report,
                      force=force)

    def human() -> None:
        t = Table(title=f"Simulated cluster in {summary.data_dir}", show_header=False)
        t.add_row("GPUs / nodes", f"{summary.gpus} / {summary.nodes}")
        t.add_row("period", f"{summary.start:%Y-%m-%d %H:%M} .. {summary.end:%Y-%m-%d %H:%M} UTC")
        t.add_row("jobs", f"{summary.jobs} " + ", ".join(f"{k} {v}" for k, v in summary.statuses.items()))
        t.add_row("attempts (failed)", f"{summary.attempts} ({summary.failed_attempts})")
        t.add_row("GPU samples", f"{summary.gpu_samples:,}")
        t.add_row("network samples", f"{summary.net_samples:,}")
        t.add_row("XID events", str(summary.xid_events))
        t.add_row("metric points", f"{summary.job_metrics:,}")
        t.add_row("planted bad nodes", ", ".join(summary.bad_nodes) or "-")
        t.add_row("planted corrupted inputs", ", ".join(summary.corrupted_inputs) or "-")
        t.add_row("elapsed", f"{summary.elapsed_s:.1f} s")
        print_table(t)

    emit(summary, as_json, human)

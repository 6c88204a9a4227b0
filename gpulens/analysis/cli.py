"""`gpulens analyze NAME`: the analyses as readable tables or JSON."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

import click
import pandas as pd
from rich.console import Console
from rich.table import Table

from gpulens.analysis import accounting as acc
from gpulens.analysis.filters import Filters
from gpulens.cliapp import App, json_option, pass_app, print_table
from gpulens.cliapp import emit as _emit

__all__ = ["analyze", "render_table"]

F = TypeVar("F", bound=Callable[..., Any])
_DT = click.DateTime(["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M"])


def filter_options(func: F) -> F:
    for opt in reversed([
        click.option("--start", type=_DT, default=None, help="Count GPU-minutes from this time."),
        click.option("--end", type=_DT, default=None, help="Count GPU-minutes before this time."),
        click.option("--vc", "vcs", multiple=True, help="Only this virtual cluster (repeatable)."),
        click.option("--user", "users", multiple=True, help="Only this user (repeatable)."),
    ]):
        func = opt(func)
    return func


def engine_options(func: F) -> F:
    """--engine duckdb|spark, --master and --lake-uri (docs/spark.md)."""
    for opt in reversed([
        click.option("--engine", type=click.Choice(["duckdb", "spark"]), default="duckdb",
                     show_default=True, help="Run in DuckDB here, or as Spark jobs."),
        click.option("--master", default=None,
                     help="Spark master URL (default: spark-submit's, else local[*])."),
        click.option("--lake-uri", default=None,
                     help="The data directory as Spark executors see it (hdfs://, s3a://; "
                          "default: the local path)."),
    ]):
        func = opt(func)
    return func


def _spark(app: App, master: str | None, lake_uri: str | None) -> Any:
    from gpulens.analysis.spark import SparkAnalyses, spark_session

    return SparkAnalyses(app.store(), spark_session(master), lake_uri)


def _filters(start: datetime | None, end: datetime | None, vcs: tuple[str, ...],
             users: tuple[str, ...]) -> Filters:
    if start and end and end <= start:
        raise click.BadParameter("--end must be after --start", param_hint="--end")
    return Filters(start=start, end=end, vcs=tuple(vcs), users=tuple(users))


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT:
        return "-"
    if isinstance(v, float):
        return f"{v:,.2f}" if abs(v) >= 0.01 or v == 0 else f"{v:.4f}"
    if isinstance(v, pd.Timestamp | datetime):
        return v.strftime("%Y-%m-%d %H:%M")
    return str(v)


_TITLES = {
    "allocated_gpu_hours": "allocated GPU-hours",
    "busy_gpu_hours": "busy GPU-hours",
    "mean_util": "mean util %",
    "median_util": "median util %",
    "gpu_hours": "GPU-hours",
    "lost_busy_gpu_hours": "lost busy GPU-hours",
    "saveable_allocated_gpu_hours": "saveable allocated GPU-hours",
    "saveable_busy_gpu_hours": "saveable busy GPU-hours",
    "saved_allocated_gpu_hours": "saved allocated GPU-hours",
    "saved_busy_gpu_hours": "saved busy GPU-hours",
    "main_allocated_gpu_hours": "allocated GPU-hours",
    "failure_category": "failure category",
    "failure_origin": "origin",
}


def render_table(df: pd.DataFrame, title: str, console: Console | None = None,
                 limit: int | None = None) -> None:
    console = console or Console()
    table = Table(title=title, header_style="bold")
    for col in df.columns:
        numeric = pd.api.types.is_numeric_dtype(df[col])
        table.add_column(_TITLES.get(str(col), str(col).replace("_", " ")),
                         justify="right" if numeric else "left")
    shown = df if limit is None else df.head(limit)
    for row in shown.itertuples(index=False):
        table.add_row(*[_fmt(v) for v in row])
    if df.empty:
        table.caption = "no data"
    elif limit is not None and len(df) > limit:
        table.caption = f"{limit} of {len(df):,} rows (--limit N for more, --json for all)"
    print_table(table, console)


_STATUS = "gpulens.analysis.status"


@click.group()
@click.pass_context
def analyze(ctx: click.Context) -> None:
    """Where the GPU-hours go: utilization, locality, early stop, goodput, failures."""
    app = ctx.find_object(App)
    if app is not None and not app.quiet and not ctx.resilient_parsing:
        # Analyses of a large store take seconds: a spinner on stderr until output starts.
        status = app.console.status("analysing the store ...")
        status.start()
        ctx.meta[_STATUS] = status
        ctx.call_on_close(status.stop)


def emit(data: Any, as_json: bool, human: Callable[[], None] | None = None) -> None:
    """Stop the spinner, then print (see gpulens.cliapp.emit)."""
    ctx = click.get_current_context(silent=True)
    status = ctx.meta.get(_STATUS) if ctx is not None else None
    if status is not None:
        status.stop()
    _emit(data, as_json, human)


@analyze.command()
@click.option("--by", type=click.Choice(["cluster", "user", "vc", "day"]), default="cluster",
              show_default=True)
@filter_options
@engine_options
@json_option
@pass_app
def utilization(app: App, by: str, start: datetime | None, end: datetime | None,
                vcs: tuple[str, ...], users: tuple[str, ...], engine: str, master: str | None,
                lake_uri: str | None, as_json: bool) -> None:
    """Allocated and busy GPU-hours and mean GPU utilization."""
    from gpulens.analysis.utilization import utilization as run

    f = _filters(start, end, vcs, users)
    if engine == "spark":
        df = _spark(app, master, lake_uri).utilization(f, by=by)
    else:
        df = run(app.store().connect(), f, by=by)
    emit(df, as_json, lambda: render_table(df, f"GPU utilization by {by}"))


@analyze.command()
@click.option("--limit", type=int, default=30, show_default=True, help="Rows shown in the table.")
@click.option("--status", "statuses", multiple=True, metavar="STATUS",
              help="Only jobs in this state (repeatable): failed, killed, passed, running, ...")
@filter_options
@json_option
@pass_app
def jobs(app: App, limit: int, statuses: tuple[str, ...], start: datetime | None,
         end: datetime | None, vcs: tuple[str, ...], users: tuple[str, ...], as_json: bool) -> None:
    """Per job: GPUs, servers, GPU-hours, utilization, and the diagnosis of a failed job
    (failure category and origin; `gpulens diagnose --job ID` explains one)."""
    from gpulens.analysis.utilization import job_utilization

    df = job_utilization(app.store().connect(), _filters(start, end, vcs, users))
    if statuses:
        df = df[df["status"].isin(statuses)].reset_index(drop=True)
    title = "Jobs by allocated GPU-hours" + (f" ({', '.join(statuses)})" if statuses else "")
    emit(df, as_json, lambda: render_table(df.drop(columns=["start_time", "end_time"]), title,
                                           limit=limit))


@analyze.command()
@click.option("--boot", "n_boot", type=int, default=1000, show_default=True,
              help="Bootstrap resamples for the confidence intervals.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--limit", type=int, default=15, show_default=True, help="Spread jobs shown.")
@filter_options
@engine_options
@json_option
@pass_app
def locality(app: App, n_boot: int, seed: int, limit: int, start: datetime | None,
             end: datetime | None, vcs: tuple[str, ...], users: tuple[str, ...], engine: str,
             master: str | None, lake_uri: str | None, as_json: bool) -> None:
    """Utilization by GPUs and servers spanned; busy GPU-hours lost to spreading."""
    from gpulens.analysis.locality import locality as run
    from gpulens.analysis.locality import locality_loss

    f = _filters(start, end, vcs, users)
    if engine == "spark":
        sa = _spark(app, master, lake_uri)
        table, loss = sa.locality(f, n_boot=n_boot, seed=seed), sa.locality_loss(f)
    else:
        con = app.store().connect()
        table, loss = run(con, f, n_boot=n_boot, seed=seed), locality_loss(con, f)
    total = (float(loss["lost_busy_gpu_hours"].fillna(0).clip(lower=0).sum())
             if not loss.empty else 0.0)

    def human() -> None:
        c = Console()
        render_table(table, "Mean GPU utilization by job size and servers spanned (95% bootstrap CI)",
                     c)
        render_table(loss, "Spread jobs by busy GPU-hours lost to relaxed locality", c,
                     limit=limit)
        c.print(f"Busy GPU-hours lost to relaxed locality: [bold]{total:,.1f}[/bold] "
                f"({len(loss):,} spread {'job' if len(loss) == 1 else 'jobs'})")

    emit({"locality": table, "spread_jobs": loss, "lost_busy_gpu_hours": total}, as_json, human)


@analyze.command("early-stop")
@click.option("--tolerance", type=float, default=0.001, show_default=True,
              help="Relative distance to the best value that counts as converged.")
@click.option("--metric", default="accuracy", show_default=True)
@click.option("--limit", type=int, default=15, show_default=True)
@filter_options
@json_option
@pass_app
def early_stop_cmd(app: App, tolerance: float, metric: str, limit: int, start: datetime | None,
                   end: datetime | None, vcs: tuple[str, ...], users: tuple[str, ...],
                   as_json: bool) -> None:
    """Hindsight early-stop savings and the Philly-style sentence."""
    from gpulens.analysis.early_stop import early_stop, early_stop_summary

    con = app.store().connect()
    f = _filters(start, end, vcs, users)
    summary = early_stop_summary(con, f, tolerance=tolerance, metric=metric)
    per_job = early_stop(con, f, tolerance=tolerance, metric=metric)

    def human() -> None:
        c = Console()
        c.print(f"[bold]{summary.sentence}[/bold]")
        if summary.cdf:
            cdf = pd.DataFrame({"epochs used <=": [f"{k}%" for k in summary.cdf],
                                "jobs converged %": list(summary.cdf.values())})
            render_table(cdf, "Share of jobs converged by fraction of epochs", c)
        render_table(per_job, "Jobs by saveable allocated GPU-hours", c, limit=limit)

    emit({"summary": summary, "jobs": per_job}, as_json, human)


@analyze.command("online-stop")
@click.option("--patience", type=int, default=5, show_default=True)
@click.option("--min-delta", type=float, default=0.001, show_default=True,
              help="Relative improvement that resets the patience counter.")
@click.option("--metric", default="accuracy", show_default=True)
@click.option("--limit", type=int, default=15, show_default=True)
@filter_options
@json_option
@pass_app
def online_stop_cmd(app: App, patience: int, min_delta: float, metric: str, limit: int,
                    start: datetime | None, end: datetime | None, vcs: tuple[str, ...],
                    users: tuple[str, ...], as_json: bool) -> None:
    """Savings of a patience stopping rule that does not know the future."""
    from gpulens.analysis.early_stop import online_stop

    if patience < 1:
        raise click.BadParameter("must be >= 1", param_hint="--patience")
    df = online_stop(app.store().connect(), _filters(start, end, vcs, users),
                     patience=patience, min_delta=min_delta, metric=metric)

    def human() -> None:
        c = Console()
        stopped = int(df["stop_epoch"].notna().sum()) if not df.empty else 0
        saved = float(df["saved_allocated_gpu_hours"].sum()) if not df.empty else 0.0
        saved_busy = float(df["saved_busy_gpu_hours"].sum()) if not df.empty else 0.0
        lost = float(df["accuracy_given_up"].mean()) if not df.empty else 0.0
        c.print(f"A patience-{patience} rule (min delta {min_delta:g}) stops {stopped:,} of "
                f"{len(df):,} jobs early, saving [bold]{saved:,.1f}[/bold] allocated GPU-hours "
                f"([bold]{saved_busy:,.1f}[/bold] busy GPU-hours) and giving up "
                f"{lost:.4f} {metric} per job on average.")
        render_table(df, "Jobs by allocated GPU-hours saved", c, limit=limit)

    emit(df, as_json, human)


@analyze.command()
@click.option("--by", type=click.Choice(["vc", "user"]), default=None)
@filter_options
@engine_options
@json_option
@pass_app
def goodput(app: App, by: str | None, start: datetime | None, end: datetime | None,
            vcs: tuple[str, ...], users: tuple[str, ...], engine: str, master: str | None,
            lake_uri: str | None, as_json: bool) -> None:
    """The goodput waterfall: allocated -> idle -> failed/killed -> post-convergence -> effective."""
    from gpulens.analysis.goodput import goodput as run

    f = _filters(start, end, vcs, users)
    if engine == "spark":
        df = _spark(app, master, lake_uri).goodput(f, by=by)
    else:
        df = run(app.store().connect(), f, by=by)  # type: ignore[arg-type]

    def human() -> None:
        c = Console()
        if by:
            wide = df.pivot(index=by, columns="stage", values="gpu_hours")
            wide = wide[[s for s in ("allocated", "idle", "failed_or_killed", "post_convergence",
                                     "effective") if s in wide.columns]].reset_index()
            render_table(wide, f"Goodput waterfall by {by} (GPU-hours; {_BASIS_NOTE})", c)
            return
        total = float(df.loc[df["stage"] == "allocated", "gpu_hours"].sum()) or 1.0
        show = df.assign(share_pct=100.0 * acc.share(df["gpu_hours"], total))
        render_table(show, f"Goodput waterfall (GPU-hours; {_BASIS_NOTE})", c)

    emit(df, as_json, human)


@analyze.command("failure-cost")
@filter_options
@json_option
@pass_app
def failure_cost_cmd(app: App, start: datetime | None, end: datetime | None,
                     vcs: tuple[str, ...], users: tuple[str, ...], as_json: bool) -> None:
    """Allocated and busy GPU-hours and runtime-to-failure by failure category and origin."""
    from gpulens.analysis.goodput import failure_cost

    df = failure_cost(app.store().connect(), _filters(start, end, vcs, users))

    def human() -> None:
        c = Console()
        render_table(df, "Cost of failed or killed runs by category and origin", c)
        c.print(f"Failed or killed runs held [bold]{df['allocated_gpu_hours'].sum():,.2f}[/bold] "
                f"allocated GPU-hours, [bold]{df['busy_gpu_hours'].sum():,.2f}[/bold] of them busy.")

    emit(df, as_json, human)


#: how the goodput waterfall's stages relate to the bases (docs/accounting.md)
_BASIS_NOTE = "the stages add up to allocated"


@analyze.command()
@click.option("--freq", type=click.Choice(["minute", "hour", "day"]), default="hour", show_default=True)
@click.option("--by", type=click.Choice(["node", "link_kind"]), default=None,
              help="One row per period and node (or link kind).")
@click.option("--start", type=_DT, default=None, help="Count minutes from this time.")
@click.option("--end", type=_DT, default=None, help="Count minutes before this time.")
@click.option("--limit", type=int, default=48, show_default=True, help="Rows shown in the table.")
@json_option
@pass_app
def network(app: App, freq: str, by: str | None, start: datetime | None, end: datetime | None,
            limit: int, as_json: bool) -> None:
    """Network traffic per period: samples, receive and transmit rates (from the rollups)."""
    from gpulens.analysis.network import network_traffic

    df = network_traffic(app.store().connect(), _filters(start, end, (), ()), freq=freq, by=by)
    title = f"Network traffic per {freq}{f' and {by}' if by else ''} (bytes/s per interface sample)"
    emit(df, as_json, lambda: render_table(df, title, limit=limit))

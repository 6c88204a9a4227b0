"""What every subcommand shares: the App context, --json output, progress bars."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from gpulens.config import Config

if TYPE_CHECKING:  # the store (duckdb, pyarrow, numpy: 0.4 CPU-s) is imported by the commands that open it
    from gpulens.store import Store

__all__ = ["App", "StageReport", "emit", "fmt_time", "json_option", "out_console", "pass_app",
           "print_table", "progress", "stage_progress", "to_jsonable"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass
class App:
    """Per-invocation state handed to every subcommand as ``ctx.obj``."""

    config: Config
    quiet: bool = False
    #: tables as wide as their widest row even on a terminal (``--wide``)
    wide: bool = False
    _store: Store | None = None

    def store(self) -> Store:
        """Open (create or migrate) the store in the configured data directory."""
        if self._store is None:
            from gpulens.store import Store

            self._store = Store.open(self.config.data_dir)
        return self._store

    @property
    def console(self) -> Console:
        return Console(stderr=True, quiet=self.quiet)


pass_app = click.make_pass_decorator(App)


def json_option(func: F) -> F:
    """Add ``--json`` to a reporting command (machine-readable output on stdout)."""
    return click.option(
        "--json", "as_json", is_flag=True,
        help="Print one JSON document on stdout (an array for listings, an object for one thing)."
    )(func)


def to_jsonable(value: Any) -> Any:
    """Convert DataFrames, dataclasses, paths and timestamps into JSON-ready values."""
    try:
        import pandas as pd

        if isinstance(value, pd.DataFrame):
            return json.loads(value.to_json(orient="records", date_format="iso"))
    except ImportError:  # pragma: no cover - pandas is a base dependency
        pass
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [to_jsonable(v) for v in value]
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and value != value:  # NaN
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return value.item()
    return value


def emit(data: Any, as_json: bool, human: Callable[[], None] | None = None) -> None:
    """Print ``data`` as JSON when asked, else call ``human`` to render it."""
    if as_json or human is None:
        json.dump(to_jsonable(data), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        human()


def fmt_time(value: Any) -> str:
    """A timestamp for human output, to the second (``-`` when missing)."""
    if value is None or value != value:  # None, NaN, NaT
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")
        except ValueError:
            return value
    return str(value)


def out_console(renderable: RenderableType | None = None, *, wide: bool = False) -> Console:
    """The console for a command's human output on stdout.

    On a terminal, tables fold long values onto more lines (see :func:`print_table`); when
    stdout is a pipe or a file, or with ``wide``, the console is as wide as ``renderable``
    needs, so no id, category, node or input is ever cut or folded (lines may then be longer
    than ``$COLUMNS``).
    """
    console = Console()
    if (console.is_terminal and not wide) or renderable is None:
        return console
    need = Measurement.get(console, console.options.update_width(100_000), renderable).maximum
    return Console(width=max(console.width, need)) if need > console.width else console


def print_table(table: Any, console: Console | None = None) -> None:
    """Print a rich table with every value whole: on a terminal long cells wrap (fold) instead
    of being cut with an ellipsis; a piped table, or any with ``gpulens --wide``, is as wide as
    its widest row."""
    for col in getattr(table, "columns", []):
        col.overflow = "fold"
    ctx = click.get_current_context(silent=True)
    app = ctx.find_object(App) if ctx is not None else None
    wide = app is not None and app.wide
    if console is None or not console.is_terminal or wide:
        console = out_console(table, wide=wide)
    console.print(table)


@contextmanager
def progress(console: Console | None = None, *, transient: bool = True) -> Iterator[Progress]:
    """Rich progress bars on stderr (hidden when stderr is not a terminal and --quiet)."""
    console = console or Console(stderr=True)
    bar = Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=transient,
        disable=not console.is_terminal,  # no redraws to draw into a pipe or a log file
    )
    with bar:
        yield bar


#: The progress callback every long operation takes: ``report(stage, done, total)``.
StageReport = Callable[[str, int, int], None]


@contextmanager
def stage_progress(console: Console | None = None) -> Iterator[StageReport]:
    """A progress callback drawing one bar per stage (``total`` 0 means unknown)."""
    with progress(console) as bar:
        tasks: dict[str, TaskID] = {}

        def report(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total or None)
            bar.update(tasks[stage], completed=done, total=total or None)

        yield report

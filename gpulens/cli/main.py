"""Entry point of the ``gpulens`` command.

Subcommands live in the feature packages. Each is imported only when invoked, by
a small loader function with a direct import (so mypy and the import contract see
every dependency while ``gpulens --help`` stays fast and the core package does not
import the feature packages at import time).
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from gpulens import __version__
from gpulens.cliapp import App
from gpulens.config import load_config
from gpulens.errors import GpulensError

__all__ = ["COMMANDS", "EXIT_INTERNAL", "cli", "main"]

#: Exit code of an unexpected error inside gpulens (a bug), distinct from 1 (a finding) and
#: 2 (a usage or input error); 70 is EX_SOFTWARE of sysexits.h.
EXIT_INTERNAL = 70
_debug = {"on": False}


def _analyze() -> click.Command:
    from gpulens.analysis.cli import analyze

    return analyze


def _blacklist() -> click.Command:
    from gpulens.diagnosis.blacklist_cli import blacklist

    return blacklist


def _collect() -> click.Command:
    from gpulens.cli.collect import collect

    return collect


def _dashboard() -> click.Command:
    from gpulens.dashboard.cli import dashboard

    return dashboard


def _demo() -> click.Command:
    from gpulens.cli.demo import demo

    return demo


def _diagnose() -> click.Command:
    from gpulens.diagnosis.cli import diagnose

    return diagnose


def _exporter() -> click.Command:
    from gpulens.exporters.cluster import exporter

    return exporter


def _import() -> click.Command:
    from gpulens.ingest.importers.cli import import_

    return import_


def _nodes() -> click.Command:
    from gpulens.diagnosis.nodes_cli import nodes

    return nodes


def _simulate() -> click.Command:
    from gpulens.ingest.simulate.cli import simulate

    return simulate


def _slurm() -> click.Command:
    from gpulens.cli.slurm import slurm

    return slurm


def _submit() -> click.Command:
    from gpulens.cli.slurm import submit

    return submit


def _store() -> click.Command:
    from gpulens.cli.store_cmd import store

    return store


def _validate() -> click.Command:
    from gpulens.validator.cli import validate

    return validate


#: command name -> (loader, one-line help shown by --help)
COMMANDS: dict[str, tuple[Callable[[], click.Command], str]] = {
    "analyze": (_analyze, "Run an analysis (utilization, locality, early-stop, ...)."),
    "blacklist": (_blacklist, "List, add, remove or check blacklisted inputs."),
    "collect": (_collect, "Run the node agent: sample GPUs and network, serve /metrics."),
    "dashboard": (_dashboard, "Start the Streamlit operator dashboard."),
    "demo": (_demo, "Simulate a cluster, analyse it, start dashboard and endpoints."),
    "diagnose": (_diagnose, "Classify why a job failed, from its logs and context."),
    "exporter": (_exporter, "Serve cluster-level metrics from the store."),
    "import": (_import, "Import Philly, Slurm, Kubernetes, Prometheus history or metric curves."),
    "nodes": (_nodes, "Flag bad nodes and score node anomalies."),
    "simulate": (_simulate, "Build a simulated cluster into the store."),
    "slurm": (_slurm, "Slurm epilog (record and diagnose every job) and sbatch checks."),
    "store": (_store, "Inspect and maintain the data directory."),
    "submit": (_submit, "Check a batch job, then sbatch it: gpulens submit -- sbatch job.sh."),
    "validate": (_validate, "Dry-run a job's first steps before submitting."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        return None if target is None else target[0]()

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


_EPILOG = """\b
Exit codes: 0 ok, 1 a finding (failed validation, blacklisted input), 2 usage or input error,
3 inconclusive validation, 70 an internal error (a bug: rerun with --debug and report it).
\b
--json prints exactly one JSON document on stdout: an array for commands that list things
(diagnose FILE..., analyze jobs, blacklist list, nodes list, ...), one object for a command
about one thing or one report (diagnose --job, store info, validate, analyze locality).
\b
Config files, first found wins: --config, $GPULENS_CONFIG, ./gpulens.toml,
$XDG_CONFIG_HOME/gpulens/gpulens.toml (~/.config/...), /etc/gpulens/gpulens.toml;
GPULENS_<SECTION>_<KEY> environment variables override their keys."""


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=_EPILOG)
@click.version_option(__version__, prog_name="gpulens")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Data directory (default: $GPULENS_DATA_DIR or ~/.local/share/gpulens).",
)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="gpulens.toml to read (default: ./gpulens.toml, ~/.config/gpulens/, then "
                   "/etc/gpulens/).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars or notices on stderr.")
@click.option("--wide", is_flag=True, help="Tables as wide as their widest row, also on a "
              "terminal (default there: long values wrap; piped output is always wide).")
@click.option("--debug", is_flag=True, help="Show the traceback of an internal error "
              "(also GPULENS_DEBUG=1).")
@click.pass_context
def cli(ctx: click.Context, data_dir: str | None, config_path: str | None, quiet: bool,
        wide: bool, debug: bool) -> None:
    """gpulens: observability and failure diagnosis for shared GPU clusters."""
    _debug["on"] = debug or _debug["on"]
    ctx.obj = App(config=load_config(config_path, data_dir=data_dir), quiet=quiet, wide=wide)


def _invoke(argv: list[str] | None, attempts: int = 10) -> Any:
    """Run the command; when it fails on a damaged Parquet segment, the segment is quarantined
    (one warning line naming it and its rows) and the command runs again without it."""
    for attempt in range(attempts):
        try:
            return cli.main(args=argv, prog_name="gpulens", standalone_mode=False)
        except (GpulensError, click.exceptions.ClickException, click.exceptions.Exit,
                click.exceptions.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:
            from gpulens.store.quarantine import quarantine_named_in_error, warn_stderr

            if attempt + 1 < attempts and quarantine_named_in_error(exc, warn_stderr):
                continue
            raise
    raise AssertionError("unreachable")


def _internal_error(exc: BaseException) -> NoReturn:
    """An exception gpulens did not expect: one line and exit 70, the traceback only on --debug."""
    if _debug["on"]:
        traceback.print_exception(exc)
    where = ""
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}"
    what = str(exc).splitlines()[0] if str(exc) else ""
    click.echo(
        f"gpulens: internal error: {type(exc).__name__}{where}: {what} "
        f"(a bug in gpulens; rerun with --debug for the traceback and report it with that traceback)",
        err=True,
    )
    sys.exit(EXIT_INTERNAL)


def main(argv: list[str] | None = None) -> NoReturn:
    """Run the CLI and exit: errors become one line on stderr and exit code 2; a command's
    integer return value becomes the exit code; an unexpected exception becomes one line and
    exit code 70 (its traceback with --debug or GPULENS_DEBUG=1)."""
    _debug["on"] = os.environ.get("GPULENS_DEBUG", "").lower() in {"1", "true", "yes", "on"}
    try:
        result = _invoke(argv)
    except GpulensError as exc:
        click.echo(f"gpulens: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # the last line of defence: never a traceback
        _internal_error(exc)
    # A command may return its exit code (e.g. 1 for a finding, 3 for inconclusive).
    sys.exit(result if isinstance(result, int) and not isinstance(result, bool) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()

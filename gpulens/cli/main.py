"""Entry point of the ``gpulens`` command.

Subcommands live in the feature packages and are imported only when invoked
(see ``COMMANDS``), so ``gpulens --help`` stays fast and the core package does
not import collectors, analysis, diagnosis or dashboard at import time.
"""

from __future__ import annotations

import importlib
import sys
from typing import NoReturn

import click

from gpulens import __version__
from gpulens.cli.common import App
from gpulens.config import load_config
from gpulens.errors import GpulensError

__all__ = ["COMMANDS", "cli", "main"]

#: command name -> ("module:attribute", one-line help shown by --help)
COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": ("analysis.cli:analyze", "Run an analysis (utilization, locality, early-stop, ...)."),
    "blacklist": ("diagnosis.blacklist_cli:blacklist", "List, add, remove or check blacklisted inputs."),
    "collect": ("collectors.cli:collect", "Run the node agent: sample GPUs and network, serve /metrics."),
    "dashboard": ("dashboard.cli:dashboard", "Start the Streamlit operator dashboard."),
    "demo": ("gpulens.cli.demo:demo", "Simulate a cluster, analyse it, start dashboard and endpoints."),
    "diagnose": ("diagnosis.cli:diagnose", "Classify why a job failed, from its logs and context."),
    "exporter": ("analysis.cluster_exporter:exporter", "Serve cluster-level metrics from the store."),
    "import": ("analysis.importers.cli:import_", "Import Philly, Slurm or metric-curve traces."),
    "nodes": ("diagnosis.nodes_cli:nodes", "Flag bad nodes and score node anomalies."),
    "simulate": ("collectors.simulate.cli:simulate", "Build a simulated cluster into the store."),
    "store": ("gpulens.cli.store_cmd:store", "Inspect and maintain the data directory."),
    "validate": ("diagnosis.validator.cli:validate", "Dry-run a job's first steps before submitting."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, attr = target[0].partition(":")
        try:
            command = getattr(importlib.import_module(module), attr)
        except (ModuleNotFoundError, AttributeError) as exc:
            if isinstance(exc, ModuleNotFoundError) and not (exc.name or "").startswith(
                module.split(".")[0]
            ):
                raise  # a third-party module is missing: let the extras guard speak
            raise click.UsageError(f"'{cmd_name}' is not available in this build ({exc}).") from None
        if not isinstance(command, click.Command):  # pragma: no cover - programming error
            raise TypeError(f"{target[0]} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpulens")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Data directory (default: $GPULENS_DATA_DIR or ~/.local/share/gpulens).",
)
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="gpulens.toml to read (default: ./gpulens.toml, then ~/.config/gpulens/).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars or notices on stderr.")
@click.pass_context
def cli(ctx: click.Context, data_dir: str | None, config_path: str | None, quiet: bool) -> None:
    """gpulens: observability and failure diagnosis for shared GPU clusters."""
    ctx.obj = App(config=load_config(config_path, data_dir=data_dir), quiet=quiet)


def main(argv: list[str] | None = None) -> NoReturn:
    """Run the CLI and exit: errors become one line on stderr and exit code 2; a command's
    integer return value becomes the exit code."""
    try:
        result = cli.main(args=argv, prog_name="gpulens", standalone_mode=False)
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
    # A command may return its exit code (e.g. 1 for a finding, 3 for inconclusive).
    sys.exit(result if isinstance(result, int) and not isinstance(result, bool) else 0)


if __name__ == "__main__":  # pragma: no cover
    main()

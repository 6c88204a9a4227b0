"""``gpulens validate``: dry-run a job's first steps before submitting it."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

from gpulens.cliapp import App, emit, json_option, pass_app
from gpulens.errors import InputError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpulens.config import ValidateConfig
    from gpulens.store import Store
    from gpulens.validator.core import ValidationResult
    from gpulens.validator.spec import JobSpec

__all__ = ["render", "validate"]

_WARNING = (
    "warning: the dry run executes the job's code with your permissions"
    " (in a private temp dir, with time, memory and file-size limits)."
)


def _gib(n: int | None) -> str:
    return "-" if not n else f"{n / 1024**3:.2f} GiB" if n >= 1024**3 else f"{n / 1024**2:.0f} MiB"


def render(result: Any) -> None:
    """The human report (stdout)."""
    colour = {"pass": "green", "fail": "red", "inconclusive": "yellow"}[result.verdict]
    head = click.style(result.verdict.upper(), fg=colour, bold=True)
    what = f" {result.category} (origin: {result.origin})" if result.category else ""
    click.echo(f"{head}{what}")
    if result.reason:
        click.echo(f"  why:      {result.reason}")
    click.echo(f"  command:  {result.command}")
    click.echo(f"  python:   {result.python or '- (not a Python command, or not found)'}")
    click.echo(f"  device:   {result.device}")
    step = f"  steps:    {result.steps_completed}"
    if result.first_step_seconds is not None:
        step += f" (first after {result.first_step_seconds:.1f} s"
        if result.seconds_per_step is not None:
            step += f", then {result.seconds_per_step:.3f} s/step"
        step += ")"
    if result.step_signal:
        step += f" [signal: {result.step_signal}]"
    click.echo(step)
    click.echo(
        f"  memory:   peak {_gib(result.peak_memory_bytes)}"
        + (f" (GPU {_gib(result.peak_gpu_memory_bytes)})" if result.peak_gpu_memory_bytes else "")
        + (f" (RSS {_gib(result.peak_rss_bytes)})" if result.peak_rss_bytes else "")
    )
    if result.projection:
        click.echo(f"  target:   {result.projection}")
    click.echo(f"  checks:   {', '.join(result.checks) or '-'}; {result.seconds:.1f} s in all")
    if result.evidence:
        click.echo("  evidence:")
        for line in result.evidence:
            click.echo(f"    {line}")
    if result.fix and result.verdict != "pass":
        click.echo(f"  fix:      {result.fix}")
    if result.category == "import_error" and result.python:
        click.echo(f"  note:     the job ran with {result.python.split(' (')[0]}; if the "
                   "job has its own environment, activate it before `gpulens validate` or name its "
                   "interpreter after `--`")
    for w in result.warnings:
        click.echo(click.style(f"  note:     {w}", fg="yellow"))


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@click.command(
    "validate",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option("--job-spec", "job_spec", type=click.Path(dir_okay=False), default=None,
              help="YAML or JSON job spec (command, workdir, env, inputs, output_dir, gpus, gpu_type).")
@click.option("--workdir", type=click.Path(file_okay=False), default=None,
              help="Working directory of the job (default: current directory).")
@click.option("--input", "inputs", multiple=True, help="A declared input file or directory (repeatable).")
@click.option("--output-dir", default=None, help="The job's output/checkpoint directory.")
@click.option("--env", "env_pairs", multiple=True, help="NAME=VALUE added to the job's environment.")
@click.option("--gpus", type=int, default=None, help="GPUs the job will request on the cluster.")
@click.option("--gpu-type", default=None, help="GPU type the job will request (e.g. A100).")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Training steps to dry-run.")
@click.option("--timeout", type=click.FloatRange(min=1), default=None, help="Wall-clock budget (s).")
@click.option("--hang-seconds", type=click.FloatRange(min=1), default=None,
              help="No progress for this long = a hang.")
@click.option("--static-only", is_flag=True, help="Only the static checks; do not run the job.")
@click.option("--no-record", is_flag=True, help="Do not record the validation in the store.")
@click.option("--show-output/--hide-output", default=True, help="Echo the job's output on stderr.")
@json_option
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@pass_app
def validate(
    app: App,
    job_spec: str | None,
    workdir: str | None,
    inputs: tuple[str, ...],
    output_dir: str | None,
    env_pairs: tuple[str, ...],
    gpus: int | None,
    gpu_type: str | None,
    steps: int | None,
    timeout: float | None,
    hang_seconds: float | None,
    static_only: bool,
    no_record: bool,
    show_output: bool,
    as_json: bool,
    command: tuple[str, ...],
) -> None:
    """Dry-run a job's first training steps on a cheap GPU (or CPU) before submitting it.

    \b
      gpulens validate -- python train.py --lr 0.1
      gpulens validate --input data/train.csv --output-dir ckpt --gpu-type A100 -- python train.py
      gpulens validate --job-spec job.yaml --json

    Exit status: 0 pass, 1 fail, 3 inconclusive, 2 usage error.
    """
    import dataclasses

    from gpulens.validator.spec import parse_env_pairs

    spec = _job_spec(job_spec, command)
    overrides = {"workdir": Path(workdir).resolve() if workdir is not None else None,
                 "inputs": list(spec.inputs) + list(inputs) if inputs else None,
                 "output_dir": output_dir,
                 "env": {**spec.env, **parse_env_pairs(env_pairs)} if env_pairs else None,
                 "gpus": gpus, "gpu_type": gpu_type}
    _set_given(spec, overrides)
    config = dataclasses.replace(app.config.validate)
    _set_given(config, {"steps": steps, "timeout": timeout, "hang_seconds": hang_seconds})
    store = _store_or_none(app)
    if not static_only:
        app.console.print(f"[yellow]{_WARNING}[/yellow]")
    echo = _stderr_echo if show_output and not static_only and not app.quiet else None
    result = _run_until_sigterm(spec, config, store, app, static_only=static_only, echo=echo,
                                record=not no_record)
    emit(result.to_json(), as_json, lambda: render(result))
    # SystemExit, not ctx.exit: the status must survive `python -m gpulens` as well as the script
    sys.exit(result.exit_status)


def _job_spec(job_spec: str | None, command: tuple[str, ...]) -> JobSpec:
    """The job spec from ``--job-spec`` (its command replaced by ``command`` when given), or ``command``'s."""
    from gpulens.validator.spec import JobSpec, load_job_spec

    if job_spec is None and not command:
        raise InputError(
            "Nothing to validate.", "Give a command after `--` (gpulens validate -- python train.py) or --job-spec FILE."
        )
    spec = load_job_spec(job_spec) if job_spec else JobSpec(command=list(command))
    if command:
        spec.command = list(command)
    return spec


def _set_given(target: Any, values: dict[str, Any]) -> None:
    """Set each attribute of ``target`` whose value in ``values`` was given (is not None)."""
    for name, value in values.items():
        if value is not None:
            setattr(target, name, value)


def _store_or_none(app: App) -> Store | None:
    """The store, or None (said on stderr) when there is none: no blacklist check, no record."""
    try:
        return app.store()
    except StoreError as exc:
        app.console.print(f"[yellow]note: no store ({exc.message}); the blacklist is not checked and "
                          "the validation is not recorded.[/yellow]")
        return None


def _stderr_echo(data: bytes) -> None:
    """Echo the job's output on stderr as it comes."""
    sys.stderr.buffer.write(data)
    sys.stderr.buffer.flush()


def _run_until_sigterm(spec: JobSpec, config: ValidateConfig, store: Store | None, app: App, *,
                       static_only: bool, echo: Callable[[bytes], None] | None, record: bool) -> ValidationResult:
    """Run the validation, SIGTERM raising KeyboardInterrupt meanwhile (so the dry run is cleaned up)."""
    from gpulens.validator.core import validate as run_validation

    console = app.console

    def notice(msg: str) -> None:
        console.print(f"[dim]validate: {msg}[/dim]")

    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return run_validation(spec, config, store, static_only=static_only, echo=echo, notice=notice, record=record)
    finally:
        signal.signal(signal.SIGTERM, previous)

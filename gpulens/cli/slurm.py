"""`gpulens slurm epilog|check|cli-filter` and `gpulens submit -- sbatch ...` (docs/slurm.md).

The epilog joins the two layers it needs: it records the attempt through the ingest layer
(:mod:`gpulens.ingest.importers.slurm_epilog`) and diagnoses it through the diagnosis layer
(:func:`gpulens.diagnosis.jobs.diagnose_job`). The sbatch checks call the validator's static
checks (:func:`gpulens.validator.validate` with ``static_only``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import syslog
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from gpulens.cliapp import App, pass_app
from gpulens.config import Config
from gpulens.errors import InputError

if TYPE_CHECKING:
    from gpulens.store import Store

__all__ = ["sbatch_script", "slurm", "submit"]

_PATH = "/usr/bin:/bin:/usr/local/bin:/usr/sbin:/sbin"
#: Short sbatch options that take no value; every other short option takes one.
_SHORT_FLAGS = frozenset("hHIkOQsvVW")
#: Long sbatch options that take no value (or only an attached ``=value``).
_LONG_FLAGS = frozenset({
    "help", "hold", "immediate", "no-kill", "overcommit", "quiet", "oversubscribe", "verbose",
    "version", "wait", "contiguous", "exclusive", "get-user-env", "ignore-pbs", "no-requeue",
    "parsable", "requeue", "spread-job", "test-only", "use-min-nodes", "usage", "nice",
    "kill-on-invalid-dep", "export-file", "propagate", "reboot", "mail-type",
})


@click.group("slurm")
def slurm() -> None:
    """Slurm: the Epilog that records and diagnoses every finished job, the sbatch checks."""


# ----------------------------------------------------------------- epilog
class _Log:
    """One line per event: stderr, syslog (never blocks on a shared file system), and the data
    directory's ``logs/slurm-epilog/<node>.log`` once the child process writes there."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.file: Path | None = None
        syslog.openlog("gpulens-epilog", syslog.LOG_PID, syslog.LOG_USER)

    def __call__(self, text: str, *, error: bool = False) -> None:
        line = f"gpulens slurm epilog: job {self.job}: {text}"
        with contextlib.suppress(Exception):
            syslog.syslog(syslog.LOG_ERR if error else syslog.LOG_INFO, line)
        with contextlib.suppress(Exception):
            print(line, file=sys.stderr, flush=True)
        if self.file is not None:
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            with contextlib.suppress(Exception), open(self.file, "a", encoding="utf-8") as fh:
                fh.write(f"{stamp} {line}\n")


def _scontrol(job: str, env: Mapping[str, str], timeout: float) -> str | None:
    """``scontrol show job -o JOB`` within ``timeout`` seconds; None when it is not there or slow."""
    exe = shutil.which("scontrol", path=env.get("PATH") or _PATH)
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "show", "job", "-o", job], capture_output=True, text=True,
                              timeout=timeout, env={**env, "PATH": env.get("PATH") or _PATH}, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 and proc.stdout.strip() else None


@slurm.command("epilog")
@click.option("--timeout", type=click.FloatRange(min=1), default=None,
              help="The epilog's time budget in seconds (default slurm.epilog_timeout, 20).")
@click.option("--no-scontrol", is_flag=True,
              help="Do not ask scontrol (environment only: no array/het ids, start time or time-limit reason).")
@click.option("--no-diagnose", is_flag=True,
              help="Only record the attempt; `gpulens diagnose --all` diagnoses it later.")
@pass_app
def epilog(app: App, timeout: float | None, no_scontrol: bool, no_diagnose: bool) -> None:
    """Record the finished job of this epilog environment and diagnose it if it failed.

    Put it in slurm.conf's Epilog (through the wrapper in docs/slurm.md). It always exits 0,
    within its time budget: whatever it could not finish stays queued for the next epilog or
    `gpulens diagnose --all`.
    """
    t0 = time.monotonic()
    cfg = app.config.slurm
    budget = timeout if timeout is not None else cfg.epilog_timeout
    env = dict(os.environ)
    log = _Log(env.get("SLURM_JOB_ID") or "?")
    try:
        _run_epilog(app.config, env, t0 + budget, not no_scontrol and cfg.scontrol, log,
                    diagnose=not no_diagnose)
    except BaseException as exc:  # an epilog that fails drains the node
        log(f"error: {type(exc).__name__}: {exc}"[:500], error=True)
    sys.exit(0)


def _run_epilog(config: Config, env: dict[str, str], deadline: float, use_scontrol: bool, log: _Log, *,
                diagnose: bool = True) -> None:
    from gpulens.ingest.importers.slurm_epilog import record_from_env

    sc = None
    if use_scontrol and env.get("SLURM_JOB_ID"):
        sc = _scontrol(env["SLURM_JOB_ID"], env,
                       max(0.5, min(config.slurm.scontrol_timeout, (deadline - time.monotonic()) / 3)))
    rec = record_from_env(env, sc)
    log.job = rec.job_id if rec.attempt == 0 else f"{rec.job_id} attempt {rec.attempt}"
    pid = os.fork()
    if pid == 0:  # the child does the file system and store work; the parent keeps the clock
        code = 0
        try:
            os.setpgid(0, 0)
            _epilog_child(config, rec, deadline, scontrol_seen=sc is not None, log=log, diagnose=diagnose)
        except BaseException as exc:  # the parent must exit 0
            log(f"error: {type(exc).__name__}: {exc}"[:400] + "; the record stays queued for the next "
                "epilog or `gpulens diagnose --all`", error=True)
        finally:
            os._exit(code)
    while True:
        done, _status = os.waitpid(pid, os.WNOHANG)
        if done:
            return
        if time.monotonic() > deadline:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)
            log(f"time budget spent; what was not done is left to `gpulens diagnose --all`. "
                f"record: {json.dumps(rec.to_json())}", error=True)
            return
        time.sleep(0.02)


def _open_node_log(root: Path, rec: Any, log: _Log) -> None:
    """Also log to ``<data dir>/logs/slurm-epilog/<node>.log`` (if it can be made)."""
    logs = root / "logs" / "slurm-epilog"
    with contextlib.suppress(OSError):
        logs.mkdir(parents=True, exist_ok=True)
        log.file = logs / f"{(rec.node or 'unknown').replace('/', '_')}.log"


def _mark_cut_off(rec: Any) -> None:
    """A passed record whose log ends with slurmstepd's CANCELLED line: failed (time limit) or killed."""
    from gpulens.ingest.importers.slurm_epilog import ended_by_slurm

    if rec.status == "passed" and rec.log_path:
        why = ended_by_slurm(rec.log_path)  # exit 0:0 in the environment: was it cut off?
        if why is not None:
            rec.status = "failed" if why != "cancelled" else "killed"
            rec.reason = why


def _queue(root: Path, rec: Any, log: _Log) -> bool:
    """Queue the record in the inbox; False (logged, with the record) when it cannot be."""
    from gpulens.ingest.importers.slurm_epilog import queue_record

    try:
        queue_record(root, rec)
    except OSError as exc:
        log(f"error: cannot queue the record in {root} ({exc.strerror or exc}); record: "
            f"{json.dumps(rec.to_json())}", error=True)
        return False
    return True


def _diagnose(store: Store, rec: Any, log: _Log) -> None:
    """Diagnose the recorded failure now, if its log can be read."""
    path = rec.log_path
    if not path or not os.access(path, os.R_OK) or not os.path.isfile(path):
        log(f"log {path} is not readable yet: `gpulens diagnose --all` diagnoses the attempt later")
        return
    from gpulens.diagnosis.jobs import diagnose_job

    jd = diagnose_job(store, rec.job_id)
    final = jd.final
    if final is not None:
        log(f"diagnosed: {final.category}, origin {final.origin.origin}")


def _epilog_child(config: Config, rec: Any, deadline: float, *, scontrol_seen: bool, log: _Log,
                  diagnose: bool) -> None:
    """Queue the record; on the batch host also drain the inbox into the store and diagnose a failure."""
    from gpulens.ingest.importers.slurm_epilog import drain_queue
    from gpulens.store import Store

    root = Path(config.data_dir)
    os.environ["GPULENS_DATA_DIR"] = str(root)  # the classifier keeps its model there
    _open_node_log(root, rec, log)
    if not scontrol_seen:
        _mark_cut_off(rec)
    if not _queue(root, rec, log):
        return
    if not rec.primary:
        log(f"queued ({rec.status}) from {rec.node}; the batch host's epilog records the job")
        return
    store = Store(root, lock_timeout=max(1.0, deadline - time.monotonic() - 1.0))
    store.ensure()
    got = drain_queue(store, warn=lambda line: log(line, error=True))
    log(f"recorded attempt {rec.attempt} ({rec.status}, exit {rec.exit_code}:{rec.signal}); "
        f"{got.records} queued record(s) written")
    if rec.status == "failed" and diagnose:
        _diagnose(store, rec, log)


# ----------------------------------------------------------------- sbatch checks
def _note(text: str) -> None:
    click.echo(f"gpulens: note: {text}", err=True)


def _check(config: Config, script: Path | None, args: Sequence[str], workdir: Path, wrap: str | None,
           dry_run: bool) -> str | None:
    """The rejection line for a script that would fail, else None. The validator is imported
    here, not at the top: every epilog imports this module (the validator costs 0.3 CPU-s)."""
    from gpulens.validator.sbatch import REJECTED, bounded, check_batch_script

    found = bounded(config.slurm.filter_timeout, lambda: check_batch_script(
        config.data_dir, config.validate, script, args, workdir=workdir, wrap=wrap, dry_run=dry_run), _note)
    return None if found is None else REJECTED + found


@slurm.command("check", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The job's working directory (sbatch -D; default: the current directory).")
@click.option("--wrap", default=None, help="Check an `sbatch --wrap` command instead of a script.")
@click.option("--dry-run", is_flag=True, help="Also dry-run the first steps (gpulens validate).")
@click.argument("script_and_args", nargs=-1, type=click.UNPROCESSED)
@pass_app
def check(app: App, workdir: Path | None, wrap: str | None, dry_run: bool,
          script_and_args: tuple[str, ...]) -> None:
    """Check a batch script before sbatch queues it: exit 1 with one line when it would fail.

    What the cli_filter runs (`gpulens slurm cli-filter`); an internal error or a check over
    slurm.filter_timeout lets the job through (exit 0, a note on stderr).
    """
    if os.environ.get("GPULENS_SKIP_VALIDATE") == "1":
        sys.exit(0)
    if wrap is None and not script_and_args:
        raise InputError("No batch script to check.", "Example: gpulens slurm check job.sbatch")
    script = Path(script_and_args[0]) if wrap is None else None
    found = _check(app.config, script, script_and_args[1:], (workdir or Path.cwd()).resolve(), wrap, dry_run)
    if found is not None:
        click.echo(found)
        sys.exit(1)
    sys.exit(0)


@slurm.command("cli-filter")
@click.option("--python", "python", default=None,
              help="Command that runs the Python with gpulens on the login nodes (default: this one).")
@pass_app
def cli_filter(app: App, python: str | None) -> None:
    """Print the cli_filter.lua that checks every sbatch (install it next to slurm.conf).

    The script runs `PYTHON -m gpulens.validator.sbatch --data-dir DIR` (the data directory of
    this command's configuration): the check alone, without the CLI's start-up cost.
    """
    template = resources.files("gpulens.cli").joinpath("cli_filter.lua").read_text(encoding="utf-8")
    check = (f"{python or shlex.quote(sys.executable)} -m gpulens.validator.sbatch "
             f"--data-dir {shlex.quote(str(app.config.data_dir))} "
             f"--timeout {app.config.slurm.filter_timeout:g}")
    click.echo(template.replace("@CHECK@", check), nl=False)


# ----------------------------------------------------------------- gpulens submit
def sbatch_script(args: Sequence[str]) -> tuple[Path | None, list[str], Path | None, str | None]:
    """(script, its args, -D/--chdir, --wrap) of an sbatch command line (its options left out)."""
    chdir: str | None = None
    wrap: str | None = None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if a.startswith("--"):
            name, eq, value = a[2:].partition("=")
            if not eq and name not in _LONG_FLAGS:
                value = args[i + 1] if i + 1 < len(args) else ""
                i += 1
            if name == "chdir":
                chdir = value
            elif name == "wrap":
                wrap = value
            i += 1
        elif a.startswith("-") and len(a) > 1:
            letter = a[1]
            if letter in _SHORT_FLAGS:
                i += 1
                continue
            value = a[2:] if len(a) > 2 else (args[i + 1] if i + 1 < len(args) else "")
            if letter == "D":
                chdir = value
            i += 1 if len(a) > 2 else 2
        else:
            break
    rest = list(args[i:])
    script = Path(rest[0]) if rest and wrap is None else None
    return script, rest[1:], Path(chdir) if chdir else None, wrap


@click.command("submit", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--dry-run", is_flag=True, help="Also dry-run the job's first steps (gpulens validate).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@pass_app
def submit(app: App, dry_run: bool, command: tuple[str, ...]) -> NoReturn:
    """Check a batch job, then run `sbatch` on it: `gpulens submit -- sbatch [options] job.sh`.

    A job whose Python entry point would fail at once (syntax, imports, inputs, blacklist,
    output directory) is not submitted: one line says why and how to fix it (exit 1).
    Anything else goes to sbatch unchanged; an error of the check never blocks it.
    """
    argv = list(command)
    if os.path.basename(argv[0]) != "sbatch":
        raise InputError(f"`gpulens submit` wraps sbatch, not {argv[0]!r}.",
                         "Example: gpulens submit -- sbatch -N1 job.sh")
    if os.environ.get("GPULENS_SKIP_VALIDATE") != "1":
        script, args, chdir, wrap = sbatch_script(argv[1:])
        workdir = (chdir or Path.cwd()).resolve()
        if script is not None or wrap is not None:
            found = _check(app.config, script, args, workdir, wrap, dry_run)
            if found is not None:
                click.echo(found, err=True)
                click.echo("gpulens: the job was not submitted (GPULENS_SKIP_VALIDATE=1 submits it "
                           "unchecked)", err=True)
                sys.exit(1)
    sys.stdout.flush()
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        raise InputError(f"Cannot run {shlex.join(argv[:1])} ({exc.strerror}).",
                         "Install the Slurm client or put sbatch on PATH.") from None

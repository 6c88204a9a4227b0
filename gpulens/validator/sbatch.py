"""Check a Slurm batch script before sbatch queues it (docs/slurm.md).

The static checks of :func:`gpulens.validator.validate` on the script's Python entry point
(the first ``python train.py`` / ``torchrun`` / ``python -m`` line): syntax of its import
closure, imports, the ``#GPULENS input PATH`` and ``#GPULENS output-dir DIR`` directives, the
input blacklist. ``#GPULENS validate`` in the script (or ``dry_run``) adds the dry run;
``#GPULENS skip`` skips the check.

``python -m gpulens.validator.sbatch`` is what the cli_filter/lua script runs at every
sbatch: it imports only the validator (not the CLI, not DuckDB unless the script declares
inputs to look up in the blacklist), to keep the added time of a healthy submission low.
Exit 1 with ``gpulens: job rejected: <category>: <finding>. Fix: <hint>`` on stdout when the
job would fail; exit 0 otherwise, also when the check itself cannot run or overruns its budget
(a note on stderr): an error of the check never blocks a submission.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpulens.config import ValidateConfig

__all__ = ["REJECTED", "Directives", "bounded", "check_batch_script", "directives", "main"]

REJECTED = "gpulens: job rejected: "
_MAX_SCRIPT_BYTES = 1024 * 1024


@dataclasses.dataclass
class Directives:
    """``#GPULENS`` lines of a batch script."""

    inputs: list[str] = dataclasses.field(default_factory=list)
    output_dir: str | None = None
    dry_run: bool = False
    skip: bool = False


def directives(text: str) -> Directives:
    d = Directives()
    for line in text.splitlines():
        words = line.strip().split(None, 2)
        if len(words) < 2 or words[0].upper() != "#GPULENS":
            continue
        what = words[1].lower()
        arg = words[2].strip() if len(words) > 2 else ""
        if what == "input" and arg:
            d.inputs.append(arg)
        elif what in ("output-dir", "output_dir") and arg:
            d.output_dir = arg
        elif what == "validate":
            d.dry_run = arg.lower() not in ("static", "static-only")
        elif what in ("skip", "no-validate"):
            d.skip = True
    return d


def check_batch_script(data_dir: str | os.PathLike[str], config: ValidateConfig, script: Path | None,
                       args: Sequence[str], *, workdir: Path, wrap: str | None = None,
                       dry_run: bool = False) -> str | None:
    """The validator's one-line finding for a batch script, or None to let it through."""
    from gpulens.validator.core import validate
    from gpulens.validator.spec import JobSpec

    if wrap is not None:
        text, command = wrap, ["bash", "-c", wrap]
    else:
        if script is None:
            return None
        with open(script, "rb") as fh:
            text = fh.read(_MAX_SCRIPT_BYTES).decode("utf-8", "replace")
        command = ["bash", str(script), *args]
    d = directives(text)
    if d.skip:
        return None
    full = dry_run or d.dry_run
    store = None
    if d.inputs or full:  # the blacklist lookup and the dry run's record need the store
        from gpulens.store import Store

        candidate = Store(data_dir)
        store = candidate if candidate.generation() > 0 else None
    spec = JobSpec(command=command, workdir=workdir, inputs=d.inputs, output_dir=d.output_dir)
    result = validate(spec, config, store, static_only=not full, record=full)
    if result.verdict != "fail":
        return None
    what = (result.reason or "").split("; ")[0] or "the static checks failed"
    fix = f" Fix: {result.fix}" if result.fix else ""
    return " ".join(f"{result.category}: {what}.{fix}".split())


def bounded(seconds: float, fn: Callable[[], str | None], note: Callable[[str], None]) -> str | None:
    """Run the check within ``seconds``; an error or an overrun lets the job through (None)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["out"] = fn()
        except BaseException as exc:  # never block a submission on our own error
            box["err"] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(seconds)
    if th.is_alive():
        note(f"the check took over {seconds:g} s; the job is submitted unchecked")
        return None
    if "err" in box:
        err = box["err"]
        note(f"the check could not run ({getattr(err, 'message', None) or err}); the job is submitted unchecked")
        return None
    out = box.get("out")
    return out if isinstance(out, str) else None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpulens.validator.sbatch [--data-dir D] [--workdir W] [--wrap CMD] [SCRIPT ARGS...]``."""
    p = argparse.ArgumentParser(prog="gpulens-sbatch-check", allow_abbrev=False)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--workdir", default=None)
    p.add_argument("--wrap", default=None)
    p.add_argument("--timeout", type=float, default=10.0)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("script", nargs="*")
    opts = p.parse_args(argv)
    if os.environ.get("GPULENS_SKIP_VALIDATE") == "1" or (opts.wrap is None and not opts.script):
        return 0

    def note(text: str) -> None:
        print(f"gpulens: note: {text}", file=sys.stderr)

    def run() -> str | None:
        from gpulens.config import load_config

        cfg = load_config(None, data_dir=opts.data_dir)
        script = Path(opts.script[0]) if opts.wrap is None else None
        return check_batch_script(cfg.data_dir, cfg.validate, script, opts.script[1:],
                                  workdir=Path(opts.workdir or os.getcwd()).resolve(), wrap=opts.wrap,
                                  dry_run=opts.dry_run)

    found = bounded(opts.timeout, run, note)
    if found is None:
        return 0
    print(REJECTED + found, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())

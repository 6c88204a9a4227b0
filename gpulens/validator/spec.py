"""What to validate: a job's command, working directory, environment, inputs and request."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from gpulens.errors import InputError

__all__ = ["JobSpec", "load_job_spec", "parse_env_pairs"]

_KEYS = ("command", "workdir", "env", "inputs", "output_dir", "gpus", "gpu_type", "name")


@dataclasses.dataclass
class JobSpec:
    """One job as it would be submitted to the cluster.

    ``inputs`` and ``output_dir`` are resolved against ``workdir`` when relative.
    ``workdir`` None means: the current directory for running the command, and
    the entry script's directory as the set of Python files to compile.
    """

    command: list[str]
    workdir: Path | None = None
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    inputs: list[str] = dataclasses.field(default_factory=list)
    output_dir: str | None = None
    gpus: int = 1
    gpu_type: str | None = None
    name: str | None = None

    @property
    def run_dir(self) -> Path:
        return (self.workdir or Path.cwd()).resolve()

    def resolve(self, path: str) -> Path:
        p = Path(os.path.expanduser(path))
        return p if p.is_absolute() else self.run_dir / p

    def command_line(self) -> str:
        return shlex.join(self.command)


def parse_env_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``["A=1", "B=x"]`` -> ``{"A": "1", "B": "x"}``."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise InputError(f"--env {pair!r} is not KEY=VALUE.", "Write it as --env NAME=value.")
        env[key] = value
    return env


def _field_error(path: Path, key: str, expected: str) -> InputError:
    return InputError(
        f"Job spec {path}: field {key!r} must be {expected}.",
        "Fix the field (see docs/validator.md for the format).",
    )


def _from_mapping(data: Mapping[str, Any], path: Path) -> JobSpec:
    """The job spec a parsed spec file describes; InputError naming the first bad field."""
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        raise InputError(
            f"Job spec {path} has unknown field(s) {', '.join(unknown)}.",
            f"Known fields: {', '.join(_KEYS)}.",
        )
    command = _command_field(data, path)
    workdir = _workdir_field(data, path)
    env = data.get("env") or {}
    if not isinstance(env, dict):
        raise _field_error(path, "env", "a mapping of names to values")
    inputs = _inputs_field(data, path)
    output_dir = data.get("output_dir")
    if output_dir is not None and not isinstance(output_dir, str):
        raise _field_error(path, "output_dir", "a path")
    gpus = data.get("gpus", 1)
    if isinstance(gpus, bool) or not isinstance(gpus, int):
        raise _field_error(path, "gpus", "an integer")
    gpu_type = data.get("gpu_type")
    if gpu_type is not None and not isinstance(gpu_type, str):
        raise _field_error(path, "gpu_type", "a string such as 'A100'")
    name = data.get("name")
    return JobSpec(
        command=command,
        workdir=workdir,
        env={str(k): str(v) for k, v in env.items()},
        inputs=inputs,
        output_dir=output_dir,
        gpus=gpus,
        gpu_type=gpu_type,
        name=str(name) if name is not None else None,
    )


def _command_field(data: Mapping[str, Any], path: Path) -> list[str]:
    """``command``: a shell-quoted string or a list of strings (numbers allowed), not empty."""
    raw_cmd = data.get("command")
    if isinstance(raw_cmd, str):
        command = shlex.split(raw_cmd)
    elif isinstance(raw_cmd, list) and all(isinstance(c, str | int | float) for c in raw_cmd):
        command = [str(c) for c in raw_cmd]
    else:
        raise _field_error(path, "command", "a string or a list of strings")
    if not command:
        raise _field_error(path, "command", "non-empty")
    return command


def _workdir_field(data: Mapping[str, Any], path: Path) -> Path | None:
    """``workdir`` with ``~`` expanded, relative to the spec file's directory; None when not given."""
    if data.get("workdir") is None:
        return None
    if not isinstance(data["workdir"], str):
        raise _field_error(path, "workdir", "a path")
    workdir = Path(os.path.expanduser(data["workdir"]))
    if not workdir.is_absolute():
        workdir = path.parent / workdir
    return workdir


def _inputs_field(data: Mapping[str, Any], path: Path) -> list[str]:
    """``inputs``: a path or a list of paths (none when not given)."""
    inputs = data.get("inputs") or []
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        raise _field_error(path, "inputs", "a list of paths")
    return list(inputs)


def load_job_spec(path: str | os.PathLike[str]) -> JobSpec:
    """Read a job spec from YAML or JSON (``command``, ``workdir``, ``env``, ``inputs``,
    ``output_dir``, ``gpus``, ``gpu_type``). A relative ``workdir`` is relative to the file."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"Job spec {file} does not exist.", "Pass an existing file to --job-spec.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Job spec {file} cannot be read ({exc}).", "Check the file.") from None
    try:
        data = json.loads(text) if file.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(
            f"Job spec {file} is not valid {'JSON' if file.suffix.lower() == '.json' else 'YAML'} ({first}).",
            "Fix the syntax (see docs/validator.md for an example).",
        ) from None
    if not isinstance(data, dict):
        raise InputError(f"Job spec {file} must be a mapping of fields.", "See docs/validator.md.")
    return _from_mapping(data, file.resolve())

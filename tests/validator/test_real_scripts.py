"""Real open-source training scripts, unmodified, through the whole validator on CPU.

Each folder of tests/validator/real/ holds the files of one script at a pinned
commit, its licence, and SOURCE.toml (repository, path, commit, licence, setup,
env, launcher, entry, args). The verdict each one deserves, and why, is in
EXPECTED.toml (and the table in docs/validator.md). A case may override the
launcher (``torchrun --standalone`` picks a free port instead of 29500).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gpulens.config import ValidateConfig
from gpulens.validator import JobSpec, ValidationResult, validate
from tests.conftest import require_module

pytestmark = [pytest.mark.torch, pytest.mark.slow]

REAL = Path(__file__).resolve().parent / "real"
EXPECTED: dict[str, dict[str, Any]] = tomllib.loads((REAL / "EXPECTED.toml").read_text(encoding="utf-8"))
BIN = Path(sys.executable).parent


def _argv(command: str) -> list[str]:
    """``python`` and the launchers of this environment (torchrun) by absolute path."""
    argv = shlex.split(command)
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    elif (BIN / argv[0]).exists():
        argv[0] = str(BIN / argv[0])
    return argv


def _run(name: str, tmp_path: Path, config: ValidateConfig) -> ValidationResult:
    source = tomllib.loads((REAL / name / "SOURCE.toml").read_text(encoding="utf-8"))
    expected = EXPECTED.get(name, {})
    job = tmp_path / name
    shutil.copytree(REAL / name, job, ignore=shutil.ignore_patterns("__pycache__"))
    # one thread per process: OpenMP's busy-waiting threads crawl on a loaded shared machine
    env = {"OMP_NUM_THREADS": "1", **{str(k): str(v) for k, v in (source.get("env") or {}).items()}}
    for step in source.get("setup") or []:
        subprocess.run(_argv(step), cwd=job, env={**os.environ, **env}, check=True, capture_output=True, timeout=120)
    command = _argv(expected.get("launcher", source["launcher"])) + [source["entry"], *source.get("args", [])]
    spec = JobSpec(command, workdir=job, env=env, gpu_type="T4")
    return validate(spec, config, None, record=False)


def test_the_suite_has_at_least_ten_scripts_each_with_its_source() -> None:
    names = sorted(p.name for p in REAL.iterdir() if p.is_dir())
    assert len(names) >= 10 and names == sorted(EXPECTED)
    for name in names:
        source = tomllib.loads((REAL / name / "SOURCE.toml").read_text(encoding="utf-8"))
        for key in ("repository", "path", "commit", "licence", "entry", "launcher"):
            assert source.get(key), (name, key)
        assert len(source["commit"]) == 40 and (REAL / name / "LICENSE").is_file()
        assert source["licence"] in ("MIT", "BSD-3-Clause", "Apache-2.0", "BSD-2-Clause")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_script_gets_the_verdict_it_deserves(name: str, tmp_path: Path, config: ValidateConfig) -> None:
    require_module("torch")
    expected = EXPECTED[name]
    result = _run(name, tmp_path, config)
    got = (result.verdict, result.category)
    assert got == (expected["verdict"], expected.get("category")), (name, result)
    if "step_signal" in expected:
        assert result.step_signal == expected["step_signal"], result
    if "steps" in expected:
        assert result.steps_completed == expected["steps"], result
    if "evidence" in expected:
        assert any(expected["evidence"] in line for line in result.evidence), result.evidence
    if "fix" in expected:
        assert result.fix and expected["fix"] in result.fix, result.fix
    if "warning" in expected:
        assert any(expected["warning"] in w for w in result.warnings), result.warnings
    assert not result.timed_out, result

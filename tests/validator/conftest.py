"""Fixtures for the validator tests: job directories built from tests/validator/jobs/."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpulens.config import ValidateConfig
from gpulens.validator import JobSpec

JOBS = Path(__file__).resolve().parent / "jobs"


def digits_csv() -> Path:
    """scikit-learn's bundled digits data (1797 x 64 pixels + label), without importing sklearn."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("scikit-learn is not installed (make venv)")
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "digits.csv.gz"
    assert path.is_file(), path
    return path


@pytest.fixture
def make_job(tmp_path: Path) -> Callable[..., JobSpec]:
    """``make_job("healthy")``: a job directory with train.py and digits.csv.gz, and its spec."""

    def make(script: str, *, data: bool = True, gpu_type: str | None = "T4", extra: list[str] | None = None) -> JobSpec:
        job = tmp_path / "job"
        job.mkdir(exist_ok=True)
        source = JOBS / script if "." in script else JOBS / f"{script}.py"
        shutil.copy(source, job / "train.py")
        if data:
            shutil.copy(digits_csv(), job / "digits.csv.gz")
        return JobSpec(
            command=[sys.executable, "train.py", "--data", "digits.csv.gz", "--out", "ckpt", *(extra or [])],
            workdir=job,
            inputs=["digits.csv.gz"],
            output_dir="ckpt",
            gpus=8,
            gpu_type=gpu_type,
        )

    return make


@pytest.fixture
def config() -> ValidateConfig:
    """CPU-only (backend none), generous timeout for torch start-up on a shared 2-core machine."""
    return ValidateConfig(
        steps=2,
        timeout=180.0,
        hang_seconds=6.0,
        memory_limit_bytes=int(2.5 * 1024**3),
        backend="none",
        kill_grace_seconds=2.0,
    )

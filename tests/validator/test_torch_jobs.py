"""Real PyTorch (CPU) training scripts through the whole validator: verdict and category each.

Each test starts a fresh Python that imports torch (several seconds here), so
they are marked slow and torch; the static failures never start torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from gpulens.config import ValidateConfig
from gpulens.store import Store
from gpulens.validator import JobSpec, validate
from tests.conftest import require_module

pytestmark = [pytest.mark.torch, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _torch() -> None:
    require_module("torch")


def test_healthy_job_passes_right_after_its_first_steps(make_job: Callable[..., JobSpec], config: ValidateConfig, store: Store) -> None:
    spec = make_job("healthy")
    result = validate(spec, config, store)
    assert result.verdict == "pass", result
    assert result.category is None and result.exit_status == 0
    assert result.steps_completed == 2
    assert result.exit_code == 86  # ended by the hook after 2 steps, not by running to the end
    assert result.first_step_seconds is not None and result.seconds_per_step is not None
    # it stopped after 2 of 20 epochs x 57 steps: no epoch finished, no checkpoint written
    assert not (spec.run_dir / "ckpt" / "model.pt").exists()
    assert all(v == v and abs(v) < 10 for v in result.losses)
    assert result.peak_rss_bytes and result.peak_rss_bytes > 50 * 1024**2
    assert result.device.startswith("cpu")
    assert result.projection and "T4" in result.projection
    assert result.recorded_id is not None
    con = store.connect()
    row = con.execute("SELECT verdict, steps_completed, gpu_type, requested_gpus FROM validations").fetchall()
    assert row == [("pass", 2, "T4", 8)]


def test_shape_mismatch_fails_as_semantic_error(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    result = validate(make_job("shape_mismatch"), config, None)
    assert (result.verdict, result.category, result.origin) == ("fail", "semantic_error", "user")
    assert any("mat1 and mat2 shapes cannot be multiplied" in line for line in result.evidence)
    assert result.steps_completed == 0 and result.stage == "dry_run"
    assert result.fix


def test_corrupt_data_file_fails_as_incorrect_input(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    spec = make_job("healthy")
    data = spec.run_dir / "digits.csv.gz"
    raw = data.read_bytes()
    data.write_bytes(raw[: len(raw) // 3])  # a truncated copy
    result = validate(spec, config, None)
    assert (result.verdict, result.category, result.origin) == ("fail", "incorrect_input", "data")
    assert any("digits.csv.gz" in line for line in result.evidence), result.evidence


def test_nan_loss_fails_as_model_diverged(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    result = validate(make_job("nan_loss"), config, None)
    assert (result.verdict, result.category, result.origin) == ("fail", "model_diverged", "user")
    assert result.exit_code == 87
    assert any(x in result.evidence[0] for x in ("inf", "nan")), result.evidence


def test_memory_hog_fails_as_cpu_oom_under_the_limit(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    result = validate(make_job("memory_hog"), config, None)
    assert (result.verdict, result.category) == ("fail", "cpu_oom"), result
    assert result.peak_rss_bytes is not None and result.peak_rss_bytes < config.memory_limit_bytes


def _in(folder: Path, p: psutil.Process) -> bool:
    try:
        return p.cwd() == str(folder)
    except psutil.Error:
        return False


def test_hang_before_first_step_is_reported_and_killed(make_job: Callable[..., JobSpec], config: ValidateConfig) -> None:
    job = make_job("hang")
    result = validate(job, config, None)
    assert result.verdict == "fail" and result.hung
    assert result.category == "unknown"
    assert result.reason is not None and "hang before the first training step" in result.reason
    assert result.steps_completed == 0
    assert not result.timed_out  # detected by inactivity, not by the deadline
    me = os.getpid()
    # the job's own processes (other tests on other workers run a train.py with the same command)
    strays = [p for p in psutil.process_iter(["cmdline"]) if p.pid != me and "train.py" in " ".join(p.info["cmdline"] or [])
              and _in(job.run_dir, p)]
    assert not strays

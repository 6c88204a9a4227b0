"""Pre-submission at sbatch: the cli_filter/lua script on the real cluster, and
`gpulens submit -- sbatch ...`; a broken entry point is refused with the validator's line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.cli.slurm import sbatch_script
from tests.slurm.cluster import REPO, SlurmCluster

BROKEN = "import torch\n\ndef main(:\n    pass\n"
HEALTHY = "print('training')\n"


def _job(c: SlurmCluster, name: str, program: str, extra: str = "") -> Path:
    d = c.jobs / name
    d.mkdir(exist_ok=True)
    (d / "train.py").write_text(program)
    script = d / "job.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH -J {name}\n#SBATCH -o {d}/%j.out\n{extra}python3 train.py --lr 0.1\n")
    return script


def _queued_names(c: SlurmCluster) -> set[str]:
    res = subprocess.run(["squeue", "-h", "-o", "%j", "--states=all"], capture_output=True, text=True, env=c.env)
    return set(res.stdout.split())


@pytest.mark.server
@pytest.mark.timeout(600)
def test_cli_filter_refuses_a_syntax_error_and_lets_a_healthy_job_through(slurm_cluster: SlurmCluster) -> None:
    c = slurm_cluster
    bad = _job(c, "filterbad", BROKEN)
    res = c.sbatch(bad, cwd=bad.parent)
    assert res.returncode != 0
    assert f"gpulens: job rejected: syntax_error: {bad.parent / 'train.py'}:3: invalid syntax." in res.stderr
    assert "Fix:" in res.stderr and "filterbad" not in _queued_names(c)
    good = _job(c, "filtergood", HEALTHY)
    res = c.sbatch(good, cwd=good.parent)
    assert res.returncode == 0 and res.stdout.strip().isdigit(), res.stderr
    # the user's escape hatch
    res = c.sbatch(bad, cwd=bad.parent, extra_env={"GPULENS_SKIP_VALIDATE": "1"})
    assert res.returncode == 0, res.stderr


@pytest.mark.server
@pytest.mark.timeout(600)
def test_gpulens_submit_wraps_sbatch(slurm_cluster: SlurmCluster) -> None:
    c = slurm_cluster
    env = {**c.env, "PYTHONPATH": str(REPO)}
    base = [sys.executable, "-m", "gpulens", "--data-dir", str(c.data_dir), "submit", "--"]
    bad = _job(c, "submitbad", BROKEN, extra="#GPULENS input data/train.csv\n")
    res = subprocess.run([*base, "sbatch", "-D", str(bad.parent), "-J", "submitbad", str(bad)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 1
    assert "gpulens: job rejected: " in res.stderr and "not submitted" in res.stderr
    assert "submitbad" not in _queued_names(c)
    good = _job(c, "submitgood", HEALTHY)
    res = subprocess.run([*base, "sbatch", "--parsable", "-N", "1", str(good)], capture_output=True, text=True,
                         env=env, timeout=300, cwd=good.parent)
    assert res.returncode == 0 and res.stdout.strip().isdigit(), res.stderr


@pytest.mark.parametrize(("argv", "script", "args", "chdir", "wrap"), [
    (["-N", "2", "--gres=gpu:4", "job.sh", "--lr", "1"], "job.sh", ["--lr", "1"], None, None),
    (["-D", "/w", "--parsable", "-t", "10", "run.sh"], "run.sh", [], "/w", None),
    (["--chdir=/x", "-Jname", "--export", "ALL", "a.sh", "-v"], "a.sh", ["-v"], "/x", None),
    (["--wrap", "python train.py", "-n", "1"], None, [], None, "python train.py"),
    (["-vv", "--requeue", "job.sh"], "job.sh", [], None, None),
])
def test_sbatch_command_line_parsing(argv: list[str], script: str | None, args: list[str], chdir: str | None,
                                     wrap: str | None) -> None:
    got = sbatch_script(argv)
    assert got == (Path(script) if script else None, args, Path(chdir) if chdir else None, wrap)


def test_check_rejects_a_missing_declared_input_and_never_blocks_on_its_own_error(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(HEALTHY)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#GPULENS input data/train.csv\npython3 train.py\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    run = [sys.executable, "-m", "gpulens", "--data-dir", str(tmp_path / "d"), "slurm", "check"]
    res = subprocess.run([*run, "--workdir", str(tmp_path), str(script)], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 1 and res.stdout.startswith("gpulens: job rejected: incorrect_input"), res
    # a script that cannot be read is the check's problem, not the user's: let it through
    res = subprocess.run([*run, str(tmp_path / "nope.sh")], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0 and "submitted unchecked" in res.stderr

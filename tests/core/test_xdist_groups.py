"""`make test` keeps each XDIST_GROUPS group (one Slurm cluster, one Spark JVM, one Chromium) on
one pytest-xdist worker, with the pytest and pytest-xdist installed (pytest 9.2 made xdist's own
"@group" node-id suffix a no-op: pytest-dev/pytest-xdist#1386)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = f"""
import importlib.util

spec = importlib.util.spec_from_file_location("gpulens_tests_conftest", {str(ROOT / "tests" / "conftest.py")!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
pytest_xdist_make_scheduler = module.pytest_xdist_make_scheduler
"""

TESTS = """
import os
import time
from pathlib import Path

import pytest


@pytest.mark.parametrize("i", range({n}))
def test_one(i):
    time.sleep({sleep})
    out = Path(os.environ["GROUPS_OUT"]) / "{name}"
    out.mkdir(exist_ok=True)
    (out / f"{{i}}-{{os.environ['PYTEST_XDIST_WORKER']}}").touch()
    with open(Path(os.environ["GROUPS_OUT"]) / "order", "a") as fh:
        fh.write("{name}\\n")
"""


def _workers(out: Path, name: str, n: int) -> set[str]:
    files = [p.name for p in (out / name).iterdir()]
    assert len(files) == n, files
    return {f.split("-", 1)[1] for f in files}


def _run(tmp_path: Path, files: list[tuple[str, str, int, float]], workers: int) -> Path:
    """Run a small project's tests on ``workers`` xdist workers with this suite's scheduler;
    the folder where each test left its name and worker."""
    project = tmp_path / "project"
    for rel, name, n, sleep in files:
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(textwrap.dedent(TESTS.format(name=name, n=n, sleep=sleep)))
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "conftest.py").write_text(CONFTEST)
    out = tmp_path / "out"
    out.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "GROUPS_OUT": str(out)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-n", str(workers), "--dist", "loadgroup",
                        "-p", "no:cacheprovider", "-q", "tests"], cwd=project, env=env,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    return out


@pytest.mark.slow
def test_a_group_runs_on_one_worker_and_the_rest_spreads(tmp_path: Path) -> None:
    # the grouped tests are short, the others long: the workers done with a group take part
    out = _run(tmp_path, [("tests/slurm/test_slurm_cluster.py", "slurm", 4, 0.05),
                          ("tests/analysis/test_spark.py", "spark", 4, 0.05),
                          ("tests/slurm/test_epilog.py", "free", 16, 0.4)], workers=3)
    assert len(_workers(out, "slurm", 4)) == 1
    assert len(_workers(out, "spark", 4)) == 1
    assert len(_workers(out, "free", 16)) > 1, "ungrouped tests (epilogs without Slurm) spread"


@pytest.mark.slow
def test_groups_start_first_in_the_listed_order(tmp_path: Path) -> None:
    """Spark's group is listed first though it has fewer tests than Slurm's (xdist alone starts
    the group with the most tests first), and both run before an ungrouped test collected first."""
    out = _run(tmp_path, [("tests/a_first/test_free.py", "free", 3, 0.0),
                          ("tests/slurm/test_slurm_cluster.py", "slurm", 6, 0.0),
                          ("tests/analysis/test_spark.py", "spark", 2, 0.0)], workers=1)
    order = (out / "order").read_text().split()
    assert order == ["spark"] * 2 + ["slurm"] * 6 + ["free"] * 3

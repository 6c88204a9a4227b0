"""Shared fixtures. In CI (CI=true) a missing tool fails the test instead of skipping it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gpulens.store import Store

IN_CI = os.environ.get("CI", "").lower() == "true"


def require_tool(name: str) -> str:
    """Path of an executable, or skip (locally) / fail (in CI) when it is missing."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not installed (run `make system-deps` as root)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return path


def require_module(name: str) -> None:
    """Import check for optional packages with the same CI rule as require_tool."""
    try:
        __import__(name)
    except ImportError:
        message = f"python package {name} is not installed (make venv)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@contextmanager
def _mounted(mnt: Path, steps: list[list[str]], what: str) -> Iterator[Path]:
    """Run the mount commands (root only), skip locally / fail in CI when they cannot run."""
    mnt.mkdir(parents=True, exist_ok=True)
    for cmd in steps:
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)
            message = f"cannot {what} here ({res.stderr.strip()}); run as root"
            if IN_CI:
                pytest.fail(message)
            pytest.skip(message)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def tmpfs(mnt: Path, size: str = "48m") -> contextlib.AbstractContextManager[Path]:
    """A real small filesystem at ``mnt`` (mounting needs root; CI runs as root)."""
    return _mounted(mnt, [["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)]],
                    "mount a tmpfs")


def read_only_view(src: Path, mnt: Path) -> contextlib.AbstractContextManager[Path]:
    """``src`` seen through a read-only bind mount at ``mnt`` (a real EROFS, even for root)."""
    return _mounted(mnt, [["mount", "--bind", str(src), str(mnt)],
                          ["mount", "-o", "remount,ro,bind", str(mnt)]], "make a read-only bind mount")


def built_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder that ``build(folder)`` fills once for the whole run, shared by the pytest-xdist
    workers: the first to ask builds it (under a lock, in the run's temporary directory that
    every worker's lies in) and the others wait for it and reuse it. Callers copy what they will
    change (a store's readers write too: listings, saved days)."""
    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = shared / f"built-{name}", shared / f"built-{name}.done"
    with open(shared / f"built-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store in a temporary data directory."""
    yield Store.open(tmp_path / "data")


# Tests that share one real server run on one pytest-xdist worker (`make test` runs `-n`
# workers with `--dist loadgroup`): the session's single Slurm cluster (the modules that take
# the slurm_cluster fixture; the rest of tests/slurm/ runs epilogs without Slurm), the JVM of
# the local Spark session, and the Streamlit server + Chromium of the browser test.
# A module whose module-scoped fixture takes seconds to build (a trained model, a simulated
# lake, a backfilled Prometheus) is kept on one worker too: spread over three, each worker
# built it again (measured: 5-22 s a build, about 150 s in all).
# The groups start first, in this order (longest first, as measured), before any other test.
XDIST_GROUPS = {
    "tests/analysis/test_spark.py": "spark",
    "tests/slurm/test_slurm_cluster.py": "slurm", "tests/slurm/test_submit.py": "slurm",
    "tests/diagnosis/test_modelstore.py": "modelstore",
    "tests/prometheus/test_import_history.py": "import_history",
    "tests/analysis/test_rollups.py": "rollups", "tests/analysis/test_accounting.py": "accounting",
    "tests/simulate/test_simulate.py": "simulate",
    "tests/analysis/test_simulated_effects.py": "simulated_effects",
    "tests/dashboard/test_browser.py": "browser",
    "tests/analysis/test_rollups_network.py": "rollups_net",
}
#: fixtures that stand for one shared server: a test taking one must be in its group
SERVER_FIXTURES = {"slurm_cluster": "slurm"}


def xdist_group_of(nodeid: str) -> str | None:
    """The XDIST_GROUPS group of a test (node ids are relative to the repository root)."""
    for prefix, group in XDIST_GROUPS.items():
        if nodeid.startswith(prefix):
            return group
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with the groups read from the node id's path.

    pytest-xdist 3.8 groups by an "@group" suffix its workers write into ``item._nodeid``;
    pytest 9.2 builds node ids elsewhere, so the suffix never reaches the scheduler and every
    group was spread over all workers (three Slurm clusters, three Spark JVMs and lakes;
    pytest-dev/pytest-xdist#1386). The scheduler sees node ids, so the group is taken from
    those. The groups are handed out first in XDIST_GROUPS' order (xdist's own order is by
    number of tests, which put the longest group, Spark's five tests, behind the others).
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    order = list(dict.fromkeys(XDIST_GROUPS.values()))

    class PathGroupScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group_of(nodeid) or super()._split_scope(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            if not getattr(self, "_groups_first", False):
                self._groups_first = True
                for group in reversed([g for g in order if g in self.workqueue]):
                    self.workqueue.move_to_end(group, last=False)
            super()._assign_work_unit(node)

    return PathGroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    for item in items:
        rel = Path(str(item.path)).relative_to(root).as_posix()
        group = xdist_group_of(rel)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        for fixture, server in SERVER_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()) and group != server:
                raise pytest.UsageError(f"{item.nodeid} uses {fixture}: add {rel} to the"
                                        f" {server!r} group in tests/conftest.py XDIST_GROUPS")
        if rel.startswith("tests/slurm/"):
            item.add_marker(pytest.mark.slurm)

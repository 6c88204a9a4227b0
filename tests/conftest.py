"""Shared fixtures. In CI (CI=true) a missing tool fails the test instead of skipping it."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store in a temporary data directory."""
    yield Store.open(tmp_path / "data")


# Tests that share one real server run on one pytest-xdist worker (`make test` runs `-n`
# workers with `--dist loadgroup`): the session's single Slurm cluster, the JVM of the local
# Spark session, and the Streamlit server + Chromium of the browser test.
XDIST_GROUPS = {"tests/slurm/": "slurm", "tests/analysis/test_spark.py": "spark",
                "tests/dashboard/test_browser.py": "browser"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = Path(str(config.rootpath))
    for item in items:
        rel = Path(str(item.path)).relative_to(root).as_posix()
        for prefix, group in XDIST_GROUPS.items():
            if rel.startswith(prefix):
                item.add_marker(pytest.mark.xdist_group(group))
        if rel.startswith("tests/slurm/"):
            item.add_marker(pytest.mark.slurm)

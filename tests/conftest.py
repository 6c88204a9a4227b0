"""Shared fixtures. In CI (CI=true) a missing tool fails the test instead of skipping it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
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


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A fresh store in a temporary data directory."""
    yield Store.open(tmp_path / "data")

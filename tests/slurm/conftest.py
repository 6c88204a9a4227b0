"""The session's one Slurm cluster (tests/slurm/cluster.py) and the jobs every test reads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI, require_tool
from tests.slurm.cluster import SLURM_TOOLS, SlurmCluster, find


def require_slurm() -> None:
    for tool in SLURM_TOOLS:
        if find(tool) is None:
            require_tool(tool)  # skips locally, fails in CI
    if os.geteuid() != 0:
        message = "the test Slurm cluster runs as root (SlurmUser=root)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    require_slurm()
    cluster = SlurmCluster(Path(tmp_path_factory.mktemp("slurm")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()

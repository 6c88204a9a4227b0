from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulens.collectors.attribution import (
    Attribution,
    JobResolver,
    job_from_cgroup,
    job_from_environ,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "proc"


@pytest.mark.parametrize(
    ("pid", "expected"),
    [
        (1001, Attribution("4242", "slurm-cgroup")),  # cgroup v1 /slurm/uid_U/job_J
        (1010, Attribution("777", "slurm-cgroup")),  # v1 with a per-node slurm dir
        (1002, Attribution("5151", "slurm-cgroup")),  # v2 slurmstepd.scope/job_J (beats environ)
        (1003, Attribution("6161", "slurm-cgroup")),  # v2 job_J under system.slice
        (1004, Attribution("1b7e3f36-2c4e-4f8a-9b2d-3a5f6c7d8e9f", "k8s")),  # systemd driver
        (1005, Attribution("7d9c2b1a-0f3e-4d5c-8b7a-6e5d4c3b2a10", "k8s")),  # cgroupfs driver
        (1009, Attribution("0c1d2e3f-4a5b-6c7d-8e9f-0a1b2c3d4e5f", "k8s")),  # guaranteed QoS pod
        (1006, Attribution("8080", "slurm-env")),
        (1007, Attribution("train-resnet-17", "env")),
        (1008, Attribution(None, "none")),
        (4_000_000, Attribution(None, "none")),  # no such process
    ],
)
def test_fixture_processes(pid: int, expected: Attribution) -> None:
    assert JobResolver(FIX).resolve(pid) == expected


def test_configurable_env_key() -> None:
    assert job_from_environ(b"A=1\0MYJOB=abc\0", "MYJOB") == Attribution("abc", "env")
    assert job_from_environ(b"A=1\0GPULENS_JOB_ID=abc\0", "MYJOB") is None


def test_non_job_cgroups_are_not_jobs() -> None:
    assert job_from_cgroup("0::/system.slice/slurmd.service\n") is None
    assert job_from_cgroup("0::/user.slice/pod-like-but-not-k8s\n") is None


def test_cache_pruned_to_running_pids() -> None:
    r = JobResolver(FIX)
    assert r.resolve_many([1001, 1007])[1001].job_id == "4242"
    r.resolve_many([1007])
    assert list(r._cache) == [1007]


@pytest.fixture
def sleepers() -> Iterator[dict[str, int]]:
    """Real processes with job ids in their environment."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    base = {k: v for k, v in os.environ.items() if k not in ("SLURM_JOB_ID", "GPULENS_JOB_ID", "MY_JOB")}
    specs = {
        "slurm": {"SLURM_JOB_ID": "31337"},
        "gpulens": {"GPULENS_JOB_ID": "llm-pretrain-7"},
        "custom": {"MY_JOB": "custom-42"},
        "plain": {},
    }
    code = "import time; time.sleep(60)"
    try:
        for name, env in specs.items():
            procs[name] = subprocess.Popen([sys.executable, "-c", code], env={**base, **env})
        time.sleep(0.2)  # let exec finish so /proc/<pid>/environ is the child's
        yield {name: p.pid for name, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_real_processes_from_environ(sleepers: dict[str, int]) -> None:
    r = JobResolver("/proc")
    own_cgroup = Path(f"/proc/{sleepers['slurm']}/cgroup").read_text()
    if job_from_cgroup(own_cgroup) is not None:  # this machine is itself a Slurm/k8s job
        pytest.fail(f"test host cgroup already names a job: {own_cgroup!r}")
    assert r.resolve(sleepers["slurm"]) == Attribution("31337", "slurm-env")
    assert r.resolve(sleepers["gpulens"]) == Attribution("llm-pretrain-7", "env")
    assert r.resolve(sleepers["plain"]) == Attribution(None, "none")
    assert r.resolve(sleepers["custom"]).job_id is None
    assert JobResolver("/proc", env_key="MY_JOB").resolve(sleepers["custom"]) == Attribution("custom-42", "env")

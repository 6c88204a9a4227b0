"""`gpulens slurm epilog` run directly with epilog environments (no Slurm needed).

The environments are what slurmd 22.05 hands its Epilog (seen on the test cluster, see
tests/slurm/cluster.py); ``scontrol show job -o`` lines likewise.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.ingest.importers.slurm_epilog import (
    EpilogRecord,
    drain_queue,
    parse_scontrol,
    queue_record,
    queued,
    record_from_env,
)
from gpulens.store import Store
from tests.slurm.cluster import REPO

OOM = ("Traceback (most recent call last):\n  File \"/home/ana/train.py\", line 41, in <module>\n"
       "    loss = model(batch)\nRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; "
       "15.78 GiB total capacity; 13.20 GiB already allocated)\n")

SCONTROL_ARRAY = (
    "JobId=9 ArrayJobId=6 ArrayTaskId=0 JobName=arr UserId=ana(1000) GroupId=ana(1000) "
    "JobState=COMPLETING Reason=None Restarts=0 ExitCode=0:0 StartTime=2026-11-25T10:57:43 "
    "EndTime=2026-11-25T10:57:44 NodeList=gpu01 BatchHost=gpu01 WorkDir=/home/ana/run "
    "StdErr=/home/ana/run/arr-6_0.out StdOut=/home/ana/run/arr-6_0.out\n"
    "JobId=6 ArrayJobId=6 ArrayTaskId=1 JobName=arr UserId=ana(1000) GroupId=ana(1000) "
    "JobState=COMPLETING Reason=NonZeroExitCode Restarts=0 ExitCode=1:0 SubmitTime=2026-11-25T10:57:40 "
    "StartTime=2026-11-25T10:57:43 EndTime=2026-11-25T10:57:45 Partition=debug NodeList=gpu01 "
    "BatchHost=gpu01 TRES=cpu=1,node=1,billing=1,gres/gpu=1 Command=/home/ana/run/my job.sh "
    "WorkDir=/home/ana/run StdErr=/home/ana/run/arr-6_1.out StdOut=/home/ana/run/arr-6_1.out\n"
)


def env_for(job: str, *, exit2: str = "0:0", node: str = "gpu01", nodes: str = "gpu01",
            stdout: str = "%x-%j.out", workdir: str = "/tmp", restarts: int = 0, gpus: str = "",
            **extra: str) -> dict[str, str]:
    code, sig = (int(x) for x in exit2.split(":"))
    env = {
        "SLURM_JOB_ID": job, "SLURM_JOBID": job, "SLURM_JOB_EXIT_CODE2": exit2,
        "SLURM_JOB_EXIT_CODE": str((code << 8) | sig), "SLURM_JOB_USER": "ana", "SLURM_JOB_UID": "1000",
        "SLURM_NODELIST": nodes, "SLURMD_NODENAME": node, "SLURM_JOB_PARTITION": "debug",
        "SLURM_JOB_RESTART_COUNT": str(restarts), "SLURM_JOB_STDOUT": stdout,
        "SLURM_JOB_WORK_DIR": workdir, "SLURM_SCRIPT_CONTEXT": "epilog_slurmd",
    }
    if gpus:
        env["SLURM_JOB_GPUS"] = gpus
    env.update(extra)
    return env


def run_epilog(data: Path, env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """As slurmd runs it: a bare environment (no PATH), the data dir on the command line."""
    full = {**env, "PYTHONPATH": str(REPO)}
    budget = [] if "--timeout" in args else ["--timeout", "150"]  # a loaded 2-core test machine
    return subprocess.run([sys.executable, "-m", "gpulens", "--data-dir", str(data), "slurm", "epilog",
                           "--no-scontrol", *budget, *args], env=full, capture_output=True, text=True,
                          timeout=timeout)


def rows(data: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    con = Store(data).connect()
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


# ----------------------------------------------------------------- parsing
def test_record_from_an_array_tasks_environment_and_scontrol() -> None:
    env = env_for("6", exit2="1:0", stdout="/home/ana/run/%x-%A_%a.out", gpus="3")
    rec = record_from_env(env, SCONTROL_ARRAY)
    assert (rec.job_id, rec.raw_job_id, rec.attempt, rec.status) == ("6_1", "6", 0, "failed")
    assert rec.stdout == "/home/ana/run/arr-6_1.out" and rec.stderr is None
    assert rec.log_path == rec.stdout and rec.gpus == 1 and rec.gpu_indices == [3]
    assert rec.primary and rec.name == "arr" and rec.partition == "debug"
    assert rec.start is not None and rec.end is not None and rec.end > rec.start
    assert parse_scontrol(SCONTROL_ARRAY, "6")["Command"] == "/home/ana/run/my job.sh"


def test_environment_only_expands_the_log_pattern_itself() -> None:
    rec = record_from_env(env_for("42", exit2="3:0", stdout="logs/%u-%j.out", workdir="/home/ana",
                                  SLURM_JOB_STDERR="logs/%u-%j.err"))
    assert (rec.stdout, rec.stderr) == ("/home/ana/logs/ana-42.out", "/home/ana/logs/ana-42.err")
    assert rec.log_path == rec.stderr and rec.status == "failed" and rec.exit_code == 3
    # a backslash turns sbatch's patterns off
    assert record_from_env(env_for("42", stdout="/o/\\%j.out")).stdout == "/o/%j.out"


@pytest.mark.parametrize(("scontrol", "status"), [
    ("JobId=7 JobState=COMPLETING Reason=TimeLimit ExitCode=0:15", "failed"),   # time limit
    ("JobId=7 JobState=COMPLETING Reason=None ExitCode=0:15", "killed"),        # scancel
    ("JobId=7 JobState=COMPLETING Reason=NonZeroExitCode ExitCode=0:11", "failed"),  # segfault
    ("JobId=7 JobState=COMPLETING Reason=None ExitCode=0:0", "passed"),
])
def test_status_from_what_scontrol_says(scontrol: str, status: str) -> None:
    # the environment of a timed-out or cancelled job says 0:0 (Slurm 22.05)
    assert record_from_env(env_for("7"), scontrol).status == status


def test_the_epilog_of_a_requeued_run_is_the_earlier_attempt() -> None:
    # `scontrol requeue` of a running job (scontrol's line as the test cluster's epilog saw it):
    # Slurm counts the next run before the killed run's epilog starts, so the environment says 1
    requeued = ("JobId=1 JobName=rq JobState=COMPLETING Reason=None Requeue=1 Restarts=1 ExitCode=0:0 "
                "RunTime=00:00:00 StartTime=2026-11-25T11:58:56 EndTime=Unknown NodeList=vm BatchHost=vm")
    rec = record_from_env(env_for("1", restarts=1), requeued)
    assert (rec.attempt, rec.status, rec.reason) == (0, "failed", "requeued")
    rec = record_from_env(env_for("1", restarts=1), "JobId=1 JobState=PENDING Reason=BeginTime Restarts=1")
    assert rec.attempt == 0
    rec = record_from_env(env_for("1", exit2="3:0", restarts=1),
                          "JobId=1 JobState=COMPLETING Reason=NonZeroExitCode Restarts=1 ExitCode=3:0 "
                          "EndTime=2026-11-25T12:01:02")
    assert (rec.attempt, rec.status) == (1, "failed")


def test_a_record_that_is_not_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        EpilogRecord.from_json({"job_id": 5, "attempt": "x", "status": "passed", "nodes": []})
    data = tmp_path / "d"
    store = Store.open(data)
    good = queue_record(data, record_from_env(env_for("1")))
    bad = good.with_name("junk.json")
    bad.write_bytes(b"\x00\xff not json")
    warned: list[str] = []
    got = drain_queue(store, warn=warned.append)
    assert got.records == 1 and len(warned) == 1 and "junk.json" in warned[0]
    assert queued(data) == [] and bad.with_name("junk.json.rejected").exists()


# ----------------------------------------------------------------- the command
def test_failed_job_recorded_and_diagnosed_then_idempotent(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "run"
    work.mkdir()
    (work / "train-101.out").write_text("epoch 0\n" + OOM)
    env = env_for("101", exit2="1:0", stdout="%x-%j.out", workdir=str(work), gpus="0,1",
                  SLURM_JOB_NAME="train")
    for _ in range(2):  # a second run (slurmd retry, an operator) changes nothing
        res = run_epilog(data, env)
        assert res.returncode == 0, res.stderr
    assert rows(data, "SELECT job_id, attempt, status, exit_code, log_path FROM attempts") == [
        ("101", 0, "failed", 1, str(work / "train-101.out"))]
    assert rows(data, "SELECT category, origin FROM failures") == [("gpu_oom", "user")]
    assert rows(data, "SELECT node, gpu_index FROM placements ORDER BY 2") == [("gpu01", 0), ("gpu01", 1)]
    assert rows(data, "SELECT count(*) FROM jobs") == [(1,)]
    log = (data / "logs" / "slurm-epilog" / "gpu01.log").read_text()
    assert "diagnosed: gpu_oom" in log


def test_unreadable_log_is_recorded_and_diagnosed_by_the_next_diagnose_all(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "run"
    work.mkdir()
    res = run_epilog(data, env_for("55", exit2="1:0", stdout="job-%j.log", workdir=str(work)))
    assert res.returncode == 0 and "not readable yet" in res.stderr
    assert rows(data, "SELECT status, log_path FROM attempts") == [("failed", str(work / "job-55.log"))]
    assert rows(data, "SELECT count(*) FROM failures") == [(0,)]
    (work / "job-55.log").write_text(OOM)  # the shared file system caught up
    done = subprocess.run([sys.executable, "-m", "gpulens", "--data-dir", str(data), "diagnose", "--all"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert rows(data, "SELECT job_id, category FROM failures") == [("55", "gpu_oom")]


def test_time_limit_seen_in_the_log_when_scontrol_is_not_asked(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "run"
    work.mkdir()
    (work / "slurm-7.out").write_text(
        "step 11\nslurmstepd-gpu01: error: *** JOB 7 ON gpu01 CANCELLED AT 2026-11-25T10:59:57 DUE TO "
        "TIME LIMIT ***\n")
    assert run_epilog(data, env_for("7", stdout="slurm-%j.out", workdir=str(work))).returncode == 0
    assert rows(data, "SELECT status FROM attempts") == [("failed",)]
    assert rows(data, "SELECT category FROM failures") == [("preempted",)]


def test_requeued_multi_node_and_het_jobs(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # a 3-node job, requeued once: attempt 0 failed on n1-n3, attempt 1 passed; one epilog per node
    for restarts, exit2 in ((0, "1:0"), (1, "0:0")):
        for node, gpus in (("n2", "2,3"), ("n1", "0,1"), ("n3", "0,1")):
            env = env_for("300", exit2=exit2, node=node, nodes="n[1-3]", restarts=restarts, gpus=gpus,
                          stdout="/nonexistent/%j.out")
            assert run_epilog(data, env, "--timeout", "60").returncode == 0
    assert queued(data)  # other nodes' records wait for the next drain ...
    drain_queue(Store(data))  # ... which any epilog or `diagnose --all` does
    assert rows(data, "SELECT attempt, status, exit_code FROM attempts ORDER BY 1") == [
        (0, "failed", 1), (1, "passed", 0)]
    assert rows(data, "SELECT node, list(gpu_index ORDER BY gpu_index) FROM placements WHERE attempt = 0 "
                      "GROUP BY node ORDER BY node") == [("n1", [0, 1]), ("n2", [2, 3]), ("n3", [0, 1])]
    assert rows(data, "SELECT status FROM jobs") == [("passed",)]
    # het job 400: component 1 (job 401) failed; component 0 passed: one job 400, failed
    het0 = "JobId=400 HetJobId=400 HetJobOffset=0 NodeList=n1 BatchHost=n1 ExitCode=0:0 Reason=None"
    het1 = "JobId=401 HetJobId=400 HetJobOffset=1 NodeList=n2 BatchHost=n2 ExitCode=2:0 Reason=NonZeroExitCode"
    store = Store(data)
    queue_record(data, record_from_env(env_for("401", node="n2", nodes="n2"), het1))
    queue_record(data, record_from_env(env_for("400", node="n1", nodes="n1"), het0))
    drain_queue(store)
    assert rows(data, "SELECT job_id, status, exit_code FROM attempts WHERE job_id LIKE '40%'") == [
        ("400", "failed", 0)]
    assert rows(data, "SELECT DISTINCT node FROM placements WHERE job_id = '400' ORDER BY 1") == []  # no GPUs
    assert rows(data, "SELECT count(*) FROM jobs WHERE job_id IN ('400', '401')") == [(1,)]


def test_epilog_exits_0_on_any_fault_within_its_budget(tmp_path: Path) -> None:
    data = tmp_path / "data"
    Store.open(data)
    res = run_epilog(data, {"SLURMD_NODENAME": "gpu01"})  # not an epilog environment
    assert res.returncode == 0 and "SLURM_JOB_ID is not set" in res.stderr
    # the store's lock held by a stuck writer: give up after the budget, keep the record queued
    with open(data / "state.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        t0 = time.monotonic()
        res = run_epilog(data, env_for("77", exit2="1:0"), "--timeout", "3")
        took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    # the budget, plus the interpreter's start on a loaded machine (18.1 s once in CI at 2613b88: two xdist workers,
    # mypy and a Spark JVM on 2 cores); an epilog that ignored its budget would wait for the lock until run_epilog's 240 s
    assert took < 3 + 40
    assert [p.name for p in queued(data)] == ["77.0.77.gpu01.json"]
    assert "diagnose --all" in res.stderr
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    try:  # a data directory that cannot be written (root writes anyway: then it works)
        assert run_epilog(tmp_path / "ro" / "d", env_for("78")).returncode == 0
    finally:
        (tmp_path / "ro").chmod(0o700)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fifty_epilogs_at_once_lose_nothing(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "run"
    work.mkdir()
    Store.open(data)
    failed = {str(1000 + i) for i in range(0, 50, 5)}  # 10 of 50 failed with an OOM log
    envs = []
    for i in range(50):
        job = str(1000 + i)
        if job in failed:
            (work / f"slurm-{job}.out").write_text(OOM)
        envs.append(env_for(job, exit2="1:0" if job in failed else "0:0", stdout="slurm-%j.out",
                            workdir=str(work), node=f"gpu{i:02d}", nodes=f"gpu{i:02d}", gpus="0"))
    with ThreadPoolExecutor(max_workers=50) as pool:
        # record only: the point is 50 writers at once (diagnosis is tested above and by diagnose --all)
        results = list(pool.map(lambda e: run_epilog(data, e, "--timeout", "120", "--no-diagnose", timeout=600),
                                envs))
    assert [r.returncode for r in results] == [0] * 50, [r.stderr for r in results if r.returncode]
    # every job is in the store or still queued; the next diagnose --all records the rest
    done = subprocess.run([sys.executable, "-m", "gpulens", "--data-dir", str(data), "diagnose", "--all",
                           "--json"], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert queued(data) == []
    got = dict(rows(data, "SELECT job_id, status FROM attempts"))
    assert got == {str(1000 + i): "failed" if str(1000 + i) in failed else "passed" for i in range(50)}
    assert dict(rows(data, "SELECT job_id, category FROM failures")) == {j: "gpu_oom" for j in failed}
    assert rows(data, "SELECT count(*), count(DISTINCT node) FROM placements") == [(50, 50)]
    writes = rows(data, "SELECT count(*), sum(rows) FROM imports WHERE kind = 'slurm:epilog'")[0]
    assert writes[1] == 50 and writes[0] <= 50  # drains batch what they find: no record twice
    print(json.dumps({"drains": writes[0], "records": writes[1]}))


def test_a_huge_log_does_not_hold_the_epilog(tmp_path: Path) -> None:
    """A 4 GiB log (sparse, on a file system that would take minutes to read it whole)."""
    data, work = tmp_path / "data", tmp_path / "run"
    work.mkdir()
    log = work / "slurm-88.out"
    steps = "".join(f"step {i} loss {1 / (i + 1):.4f}\n" for i in range(40_000)).encode()
    with open(log, "wb") as fh:
        fh.write(steps)
        fh.truncate(4 * 1024**3)  # a hole in the middle: never read
        fh.seek(0, os.SEEK_END)
        fh.write(steps + OOM.encode())
    t0 = time.monotonic()
    res = run_epilog(data, env_for("88", exit2="1:0", stdout="slurm-%j.out", workdir=str(work)))
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert rows(data, "SELECT category FROM failures") == [("gpu_oom",)]
    assert took < 150  # the budget given; reading 4 GiB is not what took the time
    assert "budget" not in res.stderr


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                     max_leaves=6)
_FIELDS = ["job_id", "raw_job_id", "attempt", "status", "node", "nodes", "exit_code", "signal", "gpus",
           "gpu_indices", "stdout", "start", "end", "het_offset"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.fixed_dictionaries({}, optional={k: _JSON for k in _FIELDS}),
       good=st.booleans())
def test_queued_record_parsing_never_raises_anything_but_valueerror(base: dict[str, Any], good: bool) -> None:
    data = {"job_id": "5", "raw_job_id": "5", "attempt": 0, "status": "passed", "nodes": ["n1"]} if good else {}
    data.update(base)
    try:
        rec = EpilogRecord.from_json(data)
    except ValueError:
        return
    assert isinstance(rec.job_id, str) and isinstance(rec.attempt, int) and rec.status in (
        "queued", "running", "passed", "killed", "failed")
    assert EpilogRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec

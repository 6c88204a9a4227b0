"""An imported sacct history and the epilog's records of the same jobs are one set of jobs and
attempts, in either order; sacct's StdOut/StdErr/WorkDir fill log paths.

The sacct lines are written here in `sacct --duplicates --parsable2` format (the test cluster
has no slurmdbd, so no real sacct); the epilog records come from epilog environments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpulens.ingest.importers.slurm import import_slurm
from gpulens.ingest.importers.slurm_epilog import drain_queue, queue_record, record_from_env
from gpulens.store import Store
from tests.slurm.test_epilog import env_for

HEADER = ("JobID|JobIDRaw|JobName|User|Account|Partition|Submit|Start|End|State|ExitCode|AllocTRES|"
          "NodeList|WorkDir|StdOut|StdErr")
SACCT = [
    "501|501|train|ana|proj|debug|2026-11-25T10:00:00|2026-11-25T10:00:05|2026-11-25T10:10:00|FAILED|1:0|"
    "cpu=2,gres/gpu=2,node=1|gpu01|/home/ana/run|%x-%j.out|%x-%j.err",
    "501.batch|501.batch|batch||proj||2026-11-25T10:00:05|2026-11-25T10:00:05|2026-11-25T10:10:00|FAILED|1:0|"
    "cpu=2,gres/gpu=2,node=1|gpu01|||",
    "502_3|510|arr|ana|proj|debug|2026-11-25T10:00:00|2026-11-25T10:01:00|2026-11-25T10:02:00|COMPLETED|0:0|"
    "cpu=1,node=1|gpu02|/w|%x-%A_%a.out|",
    "520+0|520|het|bo|proj|debug|2026-11-25T10:00:00|2026-11-25T10:03:00|2026-11-25T10:04:00|COMPLETED|0:0|"
    "cpu=1,gres/gpu=1,node=1|gpu03|/w|het-%j.out|",
    "520+1|521|het|bo|proj|debug|2026-11-25T10:00:00|2026-11-25T10:03:00|2026-11-25T10:04:00|FAILED|2:0|"
    "cpu=1,gres/gpu=1,node=1|gpu04|/w||",
    "530|530|long|cy|proj|debug|2026-11-25T09:00:00|2026-11-25T09:00:10|2026-11-25T09:30:00|REQUEUED|0:15|"
    "cpu=1,node=1|gpu05|/w|slurm-%j.out|",
    "530|530|long|cy|proj|debug|2026-11-25T09:30:05|2026-11-25T09:31:00|2026-11-25T09:50:00|FAILED|1:0|"
    "cpu=1,node=1|gpu06|/w|%x-%j.out|",
]


def _sacct(tmp: Path) -> Path:
    path = tmp / "sacct.txt"
    path.write_text(HEADER + "\n" + "\n".join(SACCT) + "\n")
    return path


def _epilogs(data: Path) -> None:
    recs = [
        record_from_env(env_for("501", exit2="1:0", gpus="2,3", workdir="/home/ana/run", stdout="%x-%j.out",
                                SLURM_JOB_STDERR="%x-%j.err", SLURM_JOB_NAME="train", SLURM_JOB_USER="ana")),
        record_from_env(env_for("510", node="gpu02", nodes="gpu02"),
                        "JobId=510 ArrayJobId=502 ArrayTaskId=3 JobName=arr WorkDir=/w StdOut=/w/arr-502_3.out"),
        record_from_env(env_for("520", node="gpu03", nodes="gpu03"),
                        "JobId=520 HetJobId=520 HetJobOffset=0 NodeList=gpu03 ExitCode=0:0 Reason=None"),
        record_from_env(env_for("521", node="gpu04", nodes="gpu04"),
                        "JobId=521 HetJobId=520 HetJobOffset=1 NodeList=gpu04 ExitCode=2:0 Reason=NonZeroExitCode"),
        record_from_env(env_for("530", exit2="0:15", node="gpu05", nodes="gpu05", restarts=0,
                                stdout="slurm-%j.out", workdir="/w")),
        # without scontrol the epilog cannot expand %x: sacct's path (or a later one) wins
        record_from_env(env_for("530", exit2="1:0", node="gpu06", nodes="gpu06", restarts=1,
                                stdout="%x-%j.out", workdir="/w")),
    ]
    for rec in recs:
        queue_record(data, rec)
    drain_queue(Store(data))


def _state(data: Path) -> dict[str, Any]:
    con = Store(data).connect()
    try:
        return {
            "jobs": sorted(r[0] for r in con.execute("SELECT job_id FROM jobs").fetchall()),
            "attempts": sorted(con.execute("SELECT job_id, attempt, status FROM attempts").fetchall()),
            "logs": dict(((r[0], r[1]), r[2]) for r in con.execute(
                "SELECT job_id, attempt, log_path FROM attempts").fetchall()),
            "gpus_501": con.execute("SELECT node, gpu_index FROM placements WHERE job_id = '501' "
                                    "ORDER BY gpu_index").fetchall(),
        }
    finally:
        con.close()


EXPECTED_ATTEMPTS = [("501", 0, "failed"), ("502_3", 0, "passed"), ("520", 0, "failed"),
                     ("530", 0, "failed"), ("530", 1, "failed")]


@pytest.mark.parametrize("order", ["epilog_then_sacct", "sacct_then_epilog"])
def test_sacct_and_epilog_are_one_set_of_jobs(tmp_path: Path, order: str) -> None:
    data = tmp_path / "data"
    store = Store.open(data)
    if order == "epilog_then_sacct":
        _epilogs(data)
        import_slurm(store, _sacct(tmp_path))
    else:
        import_slurm(store, _sacct(tmp_path))
        _epilogs(data)
    got = _state(data)
    assert got["jobs"] == ["501", "502_3", "520", "530"]
    assert got["attempts"] == EXPECTED_ATTEMPTS
    assert got["logs"][("501", 0)] == "/home/ana/run/train-501.err"  # stderr: diagnosis reads it
    assert got["logs"][("502_3", 0)] == "/w/arr-502_3.out"
    assert got["logs"][("530", 0)] == "/w/slurm-530.out"
    assert got["logs"][("530", 1)] == "/w/long-530.out"
    assert got["gpus_501"] == [("gpu01", 2), ("gpu01", 3)]  # the epilog saw the real GPU indices


def test_sacct_alone_fills_log_paths_and_merges_het_components(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = Store.open(data)
    res = import_slurm(store, _sacct(tmp_path))
    assert res.quirks[str(tmp_path / "sacct.txt")]["het_components_merged"] == 1
    got = _state(data)
    assert got["attempts"] == EXPECTED_ATTEMPTS
    assert got["logs"][("520", 0)] == "/w/het-520.out"
    con = Store(data).connect()
    try:
        nodes = con.execute("SELECT list(DISTINCT node ORDER BY node), count(*) FROM placements "
                            "WHERE job_id = '520'").fetchall()
        paths = con.execute("SELECT stdout_path, stderr_path FROM attempt_logs WHERE job_id = '501'").fetchall()
    finally:
        con.close()
    assert nodes == [(["gpu03", "gpu04"], 2)]
    assert paths == [("/home/ana/run/train-501.out", "/home/ana/run/train-501.err")]

"""Real Slurm: sbatch jobs that fail in known ways; the real Epilog runs `gpulens slurm epilog`
and `gpulens diagnose --job ID --json` shows each one's cause with no other command between.

All jobs are submitted at once (one cluster for the session, 2 CPUs) and the tests read the
outcome; the time-limit job (``--time=1``, Slurm's granularity is a minute) runs alongside.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpulens.store import Store
from tests.slurm.cluster import SlurmCluster

pytestmark = [pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(600)]

PROGRAMS = {
    "ok.py": """
        import time
        for epoch in range(3):
            print(f"epoch {epoch} loss {1.0 / (epoch + 1):.3f}", flush=True)
            time.sleep(0.2)
        print("training finished", flush=True)
    """,
    "oom.py": """
        def forward(batch):
            # what torch < 2.0 raised when the caching allocator ran out
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total "
                               "capacity; 13.20 GiB already allocated; 1.12 GiB free; 13.50 GiB reserved "
                               "in total by PyTorch)")
        print("epoch 0", flush=True)
        forward([1, 2, 3])
    """,
    "missing.py": """
        import sys
        def load(path):
            with open(path) as fh:
                return fh.read()
        print("loading the training shards", flush=True)
        load(sys.argv[1])
    """,
    "slow.py": """
        import time
        step = 0
        while True:
            print(f"step {step}", flush=True)
            step += 1
            time.sleep(5)
    """,
    "rank.py": """
        import os
        import time
        rank = int(os.environ["SLURM_PROCID"])
        print(f"rank {rank}: starting", flush=True)
        if rank == 1:
            import apex_fused_layer_norm_cuda  # noqa: F401 - installed on some nodes only
        time.sleep(1)
        print(f"rank {rank}: epoch 0 loss 0.42", flush=True)
    """,
    "array.py": """
        import os
        import sys
        task = int(os.environ["SLURM_ARRAY_TASK_ID"])
        print(f"task {task}", flush=True)
        if task == 1:
            open(f"/nonexistent/shard-{task:05d}.tar").read()
    """,
}

#: name -> (sbatch options, batch script body, expected category)
JOBS: dict[str, tuple[list[str], str, str]] = {
    "timelimit": (["--time=1", "-o", "%x-%j.out"], "python3 slow.py", "preempted"),
    "healthy": (["--gres=gpu:1", "-o", "%x-%j.out"], "python3 ok.py", "none"),
    "oom": (["--gres=gpu:2", "-o", "%x-%j.out", "-e", "%x-%j.err"], "python3 oom.py", "gpu_oom"),
    "missing": (["-o", "%x-%j.out"], "python3 missing.py /scratch/imagenet/train-00017.tar", "incorrect_input"),
    "twotask": (["-n", "2", "-o", "%x-%j.out"], "srun python3 rank.py", "import_error"),
}


def _script(jobs_dir: Path, name: str, body: str) -> Path:
    path = jobs_dir / f"{name}.sbatch"
    path.write_text(f"#!/bin/bash\n#SBATCH -J {name}\n{body}\n")
    return path


@pytest.fixture(scope="module")
def finished(slurm_cluster: SlurmCluster) -> dict[str, Any]:
    """Submit every job, wait until all have ended and their epilogs ran."""
    c = slurm_cluster
    for name, text in PROGRAMS.items():
        (c.jobs / name).write_text(textwrap.dedent(text).lstrip())
    ids: dict[str, str] = {}
    for name, (opts, body, _cat) in JOBS.items():
        ids[name] = c.submit(_script(c.jobs, name, body), *opts)
    array_script = _script(c.jobs, "arr", "python3 array.py")
    ids["array"] = c.submit(array_script, "--array=0-1", "-o", "%x-%A_%a.out")
    watch = [ids[n] for n in JOBS] + [f"{ids['array']}_0", f"{ids['array']}_1"]
    states = c.wait(watch, timeout=420)
    return {"ids": ids, "states": states}


def _diagnose(c: SlurmCluster, job_id: str) -> dict[str, Any]:
    res = c.gpulens("diagnose", "--job", job_id, "--json")
    assert res.returncode == 0, res.stderr + c.tail_logs()
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def _rows(c: SlurmCluster, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    con = Store(c.data_dir).connect()
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("name", list(JOBS))
def test_epilog_diagnosis_matches_the_failure(slurm_cluster: SlurmCluster, finished: dict[str, Any],
                                              name: str) -> None:
    c = slurm_cluster
    job_id = finished["ids"][name]
    expected = JOBS[name][2]
    got = _diagnose(c, job_id)
    assert got["job_id"] == job_id
    assert (got["category"], got["origin"] if expected == "none" else "any") == \
        (expected, "none" if expected == "none" else "any"), (got, c.tail_logs())
    stored = _rows(c, "SELECT category FROM failures WHERE job_id = ?", [job_id])
    if expected == "none":
        assert got["status"] == "passed" and stored == []
    else:  # the epilog itself stored the diagnosis (diagnose --job recomputes it the same way)
        assert got["status"] == "failed"
        assert stored == [(expected,)], c.tail_logs()


def test_epilog_records_what_slurm_knows(slurm_cluster: SlurmCluster, finished: dict[str, Any]) -> None:
    c = slurm_cluster
    ids = finished["ids"]
    rows = {r[0]: r[1:] for r in _rows(
        c, "SELECT job_id, attempt, status, exit_code, log_path, stdout_path, stderr_path, start_time, "
        "end_time FROM attempts LEFT JOIN attempt_logs USING (job_id, attempt) "
        "WHERE job_id IN (SELECT unnest(?))", [[ids[n] for n in JOBS]])}
    assert set(rows) == {ids[n] for n in JOBS}
    oom = rows[ids["oom"]]
    assert oom[0] == 0 and oom[1] == "failed" and oom[2] == 1
    assert oom[4] == str(c.jobs / f"oom-{ids['oom']}.out")  # %x-%j expanded in the job's WorkDir
    assert oom[5] == oom[3] == str(c.jobs / f"oom-{ids['oom']}.err")  # diagnosis reads stderr
    assert "Traceback" in Path(oom[3]).read_text()
    assert rows[ids["healthy"]][1] == "passed" and rows[ids["timelimit"]][1] == "failed"
    for r in rows.values():
        assert r[6] is not None and r[7] is not None and r[6] <= r[7]
    # GPUs: the node's epilog saw SLURM_JOB_GPUS; the job row has the user and the name
    pl = _rows(c, "SELECT node, gpu_index FROM placements WHERE job_id = ? ORDER BY gpu_index", [ids["oom"]])
    assert pl == [(c.node, 0), (c.node, 1)]
    job = _rows(c, 'SELECT "user", name, requested_gpus, source FROM jobs WHERE job_id = ?', [ids["oom"]])
    assert job == [("root", "oom", 2, "slurm")]


def test_array_tasks_are_named_as_sacct_names_them(
        slurm_cluster: SlurmCluster, finished: dict[str, Any]) -> None:
    c = slurm_cluster
    arr = finished["ids"]["array"]
    got = dict(_rows(c, "SELECT job_id, status FROM attempts WHERE job_id LIKE ? || '\\_%' ESCAPE '\\'", [arr]))
    assert got == {f"{arr}_0": "passed", f"{arr}_1": "failed"}
    logs = _rows(c, "SELECT log_path FROM attempts WHERE job_id = ?", [f"{arr}_1"])
    assert logs == [(str(c.jobs / f"arr-{arr}_1.out"),)]
    assert _diagnose(c, f"{arr}_1")["category"] == "incorrect_input"
    assert _rows(c, "SELECT count(*) FROM jobs WHERE job_id = ?", [arr]) == [(0,)]  # no raw-id twin


def test_epilogs_logged_no_error_and_left_nothing_behind(slurm_cluster: SlurmCluster,
                                                         finished: dict[str, Any]) -> None:
    from gpulens.ingest.importers.slurm_epilog import queued

    c = slurm_cluster
    log = (c.root / "log" / "epilog.stderr").read_text()
    assert ": error:" not in log and "budget" not in log, log
    res = c.gpulens("diagnose", "--all", "--json")
    assert res.returncode == 0, res.stderr
    assert queued(c.data_dir) == []  # another node's or component's late record is recorded too

"""`gpulens import kubernetes --logs`: container logs in the kubelet's CRI format or as
`kubectl logs` dumps, attached to the pods' attempts and diagnosed with the termination
reason; wrongly typed pod fields and malformed logs are one line, never a traceback.

The pods are tests/fixtures/kubernetes/pods.json (see test_kubernetes_import.py); the logs are
written here in the formats containerd/CRI-O (``<RFC3339Nano> stdout|stderr F|P <text>``),
Docker's json-file driver and ``kubectl logs --timestamps`` produce.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.cli.main import cli
from gpulens.errors import InputError
from gpulens.ingest.importers.common import Quirks
from gpulens.ingest.importers.kubernetes import import_kubernetes, read_pods
from gpulens.ingest.importers.podlogs import LogFile, find_logs, plain_lines, stage_copy
from gpulens.store import Store

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes"
PODS, EVENTS = FIX / "pods.json", FIX / "events.json"
RESNET = "ml_train-resnet-0_7c9e6679-7425-40de-944b-e07fc1f90ae1"
SWEEP = "ml_sweep-3_7c9e6679-7425-40de-944b-e07fc1f90ae3"


def _cri(*lines: tuple[str, str, str], t0: int = 0) -> str:
    """CRI log lines: (stream, F|P, text)."""
    return "".join(f"2026-01-05T06:{(t0 + i) // 60 % 60:02d}:{(t0 + i) % 60:02d}.123456789Z {s} {tag} {text}\n"
                   for i, (s, tag, text) in enumerate(lines))


STEPS = [("stdout", "F", f"step {i:>5} | loss {2.5 - i / 4000:.4f} | lr 3.0e-04 | 412 samples/s")
         for i in range(0, 6000, 250)]
#: restart 0: training, then the memory limit's SIGKILL in the middle of a line (nothing else)
OOM_RUN = _cri(("stdout", "F", "Loading dataset shards from /data/imagenet (1024 shards)"), *STEPS,
               ("stdout", "P", "step  6000 | loss 1.00"))
#: restart 1: the same job, now finishing
DONE_RUN = _cri(("stdout", "F", "Resuming from checkpoint step 5000"), *STEPS[-4:],
                ("stdout", "F", "Training done: 6000 steps in 9.0 h"))


def _q(store: Store, sql: str) -> list[tuple[Any, ...]]:
    con = store.connect()
    try:
        return [tuple(r) for r in con.execute(sql).fetchall()]
    finally:
        con.close()


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


# ------------------------------------------------------------------ the formats
def test_cri_prefix_is_stripped_and_partial_lines_are_joined(tmp_path: Path) -> None:
    d = tmp_path / "pods" / RESNET / "trainer"
    # rotated pieces: the oldest gzipped, then the newer plain one, then the live file
    with gzip.open(_write(d / "0.log.20260105-060000.gz", b"").as_posix(), "wt") as fh:
        fh.write(_cri(("stdout", "F", "first piece")))
    _write(d / "0.log.20260105-070000", _cri(("stdout", "P", "second "), ("stdout", "F", "piece")))
    _write(d / "0.log", _cri(
        ("stdout", "P", "Traceback (most rec"),
        ("stderr", "F", "a stderr line between the parts"),  # another stream: its own line
        ("stdout", "P", "ent call last):"),
        ("stdout", "F", ""),
        ("stdout", "F", ""),  # an empty line
        ("stderr", "F", "RuntimeError: stop"),
    ) + "a line without a prefix (cut by rotation)\n" + _cri(("stdout", "P", "killed mid-li")))
    q = Quirks()
    [lf] = find_logs([tmp_path / "pods"], q)
    assert (lf.namespace, lf.pod, lf.uid, lf.container, lf.restart) == (
        "ml", "train-resnet-0", "7c9e6679-7425-40de-944b-e07fc1f90ae1", "trainer", 0)
    assert [p.name for p in lf.pieces] == ["0.log.20260105-060000.gz", "0.log.20260105-070000", "0.log"]
    assert list(plain_lines(lf, q)) == [
        "first piece", "second piece", "a stderr line between the parts", "Traceback (most recent call last):",
        "", "RuntimeError: stop", "a line without a prefix (cut by rotation)", "killed mid-li"]
    assert q.as_dict() == {"log_lines_without_prefix": 1, "log_partial_lines_at_end": 1}


@pytest.mark.parametrize("text, expect", [
    # Docker's json-file driver (dockershim-era nodes): partial lines lack the newline
    ('{"log":"Epoch 1 ","stream":"stdout","time":"2026-01-05T06:00:00.1Z"}\n'
     '{"log":"done\\n","stream":"stdout","time":"2026-01-05T06:00:00.2Z"}\n'
     '{"log":"CUDA error: an illegal memory access\\n","stream":"stderr","time":"2026-01-05T06:00:01Z"}\n',
     ["Epoch 1 done", "CUDA error: an illegal memory access"]),
    # kubectl logs --timestamps
    ("2026-01-05T06:00:00.123456789Z Epoch 1\n2026-01-05T06:00:01+00:00 NCCL WARN timeout\n",
     ["Epoch 1", "NCCL WARN timeout"]),
    # kubectl logs (plain): unchanged
    ("Epoch 1\n  File \"train.py\", line 3\n", ["Epoch 1", '  File "train.py", line 3']),
])
def test_other_formats(tmp_path: Path, text: str, expect: list[str]) -> None:
    lf = LogFile("ml", "p", None, None, None, False, (_write(tmp_path / "ml_p.log", text),))
    assert list(plain_lines(lf, Quirks())) == expect


def test_file_names_say_whose_log_it_is(tmp_path: Path) -> None:
    _write(tmp_path / "ml_sweep-3.log", "x\n")
    _write(tmp_path / "ml_sweep-3_sweep.previous.log", "x\n")
    _write(tmp_path / "notes.txt", "x\n")
    _write(tmp_path / "pods" / SWEEP / "sweep" / "2.log", "x\n")
    q = Quirks()
    got = {(lf.job_id, lf.container, lf.restart, lf.previous, lf.kubelet) for lf in find_logs([tmp_path], q)}
    assert got == {("ml/sweep-3", None, None, False, False), ("ml/sweep-3", "sweep", 2, False, True),
                   ("ml/sweep-3", "sweep", None, True, False)}
    assert q["log_files_not_recognised"] == 1


# ------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    """A data directory after `gpulens import kubernetes pods.json events.json --logs ...`."""
    root = tmp_path_factory.mktemp("k8s")
    pods = root / "var-log-pods"
    _write(pods / RESNET / "trainer" / "0.log", OOM_RUN)
    _write(pods / RESNET / "trainer" / "1.log", DONE_RUN)
    _write(pods / SWEEP / "sweep" / "0.log", _cri(*STEPS[:5]))  # evicted: nothing in the log
    _write(pods / "ml_crashy-0_7c9e6679-7425-40de-944b-e07fc1f90ae5" / "sidecar" / "0.log",
           _cri(("stdout", "F", "sidecar")))
    _write(pods / "ml_gone-0_00000000-0000-0000-0000-000000000000" / "main" / "0.log", _cri(("stdout", "F", "x")))
    dumps = root / "dumps"  # kubectl logs --timestamps -n batch nightly-eval-29410 > batch_nightly-eval-29410.log
    _write(dumps / "batch_nightly-eval-29410.log", "".join(f"2026-01-05T01:{i:02d}:00.000000001Z {line}\n" for i, line in
           enumerate(["evaluating 2400 batches on 8 ranks", "[rank3]: batch 1200/2400",
                      "[rank3]:[E105 01:59:00.000 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
                      "operation timeout: WorkNCCL(SeqNum=40211, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                      "Timeout(ms)=600000) ran for 600014 milliseconds before timing out.",
                      "[rank3]:[E105 01:59:00.000 ProcessGroupNCCL.cpp:1537] [PG 0 Rank 3] Timeout at NCCL work: "
                      "40211, last enqueued NCCL work: 40211, last completed NCCL work: 40210."])))
    data = root / "data"
    res = CliRunner().invoke(cli, ["--data-dir", str(data), "import", "kubernetes", str(PODS), str(EVENTS),
                                   "--logs", str(pods), "--logs", str(dumps), "--json"])
    assert res.exit_code == 0, res.output
    return data, pods, json.loads(res.output)


def test_logs_are_attached_to_attempts_as_plain_text(imported: tuple[Path, Path, dict[str, Any]]) -> None:
    data, _pods, out = imported
    assert out["rows"]["logs"] == 4
    quirks = next(iter(out["quirks"].values()))
    assert quirks["logs_of_other_containers"] == 1 and quirks["logs_for_pods_not_imported"] == 1
    assert quirks["log_partial_lines_at_end"] == 1
    store = Store.open(data)
    rows = _q(store, "SELECT job_id, attempt, status, reason, log_path FROM attempts WHERE log_path IS NOT NULL"
                     " ORDER BY 1, 2")
    assert rows == [
        ("batch/nightly-eval-29410", 0, "killed", "DeadlineExceeded", "logs/kubernetes/batch/nightly-eval-29410/0.log"),
        ("ml/sweep-3", 0, "killed", "Evicted", "logs/kubernetes/ml/sweep-3/0.log"),
        ("ml/train-resnet-0", 0, "failed", "OOMKilled", "logs/kubernetes/ml/train-resnet-0/0.log"),
        ("ml/train-resnet-0", 1, "passed", "Completed", "logs/kubernetes/ml/train-resnet-0/1.log"),
    ]
    oom = (data / "logs/kubernetes/ml/train-resnet-0/0.log").read_text().splitlines()
    assert oom[0] == "Loading dataset shards from /data/imagenet (1024 shards)"
    assert oom[-1] == "step  6000 | loss 1.00" and len(oom) == 2 + len(STEPS)
    assert not any("stdout" in line for line in oom)
    eval_log = (data / "logs/kubernetes/batch/nightly-eval-29410/0.log").read_text()
    assert eval_log.startswith("evaluating 2400 batches on 8 ranks\n[rank3]: batch 1200/2400\n")
    assert not list((data / "logs" / "kubernetes").rglob("*.tmp"))


def _diagnose_job(data: Path, job: str) -> dict[str, Any]:
    res = CliRunner().invoke(cli, ["--data-dir", str(data), "diagnose", "--job", job, "--json"])
    assert res.exit_code == 0, res.output
    return dict(json.loads(res.output))  # one JSON object


@pytest.mark.slow
def test_oomkilled_restart_is_diagnosed_from_reason_and_log(imported: tuple[Path, Path, dict[str, Any]]) -> None:
    data, _pods, _out = imported
    job = _diagnose_job(data, "ml/train-resnet-0")
    [att] = job["attempts"]  # attempt 1 passed: nothing to diagnose
    assert (att["attempt"], att["category"], att["method"]) == (0, "cpu_oom", "termination")
    assert att["evidence"][0] == "terminated: reason=OOMKilled, exit code 137"
    assert att["context"]["exit"] == "sigkill"
    # the eviction: killed by the kubelet, nothing in the log
    assert _diagnose_job(data, "ml/sweep-3")["attempts"][0]["category"] == "preempted"
    # a deadline is not decisive: the NCCL hang the log shows is why the job ran out of time
    nightly = _diagnose_job(data, "batch/nightly-eval-29410")["attempts"][0]
    assert nightly["category"] == "comm_error", nightly
    assert "terminated: reason=DeadlineExceeded, exit code 143" in nightly["evidence"]


@pytest.mark.slow
def test_diagnose_all_then_reimport_keeps_logs_and_diagnoses(imported: tuple[Path, Path, dict[str, Any]]) -> None:
    data, pods, _out = imported
    res = CliRunner().invoke(cli, ["--data-dir", str(data), "diagnose", "--all", "--json"])
    assert res.exit_code == 0, res.output
    store = Store.open(data)
    fails = dict(((str(r[0]), int(r[1])), (r[2], r[3])) for r in _q(store, "SELECT job_id, attempt, category, method"
                                                                          " FROM failures"))
    assert fails[("ml/train-resnet-0", 0)] == ("cpu_oom", "termination+bn")
    assert fails[("ml/sweep-3", 0)] == ("preempted", "termination+bn")
    # the kubelet has rotated the old run away; the next periodic import keeps the copy
    (pods / RESNET / "trainer" / "0.log").unlink()
    import_kubernetes(store, [PODS, EVENTS], [pods])
    assert _q(store, "SELECT log_path FROM attempts WHERE job_id = 'ml/train-resnet-0' AND attempt = 0") == [
        ("logs/kubernetes/ml/train-resnet-0/0.log",)]
    assert (data / "logs/kubernetes/ml/train-resnet-0/0.log").stat().st_size > 0
    assert _q(store, "SELECT category FROM failures WHERE job_id = 'ml/train-resnet-0' AND attempt = 0") == [
        ("cpu_oom",)]


# ------------------------------------------------------------------ bad input
POD_ITEMS: list[dict[str, Any]] = json.loads(PODS.read_text())["items"]


def _paths(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    out = [path] if path else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*path, i))
    return out


FIELDS = [(i, p) for i, item in enumerate(POD_ITEMS) for p in _paths(item)]
_WRONG = (st.booleans() | st.integers(min_value=-(2**40), max_value=2**40) | st.floats(allow_nan=False)
          | st.text(max_size=8) | st.lists(st.integers(), max_size=2)
          | st.dictionaries(st.sampled_from(["reason", "name", "a"]), st.integers(), max_size=2))


def _with(item: int, path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    doc = {"apiVersion": "v1", "items": copy.deepcopy(POD_ITEMS)}
    node: Any = doc["items"][item]
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


@pytest.mark.parametrize("path, value, field", [
    (("status", "containerStatuses", 0, "lastState", "terminated", "reason"), ["OOMKilled"],
     "status.containerStatuses[0].lastState.terminated.reason is a list"),
    (("status", "containerStatuses", 0, "lastState", "terminated", "reason"), {"a": 1},
     "status.containerStatuses[0].lastState.terminated.reason is an object"),
    (("metadata", "name"), 7, "metadata.name is a number"),
    (("status", "containerStatuses", 0, "state", "terminated", "exitCode"), "0",
     "status.containerStatuses[0].state.terminated.exitCode is a string"),
])
def test_wrong_types_name_the_field(tmp_path: Path, path: tuple[str | int, ...], value: Any, field: str) -> None:
    bad = _write(tmp_path / "pods.json", json.dumps(_with(0, path, value)))
    with pytest.raises(InputError, match=re.escape(field)):
        read_pods([bad])


@pytest.mark.slow
def test_wrong_type_on_the_command_line_is_one_line_exit_2(tmp_path: Path) -> None:
    path = ("status", "containerStatuses", 0, "lastState", "terminated", "reason")
    bad = _write(tmp_path / "pods.json", json.dumps(_with(0, path, ["OOMKilled"])))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    r = subprocess.run([sys.executable, "-m", "gpulens", "--data-dir", str(tmp_path / "d"), "import", "kubernetes",
                        str(bad)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"{bad}:1: status.containerStatuses[0].lastState.terminated.reason is a list" in r.stderr, r.stderr


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(where=st.sampled_from(FIELDS), value=_WRONG)
@pytest.mark.slow
def test_fuzz_one_field_of_the_wrong_type(tmp_path_factory: pytest.TempPathFactory,
                                          where: tuple[int, tuple[str | int, ...]], value: Any) -> None:
    """200 copies of pods.json with one field given another type: read into the tables the import
    writes (everything that depends on the values; the write itself takes typed tables), or one
    line naming the field."""
    item, path = where
    old: Any = POD_ITEMS[item]
    for k in path:
        old = old[k]
    if type(old) is type(value) or (isinstance(old, (int, float)) and isinstance(value, (int, float))
                                    and not isinstance(value, bool)):
        value = [value]  # always another type
    bad = tmp_path_factory.mktemp("f") / "pods.json"
    bad.write_text(json.dumps(_with(item, path, value)))
    try:
        read_pods([bad]).tables({})
    except InputError as exc:
        text = str(exc)
        name = next(str(k) for k in reversed(path) if isinstance(k, str))
        assert "\n" not in text and name in text, (path, value, text)


_LOG_LINE = st.one_of(
    st.binary(max_size=40),
    st.tuples(st.sampled_from(["2026-01-05T06:00:00.1Z", "2026-13-99Tx", "", "stdout"]),
              st.sampled_from(["stdout", "stderr", "stdin", ""]), st.sampled_from(["F", "P", "X", "P:x", ""]),
              st.text(max_size=12)).map(lambda t: " ".join(t).encode("utf-8", "surrogatepass")),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(lines=st.lists(_LOG_LINE, max_size=8), gz=st.booleans())
@pytest.mark.slow
def test_fuzz_malformed_logs(tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], gz: bool) -> None:
    """Binary data, broken prefixes, damaged gzip: a plain copy or nothing, counted, never a traceback."""
    root = tmp_path_factory.mktemp("logs")
    blob = b"\n".join(lines)
    _write(root / RESNET / "trainer" / "0.log", blob)
    if gz:
        _write(root / RESNET / "trainer" / "0.log.20260105-050000.gz", blob)  # not really gzip
    q = Quirks()
    [lf] = find_logs([root], q)
    dest = root / "copy" / "0.log"
    tmp = stage_copy(lf, dest, q)
    if tmp is not None:
        assert b"\x00" not in tmp.read_bytes() and tmp.parent == dest.parent
    assert [p.name for p in dest.parent.iterdir()] == ([tmp.name] if tmp else [])


def test_pod_listed_twice_is_one_job(store: Store) -> None:
    res = import_kubernetes(store, [PODS, PODS])
    assert res.quirks[f"{PODS}, {PODS}"]["pods_listed_twice"] == 6
    assert _q(store, "SELECT count(*) FROM jobs") == [(6,)]


def test_binary_log_is_skipped_and_counted(store: Store, tmp_path: Path) -> None:
    _write(tmp_path / RESNET / "trainer" / "0.log", bytes(range(256)) * 64)
    res = import_kubernetes(store, [PODS], [tmp_path])
    assert res.rows["logs"] == 0
    assert res.quirks[str(PODS)]["log_files_skipped_binary"] == 1


def test_termination_joins_the_log() -> None:
    from gpulens.diagnosis.termination import with_termination
    from gpulens.diagnosis.types import Diagnosis

    silent = Diagnosis("unknown", "unknown", 0.0, method="none", reason="no failure line")
    gpu = Diagnosis("gpu_oom", "user", 0.95, ["torch.OutOfMemoryError: CUDA out of memory."], rule_id="cuda-oom")
    assert with_termination(silent, None, 137) is silent  # no record: the exit code is the network's evidence
    assert with_termination(gpu, "Error", 1) is gpu  # nothing the record can say
    oom = with_termination(gpu, "OOMKilled", 137)  # decisive: the memory limit ended it
    assert (oom.category, oom.method, oom.evidence[0]) == ("cpu_oom", "termination",
                                                            "terminated: reason=OOMKilled, exit code 137")
    assert oom.evidence[1] == "the log showed: torch.OutOfMemoryError: CUDA out of memory."
    late = with_termination(gpu, "DeadlineExceeded", 143)  # not decisive: the log's failure first
    assert (late.category, late.evidence[-1]) == ("gpu_oom", "terminated: reason=DeadlineExceeded, exit code 143")
    assert with_termination(silent, "DeadlineExceeded", 143).category == "preempted"
    assert with_termination(silent, "Error", 139).category == "crash"


def test_a_long_log_keeps_its_start_and_its_end(tmp_path: Path) -> None:
    lines = [("stdout", "F", f"line {i:04d} " + "x" * 40) for i in range(2000)]  # 2000 lines of 51 bytes
    with gzip.open(_write(tmp_path / "pods" / RESNET / "trainer" / "0.log.20260105-050000.gz", b""), "wt") as fh:
        fh.write(_cri(*lines[:1000]))
    _write(tmp_path / "pods" / RESNET / "trainer" / "0.log", _cri(*lines[1000:]))
    q = Quirks()
    [lf] = find_logs([tmp_path / "pods"], q)
    tmp = stage_copy(lf, tmp_path / "copy" / "0.log", q, max_bytes=10_200, head_bytes=1_020)
    assert tmp is not None
    text = tmp.read_text().splitlines()
    assert text[:20] == [f"line {i:04d} " + "x" * 40 for i in range(20)]
    assert text[20].startswith("[gpulens: about ") and text[20].endswith(" bytes of the log left out]")
    assert text[21:] == [f"line {i:04d} " + "x" * 40 for i in range(1820, 2000)]
    assert q["logs_shortened"] == 1

"""Bad importer input: one line, exit 2, nothing stored; a fuzz test over the record parsers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulens.errors import InputError
from gpulens.ingest.importers.metrics import import_metrics
from gpulens.ingest.importers.philly import PhillyFiles, import_philly
from gpulens.ingest.importers.slurm import import_slurm
from gpulens.store import Store

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HEADER = "JobID|JobName|User|Account|Partition|Submit|Start|End|State|ExitCode|AllocTRES|NodeList"


def _stored(store: Store) -> tuple[int, ...]:
    con = store.connect()
    try:
        return tuple(int(con.execute(f"SELECT count(*) FROM {t}").fetchone()[0])  # type: ignore[index]  # noqa: S608
                     for t in ("jobs", "attempts", "placements", "imports", "nodes", "gpu_samples"))
    finally:
        con.close()


def _one_line_error(store: Store, do: Callable[[], object], expect: str) -> None:
    before = _stored(store)
    with pytest.raises(InputError) as err:
        do()
    text = str(err.value)
    assert "\n" not in text and expect in text, text
    assert _stored(store) == before, "nothing may be stored"


SLURM_CASES = {
    "random bytes": (bytes(range(256)) * 8, "not UTF-8 text"),
    "binary after a JSON start": (b'{"jobs": [' + bytes(range(128, 256)), "not UTF-8 text"),
    "time is a number": (json.dumps({"jobs": [{"job_id": 1, "time": 5}]}).encode(),
                         ":1: a value has an unexpected type"),
    "tres is a number": (json.dumps({"jobs": [{"job_id": 1, "tres": 5}]}).encode(),
                         ":1: a value has an unexpected type"),
    "start is text": (json.dumps({"jobs": [{"job_id": 1, "time": {"start": "soon"}}]}).encode(),
                      ":1: a value has an unexpected type"),
    "user is an object": (json.dumps({"jobs": [{"job_id": 1, "user": {"a": 1}}]}).encode(),
                          "user is a JSON object"),
    "timestamp out of range": (json.dumps({"jobs": [{"job_id": 1, "time": {"start": 10**30}}]}).encode(),
                               "OverflowError"),
    "jobs is not a list": (json.dumps({"jobs": {"a": 1}}).encode(), "'jobs' is not a list"),
    "parsable2 hostlist": ((HEADER + "\n7|t|u|a|p|2024-01-01T00:00:00|2024-01-01T00:00:00|"
                            "2024-01-01T01:00:00|COMPLETED|0:0|gres/gpu=1|n[1-x]\n").encode(), ":2: "),
}


@pytest.mark.parametrize("case", sorted(SLURM_CASES))
@pytest.mark.slow
def test_import_slurm_bad_input(store: Store, tmp_path: Path, case: str) -> None:
    data, expect = SLURM_CASES[case]
    path = tmp_path / "sacct.out"
    path.write_bytes(data)
    _one_line_error(store, lambda: import_slurm(store, path), expect)


def _philly(tmp_path: Path, name: str, edit: Callable[[str], str] | bytes) -> PhillyFiles:
    d = tmp_path / "trace"
    d.mkdir(exist_ok=True)
    text = (FIX / "philly" / name).read_text() if (FIX / "philly" / name).exists() else ""
    if isinstance(edit, bytes):
        (d / name).write_bytes(edit)
    else:
        (d / name).write_text(edit(text))
    return PhillyFiles(**{name.removeprefix("cluster_"): d / name})


GPU_ROW = "2017-10-03 10:01:00 PDT,m1,60,20,0,0,0,0,0,0,"
PHILLY_CASES: dict[str, tuple[str, Callable[[str], str] | bytes, str]] = {
    "non-numeric utilization": ("cluster_gpu_util", lambda s: s.replace(GPU_ROW, GPU_ROW.replace(",60,", ",sixty,")),
                                "utilization 'sixty' is not a number"),
    "short row without machine": ("cluster_gpu_util", lambda s: s.replace(GPU_ROW, "2017-10-03 10:01:00 PDT"),
                                  "machine id is empty"),
    "binary gpu util": ("cluster_gpu_util", b"time,machineId,gpu0_util\n" + bytes(range(128, 256)), "not UTF-8"),
    "short machine list row": ("cluster_machine_list",
                               lambda s: "machineId,number of GPUs,single GPU mem\nm1\n",
                               "number of GPUs [] is not an integer"),
    "job log with wrong types": ("cluster_job_log", lambda s: json.dumps(
        [{"jobid": "a", "status": "Pass", "attempts": [{"start_time": 5}]}]), "is not a time string"),
    "job log attempts is a number": ("cluster_job_log", lambda s: json.dumps(
        [{"jobid": "a", "status": "Pass", "attempts": 7}]), "is not a list"),
}


@pytest.mark.parametrize("case", sorted(PHILLY_CASES))
def test_import_philly_bad_input(store: Store, tmp_path: Path, case: str) -> None:
    name, edit, expect = PHILLY_CASES[case]
    files = _philly(tmp_path, name, edit)
    _one_line_error(store, lambda: import_philly(store, files), expect)


@pytest.mark.slow
def test_short_gpu_util_row_with_a_machine_is_a_quirk_not_an_error(store: Store, tmp_path: Path) -> None:
    files = _philly(tmp_path, "cluster_gpu_util", lambda s: s.replace(GPU_ROW, "2017-10-03 10:01:00 PDT,m1"))
    res = import_philly(store, files)
    assert res.quirks[str(files.gpu_util)]["empty_values_skipped"] >= 8


@pytest.mark.slow
def test_cli_bad_import_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "sacct.bin"
    bad.write_bytes(bytes(range(256)) * 4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    r = subprocess.run([sys.executable, "-m", "gpulens", "--data-dir", str(tmp_path / "d"), "import", "slurm",
                        str(bad)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not UTF-8 text" in r.stderr, r.stderr


# ------------------------------------------------------------------------- fuzz
_KEYS = ["job_id", "user", "account", "name", "time", "start", "end", "submission", "state", "current",
         "exit_code", "return_code", "signal", "id", "tres", "allocated", "type", "count", "nodes", "array",
         "task_id", "number", "set", "infinite", "jobid", "status", "vc", "attempts", "start_time",
         "end_time", "detail", "ip", "gpus", "submitted_time", "step", "epoch", "metric", "value"]
_SCALAR = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False)
           | st.sampled_from(["", "gpu0", "gres", "2024-01-01 10:00:00", "NA", "n[1-3]", "1:9", "COMPLETED"])
           | st.text(max_size=6))
_JSON = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4), max_leaves=12)
_RECORD = st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=8)
_FIELD = st.text(alphabet="0123456789:-T []|,.gpuresNA/=\t\x00é", max_size=12)


class _Fuzz:
    """One store for all examples (a store per example would be slow); counts what is stored."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gpulens-fuzz-"))
        self.store = Store.open(self.dir / "data")
        self.n = 0

    def check(self, name: str, data: bytes, run: Callable[[Path], object]) -> None:
        self.n += 1
        path = self.dir / f"{self.n}-{name}"
        path.write_bytes(data)
        before = (self.store.generation(), len(self.store.segment_files()))
        try:
            run(path)
        except InputError as exc:
            assert "\n" not in str(exc), str(exc)
            assert (self.store.generation(), len(self.store.segment_files())) == before, "stored"
        finally:
            path.unlink()

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def fuzz() -> object:
    f = _Fuzz()
    yield f
    f.close()


_FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])


@_FUZZ
@given(jobs=st.lists(_RECORD, max_size=3))
@pytest.mark.slow
def test_fuzz_sacct_json(fuzz: _Fuzz, jobs: list[dict[str, object]]) -> None:
    fuzz.check("sacct.json", json.dumps({"jobs": jobs}).encode(), lambda p: import_slurm(fuzz.store, p))


@_FUZZ
@given(rows=st.lists(st.lists(_FIELD, min_size=12, max_size=12), min_size=1, max_size=3))
def test_fuzz_sacct_parsable(fuzz: _Fuzz, rows: list[list[str]]) -> None:
    text = HEADER + "\n" + "\n".join("|".join(r).replace("\n", " ") for r in rows) + "\n"
    fuzz.check("sacct.txt", text.encode("utf-8", "surrogatepass"), lambda p: import_slurm(fuzz.store, p))


@_FUZZ
@given(records=st.lists(_RECORD, max_size=3))
@pytest.mark.slow
def test_fuzz_philly_job_log(fuzz: _Fuzz, records: list[dict[str, object]]) -> None:
    fuzz.check("cluster_job_log", json.dumps(records).encode(),
               lambda p: import_philly(fuzz.store, PhillyFiles(job_log=p)))


@_FUZZ
@given(rows=st.lists(st.lists(_FIELD, min_size=0, max_size=5), min_size=1, max_size=4))
@pytest.mark.slow
def test_fuzz_philly_csvs(fuzz: _Fuzz, rows: list[list[str]]) -> None:
    body = "\n".join(",".join(r) for r in rows) + "\n"
    fuzz.check("cluster_gpu_util", ("time,machineId,gpu0_util,gpu1_util\n" + body).encode(),
               lambda p: import_philly(fuzz.store, PhillyFiles(gpu_util=p)))
    fuzz.check("cluster_machine_list", ("machineId,number of GPUs,single GPU mem\n" + body).encode(),
               lambda p: import_philly(fuzz.store, PhillyFiles(machine_list=p)))


@_FUZZ
@given(records=st.lists(_RECORD, max_size=3), raw=st.binary(max_size=64))
@pytest.mark.slow
def test_fuzz_metrics_and_raw_bytes(fuzz: _Fuzz, records: list[dict[str, object]], raw: bytes) -> None:
    jsonl = "\n".join(json.dumps(r) for r in records) + "\n"
    fuzz.check("curves.jsonl", jsonl.encode(), lambda p: import_metrics(fuzz.store, p))
    fuzz.check("sacct.raw", raw, lambda p: import_slurm(fuzz.store, p))

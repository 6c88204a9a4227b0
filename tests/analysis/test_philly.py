"""The Philly-format fixture (tests/fixtures/philly, written from the trace's documented
schema with its quirks) imports and analyzes to hand-computed answers.

Hand computation (minutes m with floor(start) <= m < end; NA skipped):
job 0001 m1 gpu0,1 10:00:30-10:03:00 -> 6 GPU-min; util 50,60,NA + 20,20,20 -> busy 1.7, mean 34
job 0002 retry: m2 gpu0 10:00-10:01:30 (100,100) + m2 gpu0 & m3 gpu0 10:02:10-10:04 (40,40 / 80,NA)
          -> 6 GPU-min, busy 3.6, mean 72; both attempts failed (90 s and 110 s)
job 0004 running on m3 gpu1 from 2017-11-06 09:00 PST; newest sample 09:02 -> 3 GPU-min,
          util 30, 50, NA -> busy 0.8, mean 40
cluster: 15 GPU-min, busy 6.1, 12 sampled minutes -> mean 50.8333
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpulens import analysis
from gpulens.errors import InputError
from gpulens.ingest.importers.philly import find_files, import_philly
from gpulens.store import Store

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "philly"
J1, J2, J3, J4, J5 = (f"application_1506638472019_000{i}" for i in range(1, 6))


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-9, abs=1e-12)


@pytest.mark.slow
def test_import_and_analyze(store: Store) -> None:
    res = import_philly(store, find_files(FIX))
    assert res.rows["jobs"] == 5 and res.rows["attempts"] == 5 and res.rows["placements"] == 6
    q = res.quirks[str(FIX / "cluster_job_log")]
    assert q["duplicate_jobid_skipped"] == 1
    assert q["jobs_without_attempts"] == 1
    assert q["running_attempts"] == 1
    assert q["attempts_without_gpus"] == 1
    assert q["submitted_time_missing"] == 1
    u = res.quirks[str(FIX / "cluster_gpu_util")]
    assert u["zone_pdt_stripped"] == 13 and u["zone_pst_stripped"] == 3
    assert u["trailing_comma_header"] == 1
    # 16 rows x 8 GPU columns = 128 values, 45 of them NA
    assert u["na_values_skipped"] == 45 and u["samples_written"] == 128 - 45
    con = store.connect()
    assert con.execute("SELECT count(*) FROM imports").fetchone() == (5,)
    assert con.execute("SELECT gpus, gpu_memory_bytes FROM nodes WHERE node = 'm3'").fetchone() == (
        2, 12 * 2**30)
    jobs = analysis.job_utilization(con).set_index("job_id")
    assert jobs.loc[J1, "allocated_gpu_hours"] == approx(6 / 60)
    assert jobs.loc[J1, "mean_util"] == approx(34.0)
    assert jobs.loc[J2, "busy_gpu_hours"] == approx(3.6 / 60)
    assert (jobs.loc[J2, "gpus"], jobs.loc[J2, "servers"]) == (2, 2)
    assert jobs.loc[J4, "status"] == "running"
    assert jobs.loc[J4, "allocated_gpu_hours"] == approx(3 / 60)
    assert jobs.loc[J4, "mean_util"] == approx(40.0)
    assert jobs.loc[J3, "allocated_gpu_hours"] == 0 and jobs.loc[J5, "allocated_gpu_hours"] == 0
    cl = analysis.utilization(con).iloc[0]
    assert cl["allocated_gpu_hours"] == approx(15 / 60)
    assert cl["busy_gpu_hours"] == approx(6.1 / 60)
    assert cl["mean_util"] == approx(100 * 6.1 / 12)
    fc = analysis.failure_cost(con)
    assert len(fc) == 1 and fc.iloc[0]["failures"] == 2
    assert fc.iloc[0]["allocated_gpu_hours"] == approx(6 / 60)
    assert fc.iloc[0]["mean_runtime_to_failure_hours"] == approx(100 / 3600)
    loss = analysis.locality_loss(con)
    assert list(loss["job_id"]) == [J2]
    assert loss.iloc[0]["lost_busy_gpu_hours"] == approx((34 - 160 / 3) / 100 * 4 / 60)


@pytest.mark.slow
def test_reimport_is_idempotent_for_state(store: Store) -> None:
    import_philly(store, find_files(FIX))
    import_philly(store, find_files(FIX))
    con = store.connect()
    assert con.execute("SELECT count(*) FROM jobs").fetchone() == (5,)
    assert con.execute("SELECT count(*) FROM placements").fetchone() == (6,)
    # samples were written twice; duplicate minutes do not change the analysis
    assert analysis.utilization(con).iloc[0]["busy_gpu_hours"] == approx(6.1 / 60)


def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "trace"
    shutil.copytree(FIX, dst)
    return dst


def _nothing_stored(store: Store) -> None:
    con = store.connect()
    assert con.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM imports").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (0,)


def test_malformed_job_log_names_line(store: Store, tmp_path: Path) -> None:
    d = _copy(tmp_path)
    text = (d / "cluster_job_log").read_text().splitlines()
    assert text[56].strip() == '"jobid": "application_1506638472019_0003",'
    text[56] = '    "jobid": "application_1506638472019_0003",,'
    (d / "cluster_job_log").write_text("\n".join(text))
    with pytest.raises(InputError, match=r"cluster_job_log:57: malformed JSON"):
        import_philly(store, find_files(d))
    _nothing_stored(store)


def test_bad_time_in_job_log(store: Store, tmp_path: Path) -> None:
    d = _copy(tmp_path)
    p = d / "cluster_job_log"
    p.write_text(p.read_text().replace('"2017-10-03 10:59:00"', '"yesterday"'))
    with pytest.raises(InputError, match=r"cluster_job_log:\d+: submitted_time 'yesterday'"):
        import_philly(store, find_files(d))
    _nothing_stored(store)


def test_malformed_util_row_names_line(store: Store, tmp_path: Path) -> None:
    d = _copy(tmp_path)
    p = d / "cluster_gpu_util"
    lines = p.read_text().splitlines()
    lines[5] = lines[5].replace(",100,", ",1OO,", 1)
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match=r"cluster_gpu_util:6: malformed CSV row"):
        import_philly(store, find_files(d))
    _nothing_stored(store)
    assert not list(store.tmp.glob("seg-gpu-*"))


@pytest.mark.slow
def test_machine_id_spelling_and_gz(store: Store, tmp_path: Path) -> None:
    import gzip

    d = tmp_path / "t2"
    d.mkdir()
    text = (FIX / "cluster_gpu_util").read_text().replace("machineId", "machine_id", 1)
    with gzip.open(d / "cluster_gpu_util.gz", "wt") as fh:
        fh.write(text)
    with gzip.open(d / "cluster_job_log.gz", "wt") as fh:
        fh.write((FIX / "cluster_job_log").read_text())
    res = import_philly(store, find_files(d))
    assert res.quirks[str(d / "cluster_gpu_util.gz")]["machine_id_spelling"] == 1
    assert analysis.utilization(store.connect()).iloc[0]["busy_gpu_hours"] == approx(6.1 / 60)


@pytest.mark.slow
def test_cli_import_and_analyze(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gpulens.cli.main import cli

    runner = CliRunner()
    data = str(tmp_path / "d")
    r = runner.invoke(cli, ["--data-dir", data, "-q", "import", "philly", str(FIX), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["rows"]["jobs"] == 5
    r = runner.invoke(cli, ["--data-dir", data, "analyze", "utilization", "--by", "vc", "--json"])
    assert r.exit_code == 0, r.output
    rows = {x["vc"]: x for x in json.loads(r.stdout)}
    assert rows["vc1"]["allocated_gpu_hours"] == approx(6 / 60)
    r = runner.invoke(cli, ["--data-dir", data, "analyze", "utilization"])
    assert r.exit_code == 0 and "GPU-hours" in r.output
    for name in ("locality", "early-stop", "online-stop", "goodput", "failure-cost", "jobs"):
        r = runner.invoke(cli, ["--data-dir", data, "analyze", name])
        assert r.exit_code == 0, (name, r.output)

"""Slurm (sacct --parsable2 / --json) and metric-curve importers on checked-in fixtures."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from gpulens import analysis
from gpulens.errors import InputError
from gpulens.ingest.importers.jsonstream import iter_array
from gpulens.ingest.importers.metrics import import_metrics
from gpulens.ingest.importers.slurm import expand_hostlist, import_slurm
from gpulens.store import Store

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"


def test_expand_hostlist() -> None:
    assert expand_hostlist("gpu[01-03,07],cpu5") == ["gpu01", "gpu02", "gpu03", "gpu07", "cpu5"]
    assert expand_hostlist("None assigned") == []
    assert expand_hostlist("n1") == ["n1"]


@pytest.mark.slow
def test_sacct_parsable2(store: Store) -> None:
    res = import_slurm(store, FIX / "sacct.txt")
    q = res.quirks[str(FIX / "sacct.txt")]
    assert q["steps_skipped"] == 1
    assert q["requeued_attempts"] == 1
    assert q["jobs_without_start"] == 1  # the PENDING job
    con = store.connect()
    jobs = dict(con.execute("SELECT job_id, status FROM jobs").fetchall())
    assert jobs == {"1001": "passed", "1002": "killed", "1003": "failed", "1004": "queued",
                    "1005": "running"}
    att = con.execute("SELECT attempt, status, start_time, exit_code, signal FROM attempts "
                      "WHERE job_id = '1002' ORDER BY attempt").fetchall()
    assert att == [(0, "failed", datetime(2024, 1, 1, 10, 0), 0, 0),
                   (1, "killed", datetime(2024, 1, 1, 10, 40), 0, 15)]
    pl = con.execute("SELECT attempt, node, count(*) FROM placements WHERE job_id = '1002' "
                     "GROUP BY ALL ORDER BY ALL").fetchall()
    assert pl == [(0, "gpu02", 8), (0, "gpu03", 8), (1, "gpu04", 8), (1, "gpu06", 8)]
    u = analysis.job_utilization(con).set_index("job_id")
    # 1002: 30 min x 16 GPUs + 80 min x 16 GPUs
    assert u.loc["1002", "allocated_gpu_hours"] == pytest.approx((30 + 80) * 16 / 60)
    assert u.loc["1001", "allocated_gpu_hours"] == pytest.approx(4.0)
    assert con.execute("SELECT end_time FROM attempts WHERE job_id = '1005'").fetchone() == (None,)


@pytest.mark.slow
def test_sacct_json(store: Store) -> None:
    res = import_slurm(store, FIX / "sacct.json")
    assert res.kind == "slurm:json" and res.rows["jobs"] == 2
    con = store.connect()
    row = con.execute("SELECT start_time, end_time, status FROM attempts WHERE job_id = '2001'"
                      ).fetchone()
    assert row == (datetime(2024, 1, 1, 10, 0), datetime(2024, 1, 1, 11, 0), "passed")
    assert con.execute("SELECT count(*) FROM placements WHERE job_id = '2001'").fetchone() == (8,)
    assert con.execute("SELECT exit_code FROM attempts WHERE job_id = '2002'").fetchone() == (1,)


def test_sacct_bad_line(store: Store, tmp_path: Path) -> None:
    p = tmp_path / "bad.txt"
    lines = (FIX / "sacct.txt").read_text().splitlines()
    lines[3] = lines[3].replace("2024-01-01T10:00:00", "soon", 1)
    p.write_text("\n".join(lines))
    with pytest.raises(InputError, match=r"bad.txt:4: "):
        import_slurm(store, p)
    assert store.connect().execute("SELECT count(*) FROM jobs").fetchone() == (0,)


@pytest.mark.slow
def test_metrics_csv_and_jsonl(store: Store, tmp_path: Path) -> None:
    csv_path = tmp_path / "curves.csv"
    csv_path.write_text("job,epoch,metric,value\nj1,1,accuracy,0.5\nj1,2,accuracy,0.9\n"
                        "j1,3,accuracy,\nj1,4,accuracy,0.9\n")
    res = import_metrics(store, csv_path)
    assert res.rows["job_metrics"] == 3
    assert res.quirks[str(csv_path)] == {"empty_values_skipped": 1, "jobs_not_in_store": 1}
    import_metrics(store, csv_path)  # idempotent
    jl = tmp_path / "curves.jsonl"
    jl.write_text('{"job_id": "j2", "step": 1, "metric": "loss", "value": 2.0}\n'
                  '{"job_id": "j2", "step": 2, "metric": "loss", "value": "nan"}\n')
    import_metrics(store, jl)
    con = store.connect()
    assert con.execute("SELECT count(*) FROM job_metrics").fetchone() == (4,)
    bad = tmp_path / "bad.csv"
    bad.write_text("job,step,metric,value\nj3,1,accuracy,0.5\nj3,x,accuracy,0.6\n")
    with pytest.raises(InputError, match=r"bad.csv:3: step 'x'"):
        import_metrics(store, bad)
    assert store.connect().execute("SELECT count(*) FROM job_metrics WHERE job_id = 'j3'"
                                   ).fetchone() == (0,)


def test_tensorboard_needs_package(store: Store, tmp_path: Path) -> None:
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        from gpulens.errors import MissingExtraError

        d = tmp_path / "tb"
        d.mkdir()
        with pytest.raises(MissingExtraError, match="tensorboard"):
            import_metrics(store, d, job_id="j1")


def test_json_stream_lines(tmp_path: Path) -> None:
    p = tmp_path / "a.json"
    p.write_text('[\n {"a": 1},\n {"a": 2}\n]\n')
    assert [line for line, _ in iter_array(p)] == [2, 3]

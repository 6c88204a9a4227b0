"""`gpulens diagnose FILE... [--json]` works without a store; bad invocations exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpulens.cli.main import cli

ROOT = Path(__file__).resolve().parents[2]
HOLDOUT = ROOT / "tests" / "diagnosis" / "fixtures" / "holdout"


def test_diagnose_files_json(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("")
    files = [str(HOLDOUT / "slurm_timeout.log"), str(HOLDOUT / "import_transformers.log"), str(empty)]
    res = CliRunner().invoke(cli, ["--data-dir", str(tmp_path / "nostore"), "diagnose", *files, "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["category"] for r in rows] == ["preempted", "import_error", "unknown"]
    for r in rows:
        assert {"file", "category", "origin", "confidence", "evidence"} <= set(r)
    assert rows[2]["reason"] == "empty log"
    assert not (tmp_path / "nostore" / "gpulens.duckdb").exists()


def test_diagnose_human_output(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["diagnose", str(HOLDOUT / "driver_old.log")])
    assert res.exit_code == 0
    assert "cuda_env_error" in res.output


@pytest.mark.slow
def test_missing_file_exits_2_after_reporting(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "gpulens.cli.main", "diagnose", str(tmp_path / "nope.log"),
                           str(HOLDOUT / "typo_attr.log"), "--json"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    rows = json.loads(proc.stdout)
    assert rows[0]["reason"] == "file not found" and rows[1]["category"] == "semantic_error"
    assert "could not be read" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_no_arguments_is_a_usage_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpulens.cli.main", "diagnose"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert "Give log FILE" in proc.stderr


@pytest.mark.slow
def test_label_records_a_manual_verdict_that_survives_and_refits(tmp_path: Path) -> None:
    """`diagnose --label JOB[:ATTEMPT] --origin O`: the operator's verdict is kept by --all and is
    what the store's network learns from; bad labels are one line, exit 2."""
    from gpulens.diagnosis.jobs import diagnose_all, labeled_history
    from gpulens.store import Store
    from tests.diagnosis.test_jobs import FakeClassifier, add_job

    data = tmp_path / "data"
    store = Store.open(data)
    add_job(store, "j1", [{"status": "failed", "nodes": ["n1"], "minutes": 5, "category": "crash"},
                          {"status": "failed", "nodes": ["n2"], "start": 10, "minutes": 5, "category": "crash"}])
    diagnose_all(store, classify=FakeClassifier())
    res = CliRunner().invoke(cli, ["--data-dir", str(data), "diagnose", "--label", "j1", "--origin", "framework",
                                   "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {"job_id": "j1", "attempt": 1, "category": "crash", "origin": "framework",
                                      "method": "manual"}
    res = CliRunner().invoke(cli, ["--data-dir", str(data), "diagnose", "--label", "j1:0", "--origin", "user",
                                   "--category", "semantic_error"])
    assert res.exit_code == 0 and "attempt 0: semantic_error, origin user" in res.output
    diagnose_all(store, classify=FakeClassifier())
    con = store.connect()
    try:
        rows = con.execute("SELECT attempt, category, origin, method FROM failures ORDER BY attempt").fetchall()
    finally:
        con.close()
    assert rows == [(0, "semantic_error", "user", "manual"), (1, "crash", "framework", "manual")]
    assert sorted(labeled_history(store)["origin"]) == ["framework", "user"]
    for args, msg in ((["--label", "j1", "--origin", "martians"], "'martians' is not an origin"),
                      (["--label", "j1:7", "--origin", "user"], "No failed attempt 7 of job 'j1'"),
                      (["--label", "j1"], "--label needs --origin"),
                      (["--origin", "user", "--all"], "--origin and --category go with --label")):
        proc = subprocess.run([sys.executable, "-m", "gpulens.cli.main", "--data-dir", str(data), "diagnose", *args],
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2, (args, proc.stderr)
        assert msg in proc.stderr and "Traceback" not in proc.stderr

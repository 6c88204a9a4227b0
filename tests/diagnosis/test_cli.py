"""`gpulens diagnose FILE... [--json]` works without a store; bad invocations exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    rows = [json.loads(line) for line in res.output.strip().splitlines()]
    assert [r["category"] for r in rows] == ["preempted", "import_error", "unknown"]
    for r in rows:
        assert {"file", "category", "origin", "confidence", "evidence"} <= set(r)
    assert rows[2]["reason"] == "empty log"
    assert not (tmp_path / "nostore" / "gpulens.duckdb").exists()


def test_diagnose_human_output(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["diagnose", str(HOLDOUT / "driver_old.log")])
    assert res.exit_code == 0
    assert "cuda_env_error" in res.output


def test_missing_file_exits_2_after_reporting(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "gpulens.cli.main", "diagnose", str(tmp_path / "nope.log"),
                           str(HOLDOUT / "typo_attr.log"), "--json"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    rows = [json.loads(x) for x in proc.stdout.strip().splitlines()]
    assert rows[0]["reason"] == "file not found" and rows[1]["category"] == "semantic_error"
    assert "could not be read" in proc.stderr and "Traceback" not in proc.stderr


def test_no_arguments_is_a_usage_error() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpulens.cli.main", "diagnose"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2
    assert "Give log FILE" in proc.stderr

"""`gpulens validate`: JSON keys, exit codes, job specs, the record and the summary."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpulens.cli.main import main
from gpulens.store import Store

KEYS = {"verdict", "category", "origin", "evidence", "steps_completed", "seconds", "peak_memory_bytes", "device"}


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(args)  # the console script passes this to sys.exit
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return int(code or 0), out, err


@pytest.fixture(autouse=True)
def _cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPULENS_VALIDATE_BACKEND", "none")  # configuration, not a patch of internals


@pytest.mark.slow
def test_json_pass_fail_inconclusive_and_usage_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = ["--data-dir", str(tmp_path / "data")]
    (tmp_path / "ok.py").write_text("print('fine')\n")
    code, out, err = _run([*data, "validate", "--json", "--workdir", str(tmp_path), "--", sys.executable, "ok.py"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["verdict"] == "pass" and KEYS <= set(doc)
    assert "executes the job's code with your permissions" in err

    (tmp_path / "bad.py").write_text("def f(:\n")
    code, out, _ = _run([*data, "validate", "--json", "--workdir", str(tmp_path), "--", sys.executable, "bad.py"], capsys)
    doc = json.loads(out)
    assert code == 1 and (doc["verdict"], doc["category"], doc["origin"]) == ("fail", "syntax_error", "user")

    (tmp_path / "spin").mkdir()  # its own job directory: bad.py above is not part of it
    (tmp_path / "spin" / "spin.py").write_text("while True:\n    pass\n")
    code, out, _ = _run([*data, "validate", "--json", "--timeout", "2", "--workdir", str(tmp_path / "spin"), "--", sys.executable, "spin.py"], capsys)
    assert code == 3 and json.loads(out)["verdict"] == "inconclusive"

    code, _, err = _run([*data, "validate"], capsys)
    assert code == 2 and "Nothing to validate" in err
    code, _, err = _run([*data, "validate", "--gpu-type", "Z80", "--", sys.executable, "ok.py"], capsys)
    assert code == 2 and "Z80" in err
    code, _, err = _run([*data, "validate", "--job-spec", str(tmp_path / "missing.yaml")], capsys)
    assert code == 2 and "missing.yaml" in err

    rows = Store(tmp_path / "data").connect().execute("SELECT verdict FROM validations ORDER BY id").fetchall()
    assert rows == [("pass",), ("fail",), ("inconclusive",)]


@pytest.mark.slow
def test_job_spec_and_human_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text("import json\nprint(open('data.txt').read())\n")
    (tmp_path / "job.yaml").write_text(
        f"command: [{sys.executable!r}, train.py]\nworkdir: job\ninputs: [data.txt]\n"
        "output_dir: out\ngpus: 2\ngpu_type: V100\n"
    )
    code, out, _ = _run(["--data-dir", str(tmp_path / "data"), "validate", "--no-record", "--job-spec", str(tmp_path / "job.yaml")], capsys)
    assert code == 1
    assert "FAIL incorrect_input (origin: data)" in out and "data.txt does not exist" in out and "fix:" in out
    (job / "data.txt").write_text("42\n")
    code, out, _ = _run(["--data-dir", str(tmp_path / "data"), "validate", "--no-record", "--job-spec", str(tmp_path / "job.yaml")], capsys)
    assert code == 0 and out.startswith("PASS")


def test_validation_summary_counts_and_gpu_hours_saved(store: Store) -> None:
    from gpulens.validator import validation_summary

    now = datetime(2026, 11, 20, 12, 0)
    with store.write() as con:
        rows = [
            ("alice", "fail", "syntax_error", 8),
            ("alice", "fail", "syntax_error", 4),
            ("bob", "fail", "cpu_oom", 2),
            ("bob", "pass", None, 8),
            ("bob", "inconclusive", None, 1),
        ]
        for user, verdict, category, gpus in rows:
            con.execute(
                'INSERT INTO validations (ts, "user", command, verdict, category, requested_gpus)'
                " VALUES (?, ?, 'python train.py', ?, ?, ?)",
                [now, user, verdict, category, gpus],
            )
        # cluster history: syntax errors ran 0.1 h before failing (median); no cpu_oom history
        for i, hours in enumerate((0.05, 0.1, 0.3)):
            con.execute("INSERT INTO attempts (job_id, attempt, start_time, end_time, status) VALUES (?, 0, ?, ?, 'failed')",
                        [f"j{i}", now, now + timedelta(hours=hours)])
            con.execute("INSERT INTO failures (job_id, attempt, category, origin) VALUES (?, 0, 'syntax_error', 'user')", [f"j{i}"])
    con = store.connect()
    df = validation_summary(con)
    got = {(r.verdict, r.category if isinstance(r.category, str) else None): (r.count, round(r.allocated_gpu_hours_saved, 3)) for r in df.itertuples()}
    assert got[("fail", "syntax_error")] == (2, round(12 * 0.1, 3))
    assert got[("fail", "cpu_oom")] == (1, 2 * 0.5)  # default hours without history
    assert got[("pass", None)] == (1, 0.0)
    assert list(df.columns) == ["verdict", "category", "count", "allocated_gpu_hours_saved"]
    only_bob = validation_summary(con, SimpleNamespace(start=None, end=None, users=("bob",)))
    assert int(only_bob["count"].sum()) == 3
    later = validation_summary(con, SimpleNamespace(start=now + timedelta(days=1), end=None, users=()))
    assert later.empty

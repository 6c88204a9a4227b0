"""Input blacklist: state transitions, evidence rules, the audit log and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from gpulens.diagnosis import blacklist as bl
from gpulens.errors import InputError
from gpulens.store import Store
from tests.diagnosis.test_jobs import add_job


class Clock:
    def __init__(self) -> None:
        self.t = datetime(2026, 11, 22, 9, 0, 0)

    def __call__(self) -> datetime:
        self.t += timedelta(minutes=1)
        return self.t


def add_failure(store: Store, job: str, user: str, declared: list[str], named: list[str],
                category: str = "incorrect_input", minute: int = 0) -> None:
    add_job(store, job, [{"status": "failed", "nodes": ["n1"], "start": minute, "minutes": 10}],
            user=user, inputs=declared)
    with store.write() as con:
        con.execute(
            "INSERT INTO failures (job_id, attempt, category, origin, method, inputs) "
            "VALUES (?, 0, ?, 'data', 'rule+bn', ?)",
            [job, category, named],
        )


def entries(store: Store) -> dict[str, dict]:
    con = store.connect()
    try:
        return {r["input"]: r for r in bl.list_entries(con).to_dict("records")}
    finally:
        con.close()


def audit(store: Store) -> list[dict]:
    con = store.connect()
    try:
        return bl.audit_log(con).to_dict("records")
    finally:
        con.close()


# ---------------------------------------------------------------- pure rules
def test_normalize_and_cover() -> None:
    assert bl.normalize_input(" '/data//x/./y' ") == "/data/x/y"
    assert bl.normalize_input("S3://bucket/a/../b") == "s3://bucket/b"
    assert bl.normalize_input("/data/dir/") == "/data/dir/"
    assert bl.normalize_input("imagenet-2012") == "imagenet-2012"
    assert bl.covers("/data/dir/", "/data/dir/f.rec")
    assert bl.covers("/data/dir", "/data/dir/f.rec")
    assert not bl.covers("/data/di", "/data/dir/f.rec")
    with pytest.raises(InputError):
        bl.normalize_input("   ")


def test_blame_prefers_declared_inputs_the_log_names() -> None:
    declared = ["/data/shared/imagenet", "/home/u/bad.rec"]
    assert bl.blame_inputs(declared, ["/home/u/bad.rec"]) == ["/home/u/bad.rec"]
    assert bl.blame_inputs(declared, ["/data/shared/imagenet/train/0001.jpg"]) == ["/data/shared/imagenet"]
    assert bl.blame_inputs(declared, ["/tmp/other.csv"]) == ["/tmp/other.csv"]
    assert bl.blame_inputs(declared, ["data/train.csv"]) == declared  # relative: ambiguous
    assert bl.blame_inputs([], ["data/train.csv", "s3://b/x"]) == ["s3://b/x"]
    assert bl.blame_inputs(declared, []) == declared
    assert bl.blame_inputs(None, None) == []
    # several candidates: inputs other jobs read fine are exonerated, unless all are
    assert bl.blame_inputs(declared, [], ["/data/shared/imagenet"]) == ["/home/u/bad.rec"]
    assert bl.blame_inputs(declared, [], declared) == declared


def test_evidence_score_counts_users_extra() -> None:
    assert bl.evidence_score(2, 1) == 2.0
    assert bl.evidence_score(2, 2) == 3.0
    assert bl.evidence_score(2, 2, user_weight=0.5) == 2.5
    assert bl.evidence_score(0, 0) == 0.0


# ---------------------------------------------------------------- transitions
@pytest.mark.slow
def test_suspected_then_blacklisted_keeps_evidence_jobs(store: Store) -> None:
    clock = Clock()
    bad = "/data/shared/corrupt"
    add_failure(store, "j1", "alice", [bad], [bad + "/part-3.rec"])
    changes = bl.update_from_failures(store, k=2, clock=clock)
    assert [(c.input, c.old_state, c.new_state) for c in changes] == [(bad, None, "suspected")]
    assert entries(store)[bad]["state"] == "suspected"

    add_failure(store, "j2", "bob", [bad], [], minute=60)
    changes = bl.update_from_failures(store, k=2, clock=clock)
    assert [(c.old_state, c.new_state) for c in changes] == [("suspected", "blacklisted")]
    e = entries(store)[bad]
    assert e["state"] == "blacklisted"
    assert list(e["evidence_jobs"]) == ["j1", "j2"]
    assert "2 job(s) from 2 user(s)" in e["reason"]

    log = audit(store)
    assert [(r["old_state"], r["new_state"]) for r in log] == [(None, "suspected"), ("suspected", "blacklisted")]
    assert all(r["actor"] == bl.AUTO_ACTOR for r in log)
    assert log[0]["ts"] < log[1]["ts"]
    assert "incorrect_input" in log[1]["reason"]
    # nothing new: no change, no audit row
    assert bl.update_from_failures(store, k=2, clock=clock) == []
    assert len(audit(store)) == 2


@pytest.mark.slow
def test_other_users_are_stronger_evidence(store: Store) -> None:
    add_failure(store, "a1", "alice", ["/d/one-user"], [])
    add_failure(store, "a2", "alice", ["/d/one-user"], [])
    add_failure(store, "b1", "bob", ["/d/two-users"], [])
    add_failure(store, "c1", "carol", ["/d/two-users"], [])
    bl.update_from_failures(store, k=3)
    e = entries(store)
    assert e["/d/one-user"]["state"] == "suspected"  # 2 jobs, 1 user: score 2 < 3
    assert e["/d/two-users"]["state"] == "blacklisted"  # 2 jobs, 2 users: score 3
    # with the default k=2, two jobs are enough even from one user
    bl.update_from_failures(store, k=2)
    assert entries(store)["/d/one-user"]["state"] == "blacklisted"


@pytest.mark.slow
def test_other_categories_and_passing_jobs(store: Store) -> None:
    add_failure(store, "x1", "alice", ["/d/fine"], [], category="gpu_oom")
    add_failure(store, "x2", "bob", ["/d/fine"], [], category="gpu_oom")
    add_failure(store, "p1", "alice", ["/d/flaky"], [])
    add_failure(store, "p2", "bob", ["/d/flaky"], [])
    for i in range(3):
        add_job(store, f"ok{i}", [{"status": "passed", "nodes": ["n2"], "start": 100}], user="eve",
                inputs=["/d/flaky"])
    bl.update_from_failures(store, k=2)
    e = entries(store)
    assert "/d/fine" not in e
    assert e["/d/flaky"]["state"] == "suspected"
    assert "passed with it" in e["/d/flaky"]["reason"]


@pytest.mark.slow
def test_manual_add_remove_and_relisting(store: Store) -> None:
    clock = Clock()
    assert bl.add(store, "/d/manual", "ops-ann", "vendor says corrupt", clock=clock) == ""
    assert bl.add(store, "/d/manual", "ops-ann", "again", clock=clock) == "blacklisted"  # no-op
    assert bl.remove(store, "/d/manual", "ops-bob", "re-uploaded", clock=clock) == "blacklisted"
    e = entries(store)["/d/manual"]
    assert e["state"] == "cleared" and e["reason"] == "re-uploaded"
    log = audit(store)
    assert [(r["old_state"], r["new_state"], r["actor"], r["reason"]) for r in log] == [
        (None, "blacklisted", "ops-ann", "vendor says corrupt"),
        ("blacklisted", "cleared", "ops-bob", "re-uploaded"),
    ]
    with pytest.raises(InputError, match="not on the blacklist"):
        bl.remove(store, "/d/never", "ops", "x")
    with pytest.raises(InputError, match="reason"):
        bl.add(store, "/d/x", "ops", " ")

    # a cleared input comes back only with new failing jobs
    add_failure(store, "c1", "alice", ["/d/cleared"], [])
    add_failure(store, "c2", "bob", ["/d/cleared"], [])
    bl.update_from_failures(store, k=2, clock=clock)
    bl.remove(store, "/d/cleared", "ops", "fixed", clock=clock)
    bl.update_from_failures(store, k=2, clock=clock)
    assert entries(store)["/d/cleared"]["state"] == "cleared"
    add_failure(store, "c3", "carol", ["/d/cleared"], [])
    bl.update_from_failures(store, k=2, clock=clock)
    assert entries(store)["/d/cleared"]["state"] == "cleared"  # one new job: score 1
    add_failure(store, "c4", "dave", ["/d/cleared"], [])
    bl.update_from_failures(store, k=2, clock=clock)
    e = entries(store)["/d/cleared"]
    assert e["state"] == "blacklisted"
    assert set(e["evidence_jobs"]) == {"c1", "c2", "c3", "c4"}


@pytest.mark.slow
def test_check_matches_directories_and_ignores_cleared(store: Store) -> None:
    bl.add(store, "/data/bad/", "ops", "corrupt shards")
    bl.add(store, "/data/gone.csv", "ops", "bad")
    bl.remove(store, "/data/gone.csv", "ops", "fixed")
    con = store.connect()
    try:
        assert bl.check(con, ["/data/bad/shard-1.rec", "/data/good", "/data/gone.csv"]) == [
            "/data/bad/shard-1.rec"
        ]
        assert bl.check(con, []) == []
    finally:
        con.close()


# ---------------------------------------------------------------- CLI
def cli(data: Path, *args: str, capsys: pytest.CaptureFixture[str], config: Path | None = None
        ) -> tuple[int, str, str]:
    """Run gpulens's real entry point in-process; (exit code, stdout, stderr)."""
    from gpulens.cli.main import main

    argv = [*(["--config", str(config)] if config else []), "--data-dir", str(data), "blacklist", *args]
    capsys.readouterr()
    try:
        rv = main(argv)
        code = rv if isinstance(rv, int) else 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def actor_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("GPULENS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("GPULENS_ACTOR", "cli-tester")


@pytest.mark.slow
def test_cli_add_check_remove_audit(tmp_path: Path, capsys: pytest.CaptureFixture[str], actor_env: None) -> None:
    data = tmp_path / "d"
    code, _, err = cli(data, "add", "/data/bad.rec", "--reason", "truncated file", capsys=capsys)
    assert code == 0, err
    code, out, _ = cli(data, "check", "/data/ok.rec", "/data/bad.rec", capsys=capsys)
    assert code == 1
    assert "BLACKLISTED  /data/bad.rec" in out and "ok           /data/ok.rec" in out
    code, out, _ = cli(data, "check", "/data/ok.rec", "--json", capsys=capsys)
    assert code == 0
    assert json.loads(out) == {"blacklisted": [], "checked": ["/data/ok.rec"]}
    code, out, _ = cli(data, "list", "--json", capsys=capsys)
    assert code == 0
    (entry,) = json.loads(out)
    assert entry["input"] == "/data/bad.rec" and entry["state"] == "blacklisted"
    code, _, err = cli(data, "remove", "/data/bad.rec", "--reason", "restored", "--actor", "ops-kim",
                       capsys=capsys)
    assert code == 0, err
    assert cli(data, "check", "/data/bad.rec", capsys=capsys)[0] == 0
    code, out, _ = cli(data, "list", "--audit", "--json", capsys=capsys)
    log = json.loads(out)
    assert [(e["old_state"], e["new_state"], e["actor"], e["reason"]) for e in log] == [
        (None, "blacklisted", "cli-tester", "truncated file"),
        ("blacklisted", "cleared", "ops-kim", "restored"),
    ]
    assert all(e["ts"] for e in log)
    code, _, err = cli(data, "remove", "/data/never.rec", "--reason", "x", capsys=capsys)
    assert code == 2
    assert "not on the blacklist" in err and "Traceback" not in err


@pytest.mark.slow
def test_cli_check_exit_code_in_a_real_process(tmp_path: Path) -> None:
    data = tmp_path / "d"
    bl.add(Store.open(data), "/data/bad/", "ops", "corrupt shards")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    argv = [sys.executable, "-m", "gpulens", "--data-dir", str(data), "blacklist", "check"]
    bad = subprocess.run([*argv, "/data/bad/x.rec"], capture_output=True, text=True, env=env, timeout=120)
    good = subprocess.run([*argv, "/data/good/x.rec"], capture_output=True, text=True, env=env, timeout=120)
    assert (bad.returncode, good.returncode) == (1, 0), bad.stderr + good.stderr


@pytest.mark.slow
def test_cli_update_uses_config_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          actor_env: None) -> None:
    data = tmp_path / "d"
    store = Store.open(data)
    add_failure(store, "j1", "alice", ["/d/x"], [])
    add_failure(store, "j2", "alice", ["/d/x"], [])
    cfg = tmp_path / "gpulens.toml"
    cfg.write_text("[diagnose]\nblacklist_min_jobs = 3\n")
    code, out, err = cli(data, "update", "--json", capsys=capsys, config=cfg)
    assert code == 0, err
    (change,) = json.loads(out)
    assert change["new_state"] == "suspected"
    code, out, _ = cli(data, "update", "--min-jobs", "2", "--json", capsys=capsys)
    assert json.loads(out)[0]["new_state"] == "blacklisted"

"""State corruption is caught before a snapshot is published; `store restore` recovers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.store import Store
from gpulens.store.integrity import verify_db
from tests.conftest import tmpfs


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    return subprocess.run([sys.executable, "-m", "gpulens", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def _store_with_jobs(root: Path) -> Store:
    st = Store.open(root)
    for i in range(3):
        with st.write() as con:
            con.executemany("INSERT INTO jobs (job_id, status) VALUES (?, 'passed')",
                            [[f"j{i}-{k:05d}"] for k in range(2000)])
    return st


def _garbage_in_the_middle(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "r+b") as fh:  # past the first 8 KiB: the header checks do not see it
        fh.seek(size // 2)
        fh.write(bytes((i * 7919) % 251 for i in range(65536)))


@pytest.mark.slow
def test_damaged_state_stops_writers_and_restore_recovers(tmp_path: Path) -> None:
    root = tmp_path / "d"
    st = _store_with_jobs(root)
    gen = st.generation()
    snaps = sorted(p.name for p in st.snapshots.glob("state-*.duckdb"))
    _garbage_in_the_middle(st.state_db)
    assert verify_db(st.state_db) is not None  # the precondition: a block really is damaged

    add = ("--data-dir", str(root), "blacklist", "add", "/data/x", "--reason", "test")
    for _ in range(2):  # the first writer finds it; the next one is refused at once
        r = run(*add)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
        assert f"snapshots/state-{gen:08d}.duckdb" in r.stderr and "gpulens store restore" in r.stderr
        assert st.generation() == gen
        assert sorted(p.name for p in st.snapshots.glob("state-*.duckdb")) == snaps, "no rotation"

    r = run("--data-dir", str(root), "store", "info", "--json")  # readers are unaffected
    assert r.returncode == 0 and json.loads(r.stdout)["rows"]["jobs"] == 6000
    r = run("--data-dir", str(root), "store", "check", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["state_damaged"]["last_good"].endswith(snaps[-1])

    r = run("--data-dir", str(root), "store", "restore", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["restored_generation"] == gen and out["published_generation"] == gen + 1
    assert Path(out["damaged_file_kept_as"]).is_file()

    r = run(*add)
    assert r.returncode == 0, r.stderr
    r = run("--data-dir", str(root), "blacklist", "list", "--json")
    assert [e["input"] for e in json.loads(r.stdout)] == ["/data/x"]
    assert run("--data-dir", str(root), "store", "check").returncode == 0


@pytest.mark.slow
def test_every_published_snapshot_verifies(tmp_path: Path) -> None:
    st = _store_with_jobs(tmp_path / "d")
    for snap in st.snapshots.glob("state-*.duckdb"):
        assert verify_db(snap) is None
    assert st.last_good_snapshot() == st.snapshots / f"state-{st.generation():08d}.duckdb"


@pytest.mark.slow
def test_restore_of_a_missing_generation_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "d"
    Store.open(root)
    r = run("--data-dir", str(root), "store", "restore", "--generation", "99")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "generation 99" in r.stderr


@pytest.mark.slow
def test_full_disk_state_writer_is_one_line_and_stores_nothing(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "mnt", "16m") as mnt:
        root = mnt / "d"
        st = Store.open(root)
        gen = st.generation()
        filler = mnt / "filler"
        with open(filler, "wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * (1 << 20))
                    fh.flush()
            except OSError:
                pass
        r = run("--data-dir", str(root), "blacklist", "add", "/data/x", "--reason", "y" * 2000)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and "No space left on device" in r.stderr, r.stderr
        assert st.generation() == gen
        filler.unlink()
        r = run("--data-dir", str(root), "blacklist", "list", "--json")
        assert r.returncode == 0 and json.loads(r.stdout) == [], "nothing was stored"
        assert run("--data-dir", str(root), "blacklist", "add", "/data/z", "--reason", "ok").returncode == 0


@pytest.mark.slow
def test_reader_falls_back_to_an_older_snapshot_when_the_newest_is_unreadable(tmp_path: Path) -> None:
    st = _store_with_jobs(tmp_path / "d")
    newest = st.snapshots / f"state-{st.generation():08d}.duckdb"
    newest.write_bytes(b"not a database" * 100)
    lines: list[str] = []
    reader = Store(tmp_path / "d")
    reader.warn = lines.append
    con = reader.connect(samples=False)
    assert con.execute("SELECT count(*) FROM jobs").fetchone() == (4000,)  # one write older
    assert len(lines) == 1 and newest.name in lines[0] and "1 write(s) older" in lines[0]

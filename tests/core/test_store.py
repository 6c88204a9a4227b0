from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from gpulens.errors import StoreCorruptError, StoreError, StoreLockedError
from gpulens.store import SegmentWriter, Store, latest_version
from gpulens.store.schema import Migration, apply_migrations, current_version

ROOT = Path(__file__).resolve().parents[2]


def _py(*args: str, **kw: object) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.core.store_procs", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        **kw,  # type: ignore[arg-type]
    )


def test_fresh_store_is_migrated_and_reopen_is_idempotent(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "d")
    gen = store.generation()
    con = store.connect()
    assert current_version(con, "state") == latest_version()
    assert con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (0,)
    Store.open(tmp_path / "d")
    assert store.generation() == gen  # nothing to migrate: no new snapshot


def test_write_rolls_back_on_error_and_publishes_nothing(store: Store) -> None:
    gen = store.generation()
    with pytest.raises(RuntimeError), store.write() as con:
        con.execute("INSERT INTO jobs (job_id) VALUES ('a')")
        raise RuntimeError("boom")
    assert store.generation() == gen
    assert store.connect().execute("SELECT count(*) FROM jobs").fetchone() == (0,)


def test_reader_sees_commits_only_in_new_connections(store: Store) -> None:
    old = store.connect()
    with store.write() as con:
        con.execute("INSERT INTO jobs (job_id, \"user\") VALUES (?, ?)", ["j'1", "o'brien"])
    assert old.execute("SELECT count(*) FROM jobs").fetchone() == (0,)
    new = store.connect()
    assert new.execute("SELECT job_id, \"user\" FROM jobs").fetchall() == [("j'1", "o'brien")]


def test_data_dir_with_quote_in_path(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "it's here")
    store.write_samples(
        "gpu", pa.table({"ts": [dt.datetime(2026, 1, 1)], "node": ["n"], "util_gpu": [5.0]})
    )
    assert store.connect().execute("SELECT util_gpu FROM gpu_samples").fetchall() == [(5.0,)]


@pytest.mark.slow
def test_concurrent_reader_never_fails_while_writer_appends(tmp_path: Path) -> None:
    root = str(tmp_path / "d")
    Store.open(root)
    stop = tmp_path / "stop"
    reader = _py("reader", root, str(stop))
    assert reader.stdout is not None and reader.stdout.readline().strip() == "reading"
    writer = _py("state_writer", root, "40")
    w_out, w_err = writer.communicate(timeout=600)
    stop.write_text("")
    r_out, r_err = reader.communicate(timeout=120)
    assert writer.returncode == 0, w_err
    assert reader.returncode == 0, r_err
    summary = r_out.strip().splitlines()[-1]
    stats = dict(kv.split("=") for kv in summary.split())
    assert int(stats["errors"]) == 0, r_out
    assert int(stats["regressions"]) == 0, r_out
    assert int(stats["queries"]) >= 10, "the reader must have overlapped the writer"
    assert 0 < int(stats["jobs"]) <= 40
    final = Store(root).connect()
    assert final.execute("SELECT count(*) FROM jobs").fetchone() == (40,)
    assert final.execute("SELECT count(*) FROM gpu_samples").fetchone() == (40 * 8,)


def _wait_for_line(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith(prefix), (line, proc.stderr.read() if proc.stderr else "")
    return line


def _flushed(out: str) -> int:
    lines = [ln for ln in out.splitlines() if ln.startswith("flushed ")]
    return int(lines[-1].split()[1]) if lines else 0


@pytest.mark.slow
def test_sigkilled_spool_writer_loses_nothing_flushed(tmp_path: Path) -> None:
    """Kill the agent's writer at random moments; every flushed batch survives exactly once."""
    root = str(tmp_path / "d")
    store = Store.open(root)
    rng = random.Random(7)
    batch, start = 50, 0
    for _ in range(6):
        proc = _py("spool_writer", root, "agent1", str(batch), str(start))
        first = _wait_for_line(proc, "flushed ")
        time.sleep(rng.uniform(0.05, 1.0))  # some more flushes and rolls, then a kill
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        out = first + out
        # The child may have flushed more than it printed, never less.
        start = max(start, _flushed(out))
        # Resume numbering after the last row actually in the spool or the samples.
        with SegmentWriter(store, "agent1"):  # recovers, then rolls everything
            pass
        con = store.connect()
        n, distinct, lo, hi = con.execute(
            "SELECT count(*), count(DISTINCT pid), min(pid), max(pid) FROM gpu_process_samples"
        ).fetchone()  # type: ignore[misc]
        assert n == distinct, "a row was duplicated by a crash"
        assert n >= start, "a flushed batch was lost"
        assert n % batch == 0, "a half batch became visible"
        assert lo == 0 and hi == n - 1, "rows are missing in the middle"
        start = n
    assert start > 0
    leftovers = list(Path(root, "tmp").glob("spool-*")) + list(Path(root, "spool").glob("*/.tmp-*"))
    assert leftovers == []


@pytest.mark.slow
def test_sigkilled_state_writer_leaves_a_store_that_reopens(tmp_path: Path) -> None:
    root = str(tmp_path / "d")
    Store.open(root)
    proc = _py("state_writer", root, "0")
    first = _wait_for_line(proc, "committed ")
    time.sleep(1.0)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    out = first + out
    committed = int(out.strip().splitlines()[-1].split()[1])
    store = Store.open(root)  # must reopen, replaying DuckDB's WAL if needed
    with store.write() as con:  # and accept writes again
        n = con.execute("SELECT count(*) FROM jobs").fetchone()[0]  # type: ignore[index]
    assert n >= committed  # the child may have committed one more than it printed
    assert store.connect().execute("SELECT count(*) FROM jobs").fetchone() == (n,)


def test_corrupt_state_file_is_a_clear_error(tmp_path: Path) -> None:
    root = tmp_path / "d"
    Store.open(root)
    (root / "state.duckdb").write_bytes(b"this is not a duckdb file" * 1000)
    with pytest.raises(StoreCorruptError) as err:
        with Store(root).write():
            pass
    assert "state.duckdb" in str(err.value) and "snapshots" in str(err.value)
    # readers still work from the last good snapshot
    assert Store(root).connect().execute("SELECT count(*) FROM jobs").fetchone() == (0,)


def test_unwritable_data_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError) as err:
        Store.open(blocker / "data")
    assert str(blocker / "data") in str(err.value)


def test_spool_is_private_to_one_agent(store: Store) -> None:
    with SegmentWriter(store, "n1"):
        with pytest.raises(StoreLockedError) as err:
            SegmentWriter(store, "n1")
        assert "another agent" in str(err.value)
    with SegmentWriter(store, "n1"):  # released on close
        pass


@pytest.mark.slow
def test_duckdb_lock_conflict_is_translated(tmp_path: Path) -> None:
    root = tmp_path / "d"
    Store.open(root)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import duckdb,sys,time; c=duckdb.connect(sys.argv[1]); print('ok', flush=True); time.sleep(30)",
         str(root / "state.duckdb")],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ok"
        quick = Store(root, lock_timeout=0.5)
        with pytest.raises(StoreError) as err:
            with quick.write():
                pass
        assert "held by another process" in str(err.value)
    finally:
        holder.kill()
        holder.wait()
    assert duckdb.__version__


def test_a_lower_numbered_migration_landing_later_is_applied() -> None:
    """Migrations from parallel branches: 0005 may arrive after 0007 was applied."""
    m1 = Migration(1, "one", "CREATE TABLE a (x INTEGER)")
    m5 = Migration(5, "five", "CREATE TABLE b (x INTEGER)")
    m7 = Migration(7, "seven", "CREATE TABLE c (x INTEGER)")
    con = duckdb.connect(":memory:")
    assert apply_migrations(con, [m1, m7]) == [1, 7]
    assert apply_migrations(con, [m1, m5, m7]) == [5]
    # DuckDB 2.0 refuses register() while a half-read result is open: migrations leave none.
    con.register("batch", pa.table({"x": [1, 2]}))
    con.execute("INSERT INTO b SELECT x FROM batch")
    assert apply_migrations(con, [m1, m5, m7]) == []
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert {"a", "b", "c"} <= tables


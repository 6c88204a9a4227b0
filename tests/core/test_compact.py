"""Compaction of the samples lake: same rows and analyses, fewer files, atomic and crash-safe.

The concurrency and crash tests run real processes (tests/core/store_procs.py): a
reader counting rows, agents rolling segments into the days being compacted, and a
compactor killed with SIGKILL at random moments.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import signal
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gpulens import analysis
from gpulens.errors import StoreLockedError
from gpulens.ingest.simulate import simulate
from gpulens.store import SegmentWriter, Store, arrow_schema
from gpulens.store.compact import OPEN_MAX_TIERS, _run_lock, compact, deletion_order
from gpulens.store.lake import (
    COMPACT_PREFIX,
    FILES_FUNCTION,
    conform,
    partitions,
    schema_mark,
)
from gpulens.store.quarantine import list_quarantined
from tests.core.lake_builders import DAY, proc_rows, write_segments
from tests.core.test_cli import run
from tests.core.test_quarantine import _damage_column
from tests.core.test_store import _py, _wait_for_line

NOW = (DAY + dt.timedelta(days=3)).replace(tzinfo=dt.UTC).timestamp()


def _segmented_simulation(root: Path) -> Store:
    """A small simulated cluster whose GPU samples are re-written as 30-minute segments."""
    store = Store.open(root)
    simulate(store, gpus=8, days=2, seed=5, start=DAY)
    table = store.connect().sql(
        "SELECT * EXCLUDE (date) FROM gpu_samples ORDER BY ts").to_arrow_table()
    for part in partitions(store.samples, "gpu"):
        shutil.rmtree(part.path)
    slot = pc.divide(pc.cast(pc.cast(table["ts"], pa.int64()), pa.int64()), 1_800_000_000)
    for value in pc.unique(slot).to_pylist():
        store.write_samples("gpu", table.filter(pc.equal(slot, value)))
    return store


def _analyses(store: Store) -> dict[str, pd.DataFrame]:
    con = store.connect()
    return {"jobs": analysis.job_utilization(con), "day": analysis.utilization(con, by="day"),
            "goodput": analysis.goodput(con), "locality": analysis.locality(con, n_boot=50)}


def _files(store: Store, kind: str) -> list[Path]:
    return sorted(store.samples.glob(f"kind={kind}/date=2026-*/node=*/*.parquet"))


@pytest.mark.slow
def test_compaction_keeps_rows_and_analyses_and_merges_each_partition(tmp_path: Path) -> None:
    store = _segmented_simulation(tmp_path / "d")
    before_files = len(_files(store, "gpu"))
    before = _analyses(store)
    rows = store.connect().execute(
        "SELECT * FROM gpu_samples ORDER BY node, gpu_index, ts").df()

    report = compact(store, settle=0, grace=60, clock=lambda: NOW)

    parts = list(partitions(store.samples, "gpu"))
    assert parts and all(p.compacted for p in parts), "one live file per partition"
    assert report.files_in == before_files and report.partitions == len(parts) < before_files
    assert report.pending_files == before_files, "replaced files wait out the grace period"
    after = _analyses(store)
    for name, df in before.items():
        pd.testing.assert_frame_equal(df, after[name], check_exact=False, rtol=1e-9)
    pd.testing.assert_frame_equal(rows, store.connect().execute(
        "SELECT * FROM gpu_samples ORDER BY node, gpu_index, ts").df())
    out = pq.ParquetFile(parts[0].path / parts[0].live[0])
    assert out.schema_arrow.field("ts").type == pa.timestamp("us")
    assert out.metadata.row_group(0).column(0).compression == "ZSTD"
    ts = out.read(columns=["ts"]).column("ts").to_pylist()
    assert ts == sorted(ts), "rows are sorted by time"

    recorded = store.connect().execute(
        "SELECT count(*), sum(inputs), sum(rows) FROM lake_compactions WHERE kind = 'gpu'"
    ).fetchone()
    assert recorded == (len(parts), before_files, len(rows))
    # nothing to merge again; past the grace period the replaced files are deleted
    again = compact(store, settle=0, grace=60, clock=lambda: NOW + 61)
    assert again.partitions == 0 and again.deleted_files >= before_files
    assert len(_files(store, "gpu")) == len(parts)


@pytest.mark.slow
def test_only_closed_days_are_compacted_and_info_counts_files(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "d")
    write_segments(store, nodes=2, files=3, rows=5, start=0)  # 2026-01-01
    write_segments(store, nodes=2, files=3, rows=5, start=30, day=DAY + dt.timedelta(days=1))
    # at 00:30 on Jan 3rd with a one-hour settle, only Jan 1st is closed
    clock = (DAY + dt.timedelta(days=2, minutes=30)).replace(tzinfo=dt.UTC).timestamp()
    report = compact(store, settle=3600, grace=0, clock=lambda: clock)
    assert report.days == ["2026-01-01"] and report.partitions == 2
    r = run("--data-dir", str(store.root), "store", "info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["files"]["proc"] == {
        "live_files": 2 + 6, "live_bytes": info["files"]["proc"]["live_bytes"],
        "replaced_files": 6, "replaced_bytes": info["files"]["proc"]["replaced_bytes"]}
    assert info["files"]["proc"]["replaced_bytes"] > 0
    assert info["compacted_files"] == 2 and info["rows"]["gpu_process_samples"] == 60


@pytest.mark.slow
def test_late_segment_stays_live_and_is_merged_next_run(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "d")
    write_segments(store, nodes=1, files=4, rows=10, start=0)
    compact(store, settle=0, grace=0, clock=lambda: NOW)
    store.write_samples("proc", proc_rows("n0", 40, 10))  # an agent back from an outage
    count = "SELECT count(*), count(DISTINCT pid) FROM gpu_process_samples"
    assert store.connect().execute(count).fetchone() == (50, 50)
    compact(store, settle=0, grace=0, clock=lambda: NOW)
    assert store.connect().execute(count).fetchone() == (50, 50)
    (part,) = partitions(store.samples, "proc")
    assert part.compacted and part.replaced  # the first compacted file is replaced in turn
    compact(store, settle=0, grace=0, clock=lambda: NOW)
    assert [p.name for p in part.path.iterdir()] == list(
        next(iter(partitions(store.samples, "proc"))).live)
    assert store.connect().execute(count).fetchone() == (50, 50)


@pytest.mark.slow
def test_grace_counts_from_each_replacement_not_from_the_run_start(tmp_path: Path) -> None:
    """A long run (here: 1,000 s pass while its first partition is merged) writes the second
    partition's file late; a run 1,300 s after the first began may delete the first
    partition's inputs (replaced 1,300 s ago) but not the second's (replaced 300 s ago)."""
    store = Store.open(tmp_path / "d")
    write_segments(store, nodes=2, files=3, rows=5, start=0)
    now = [NOW]

    def slow_progress(_: str) -> None:
        now[0] += 1000

    compact(store, settle=0, grace=600, clock=lambda: now[0], progress=slow_progress)
    first, second = sorted(partitions(store.samples, "proc"), key=lambda p: p.node)
    assert len(first.replaced) == len(second.replaced) == 3
    now[0] = NOW + 1300
    report = compact(store, settle=0, grace=600, clock=lambda: now[0])
    assert report.deleted_files == 3 and report.pending_files == 3
    after = {p.node: p for p in partitions(store.samples, "proc")}
    assert after[first.node].replaced == () and after[second.node].replaced == second.replaced


def test_a_replaced_compacted_file_is_deleted_only_after_the_files_it_hides() -> None:
    """Three runs in one second chained C1 <- C2 <- C3 (each replaces the one before and the
    segments that came since); a run finding C1, C2 and their segments past grace deletes them.
    Compacted names sort by the run's second, then at random: here C2 sorts before C1. Deleted
    before C1, C2 would leave C1 unhidden (C3 names C2, not C1) next to C3, which holds its rows:
    a reader listing between the two deletions counted them twice (and a run killed there, for good)."""
    c1, c2, c3 = (f"{COMPACT_PREFIX}1700000000-{h}.parquet" for h in ("f" * 12, "0" * 12, "8" * 12))
    assert sorted([c1, c2]) == [c2, c1]
    inputs = {c1: frozenset({"s1", "s2"}), c2: frozenset({c1, "s3"}), c3: frozenset({c2, "s4"})}
    present = {c3, c2, c1, "s1", "s2", "s3", "s4"}
    order = deletion_order({c1, c2, "s1", "s2", "s3", "s4"}, present, lambda n: inputs[n])
    assert order == ["s1", "s2", "s3", "s4", c1, c2]
    # an input that must stay (not ripe yet) keeps the file that hides it
    assert deletion_order({c1, c2, "s3"}, present, lambda n: inputs[n]) == ["s3"]
    # files with no hiding relation go in one tier, by name
    assert deletion_order({c1, "s1", "s2", "x"}, present | {"x"}, lambda n: inputs[n]) == ["s1", "s2", "x", c1]


@pytest.mark.slow
def test_second_compactor_is_refused(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "d")
    with _run_lock(store), pytest.raises(StoreLockedError, match="compact"):
        compact(store)
    r = run("--data-dir", str(store.root), "store", "compact", "--settle", "-1")
    assert r.returncode == 2 and "Traceback" not in r.stderr


@pytest.mark.slow
def test_readers_never_see_both_or_neither_while_agents_write_and_compaction_runs(
    tmp_path: Path,
) -> None:
    """A reader counts rows in a loop while an agent rolls segments into the day being
    compacted and a compactor merges and deletes (grace 2 s) again and again. A query that
    outlived the grace period may fail (the reader counts it as ``late``); none other may."""
    root = str(tmp_path / "d")
    store = Store.open(root)
    write_segments(store, nodes=3, files=20, rows=10, start=10_000_000)
    stop = tmp_path / "stop"
    reader = _py("proc_reader", root, str(stop), "2.0")
    _wait_for_line(reader, "reading")
    agent = _py("spool_writer", root, "n0", "25", "0")
    _wait_for_line(agent, "flushed ")
    comp = _py("compactor", root, "2.0", str(stop))
    _wait_for_line(comp, "compacting")
    time.sleep(7)
    agent.send_signal(signal.SIGKILL)
    agent.communicate(timeout=30)
    stop.write_text("")
    c_out, c_err = comp.communicate(timeout=120)
    r_out, r_err = reader.communicate(timeout=120)
    assert comp.returncode == 0, c_err
    stats = dict(kv.split("=") for kv in r_out.strip().splitlines()[-1].split())
    assert int(stats["errors"]) == 0, r_out
    assert int(stats["dups"]) == 0, "a reader saw replaced files next to their replacement"
    assert int(stats["regressions"]) == 0, "a reader saw neither the old files nor the new one"
    assert int(stats["queries"]) >= 20
    assert int(c_out.strip().splitlines()[-1].split("=")[1]) >= 2, c_out
    assert "partitions=0" not in c_out.splitlines()[1], "the first run must have merged"
    deleted = sum(int(line.rsplit("deleted=", 1)[1]) for line in c_out.splitlines()
                  if "deleted=" in line)
    assert deleted > 0, "replaced files must have been deleted while the reader read"
    with SegmentWriter(store, "n0"):  # recover what the killed agent flushed
        pass
    compact(store, settle=0, grace=0)
    n, distinct, agent_rows = store.connect().execute(
        "SELECT count(*), count(DISTINCT pid), count(*) FILTER (WHERE pid < 10000000)"
        " FROM gpu_process_samples").fetchone()  # type: ignore[misc]
    assert n == distinct == 600 + agent_rows and agent_rows > 0


@pytest.mark.slow
def test_sigkilled_compaction_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    root = str(tmp_path / "d")
    store = Store.open(root)
    rng = random.Random(11)
    pid = write_segments(store, nodes=12, files=6, rows=20, start=0)
    count = "SELECT count(*), count(DISTINCT pid), min(pid), max(pid) FROM gpu_process_samples"
    finished = 0
    for round_ in range(6):
        proc = _py("compact_once", root)
        _wait_for_line(proc, "start")
        for _ in range(rng.randrange(0, 6)):  # of 12 partitions: kill part-way through
            _wait_for_line(proc, "merged ")
        time.sleep(rng.uniform(0.0, 0.02))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        finished += "done" in out
        assert store.connect().execute(count).fetchone() == (pid, pid, 0, pid - 1), round_
        compact(store, settle=0, grace=0)  # finish what the killed run left
        assert store.connect().execute(count).fetchone() == (pid, pid, 0, pid - 1), round_
        pid = write_segments(store, nodes=12, files=2, rows=20, start=pid)  # late arrivals
    assert finished <= 1, "the runs must have been killed mid-way"
    compact(store, settle=0, grace=0)
    compact(store, settle=0, grace=0)
    assert all(p.compacted and not p.replaced for p in partitions(store.samples, "proc"))
    assert list(Path(root, "tmp").glob("compact-*")) == []
    outputs = {p.live[0] for p in partitions(store.samples, "proc")}
    recorded = {r[0] for r in store.connect().execute(
        "SELECT output FROM lake_compactions").fetchall()}
    assert outputs <= recorded, "a run killed after its commit is recorded by the next one"
    assert all(name.startswith(COMPACT_PREFIX) for name in outputs)


def test_periodic_job_runs_compact_with_known_flags() -> None:
    import configparser

    from gpulens.cli.store_cmd import compact_cmd

    deploy = Path(__file__).resolve().parents[2] / "deploy"
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.read_string((deploy / "gpulens-compact.service").read_text())
    argv = unit["Service"]["ExecStart"].split()
    assert argv[argv.index("store") + 1] == "compact"
    known = {o for p in compact_cmd.params for o in getattr(p, "opts", [])}
    assert {a for a in argv if a.startswith("--")} <= known
    timer = configparser.ConfigParser(strict=False, interpolation=None)
    timer.read_string((deploy / "gpulens-compact.timer").read_text())
    assert timer["Timer"]["OnCalendar"] and timer["Install"]["WantedBy"] == "timers.target"


def test_files_of_older_and_newer_releases_merge_by_column_name(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "d")
    old = proc_rows("n0", 0, 10).drop_columns(["gpu_index"])  # before gpu_index existed
    new = proc_rows("n0", 10, 10)
    new = new.append_column("future_col", pa.array([1.5] * 10))  # added by a later release
    store.write_samples("proc", old)
    store.write_samples("proc", new)
    store.write_samples("proc", proc_rows("n0", 20, 10))
    compact(store, settle=0, grace=0, clock=lambda: NOW)
    (part,) = partitions(store.samples, "proc")
    merged = pq.read_table(part.path / part.live[0])
    assert merged.num_rows == 30 and "future_col" in merged.column_names
    got = store.connect().execute(
        "SELECT count(*), count(gpu_index), count(DISTINCT pid) FROM gpu_process_samples"
    ).fetchone()
    assert got == (30, 20, 30)


@pytest.mark.slow
def test_files_in_the_current_schema_are_marked_and_read_without_the_schema_merge(tmp_path: Path) -> None:
    """A file whose columns are exactly the kind's current ones carries schema_mark in its name and
    is read without DuckDB's per-file schema merge; the others (an older or newer release's columns)
    are merged by name. The view sees all rows either way, and a compaction of a subset-schema
    partition writes a marked, current file (missing columns NULL)."""
    store = Store.open(tmp_path / "d")
    full = proc_rows("n0", 0, 10)
    full = conform(full.drop_columns(["node"]), "proc").append_column("node", full.column("node"))
    (cur,) = store.write_samples("proc", full)
    (old,) = store.write_samples("proc", proc_rows("n0", 10, 10))  # fewer columns: an older release
    newer = proc_rows("n1", 20, 10)
    (new,) = store.write_samples("proc", newer.append_column("future_col", pa.array([2.5] * 10)))
    dict_uuid = full.set_column(full.schema.get_field_index("uuid"), "uuid",
                                full.column("uuid").fill_null("GPU-x").dictionary_encode())
    dict_uuid = dict_uuid.set_column(dict_uuid.schema.get_field_index("node"), "node", pa.array(["n2"] * 10))
    (enc,) = store.write_samples("proc", dict_uuid)  # dictionary-encoded strings read as strings
    mark = schema_mark("proc")
    assert f"-{mark}-" in cur.name and mark not in old.name and mark not in new.name
    assert f"-{mark}-" in enc.name
    con = store.connect()
    fast = con.execute(f"SELECT {FILES_FUNCTION}('proc', false)").fetchone()[0]
    mixed = con.execute(f"SELECT {FILES_FUNCTION}('proc', true)").fetchone()[0]
    assert sorted(Path(p).name for p in fast[1:]) == sorted([cur.name, enc.name])
    assert sorted(Path(p).name for p in mixed[1:]) == sorted([old.name, new.name])
    got = con.execute("SELECT count(*), count(DISTINCT pid), count(future_col), count(used_memory_bytes) "
                      "FROM gpu_process_samples").fetchone()
    assert got == (40, 30, 10, 0)
    assert con.execute("SELECT DISTINCT uuid FROM gpu_process_samples WHERE node = 'n2'").fetchall() == [("GPU-x",)]
    con.close()
    compact(store, settle=0, grace=0, clock=lambda: NOW)
    parts = {p.node: p for p in partitions(store.samples, "proc")}
    assert f"-{mark}-" in parts["n0"].live[0]  # cur + old: conformed to the current schema
    assert mark not in parts["n1"].live[0]  # a single file is not compacted; it stays as it was
    merged = pq.read_table(parts["n0"].path / parts["n0"].live[0])
    assert merged.schema.remove_metadata().equals(arrow_schema("proc", with_node=False))
    assert store.connect().execute("SELECT count(*), count(future_col) FROM gpu_process_samples"
                                   ).fetchone() == (40, 10)


@pytest.mark.slow
def test_damaged_segments_are_quarantined_never_merged(tmp_path: Path) -> None:
    """A torn file (fails the listing's magic check) and one with a damaged page (found
    while merging) go to quarantine/ with one warning line each; the rest is merged."""
    store = Store.open(tmp_path / "d")
    write_segments(store, nodes=1, files=4, rows=5, start=0)
    (part,) = partitions(store.samples, "proc")
    torn = part.path / "zz-torn-r3.parquet"
    torn.write_bytes(b"PAR1 not really parquet")
    paged = part.path / part.live[0]
    _damage_column(paged, "pid")
    r = run("--data-dir", str(store.root), "store", "compact", "--settle", "0", "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(warnings) == 2 and all(ln.startswith("gpulens: warning:") for ln in warnings)
    assert "its 3 rows are left out" in r.stderr and "its 5 rows are left out" in r.stderr
    assert json.loads(r.stdout)["rows"] == 15
    quarantined = {q["file"] for q in list_quarantined(store.root)}
    assert quarantined == {str(f.relative_to(store.root)) for f in (torn, paged)}
    (after,) = partitions(store.samples, "proc")
    assert after.compacted and after.live[0].endswith("-r15.parquet")
    assert paged.name not in after.replaced and torn.name not in after.replaced
    got = store.connect().execute(
        "SELECT count(*), count(DISTINCT pid) FROM gpu_process_samples").fetchone()
    assert got == (15, 15)


@pytest.mark.slow
def test_damaged_compacted_file_is_quarantined_and_its_inputs_read_again(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "d")
    write_segments(store, nodes=1, files=3, rows=5, start=0)
    compact(store, settle=0, grace=3600, clock=lambda: NOW)  # inputs kept (grace)
    (part,) = partitions(store.samples, "proc")
    out, inputs = part.path / part.live[0], part.replaced
    assert len(inputs) == 3
    os.truncate(out, 100)
    lines: list[str] = []
    store.warn = lines.append
    got = store.connect().execute(
        "SELECT count(*), count(DISTINCT pid) FROM gpu_process_samples").fetchone()
    assert got == (15, 15)
    assert len(lines) == 1 and out.name in lines[0] and "its 15 rows are left out" in lines[0]
    assert (store.root / "quarantine" / out.relative_to(store.root)).exists()
    assert tuple(Path(p).name for p in store.sample_files("proc").paths) == inputs


@pytest.mark.slow
def test_compact_command_reports_what_it_merged(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "d")
    write_segments(store, nodes=2, files=3, rows=5, start=0)
    r = run("--data-dir", str(store.root), "store", "compact", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert (report["partitions"], report["files_in"], report["rows"]) == (2, 6, 30)
    assert report["pending_files"] == 6 and report["days"] == ["2026-01-01"]


@pytest.mark.slow
def test_the_open_day_is_compacted_in_tiers_then_into_one_file_when_it_closes(tmp_path: Path) -> None:
    """Open day: every `open_min_files` segments become one compacted file (earlier ones are left
    alone); leftover segments stay live; no row is lost or doubled at any step; once the day
    closes, its tiers and segments are merged into one file."""
    store = Store.open(tmp_path / "d")
    count = "SELECT count(*), count(DISTINCT pid) FROM gpu_process_samples"
    noon = (DAY + dt.timedelta(hours=12)).replace(tzinfo=dt.UTC).timestamp()
    pid = write_segments(store, nodes=2, files=5, rows=3, start=0)
    r1 = compact(store, settle=3600, grace=0, clock=lambda: noon, open_min_files=4)
    assert r1.partitions == 2 and r1.files_in == 10 and r1.days == ["2026-01-01"]
    pid = write_segments(store, nodes=2, files=3, rows=3, start=pid)  # 3 < 4: left as they are
    r2 = compact(store, settle=3600, grace=0, clock=lambda: noon, open_min_files=4)
    assert r2.partitions == 0 and store.connect().execute(count).fetchone() == (48, 48)
    pid = write_segments(store, nodes=2, files=2, rows=3, start=pid)
    compact(store, settle=3600, grace=0, clock=lambda: noon, open_min_files=4)
    parts = list(partitions(store.samples, "proc"))
    for part in parts:  # two tiers, nothing plain left, the first tier untouched
        assert len(part.live) == 2 and all(n.startswith(COMPACT_PREFIX) for n in part.live)
    assert store.connect().execute(count).fetchone() == (60, 60)
    assert compact(store, settle=3600, grace=0, clock=lambda: noon, open_min_files=0).partitions == 0
    compact(store, settle=3600, grace=0, clock=lambda: NOW, open_min_files=4)  # the day closed
    for part in partitions(store.samples, "proc"):
        assert part.compacted and len(part.replaced) == 2
    compact(store, settle=3600, grace=0, clock=lambda: NOW, open_min_files=4)  # past grace: deleted
    for part in partitions(store.samples, "proc"):
        assert [p.name for p in part.path.iterdir()] == list(part.live)
    assert store.connect().execute(count).fetchone() == (60, 60)


@pytest.mark.slow
def test_open_day_tiers_are_merged_into_one_once_there_are_four(tmp_path: Path) -> None:
    """Four tiers and a new batch of segments become one file: a partition of the open day never
    holds more than OPEN_MAX_TIERS tiers plus a batch of segments."""
    store = Store.open(tmp_path / "d")
    noon = (DAY + dt.timedelta(hours=12)).replace(tzinfo=dt.UTC).timestamp()
    pid, tiers = 0, []
    for _ in range(OPEN_MAX_TIERS + 1):
        pid = write_segments(store, nodes=1, files=3, rows=2, start=pid)
        compact(store, settle=3600, grace=0, clock=lambda: noon, open_min_files=3)
        (part,) = partitions(store.samples, "proc")
        tiers.append(len(part.live))
    assert tiers == [1, 2, 3, 4, 1]
    assert store.connect().execute(
        "SELECT count(*), count(DISTINCT pid) FROM gpu_process_samples").fetchone() == (pid, pid)


@pytest.mark.slow
def test_dictionary_encoded_segments_merge_with_plain_compacted_files(tmp_path: Path) -> None:
    """The simulator writes dictionary-encoded strings, compaction plain ones: a later run that
    merges a compacted file with new dictionary-encoded segments (a second tier level, a closed
    day with tiers, a late segment) reads both as strings."""
    store = Store.open(tmp_path / "d")

    def encoded(first: int) -> pa.Table:
        t = proc_rows("n0", first, 4)
        t = conform(t.drop_columns(["node"]), "proc").append_column("node", t.column("node"))
        i = t.schema.get_field_index("uuid")
        return t.set_column(i, "uuid", t.column("uuid").fill_null("GPU-0").dictionary_encode())

    for k in range(2):
        store.write_samples("proc", encoded(4 * k))
    compact(store, settle=0, grace=0, clock=lambda: NOW)
    for k in range(2, 4):
        store.write_samples("proc", encoded(4 * k))
    report = compact(store, settle=0, grace=0, clock=lambda: NOW)
    assert report.partitions == 1 and report.files_in == 3
    (part,) = partitions(store.samples, "proc")
    assert part.compacted and f"-{schema_mark('proc')}-" in part.live[0]
    assert store.connect().execute(
        "SELECT count(*), count(DISTINCT pid), min(uuid) FROM gpu_process_samples").fetchone() == (16, 16, "GPU-0")

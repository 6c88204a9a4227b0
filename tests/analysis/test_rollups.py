"""Rollups (issue 26): every analysis gives the same numbers with and without them.

One small simulated store whose lake holds what a real one does: closed days compacted,
an open day compacted in a tier with newer segments beside it, late segments (with
samples in minutes the rollups already hold, several samples a minute, NaN samples),
and re-compaction. Each state is compared with a copy of the same store without its
``rollups/`` folder (raw samples only), to 1e-9 (relative) on every number.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gpulens import analysis
from gpulens.analysis import Filters
from gpulens.ingest.simulate import simulate
from gpulens.store import Store
from gpulens.store.compact import compact
from gpulens.store.lake import live_files, partitions
from gpulens.store.rollups import SOURCES_KEY, plan, rollup_path
from tests.conftest import built_once
from tests.core.test_store import _py, _wait_for_line

DAY = dt.datetime(2026, 1, 1)
#: noon of the third day: days 1 and 2 are closed, day 3 is open
NOON3 = (DAY + dt.timedelta(days=2, hours=12)).replace(tzinfo=dt.UTC).timestamp()


def _segmented(root: Path) -> Store:
    """16 GPUs x 3 days, re-written as 30-minute segments, some samples NaN."""
    store = Store.open(root)
    simulate(store, gpus=16, days=3, seed=7, start=DAY)
    table = store.connect().sql(
        "SELECT * EXCLUDE (date) FROM gpu_samples ORDER BY ts").to_arrow_table()
    for part in partitions(store.samples, "gpu"):
        shutil.rmtree(part.path)
    nan = pc.equal(pc.bit_wise_and(pc.cast(table["ts"], pa.int64()), 7 * 60_000_000), 0)
    util = pc.if_else(nan, pa.scalar(float("nan"), pa.float32()), table["util_gpu"])
    table = table.set_column(table.schema.get_field_index("util_gpu"), "util_gpu", util)
    slot = pc.divide(pc.cast(table["ts"], pa.int64()), 1_800_000_000)
    for value in pc.unique(slot).to_pylist():
        store.write_samples("gpu", table.filter(pc.equal(slot, value)))
    return store


def segmented_copy(factory: pytest.TempPathFactory, dest: Path) -> Store:
    """A copy at ``dest`` of :func:`_segmented`'s store, built once for the whole run (six
    modules and tests use it: each build took about 5 CPU-s)."""
    def build(folder: Path) -> None:
        _segmented(folder / "d")

    shutil.copytree(built_once(factory, "segmented", build) / "d", dest)
    return Store.open(dest)


def _late(store: Store, day: int, seconds: int) -> None:
    """A late segment: every GPU's samples of hours 5-7 of ``day`` again, ``seconds`` later
    (so the same minutes get a second sample), utilization shifted."""
    lo = DAY + dt.timedelta(days=day, hours=5)
    table = store.connect().sql(
        "SELECT * EXCLUDE (date) FROM gpu_samples WHERE ts >= $lo AND ts < $hi ORDER BY ts",
        params={"lo": lo, "hi": lo + dt.timedelta(hours=2)}).to_arrow_table()
    ts = pc.add(table["ts"], pa.scalar(dt.timedelta(seconds=seconds)))
    util = pc.subtract(table["util_gpu"], pa.scalar(3.5, pa.float32()))
    table = table.set_column(0, "ts", ts)
    table = table.set_column(table.schema.get_field_index("util_gpu"), "util_gpu", util)
    store.write_samples("gpu", table)


def _everything(store: Store) -> dict[str, Any]:
    """Every analysis that reads GPU samples, unfiltered and in a window with a vc filter."""
    con = store.connect()
    vcs = tuple(r[0] for r in con.execute(
        "SELECT vc FROM jobs GROUP BY vc ORDER BY count(*) DESC, vc LIMIT 2").fetchall())
    out: dict[str, Any] = {}
    for name, f in (("all", None), ("window", Filters(
            start=DAY + dt.timedelta(hours=20, minutes=17), end=DAY + dt.timedelta(hours=61),
            vcs=vcs))):
        for by in ("cluster", "user", "vc", "day"):
            out[f"{name} utilization {by}"] = analysis.utilization(con, f, by=by)
        for freq in ("hour", "day"):
            out[f"{name} series {freq}"] = analysis.utilization_timeseries(con, f, freq=freq)
        out[f"{name} jobs"] = analysis.job_utilization(con, f)
        out[f"{name} locality"] = analysis.locality(con, f, n_boot=50)
        out[f"{name} locality_loss"] = analysis.locality_loss(con, f)
        for key in (None, "vc", "user"):
            out[f"{name} goodput {key}"] = analysis.goodput(con, f, by=key)  # type: ignore[arg-type]
        out[f"{name} failure_cost"] = analysis.failure_cost(con, f)
        out[f"{name} early_stop"] = analysis.early_stop(con, f)
        summary = analysis.early_stop_summary(con, f)
        out[f"{name} early_stop_summary"] = pd.DataFrame([dataclasses.asdict(summary)])
        out[f"{name} online_stop"] = analysis.online_stop(con, f)
    return out


def _raw_copy(store: Store, dest: Path) -> Store:
    shutil.copytree(store.root, dest, ignore=shutil.ignore_patterns("rollups", "*.lock"))
    assert not (dest / "rollups").exists()
    return Store(dest)


def _assert_same(rolled: dict[str, Any], raw: dict[str, Any]) -> None:
    assert rolled.keys() == raw.keys()
    for name, a in rolled.items():
        b = raw[name]
        assert list(a.columns) == list(b.columns), name
        assert len(a) == len(b), name
        for col in a.columns:
            x, y = a[col].reset_index(drop=True), b[col].reset_index(drop=True)
            if pd.api.types.is_numeric_dtype(x) and not pd.api.types.is_bool_dtype(x):
                np.testing.assert_allclose(x.to_numpy("float64"), y.to_numpy("float64"),
                                           rtol=1e-9, atol=1e-12, err_msg=f"{name}: {col}")
            else:
                assert x.astype(str).tolist() == y.astype(str).tolist(), f"{name}: {col}"
    first = next(iter(rolled.values()))
    assert len(first) > 0, "the store must have rows to compare"


#: the rollup the analyses of each sample kind read
ROLLUP = {"gpu": "gpu_hour", "net": "net_minute"}


def _used(store: Store, kind: str = "gpu") -> tuple[int, int]:
    """(rollup files, raw files) the analyses of ``kind`` samples read for the whole store
    (tests/analysis/test_rollups_network.py uses it for "net")."""
    listing = live_files(store.connect(), kind)
    assert listing is not None
    p = plan(store.root, ROLLUP[kind], listing.files, store.warn)
    return len(p.rollups), len(p.raw)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return segmented_copy(tmp_path_factory, tmp_path_factory.mktemp("rollups") / "d")


@pytest.mark.slow
def test_rollups_give_the_raw_numbers_through_late_segments_and_recompaction(
        lake: Store, tmp_path: Path) -> None:
    store = Store(tmp_path / "d1")
    shutil.copytree(lake.root, store.root)
    report = compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    assert report.rollup_files >= 3 and report.rollup_bytes > 0
    days = [DAY.date() + dt.timedelta(days=i) for i in range(3)]
    assert all(rollup_path(store.root, "gpu_hour", d).exists() for d in days)
    assert _used(store) == (3, 0), "closed days and the open day's tier are all rolled"
    _assert_same(_everything(store), _everything(_raw_copy(store, tmp_path / "raw1")))

    nodes = len({p.node for p in partitions(store.samples, "gpu", days[0], days[0])})
    _late(store, 0, 10)  # a closed day: same minutes, a second sample each
    _late(store, 2, 20)  # the open day: newer segments beside its tier
    assert _used(store) == (3, 2 * nodes), "only the late segments are read raw"
    _assert_same(_everything(store), _everything(_raw_copy(store, tmp_path / "raw2")))

    old = rollup_path(store.root, "gpu_hour", days[0]).read_bytes()
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    assert _used(store) == (3, nodes), "the closed day's late segment was rolled in; the open" \
        " day's one new segment per node is fewer than a tier: read raw"
    counts = pq.read_table(rollup_path(store.root, "gpu_hour", days[0]), columns=["hk", "nm"])
    two = {hk % 24 for hk, nm in zip(counts["hk"].to_pylist(), counts["nm"].to_pylist(),
                                     strict=True) if nm is not None}
    assert two == {5, 6}, "minute counts are stored where a minute has two samples"
    _assert_same(_everything(store), _everything(_raw_copy(store, tmp_path / "raw3")))

    # a rollup out of step with its day (a crash before step 5): its nodes are read raw
    rollup_path(store.root, "gpu_hour", days[0]).write_bytes(old)
    assert _used(store) == (2, 2 * nodes)
    _assert_same(_everything(store), _everything(_raw_copy(store, tmp_path / "raw4")))
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)  # the next run repairs it
    assert _used(store) == (3, nodes)


def _damage(store: Store, path: Path) -> list[str]:
    """Overwrite a data page of ``path`` (the footer kept); the store's warnings are collected in the list."""
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.seek(size // 3)
        fh.write(b"\xff" * 64)
    lines: list[str] = []
    store.warn = lines.append
    return lines


def _quarantined_once(store: Store, path: Path, lines: list[str]) -> None:
    """One warning naming ``path``, which is now in quarantine."""
    assert len(lines) == 1 and path.name in lines[0] and "Raw samples are read instead" in lines[0]
    assert (store.root / "quarantine" / path.relative_to(store.root)).exists()
    assert not path.exists()


def test_a_file_rewritten_under_the_same_name_is_not_taken_for_the_rolled_one(
        lake: Store, tmp_path: Path) -> None:
    """A second simulation into the same directory writes files of the same names: the rollups
    of the first must not be used for them."""
    store = Store(tmp_path / "d5")
    shutil.copytree(lake.root, store.root)
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    (part,) = [p for p in partitions(store.samples, "gpu", DAY.date(), DAY.date())][:1]
    path = part.path / part.live[0]
    table = pq.read_table(path, partitioning=None)
    util = pc.multiply(table["util_gpu"], pa.scalar(0.5, pa.float32()))
    pq.write_table(table.set_column(table.schema.get_field_index("util_gpu"), "util_gpu", util),
                   path)  # same name, other rows
    assert _used(store)[1] == 1, "that node-day is read raw"
    _assert_same(_core(store), _core(_raw_copy(store, tmp_path / "raw")))


def test_a_page_run_takes_the_listing_stat_and_the_next_run_sees_a_file_rewritten_in_place(
        lake: Store, tmp_path: Path) -> None:
    """Inside one pinned page run a saved listing's file stats stand for the files (the run reads
    the files as listed; the plan is the one stating them gives); the next run states them again
    and reads a node-day raw once its file was rewritten under the same name."""
    from gpulens.store import lake as lk
    from tests.core.test_lake_listing import _new_process

    store = Store(tmp_path / "d7")
    shutil.copytree(lake.root, store.root)
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    time.sleep(2.1)  # nothing changed in the last 2 s is saved (mtimes are coarse)
    lk.list_live(store.samples, "gpu")  # saved for the next process
    _new_process()
    with lk.listings_pinned():
        listing = lk.list_live(store.samples, "gpu")
        assert all(lk.pinned_stat(p) is not None for p in listing.paths)
        pinned = plan(store.root, "gpu_hour", listing.files, store.warn)
    assert lk.pinned_stat(listing.paths[0]) is None, "only inside the block"
    assert pinned == plan(store.root, "gpu_hour", listing.files, store.warn)
    assert pinned.rollups and not any(day == DAY.date() for _, day in pinned.raw)

    (part,) = [p for p in partitions(store.samples, "gpu", DAY.date(), DAY.date())][:1]
    path = part.path / part.live[0]
    table = pq.read_table(path, partitioning=None)
    util = pc.multiply(table["util_gpu"], pa.scalar(0.5, pa.float32()))
    pq.write_table(table.set_column(table.schema.get_field_index("util_gpu"), "util_gpu", util),
                   path)  # same name, other rows: its folder's mtime is unchanged
    with lk.listings_pinned():
        again = lk.list_live(store.samples, "gpu")
        assert lk.pinned_stat(str(path)) is None, "a listing reused in process states nothing"
        raw = plan(store.root, "gpu_hour", again.files, store.warn).raw
    assert [p for p, _ in raw if p == str(path)], "that node-day is read raw"
    _assert_same(_core(store), _core(_raw_copy(store, tmp_path / "raw")))


def test_a_damaged_or_missing_rollup_falls_back_to_raw_with_one_warning(
        lake: Store, tmp_path: Path) -> None:
    store = Store(tmp_path / "d2")
    shutil.copytree(lake.root, store.root)
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    want = _everything(_raw_copy(store, tmp_path / "raw"))
    path = rollup_path(store.root, "gpu_hour", DAY.date())
    lines = _damage(store, path)
    _assert_same(_everything(store), want)
    _quarantined_once(store, path, lines)
    # a missing rollup: raw, no warning (a day not rolled yet is normal)
    rollup_path(store.root, "gpu_hour", DAY.date() + dt.timedelta(days=1)).unlink()
    lines.clear()
    _assert_same(_everything(store), want)
    assert lines == []


@pytest.mark.slow
def test_store_check_reads_every_rollup_and_quarantines_a_damaged_one(
        lake: Store, tmp_path: Path) -> None:
    from tests.core.test_quarantine import run

    store = Store(tmp_path / "d6")
    shutil.copytree(lake.root, store.root)
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    r = run("--data-dir", str(store.root), "store", "check", "--json")
    assert r.returncode == 0, r.stderr
    on_disk = list((store.root / "rollups").rglob("*.parquet"))
    assert len(on_disk) >= 4 and json.loads(r.stdout)["rollups_checked"] == len(on_disk)
    path = rollup_path(store.root, "gpu_hour", DAY.date())
    size = path.stat().st_size
    with open(path, "r+b") as fh:  # a damaged data page behind an intact footer
        fh.seek(size // 3)
        fh.write(b"\xff" * 64)
    r = run("--data-dir", str(store.root), "store", "check", "--json")
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["newly_quarantined"] == [str(path.relative_to(store.root))]
    assert not path.exists()
    _assert_same(_core(store), _core(_raw_copy(store, tmp_path / "raw")))


def test_rollup_names_the_files_it_summarises(lake: Store, tmp_path: Path) -> None:
    store = Store(tmp_path / "d3")
    shutil.copytree(lake.root, store.root)
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    path = rollup_path(store.root, "gpu_hour", DAY.date())
    sources = json.loads((pq.read_metadata(path).metadata or {})[SOURCES_KEY])
    live = {p.node: list(p.live) for p in partitions(store.samples, "gpu", DAY.date(), DAY.date())}
    assert {node: [n for n, _, _ in src] for node, src in sources.items()} == live
    rows = pq.read_table(path)
    assert rows.num_rows == 16 * 24, "one row per GPU and hour"
    assert {len(v) for v in rows["sm"].to_pylist()} == {60}
    assert rows["nm"].null_count == rows.num_rows, "one sample a minute: counts are the mask's bits"
    net = rollup_path(store.root, "net_minute", DAY.date())
    assert pq.read_table(net).num_rows > 0


def _core(store: Store) -> dict[str, Any]:
    con = store.connect()
    return {"day": analysis.utilization(con, by="day"), "jobs": analysis.job_utilization(con),
            "goodput": analysis.goodput(con), "series": analysis.utilization_timeseries(con)}


@pytest.mark.slow
def test_sigkilled_compaction_never_leaves_a_rollup_out_of_step(lake: Store, tmp_path: Path) -> None:
    """Rounds of: late segments on one node-day per node, then a compaction (5 merges, then the
    day's rollup) killed with SIGKILL after 0, 1, ... of its steps. Every analysis still gives
    the raw numbers after each kill, and a last run leaves every day rolled up, no debris."""
    root = tmp_path / "d4"
    shutil.copytree(lake.root, root)
    store = Store(root)
    compact(store, settle=0, grace=0)
    rng = random.Random(26)
    killed = 0
    for i, steps in enumerate((0, 1, 3, 5, 6, 2)):
        _late(store, i % 3, 10 + i)
        want = _core(_raw_copy(store, tmp_path / f"raw{i}"))
        proc = _py("compact_once", str(root))
        _wait_for_line(proc, "start")
        for _ in range(steps):
            _wait_for_line(proc, "merged ")
        time.sleep(rng.uniform(0.0, 0.05))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        killed += "done" not in out
        _assert_same(_core(store), want)
        if i % 2:  # a later run finishes what the killed one left
            compact(store, settle=0, grace=0)
            _assert_same(_core(store), want)
    assert killed >= 4, "the runs must have been killed mid-way"
    compact(store, settle=0, grace=0)
    assert _used(store) == (3, 0)
    assert list((root / "tmp").glob("rollup-*")) == []
    _assert_same(_core(store), _core(_raw_copy(store, tmp_path / "raw-end")))

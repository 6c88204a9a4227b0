"""Saved bases (issue 26, gpulens/analysis/saved.py): the closed days of the utilization base and
the convergence table kept between processes give the same numbers as building them afresh.

The store is the rollup tests' small simulated lake (16 GPUs x 3 days as 30-minute segments,
compacted at noon of day 3: days 1 and 2 closed, day 3 open). Each state is compared, to 1e-9,
with a copy of the same store without ``derived/`` (everything built), and the days each build
read from the saved base or built are checked: a change touches exactly its days.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
import pytest

from gpulens import analysis
from gpulens.analysis import Filters
from gpulens.analysis.base import base_days
from gpulens.store import Store
from gpulens.store.compact import compact
from gpulens.store.derived import KEY, base_dir, base_path, saved_bases
from tests.analysis.test_rollups import DAY, NOON3, _assert_same, _late, segmented_copy
from tests.core.test_quarantine import run

D0, D1, D2 = (DAY.date() + dt.timedelta(days=i) for i in range(3))
WINDOW = Filters(start=DAY + dt.timedelta(hours=20, minutes=17), end=DAY + dt.timedelta(hours=61))


def _overview(store: Store) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Overview's figures (and the other analyses on the base), unfiltered and in a window;
    and the days the unfiltered build read from the saved base."""
    con = store.connect()
    out: dict[str, Any] = {}
    for name, f in (("all", None), ("window", WINDOW)):
        for by in ("cluster", "user", "vc", "day"):
            out[f"{name} utilization {by}"] = analysis.utilization(con, f, by=by)
        if name == "all":
            days = base_days(con)
        for freq in ("hour", "day"):
            out[f"{name} series {freq}"] = analysis.utilization_timeseries(con, f, freq=freq)
        out[f"{name} jobs"] = analysis.job_utilization(con, f)
        out[f"{name} goodput"] = analysis.goodput(con, f)
        out[f"{name} failure_cost"] = analysis.failure_cost(con, f)
        out[f"{name} early_stop"] = analysis.early_stop(con, f)
        out[f"{name} online_stop"] = analysis.online_stop(con, f)
        summary = analysis.early_stop_summary(con, f)
        out[f"{name} early_stop_summary"] = pd.DataFrame([dataclasses.asdict(summary)])
    con.close()
    return out, days


def _fresh(store: Store, dest: Path) -> dict[str, Any]:
    """The figures of a copy of ``store`` without its saved tables (everything built)."""
    shutil.copytree(store.root, dest, ignore=shutil.ignore_patterns("derived", "*.lock"))
    got, days = _overview(Store(dest))
    assert days["loaded"] == [], "the copy has nothing saved"
    return got


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = segmented_copy(tmp_path_factory, tmp_path_factory.mktemp("saved") / "d")
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    return store


def _copy(lake: Store, dest: Path) -> Store:
    shutil.copytree(lake.root, dest)
    return Store(dest)


@pytest.mark.slow
def test_saved_days_give_the_built_numbers_through_late_segments_recompaction_and_placements(
        lake: Store, tmp_path: Path) -> None:
    store = _copy(lake, tmp_path / "s")
    first, days = _overview(store)
    assert days == {"loaded": [], "built": [str(D0), str(D1), str(D2)], "saved": 2}
    assert [f.day for f in saved_bases(store.root)] == [D0, D1], "closed days only"
    again, days = _overview(store)
    assert days["loaded"] == [str(D0), str(D1)] and days["built"] == [str(D2)]
    _assert_same(again, first)
    _assert_same(again, _fresh(store, tmp_path / "f0"))

    # a late segment on a closed day: that day is built again, the other one read
    _late(store, 0, 10)
    got, days = _overview(store)
    assert days["loaded"] == [str(D1)] and days["built"] == [str(D0), str(D2)]
    _assert_same(got, _fresh(store, tmp_path / "f1"))
    got, days = _overview(store)
    assert days["loaded"] == [str(D0), str(D1)], "saved again with the late segment"

    # re-compaction (the late segment merged, the day's rollup rewritten)
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    got, days = _overview(store)
    assert days["loaded"] == [str(D1)] and days["built"] == [str(D0), str(D2)]
    _assert_same(got, _fresh(store, tmp_path / "f2"))

    # an attempt that ends earlier, on day 2 only: day 2 is built again, day 1 read
    con = store.connect()
    job, attempt, end = con.execute(
        "SELECT job_id, attempt, end_time FROM attempts WHERE start_time >= $a AND end_time > $b"
        " AND end_time < $c ORDER BY job_id LIMIT 1",
        {"a": DAY + dt.timedelta(days=1, hours=2), "b": DAY + dt.timedelta(days=1, hours=6),
         "c": DAY + dt.timedelta(days=1, hours=22)}).fetchall()[0]
    con.close()
    with store.write() as w:
        w.execute("UPDATE attempts SET end_time = $e WHERE job_id = $j AND attempt = $a",
                  {"e": end - dt.timedelta(hours=1, minutes=7), "j": job, "a": attempt})
        w.execute("UPDATE placements SET end_time = NULL WHERE job_id = $j AND attempt = $a",
                  {"j": job, "a": attempt})
    got, days = _overview(store)
    assert days["loaded"] == [str(D0)] and days["built"] == [str(D1), str(D2)]
    _assert_same(got, _fresh(store, tmp_path / "f3"))

    # a placement moved to another GPU on day 1
    with store.write() as w:
        w.execute("UPDATE placements SET gpu_index = (gpu_index + 1) % 8"
                  " WHERE job_id = $j AND attempt = $a", {"j": job, "a": attempt})
    got, days = _overview(store)
    assert days["loaded"] == [str(D0)] and days["built"] == [str(D1), str(D2)]
    _assert_same(got, _fresh(store, tmp_path / "f4"))


def test_a_window_reads_the_whole_days_inside_it_and_builds_its_edges(
        lake: Store, tmp_path: Path) -> None:
    store = _copy(lake, tmp_path / "w")
    _overview(store)  # saves days 1 and 2
    con = store.connect()
    analysis.utilization(con, Filters(start=DAY - dt.timedelta(days=3), end=DAY + dt.timedelta(hours=40)))
    days = base_days(con)
    assert days["loaded"] == [str(D0)], "day 1 lies whole inside the window"
    assert days["built"] == [str(D1)] and days["saved"] == 0, "day 2 is cut by the window: built"
    analysis.utilization(con, WINDOW)
    assert base_days(con)["loaded"] == [str(D1)] and base_days(con)["saved"] == 0
    con.close()


def test_a_damaged_or_foreign_saved_file_is_rebuilt_with_one_warning(
        lake: Store, tmp_path: Path) -> None:
    store = _copy(lake, tmp_path / "d")
    want, _ = _overview(store)
    lines: list[str] = []
    store.warn = lines.append
    path = base_path(store.root, D0)
    size = path.stat().st_size
    with open(path, "r+b") as fh:  # a data page overwritten, the footer kept
        fh.seek(size // 3)
        fh.write(b"\xff" * 64)
    got, days = _overview(store)
    assert days["loaded"] == [str(D1)] and days["built"] == [str(D0), str(D2)]
    assert len(lines) == 1 and str(path) in lines[0] and "damaged" in lines[0], lines
    _assert_same(got, want)
    assert pq.read_table(path).num_rows > 0, "saved again, whole"
    got, days = _overview(store)
    assert days["loaded"] == [str(D0), str(D1)] and len(lines) == 1

    # a truncated file (no footer): the same
    path.write_bytes(path.read_bytes()[: size // 2])
    got, days = _overview(store)
    assert str(D0) in days["built"] and len(lines) == 2 and "footer" in lines[1]
    _assert_same(got, want)

    # a file of another key (another store's, or copied by hand): rebuilt, no warning
    shutil.copyfile(base_path(store.root, D1), path)
    got, days = _overview(store)
    assert days["loaded"] == [str(D1)] and len(lines) == 2
    assert pq.read_metadata(path).metadata[KEY] != pq.read_metadata(base_path(store.root, D1)).metadata[KEY]
    _assert_same(got, want)

    # the saved convergence and curve tables damaged: rebuilt with one warning each
    (cv,) = (store.root / "derived" / "convergence").glob("cv-*.parquet")
    (curve,) = (store.root / "derived" / "convergence").glob("curve-*.parquet")
    cv.write_bytes(b"PAR1" + b"\0" * 100)
    with open(curve, "r+b") as fh:
        fh.seek(curve.stat().st_size // 3)
        fh.write(b"\xff" * 64)
    got, _ = _overview(store)
    assert len(lines) == 4 and {str(cv), str(curve)} == {ln.split()[2] for ln in lines[2:]}, lines
    _assert_same(got, want)
    got, _ = _overview(store)
    assert len(lines) == 4, "saved again, whole"


def test_saving_is_atomic_and_a_read_only_store_saves_nothing(lake: Store, tmp_path: Path) -> None:
    store = _copy(lake, tmp_path / "a")
    folder = base_dir(store.root)
    folder.mkdir(parents=True)
    debris = folder / ".base-2026-01-01.parquet.123.abcd.tmp"  # a killed writer's
    debris.write_bytes(b"PAR1 half")
    old = time.time() - 7200
    os.utime(debris, (old, old))
    fresh = folder / ".base-2026-01-02.parquet.456.ef01.tmp"  # another writer's, in progress
    fresh.write_bytes(b"PAR1 half")
    want, days = _overview(store)
    assert days["saved"] == 2
    r = run("--data-dir", str(store.root), "store", "info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)["saved"]
    assert info["base_files"] == 2 and info["base_days"] == [str(D0), str(D1)]
    assert info["base_bytes"] == sum(f.bytes for f in saved_bases(store.root)) > 0
    assert info["convergence_files"] == 2, "the metric's curves and its convergence"
    assert sorted(p.name for p in folder.iterdir()) == [fresh.name, "base-2026-01-01.parquet",
                                                        "base-2026-01-02.parquet"]
    # a data directory where nothing can be saved (``derived`` is a file here: no folder can be
    # made, as on a read-only mount): every build builds, nothing fails, nothing is written
    blocked = _copy(lake, tmp_path / "ro")
    (blocked.root / "derived").write_bytes(b"")
    got, days = _overview(blocked)
    assert days["saved"] == 0 and days["loaded"] == []
    assert (blocked.root / "derived").read_bytes() == b""
    _assert_same(got, want)

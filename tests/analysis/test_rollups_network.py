"""Network traffic (issue 26, item 2) reads the ``net_minute`` rollups: the same numbers with and
without them, through closed days, an open day's tier beside newer segments, late segments,
re-compaction, a stale rollup and a damaged one (which falls back to raw with one warning).

Each state is compared with a copy of the store without its ``rollups/`` folder, to 1e-9
(relative) on every number (tests/analysis/test_rollups.py does the same for the GPU analyses).
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gpulens import analysis
from gpulens.analysis import Filters
from gpulens.ingest.simulate import simulate
from gpulens.store import Store
from gpulens.store.compact import compact
from gpulens.store.lake import live_files, partitions
from gpulens.store.rollups import plan, rollup_path
from tests.analysis.test_rollups import (
    DAY,
    NOON3,
    _assert_same,
    _damage,
    _quarantined_once,
    _raw_copy,
    _used,
)


def _segmented(root: Path) -> Store:
    """16 GPUs x 3 days; network samples re-written as 30-minute segments, some rates NULL."""
    store = Store.open(root)
    simulate(store, gpus=16, days=3, seed=11, start=DAY)
    table = store.connect().sql("SELECT * EXCLUDE (date) FROM net_samples ORDER BY ts").to_arrow_table()
    for part in partitions(store.samples, "net"):
        shutil.rmtree(part.path)
    gap = pc.equal(pc.bit_wise_and(pc.cast(table["ts"], pa.int64()), 7 * 60_000_000), 0)
    rx = pc.if_else(gap, pa.scalar(None, pa.float64()), table["rx_bps"])
    table = table.set_column(table.schema.get_field_index("rx_bps"), "rx_bps", rx)
    slot = pc.divide(pc.cast(table["ts"], pa.int64()), 1_800_000_000)
    for value in pc.unique(slot).to_pylist():
        store.write_samples("net", table.filter(pc.equal(slot, value)))
    return store


def _late(store: Store, day: int, seconds: int, node: str | None = None) -> None:
    """Every interface's (or one node's) samples of hours 5-7 of ``day`` again, ``seconds`` later,
    rates doubled."""
    lo = DAY + dt.timedelta(days=day, hours=5)
    table = store.connect().sql(
        "SELECT * EXCLUDE (date) FROM net_samples WHERE ts >= $lo AND ts < $hi"
        " AND ($node IS NULL OR node = $node) ORDER BY ts",
        params={"lo": lo, "hi": lo + dt.timedelta(hours=2), "node": node}).to_arrow_table()
    table = table.set_column(0, "ts", pc.add(table["ts"], pa.scalar(dt.timedelta(seconds=seconds))))
    rx = pc.multiply(table["rx_bps"], pa.scalar(2.0))
    store.write_samples("net", table.set_column(table.schema.get_field_index("rx_bps"), "rx_bps", rx))


def _traffic(store: Store) -> dict[str, pd.DataFrame]:
    con = store.connect()
    out: dict[str, pd.DataFrame] = {}
    window = Filters(start=DAY + dt.timedelta(hours=20, minutes=17, seconds=30),
                     end=DAY + dt.timedelta(hours=61, seconds=1))
    for name, f in (("all", None), ("window", window)):
        for freq in ("minute", "hour", "day"):
            for by in (None, "node", "link_kind"):
                out[f"{name} {freq} {by}"] = analysis.network_traffic(con, f, freq=freq, by=by)
    return out


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return _segmented(tmp_path_factory.mktemp("net") / "d")


@pytest.mark.slow
def test_network_traffic_gives_the_raw_numbers_from_rollups(lake: Store, tmp_path: Path) -> None:
    store = Store(tmp_path / "d1")
    shutil.copytree(lake.root, store.root)
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    assert _used(store, "net") == (3, 0), "closed days and the open day's tier are all rolled"
    rolled = _traffic(store)
    _assert_same(rolled, _traffic(_raw_copy(store, tmp_path / "raw1")))
    first = rolled["all hour None"]
    assert first["samples"].sum() > 0 and first["rx_bps_sum"].sum() > 0
    assert len(rolled["window minute None"]) < len(rolled["all minute None"])

    nodes = len({p.node for p in partitions(store.samples, "net", DAY.date(), DAY.date())})
    _late(store, 0, 10)  # a closed day: the same minutes get a second sample
    _late(store, 2, 20)  # the open day: newer segments beside its tier
    assert _used(store, "net") == (3, 2 * nodes), "only the late segments are read raw"
    _assert_same(_traffic(store), _traffic(_raw_copy(store, tmp_path / "raw2")))

    old = rollup_path(store.root, "net_minute", DAY.date()).read_bytes()
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    _assert_same(_traffic(store), _traffic(_raw_copy(store, tmp_path / "raw3")))

    # a rollup out of step with its day (its files were re-compacted since): its nodes read raw
    rollup_path(store.root, "net_minute", DAY.date()).write_bytes(old)
    assert _used(store, "net")[0] == 2
    _assert_same(_traffic(store), _traffic(_raw_copy(store, tmp_path / "raw4")))

    # one node's files of day 2 re-compacted since its rollup: that node raw, the others rolled
    day2 = DAY.date() + dt.timedelta(days=1)
    old = rollup_path(store.root, "net_minute", day2).read_bytes()
    node = sorted(p.node for p in partitions(store.samples, "net", day2, day2))[0]
    _late(store, 1, 30, node)
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    rollup_path(store.root, "net_minute", day2).write_bytes(old)
    con = store.connect()
    listing = live_files(con, "net")
    assert listing is not None
    subsets = [nodes for _, nodes in plan(store.root, "net_minute", listing.files, store.warn).rollups
               if nodes is not None]
    assert len(subsets) == 1 and node not in subsets[0] and len(subsets[0]) == nodes - 1
    _assert_same(_traffic(store), _traffic(_raw_copy(store, tmp_path / "raw5")))


@pytest.mark.slow
def test_a_damaged_network_rollup_falls_back_to_raw_with_one_warning(lake: Store, tmp_path: Path) -> None:
    store = Store(tmp_path / "d2")
    shutil.copytree(lake.root, store.root)
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    want = _traffic(_raw_copy(store, tmp_path / "raw"))
    path = rollup_path(store.root, "net_minute", DAY.date())
    lines = _damage(store, path)
    _assert_same(_traffic(store), want)
    _quarantined_once(store, path, lines)

"""The live-file listing saved for the next process (gpulens.store.lake): a folder's entry is used
only while that folder and its files are unchanged (the others are listed and checked again), so it
is always the listing a walk would give."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from gpulens.store import Store, lake
from gpulens.store import quarantine as qr
from tests.core.lake_builders import proc_rows


def _settle(samples: Path, seconds: float = 60.0) -> None:
    """Date every folder and file under ``samples`` back (the listing saves nothing that
    changed in the last 2 s: mtimes can be coarse)."""
    then = time.time() - seconds
    for folder, _, names in os.walk(samples, topdown=False):
        for name in names:
            os.utime(os.path.join(folder, name), (then, then))
        os.utime(folder, (then, then))


def _new_process() -> None:
    """Forget what this process listed and checked, as a fresh process would not know it."""
    lake._whole.clear()
    lake._listed.clear()
    lake._inputs_cache.clear()
    lake._saved_state.clear()
    lake._taken.clear()
    lake._patchable.clear()
    qr._VERIFIED.clear()


def _saved_files(saved: Path) -> int:
    return sum(len(entry[3]) for entry in json.loads(saved.read_text())["folders"])


def _walked(samples: Path, kind: str) -> lake.LakeListing:
    """The listing by a walk of the folders (the saved one set aside)."""
    saved = lake._saved_path(samples, kind)
    aside = saved.with_name("aside.json")
    saved.rename(aside)
    try:
        _new_process()
        return lake.list_live(samples, kind)
    finally:
        aside.rename(saved)
        _new_process()


def test_saved_listing_is_used_only_while_nothing_it_came_from_changed(store: Store) -> None:
    for node in ("n0", "n1"):
        for first in (0, 100):
            store.write_samples("proc", proc_rows(node, first, 50))
    _settle(store.samples)
    first = lake.list_live(store.samples, "proc")
    saved = lake._saved_path(store.samples, "proc")
    assert saved.exists() and _saved_files(saved) == 4

    _new_process()
    again = lake._load_saved(store.samples, "proc")
    assert again is not None and again[1] == first == _walked(store.samples, "proc")

    # a file changed in place (its folder's mtime is not): the saved listing is not used, and
    # the walk's magic check finds the damage
    victim = Path(first.paths[0])
    folder_mtime = victim.parent.stat().st_mtime_ns
    with open(victim, "r+b") as fh:
        fh.truncate(victim.stat().st_size // 2)
    assert victim.parent.stat().st_mtime_ns == folder_mtime
    _new_process()
    assert lake._load_saved(store.samples, "proc") is None
    lines: list[str] = []
    after = lake.list_live(store.samples, "proc", warn=lines.append)
    assert str(victim) not in after.paths and len(after.paths) == 3
    assert len(lines) == 1 and victim.name in lines[0]

    # a new file in a partition: its folder changed, the new file is listed
    _settle(store.samples)
    lake.list_live(store.samples, "proc")
    store.write_samples("proc", proc_rows("n1", 500, 10))
    _new_process()
    assert lake._load_saved(store.samples, "proc") is None
    assert len(lake.list_live(store.samples, "proc").paths) == 4


def test_nothing_recent_is_saved_and_a_bad_saved_file_is_ignored(store: Store) -> None:
    store.write_samples("proc", proc_rows("n0", 0, 20))
    saved = lake._saved_path(store.samples, "proc")
    saved.unlink(missing_ok=True)
    _new_process()
    listing = lake.list_live(store.samples, "proc")
    assert len(listing.paths) == 1 and not saved.exists()  # written just now: not settled
    saved.write_text("{not json")
    _new_process()
    assert lake.list_live(store.samples, "proc") == listing
    saved.write_text(json.dumps({"version": 1, "kind": "proc", "stamps": [], "files": []}))
    _new_process()
    assert lake.list_live(store.samples, "proc") == listing
    saved.write_text(json.dumps({"version": 2, "kind": "proc", "stamps": [],
                                 "folders": [["kind=proc/x", "2026-01-01", 1, [["a", 1]], []]]}))
    _new_process()
    assert lake.list_live(store.samples, "proc") == listing


def _folder(samples: Path, node: str) -> str:
    return next(str(p) for p in samples.glob(f"kind=proc/date=*/node={node}"))


def test_a_changed_folder_is_listed_again_the_unchanged_ones_are_reused(store: Store) -> None:
    for node in ("n0", "n1", "n2"):
        store.write_samples("proc", proc_rows(node, 0, 30))
    _settle(store.samples)
    lake.list_live(store.samples, "proc")
    saved = lake._saved_path(store.samples, "proc")
    assert _saved_files(saved) == 3
    n0, n1, n2 = (_folder(store.samples, n) for n in ("n0", "n1", "n2"))
    before = saved.read_text()

    # the open day's folder of n1 gets a new segment (just now: not settled), n2's file is
    # damaged in place (its folder's mtime unchanged): only n0's entry is reused
    store.write_samples("proc", proc_rows("n1", 100, 10))
    victim = next(Path(n2).glob("*.parquet"))
    with open(victim, "r+b") as fh:
        fh.truncate(victim.stat().st_size // 2)
    _new_process()
    assert lake._load_saved(store.samples, "proc") is None
    # the entries whose files are unchanged are taken (n1's folder mtime is the walk's to check)
    assert set(lake._listed) == {n0, n1}
    assert [qr.verified(str(p)) is not None for p in Path(n0).glob("*.parquet")] == [True]
    # n1's old file counts as checked (size and mtime unchanged), its new one does not yet
    assert sorted(qr.verified(str(p)) is not None for p in Path(n1).glob("*.parquet")) == [False, True]
    lines: list[str] = []
    after = lake.list_live(store.samples, "proc", warn=lines.append)
    assert str(victim) not in after.paths and len(after.paths) == 3
    assert len(lines) == 1 and victim.name in lines[0]
    assert sorted(after.paths) == sorted(_walked(store.samples, "proc").paths)

    # nothing new was saved: the settled folders are n0 only (n1 got a file and n2 lost one to
    # the quarantine in the last 2 s), whose entry the saved file holds as it is; the next
    # process reuses n0 and lists the others again (n1's unchanged entry is taken, for the walk
    # to use if the folder's mtime matches; n2's lost its file)
    assert saved.read_text() == before
    _new_process()
    assert lake._load_saved(store.samples, "proc") is None
    assert set(lake._listed) == {n0, n1}
    assert lake.list_live(store.samples, "proc").paths == after.paths

    # once everything is settled the whole listing is saved and taken as is again
    _settle(store.samples)
    _new_process()
    lake.list_live(store.samples, "proc")
    _new_process()
    again = lake._load_saved(store.samples, "proc")
    assert again is not None and again[1].paths == after.paths


def test_a_whole_listing_is_reused_in_process_until_a_file_a_node_or_a_day_is_added(
        store: Store) -> None:
    """The stamps a walk takes (each folder stated before it is read) keep the whole listing
    while nothing changed, and any new file, node folder or day folder ends the reuse."""
    import datetime as dt

    from tests.core.lake_builders import DAY

    store.write_samples("proc", proc_rows("n0", 0, 20))
    _settle(store.samples)
    _new_process()
    first = lake.list_live(store.samples, "proc")
    key = (str(store.samples), "proc", None, None)
    assert key in lake._whole, "settled: kept with its stamps"
    assert lake.list_live(store.samples, "proc") is first
    for node, day, n in (("n0", DAY, 2), ("n9", DAY, 3),
                         ("n0", DAY + dt.timedelta(days=1), 4)):
        store.write_samples("proc", proc_rows(node, 100 * n, 5, day))
        _settle(store.samples)
        got = lake.list_live(store.samples, "proc")
        on_disk = sorted(str(f) for f in store.samples.glob("kind=proc/date=*/node=*/*.parquet")
                         if lake.SEED_NODE not in str(f))
        assert len(got.paths) == n and sorted(got.paths) == on_disk
        assert lake.list_live(store.samples, "proc") is got
    assert got == _walked(store.samples, "proc")


def test_a_pinned_listing_is_reused_until_the_block_ends_or_a_file_is_quarantined(
        store: Store) -> None:
    import threading

    for node in ("n0", "n1"):
        store.write_samples("proc", proc_rows(node, 0, 20))
    _settle(store.samples)
    before = lake.list_live(store.samples, "proc")
    with lake.listings_pinned():
        pinned = lake.list_live(store.samples, "proc")
        assert pinned == before
        # a segment arriving during the block is not seen inside it (one listing per page run) ...
        store.write_samples("proc", proc_rows("n0", 100, 5))
        assert lake.list_live(store.samples, "proc") is pinned
        with lake.listings_pinned():  # a nested block shares the outer one
            assert lake.list_live(store.samples, "proc") is pinned
        # ... another thread, outside any block, lists afresh ...
        seen: list[lake.LakeListing] = []
        other = threading.Thread(target=lambda: seen.append(lake.list_live(store.samples, "proc")))
        other.start()
        other.join()
        assert len(seen[0].paths) == 3
        # ... and a file this process quarantines ends the reuse: the next call lists again,
        # without it and with the new segment
        victim = Path(before.paths[1])
        assert qr.quarantine(store.root, victim, "test: damaged") is not None
        again = lake.list_live(store.samples, "proc")
        assert str(victim) not in again.paths and len(again.paths) == 2
        assert sorted(again.paths) == sorted(set(seen[0].paths) - {str(victim)})
        assert lake.list_live(store.samples, "proc") is again
    # after the block every call checks the folders again
    store.write_samples("proc", proc_rows("n1", 300, 5))
    assert len(lake.list_live(store.samples, "proc").paths) == 3


def test_a_saved_listing_is_not_rewritten_when_only_unsettled_folders_changed(
        store: Store) -> None:
    for node in ("n0", "n1", "n2"):
        store.write_samples("proc", proc_rows(node, 0, 30))
    _settle(store.samples)
    lake.list_live(store.samples, "proc")
    saved = lake._saved_path(store.samples, "proc")
    text = saved.read_text()
    assert json.loads(text)["stamps"]  # whole

    # a new segment of the open day (just now: not settled): the next process lists that folder
    # again and takes the others from the saved file, which holds nothing older than that: it is
    # left as it is (the process after that does the same)
    store.write_samples("proc", proc_rows("n1", 100, 10))
    for _ in range(2):
        _new_process()
        listing = lake.list_live(store.samples, "proc")
        assert listing == _walked(store.samples, "proc") and len(listing.paths) == 4
        assert saved.read_text() == text

    # once that folder settled, its new entry is saved (and the listing whole again)
    _settle(store.samples)
    _new_process()
    assert lake.list_live(store.samples, "proc") == listing
    doc = json.loads(saved.read_text())
    assert saved.read_text() != text and doc["stamps"] and _saved_files(saved) == 4
    _new_process()
    again = lake._load_saved(store.samples, "proc")
    assert again is not None and again[1] == listing


def test_when_only_partition_folders_changed_those_are_listed_and_the_rest_taken_as_saved(
        store: Store) -> None:
    """A restart on a live cluster: the open day's partition folders changed since the listing
    was saved. Only those are listed again (no walk of the others), and the listing is the
    walk's; a new node or day folder, or a file changed in place, makes it walk."""
    import datetime as dt

    from tests.core.lake_builders import DAY

    for node in ("n0", "n1", "n2"):
        store.write_samples("proc", proc_rows(node, 0, 30))
    _settle(store.samples)
    lake.list_live(store.samples, "proc")
    n0, n1, n2 = (_folder(store.samples, n) for n in ("n0", "n1", "n2"))

    store.write_samples("proc", proc_rows("n1", 100, 10))  # a new segment in n1's folder
    os.utime(n2)  # n2's folder touched, nothing in it changed
    _new_process()
    assert lake._load_saved(store.samples, "proc") is None
    stamps, changed = lake._patchable[(str(store.samples), "proc")]
    assert changed == {n1, n2} and {n0, n1, n2} <= {p for p, _ in stamps}
    got = lake.list_live(store.samples, "proc")
    assert not lake._patchable, "taken"
    assert len(got.paths) == 4 and got == _walked(store.samples, "proc")

    # settled and saved again; then a new node folder, and a new day folder: a walk each
    for node, day, n in (("n9", DAY, 5), ("n0", DAY + dt.timedelta(days=1), 6)):
        _settle(store.samples)
        _new_process()
        lake.list_live(store.samples, "proc")
        store.write_samples("proc", proc_rows(node, 300, 5, day))
        _new_process()
        assert lake._load_saved(store.samples, "proc") is None
        assert not lake._patchable, "a folder above the partitions changed"
        got = lake.list_live(store.samples, "proc")
        assert len(got.paths) == n and got == _walked(store.samples, "proc")

    # a file changed in place in one folder, another folder touched: a walk (it finds the damage)
    _settle(store.samples)
    _new_process()
    lake.list_live(store.samples, "proc")
    victim = next(Path(n0).glob("*.parquet"))
    with open(victim, "r+b") as fh:
        fh.truncate(victim.stat().st_size // 2)
    os.utime(n2)
    _new_process()
    assert lake._load_saved(store.samples, "proc") is None and not lake._patchable
    lines: list[str] = []
    got = lake.list_live(store.samples, "proc", warn=lines.append)
    assert str(victim) not in got.paths and len(lines) == 1


# ------------------------------------------------------------ views listed at their first read
def _readers(con: Any) -> dict[str, Any]:
    """What every direct reader of the sample views gives on ``con``."""
    from gpulens.analysis import detail, network
    from gpulens.config import DiagnoseConfig
    from gpulens.diagnosis import badnodes, live, nodes
    from gpulens.store.samples import VIEW_NAMES
    from gpulens.store.scan import node_source

    out: dict[str, Any] = {}
    for kind, view in VIEW_NAMES.items():
        sql = f"SELECT count(*), count(DISTINCT node), min(ts), max(ts) FROM {view}"  # noqa: S608
        out[view] = con.execute(sql).fetchone()
        src, params = node_source(con, kind, ["node-a"], None, None)
        out[f"{kind} node_source"] = con.execute(f"SELECT count(*) FROM {src}",  # noqa: S608
                                                 params).fetchone()
    out["node_timeline"] = detail.node_timeline(con, "node-a")
    out["hourly_features"] = nodes.hourly_features(con)
    out["latest_sample"] = live.latest_sample(con)
    out["network"] = network.network_traffic(con)
    ev = badnodes.read_evidence(con, DiagnoseConfig())
    out["evidence"] = repr((ev.signals, ev.failures, sorted(ev.node_hours.items())))
    return out


def test_each_kind_is_listed_at_its_first_read_and_reads_what_an_eager_listing_gives(
        tmp_path: Path) -> None:
    """A store connection lists a sample kind when a query first reads it (the Overview never
    lists the net kind); every direct reader of the views gives what it gives when every kind
    was listed before it ran."""
    import pandas as pd

    from tests.dashboard.smallstore import build_small_store

    store = Store.open(tmp_path / "d")
    build_small_store(store)
    con = store.connect()
    lists = lake._lists_of(con)
    assert lists is not None and lists.lists == {}, "nothing listed at connect"
    assert con.execute("SELECT count(*) FROM gpu_samples").fetchone()[0] > 0
    assert set(lists.lists) == {"gpu"}, "only the kind that was read"
    lazy = _readers(con)
    assert set(lists.lists) == {"gpu", "net", "proc", "xid"}
    con.close()

    eager = store.connect()
    for kind in ("gpu", "net", "proc", "xid"):
        assert lake.live_files(eager, kind) is not None
    want = _readers(eager)
    eager.close()
    assert lazy.keys() == want.keys()
    for name, got in lazy.items():
        if isinstance(got, pd.DataFrame):
            pd.testing.assert_frame_equal(got, want[name], obj=name)
        else:
            assert got == want[name], name
    assert lazy["gpu_samples"][0] > 0 and lazy["net_samples"][0] > 0 and lazy["xid_events"][0] > 0
    assert len(lazy["node_timeline"]) > 0 and len(lazy["hourly_features"]) > 0


def test_a_view_reads_its_first_listing_until_live_files_lists_again(store: Store) -> None:
    """Files that arrive after a kind's first read show up once ``live_files`` re-lists (the
    analyses do at every call); a file read by the view is never stale after that."""
    store.write_samples("proc", proc_rows("n0", 0, 50))
    con = store.connect()
    assert con.execute("SELECT count(*) FROM gpu_process_samples").fetchone() == (50,)
    store.write_samples("proc", proc_rows("n1", 100, 30))
    assert con.execute("SELECT count(*) FROM gpu_process_samples").fetchone() == (50,)
    listing = lake.live_files(con, "proc")
    assert listing is not None and len(listing.files) == 2
    assert con.execute("SELECT count(*) FROM gpu_process_samples").fetchone() == (80,)
    fresh = store.connect()
    assert fresh.execute("SELECT count(*) FROM gpu_process_samples").fetchone() == (80,)
    con.close()
    fresh.close()
    # a connection that is not a store's has no lake listing
    import duckdb

    assert lake.live_files(duckdb.connect(), "proc") is None

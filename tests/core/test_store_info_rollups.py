"""``gpulens store info`` lists the rollups (issue 26): per kind the files, bytes and days, and
whether each file is current, partial (late segments beside it), stale (its nodes' files were
replaced since) or unusable (another release's columns), and the days read raw."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpulens.store import Store
from gpulens.store.compact import compact
from gpulens.store.lake import partitions
from gpulens.store.rollups import rollup_path
from tests.analysis.test_rollups import DAY, NOON3, _late, segmented_copy
from tests.core.test_cli import run


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return segmented_copy(tmp_path_factory, tmp_path_factory.mktemp("info") / "d")


def _info(store: Store) -> dict[str, Any]:
    r = run("--data-dir", str(store.root), "store", "info", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["rollups"]  # type: ignore[no-any-return]


def _states(rollups: dict[str, Any], kind: str) -> dict[str, str]:
    return {f["day"]: f["state"] for f in rollups[kind]["by_file"]}


@pytest.mark.slow
def test_store_info_lists_rollups_and_their_state(lake: Store, tmp_path: Path) -> None:
    store = Store(tmp_path / "d")
    shutil.copytree(lake.root, store.root)
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)
    days = [str(DAY.date() + dt.timedelta(days=i)) for i in range(3)]
    info = _info(store)
    for kind in ("gpu_hour", "net_minute"):
        on_disk = sorted((store.root / "rollups" / f"kind={kind}").rglob("*.parquet"))
        assert info[kind]["files"] == len(on_disk) == len(info[kind]["by_file"])
        assert info[kind]["bytes"] == sum(p.stat().st_size for p in on_disk) > 0
    gpu = info["gpu_hour"]
    assert gpu["days"] == days and gpu["days_not_rolled"] == []
    assert _states(info, "gpu_hour") == dict.fromkeys(days, "current")
    nodes = len({p.node for p in partitions(store.samples, "gpu", DAY.date(), DAY.date())})
    assert {f["nodes"] for f in gpu["by_file"]} == {nodes}

    _late(store, 0, 10)  # late segments beside day 0's compacted files: read raw beside the rollup
    info = _info(store)
    assert _states(info, "gpu_hour") == {days[0]: "partial", days[1]: "current", days[2]: "current"}
    assert info["gpu_hour"]["partial"] == 1 and info["gpu_hour"]["current"] == 2
    assert [f["raw_files"] for f in info["gpu_hour"]["by_file"] if f["day"] == days[0]] == [nodes]

    path = rollup_path(store.root, "gpu_hour", DAY.date())
    old = path.read_bytes()
    compact(store, settle=3600, grace=3600, clock=lambda: NOON3)  # merges them: a new rollup
    assert _states(_info(store), "gpu_hour")[days[0]] == "current"
    path.write_bytes(old)  # the rollup of files replaced since (a crash between the two)
    (path.parent / "rollup-s00000000.parquet").write_bytes(old)  # another release's columns
    rollup_path(store.root, "gpu_hour", DAY.date() + dt.timedelta(days=1)).unlink()
    info = _info(store)
    gpu = info["gpu_hour"]
    stale = [f for f in gpu["by_file"] if f["state"] == "stale"]
    assert len(stale) == 1 and stale[0]["day"] == days[0] and stale[0]["stale_nodes"] == nodes
    assert (gpu["stale"], gpu["unusable"], gpu["current"]) == (1, 1, 1)
    assert gpu["days_not_rolled"] == [days[1]]
    net = info["net_minute"]  # the open day's network samples are one file a node: not rolled yet
    assert set(_states(info, "net_minute").values()) == {"current"}
    assert sorted([*net["days"], *net["days_not_rolled"]]) == days and net["days"][:2] == days[:2]

    r = run("--data-dir", str(store.root), "store", "info")
    assert r.returncode == 0, r.stderr
    assert f"stale: {path} ({nodes} of {nodes} nodes read raw)" in r.stdout
    assert "unusable: " in r.stdout and "rollup-s00000000.parquet" in r.stdout
    assert "gpu_hour" in r.stdout and "1 day(s) without one" in r.stdout

"""The job page's "Machines side by side" section (issue 25): each machine's signals, the straggler marked."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from gpulens.diagnosis import live as lv
from gpulens.store import Store, arrow_schema
from tests.dashboard.test_pages import UseStore, run_page

T0 = datetime(2027, 3, 1, 8, 0)


def _store(root: Path) -> Store:
    store = Store.open(root)
    nodes = ["m1", "m2", "m3"]
    with store.write() as con:
        con.execute("INSERT INTO jobs (job_id, \"user\", vc, status, requested_gpus, source)"
                    " VALUES ('job-m', 'ann', 'vc1', 'running', 6, 'slurm')")
        con.execute("INSERT INTO attempts (job_id, attempt, start_time, status) VALUES ('job-m', 0, ?, 'running')",
                    [T0])
        for n in nodes:
            for g in range(2):
                con.execute("INSERT INTO placements (job_id, attempt, node, gpu_index, start_time)"
                            " VALUES ('job-m', 0, ?, ?, ?)", [n, g, T0])
        con.execute("INSERT INTO straggler_detections VALUES ('job-m', 0, 'm2', ?, ?, ?, NULL, ['sm_clock'], 3.5, ?,"
                    " 3, 'live')", [T0 + timedelta(minutes=30), T0 + timedelta(minutes=31),
                                    T0 + timedelta(minutes=59),
                                    json.dumps({"sm_clock": {"score": 3.5, "deviation": -0.42}})])
    schema = arrow_schema("gpu")
    rows = []
    for minute in range(60):
        for n in nodes:
            for g in range(2):
                slow = n == "m2" and minute >= 30
                rows.append({"ts": T0 + timedelta(minutes=minute), "node": n, "gpu_index": g, "util_gpu": 95.0,
                             "power_w": 450.0 if slow else 600.0, "sm_clock_mhz": 1150.0 if slow else 1980.0,
                             "pcie_tx_bps": 2e9, "pcie_rx_bps": 3e9, "xid_count": 0})
    cols = {f.name: [r.get(f.name) for r in rows] for f in schema}
    store.write_samples("gpu", pa.table(cols, schema=schema))
    return store


@pytest.mark.slow
def test_machines_side_by_side_with_the_suspect_marked(tmp_path: Path, use_store: UseStore) -> None:
    store = _store(tmp_path / "data")
    con = store.connect()
    sig = lv.job_machine_signals(con, "job-m")
    con.close()
    clock = sig[sig["signal"] == "SM clock MHz (lowest GPU)"]
    late = clock[clock["ts"] >= T0 + timedelta(minutes=31)]
    assert late.groupby("node")["value"].mean().round().to_dict() == {"m1": 1980.0, "m2": 1150.0, "m3": 1980.0}
    use_store(store)
    at = run_page("job", {"job": "job-m"})
    warned = [w.value for w in at.warning if "m2" in w.value]
    assert len(warned) == 1 and "sm_clock" in warned[0] and "suspected now" in warned[0]
    facets = [c for c in at.get("vega_lite_chart") if "facet" in json.loads(c.proto.spec)]
    assert len(facets) == 1
    spec = json.loads(facets[0].proto.spec)
    assert "datum.suspect" in json.dumps(spec["spec"]["encoding"]["color"])
    data = b"".join(d.data.data for d in facets[0].proto.datasets)
    assert b"m2  (suspect)" in data and b"m1  (suspect)" not in data and b"m3" in data
    assert any("red: a machine the straggler watcher suspected" in c.value for c in at.caption)


@pytest.mark.slow
def test_single_machine_job_says_why_nothing_is_compared(tmp_path: Path, use_store: UseStore) -> None:
    store = Store.open(tmp_path / "data")
    with store.write() as con:
        con.execute("INSERT INTO jobs (job_id, status) VALUES ('job-1', 'passed')")
        con.execute("INSERT INTO attempts (job_id, attempt, start_time, end_time, status)"
                    " VALUES ('job-1', 0, ?, ?, 'passed')", [T0, T0 + timedelta(hours=1)])
        con.execute("INSERT INTO placements VALUES ('job-1', 0, 'solo', 0, ?, ?)", [T0, T0 + timedelta(hours=1)])
    use_store(store)
    at = run_page("job", {"job": "job-1"})
    assert any("two or more nodes" in c.value for c in at.caption)


def test_latest_sample_reads_the_newest_day_and_gives_the_whole_stores_max(tmp_path: Path) -> None:
    """A running job's machines are drawn up to the newest sample (issue 26: found from the newest
    day's partitions, not by scanning every sample)."""
    store = Store.open(tmp_path / "data")
    schema = arrow_schema("gpu")
    times = {"a": [T0, T0 + timedelta(days=1, hours=3)], "b": [T0 + timedelta(days=1, hours=7, minutes=5)],
             "c": [T0 - timedelta(days=3)]}
    rows = [{"ts": t, "node": n, "gpu_index": 0} for n, ts in times.items() for t in ts]
    store.write_samples("gpu", pa.Table.from_pylist(rows, schema=schema))
    con = store.connect()
    try:
        whole = con.execute("SELECT max(ts) FROM gpu_samples").fetchone()
        assert whole is not None and lv.latest_sample(con) == whole[0] == T0 + timedelta(days=1, hours=7, minutes=5)
    finally:
        con.close()
    empty = Store.open(tmp_path / "empty").connect()
    try:
        assert lv.latest_sample(empty) is None
    finally:
        empty.close()

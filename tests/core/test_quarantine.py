"""Quarantine: one damaged Parquet segment never takes a reader down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gpulens.config import ExporterConfig
from gpulens.exporters.cluster import ClusterCollector
from gpulens.store import Store
from gpulens.store.quarantine import check_segment, list_quarantined


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    return subprocess.run([sys.executable, "-m", "gpulens", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small simulated store (2 nodes, 12 h): copied by each test."""
    root = tmp_path_factory.mktemp("sim") / "data"
    r = run("--data-dir", str(root), "simulate", "--gpus", "16", "--days", "0.5")
    assert r.returncode == 0, r.stderr
    return root


def _copy(sim: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(sim, tmp_path / "data")
    return tmp_path / "data"


def _gpu_segments(root: Path) -> list[Path]:
    return sorted(p for p in (root / "samples" / "kind=gpu").glob("*/*/*.parquet") if "__seed__" not in str(p))


def _damage_column(path: Path, column: str) -> None:
    """Overwrite the page header of one column chunk: magic and footer stay intact, so only
    reading that column finds the damage."""
    import pyarrow.parquet as pq

    meta = pq.read_metadata(path)
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    chunk = meta.row_group(0).column(names.index(column))
    with open(path, "r+b") as fh:
        fh.seek(chunk.data_page_offset)
        fh.write(b"\xff" * min(64, chunk.total_compressed_size))


def _warnings(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("gpulens: warning:")]


@pytest.mark.slow
def test_truncated_segment_is_quarantined_and_every_reader_goes_on(sim: Path, tmp_path: Path) -> None:
    root = _copy(sim, tmp_path)
    before = json.loads(run("--data-dir", str(root), "store", "info", "--json").stdout)["rows"]
    bad = _gpu_segments(root)[1]
    import pyarrow.parquet as pq

    held = pq.read_metadata(bad).num_rows
    os.truncate(bad, bad.stat().st_size // 2)
    assert check_segment(bad) is not None

    # a reader of state tables only: never touches the samples, the bad file stays where it is
    r = run("--data-dir", str(root), "blacklist", "list")
    assert r.returncode == 0 and r.stderr == "" and bad.exists()

    r = run("--data-dir", str(root), "analyze", "utilization", "--json")
    assert r.returncode == 0, r.stderr
    lines = _warnings(r.stderr)
    assert len(lines) == 1 and r.stderr.count("\n") == 1, r.stderr
    rel = str(bad.relative_to(root))
    assert rel in lines[0] and "an unknown number of rows" in lines[0]
    assert not bad.exists() and (root / "quarantine" / rel).exists()
    rec = json.loads((root / "quarantine" / (rel + ".json")).read_text())
    assert rec["file"] == rel and "magic" in rec["reason"]

    r = run("--data-dir", str(root), "store", "info", "--json")
    assert r.returncode == 0 and _warnings(r.stderr) == []
    info = json.loads(r.stdout)
    assert info["rows"]["gpu_samples"] == before["gpu_samples"] - held
    assert [q["file"] for q in info["quarantined"]] == [rel]
    r = run("--data-dir", str(root), "store", "check")
    assert r.returncode == 1 and rel in r.stdout


@pytest.mark.slow
def test_damaged_pages_are_caught_on_read_and_the_command_reruns(sim: Path, tmp_path: Path) -> None:
    root = _copy(sim, tmp_path)
    ok = json.loads(run("--data-dir", str(root), "analyze", "utilization", "--json").stdout)
    bad = _gpu_segments(root)[0]
    _damage_column(bad, "util_gpu")
    assert check_segment(bad) is None
    r = run("--data-dir", str(root), "analyze", "utilization", "--json")
    assert r.returncode == 0, r.stderr
    lines = _warnings(r.stderr)
    assert len(lines) == 1 and str(bad.relative_to(root)) in lines[0], r.stderr
    assert json.loads(r.stdout) != ok  # the result without that node's samples
    assert list_quarantined(root)[0]["moved_to"].endswith(bad.name)


@pytest.mark.slow
def test_store_check_reads_every_page(sim: Path, tmp_path: Path) -> None:
    root = _copy(sim, tmp_path)
    r = run("--data-dir", str(root), "store", "check", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["quarantined"] == []
    bad = _gpu_segments(root)[0]
    _damage_column(bad, "temp_c")
    r = run("--data-dir", str(root), "store", "check", "--json")
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert data["newly_quarantined"] == [str(bad.relative_to(root))]
    assert len(_warnings(r.stderr)) == 1


def test_segment_names_carry_their_rows(store: Store) -> None:
    import datetime as dt

    import pyarrow as pa

    table = pa.table({"ts": [dt.datetime(2026, 1, 1)] * 7, "node": ["n1"] * 7, "gpu_index": list(range(7))})
    (path,) = store.write_samples("gpu", table)
    assert path.name.endswith("-r7.parquet")
    with open(path, "r+b") as fh:
        fh.truncate(100)
    lines: list[str] = []
    store.warn = lines.append
    con = store.connect()
    assert lines == [], "a kind is listed when a query first reads it"
    assert con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (0,)
    con.close()
    assert len(lines) == 1 and "its 7 rows are left out" in lines[0]


def test_exporter_reports_quarantined_segments(sim: Path, tmp_path: Path) -> None:
    root = _copy(sim, tmp_path)
    os.truncate(_gpu_segments(root)[0], 10)
    store = Store.open(root)
    reg = CollectorRegistry(auto_describe=False)
    ClusterCollector(lambda: store, ExporterConfig(), registry=reg)
    assert reg.get_sample_value("gpulens_cluster_store_quarantined_segments") == 1
    assert reg.get_sample_value("gpulens_cluster_exporter_up") == 1


def test_damaged_spool_batch_is_quarantined_and_the_agent_goes_on(store: Store) -> None:
    import datetime as dt

    from gpulens.store import SegmentWriter

    lines: list[str] = []
    store.warn = lines.append
    writer = SegmentWriter(store, "agent1")
    for k in range(2):
        writer.append("gpu", [{"ts": dt.datetime(2026, 1, 1, 0, k), "node": "n1", "gpu_index": g}
                              for g in range(4)])
        writer.flush()
    first = sorted((store.spool / "agent1").glob("gpu-*.arrow"))[0]
    first.write_bytes(first.read_bytes()[:50])  # a damaged batch (e.g. a disk error)
    writer.close()  # rolls: the good batch becomes a segment, the damaged one is set aside
    assert len(lines) == 1 and first.name in lines[0]
    assert (store.root / "quarantine" / "spool" / "agent1" / first.name).exists()
    assert [q["file"] for q in list_quarantined(store.root)] == [f"spool/agent1/{first.name}"]
    con = store.connect()
    assert con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (4,)
    SegmentWriter(store, "agent1").close()  # and the next start is clean

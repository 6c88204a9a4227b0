"""`gpulens import prometheus` against a real Prometheus holding backfilled dcgm-exporter history.

The history (tests/prometheus/dcgm_history.py: 2 nodes x 8 GPUs, two days, a pod,
a Slurm job, counter resets, a gap, a stale series, a replica pair, a replaced
GPU, an XID) is written as OpenMetrics, loaded with ``promtool tsdb
create-blocks-from openmetrics`` and served by Prometheus on 127.0.0.1. Every
expected value is recomputed from the generator's definitions, not from
Prometheus.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from gpulens.errors import InputError
from gpulens.ingest.importers.prometheus import PromImport, import_prometheus
from gpulens.ingest.importers.slurm import import_slurm
from gpulens.store import Store
from tests.prometheus import dcgm_history as H
from tests.prometheus.promserver import backfill, prometheus

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.timeout(180)]

MIB = 1 << 20
CHUNK = 360  # 12 h chunks at a 2 min step: four per node, boundaries inside the planted events


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("backfill")
    om = work / "history.om"
    H.write_openmetrics(om)
    backfill(om, work / "tsdb")
    om.unlink()
    with prometheus(work, tsdb=work / "tsdb") as url:
        yield url


def _request(url: str, **kw: object) -> PromImport:
    last = H.START + timedelta(seconds=(H.N_STEPS - 1) * H.STEP)
    args: dict[str, object] = {"start": H.START, "end": last, "step": float(H.STEP), "source": "dcgm"}
    args.update(kw)
    return PromImport(url, **args)  # type: ignore[arg-type]


def _rows(store: Store) -> dict[tuple[str, int], list[tuple[object, ...]]]:
    con = store.connect()
    try:
        rows = con.execute(
            "SELECT node, gpu_index, ts, uuid, util_gpu, mem_used_bytes, mem_total_bytes, energy_j,"
            " pcie_tx_bps, power_w, xid_count, model FROM gpu_samples ORDER BY node, gpu_index, ts"
        ).fetchall()
    finally:
        con.close()
    out: dict[tuple[str, int], list[tuple[object, ...]]] = {}
    for r in rows:
        out.setdefault((str(r[0]), int(r[1])), []).append(tuple(r[2:]))
    return out


GPU_B = '{Hostname="gpu-b"}'  # later tests import one node: half the work


def _check_samples(rows: dict[tuple[str, int], list[tuple[object, ...]]], node_only: str | None = None) -> None:
    expected = {k: v for k, v in H.expected_rows().items() if node_only in (None, k[0])}
    assert set(rows) == set(expected)
    for (node, gpu), ks in expected.items():
        got = rows[(node, gpu)]
        assert [r[0] for r in got] == [H.ts(k) for k in ks], (node, gpu)  # one row per step, no dup
        mean = sum(H.util(node, gpu, k) for k in ks) / len(ks)
        assert sum(float(r[2]) for r in got) / len(got) == pytest.approx(mean, abs=1e-9)  # type: ignore[arg-type]
        for r, k in zip(got, ks, strict=True):
            assert r[3] == H.fb_used(node, gpu, k) * MIB and r[4] == H.FB_TOTAL_MIB * MIB
            assert r[5] == pytest.approx(H.energy_mj(node, gpu, k) / 1000.0)
            assert r[7] == pytest.approx(H.power(node, gpu, k), abs=1e-3)
            assert r[9] == H.MODEL


def test_import_reproduces_the_generated_history(prom: str, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    res = import_prometheus(store, _request(prom), chunk_steps=CHUNK)
    rows = _rows(store)
    _check_samples(rows)
    q = res.quirks[prom]
    assert q["counter_resets"] == 3  # energy and PCIe TX on gpu-a GPU 1, gpu-b's IB port
    _check_net(store)
    assert (q["gaps"], q["gap_steps"]) == (1, H.GAP[2][1] - H.GAP[2][0])
    assert q["uuid_changes"] == 1 and q["replica_duplicate_series"] == 1
    assert q["stale_series"] == H.expected_stale_series() and q["stale_points"] > 0
    assert q["chunks_imported"] == 2 * 4

    # the replaced GPU: old UUID before the swap, new after; the registry has the new one
    node, gpu, cut = H.NEW_UUID
    assert {r[1] for r in rows[(node, gpu)] if r[0] < H.ts(cut)} == {H.gpu_uuid(node, gpu)}
    assert {r[1] for r in rows[(node, gpu)] if r[0] >= H.ts(cut)} == {H.gpu_uuid(node, gpu, 1)}
    # PCIe TX: a KB counter turned into bytes/s; after the reset the new value counts from zero
    node, gpu, k0 = H.RESET
    tx = {r[0]: r[6] for r in rows[(node, gpu)]}
    assert tx[H.ts(k0)] == pytest.approx(H.pcie_tx_kb(node, gpu, k0) * 1024 / H.STEP)
    assert tx[H.ts(k0 + 1)] == pytest.approx(
        (H.pcie_tx_kb(node, gpu, k0 + 1) - H.pcie_tx_kb(node, gpu, k0)) * 1024 / H.STEP)
    # one XID event, at the step the last-XID gauge changed
    node, gpu, kx, code = H.XID
    con = store.connect()
    try:
        assert con.execute("SELECT node, gpu_index, ts, xid FROM xid_events").fetchall() == \
            [(node, gpu, H.ts(kx), code)]
        assert con.execute("SELECT uuid FROM gpus WHERE node = ? AND gpu_index = ?",
                           [H.NEW_UUID[0], H.NEW_UUID[1]]).fetchall() == [(H.gpu_uuid(node, 7, 1),)]
        pls = con.execute("SELECT job_id, attempt, node, gpu_index, start_time, end_time FROM placements"
                          " ORDER BY job_id, gpu_index").fetchall()
        jobs = con.execute("SELECT job_id, source, vc, requested_gpus FROM jobs ORDER BY job_id").fetchall()
    finally:
        con.close()
    pod = f"{H.POD[0]}/{H.POD[1]}"
    assert jobs == [(H.HPC, "prometheus", None, 2), (pod, "prometheus", H.POD[0], 4)]
    want = [(H.HPC, 0, H.HPC_GPUS[0], g, H.ts(H.HPC_SPAN[0]), H.ts(H.HPC_SPAN[1])) for g in H.HPC_GPUS[1]]
    want += [(pod, 0, H.POD_GPUS[0], g, H.ts(H.POD_SPAN[0]), H.ts(H.POD_SPAN[1])) for g in H.POD_GPUS[1]]
    assert pls == want
    _check_job_utilization(store)


def _check_net(store: Store) -> None:
    """node_exporter's interfaces, matched to the GPU nodes by instance host."""
    con = store.connect()
    try:
        rows = con.execute("SELECT node, device, link_kind, port, ts, rx_bytes_total, rx_bps, tx_bps"
                           " FROM net_samples ORDER BY node, device, ts").fetchall()
    finally:
        con.close()
    by = {}
    for r in rows:
        by.setdefault((r[0], r[1], r[2], r[3]), []).append(r[4:])
    assert set(by) == {(n, d, "ethernet" if d == "eth0" else "infiniband", None if d == "eth0" else 1)
                       for n in H.NODES for d in ("eth0", "mlx5_0")}
    for (node, device, _, _), got in by.items():
        rx = next(m for m in H.NET if m[1] == device and "receive" in m[0])
        tx = next(m for m in H.NET if m[1] == device and "transmit" in m[0])
        assert [g[0] for g in got] == [H.ts(k) for k in range(H.N_STEPS)]
        for g, k in zip(got, range(H.N_STEPS), strict=True):
            total = H.net_total(rx[0], node, device, rx[3], k)
            assert g[1] == total
            if k:
                prev = H.net_total(rx[0], node, device, rx[3], k - 1)
                assert g[2] == pytest.approx((total - prev if total >= prev else total) / H.STEP)
                assert g[3] == pytest.approx(tx[3] / H.STEP)


def _check_job_utilization(store: Store) -> None:
    """Per-job utilization works from the labels alone (no scheduler import)."""
    from gpulens.analysis.filters import Filters
    from gpulens.analysis.utilization import job_utilization

    con = store.connect()
    try:
        df = job_utilization(con, Filters(now=H.ts(H.N_STEPS)))
    finally:
        con.close()
    got = {r.job_id: (r.mean_util, r.allocated_gpu_hours) for r in df.itertuples()}
    node, gpus = H.POD_GPUS
    vals = [H.util(node, g, k) for g in gpus for k in range(*H.POD_SPAN)]
    mean, hours = got[f"{H.POD[0]}/{H.POD[1]}"]
    assert mean == pytest.approx(sum(vals) / len(vals), abs=1e-6)
    assert hours == pytest.approx(len(gpus) * (H.POD_SPAN[1] - H.POD_SPAN[0]) * H.STEP / 3600)


def test_interrupted_import_resumes_without_duplicates(prom: str, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")

    class Interrupted(Exception):
        pass

    done: list[int] = []

    def stop_after_three(node: str, chunk: int) -> None:
        done.append(chunk)
        if len(done) == 3:
            raise Interrupted

    with pytest.raises(Interrupted):
        import_prometheus(store, _request(prom, match=GPU_B), chunk_steps=CHUNK, on_chunk=stop_after_three)
    # a shorter range next: its last chunk is partial and is redone by the full run
    half = H.START + timedelta(hours=30)
    import_prometheus(store, _request(prom, end=half, match=GPU_B), chunk_steps=CHUNK)
    res = import_prometheus(store, _request(prom, match=GPU_B), chunk_steps=CHUNK)
    assert res.quirks[prom]["chunks_skipped_already_imported"] == 3
    _check_samples(_rows(store), "gpu-b")
    again = import_prometheus(store, _request(prom, match=GPU_B), chunk_steps=CHUNK)
    assert again.rows["gpu_samples"] == 0
    assert again.quirks[prom]["chunks_skipped_already_imported"] == 4
    _check_samples(_rows(store), "gpu-b")
    with pytest.raises(InputError, match="--step 120s"):
        import_prometheus(store, _request(prom, step=60.0, match=GPU_B), chunk_steps=CHUNK)
    # a crash after the files were written but before progress was committed: the chunks
    # are imported again and their files replace the earlier ones
    with store.write() as con:
        con.execute("DELETE FROM prometheus_import_chunks")
    lost = import_prometheus(store, _request(prom, match=GPU_B), chunk_steps=CHUNK)
    assert lost.quirks[prom]["chunks_imported"] == 4
    _check_samples(_rows(store), "gpu-b")


def _sacct(path: Path) -> Path:
    start = H.ts(H.HPC_SPAN[0]).strftime("%Y-%m-%dT%H:%M:%S")
    end = H.ts(H.HPC_SPAN[1]).strftime("%Y-%m-%dT%H:%M:%S")
    path.write_text(
        "JobID|JobName|User|Account|Partition|Submit|Start|End|State|ExitCode|AllocTRES|NodeList\n"
        f"{H.HPC}|bert|alice|nlp|gpu|{start}|{start}|{end}|COMPLETED|0:0|cpu=8,gres/gpu=2|{H.HPC_GPUS[0]}\n"
        f"{H.HPC}.batch|batch||nlp||{start}|{start}|{end}|COMPLETED|0:0|cpu=8|{H.HPC_GPUS[0]}\n")
    return path


@pytest.mark.parametrize("slurm_first", [True, False])
def test_slurm_and_hpc_job_labels_reconcile(prom: str, tmp_path: Path, slurm_first: bool) -> None:
    store = Store.open(tmp_path / "data")
    sacct = _sacct(tmp_path / "sacct.txt")
    if slurm_first:
        import_slurm(store, sacct)
    import_prometheus(store, _request(prom, match=GPU_B))
    if not slurm_first:
        import_slurm(store, sacct)
    con = store.connect()
    try:
        job = con.execute('SELECT source, "user", status FROM jobs WHERE job_id = ?', [H.HPC]).fetchall()
        pls = con.execute("SELECT attempt, node, gpu_index FROM placements WHERE job_id = ?"
                          " ORDER BY gpu_index", [H.HPC]).fetchall()
    finally:
        con.close()
    assert job == [("slurm", "alice", "passed")]  # the scheduler's record, not a second job
    assert pls == [(0, H.HPC_GPUS[0], g) for g in H.HPC_GPUS[1]]  # the GPUs really used, not 0..1


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULENS_")}
    return subprocess.run([sys.executable, "-m", "gpulens", *args], capture_output=True, text=True,
                          env=env, timeout=120)


def test_cli_import_and_one_line_errors(prom: str, tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    last = (H.START + timedelta(seconds=(H.N_STEPS - 1) * H.STEP)).isoformat()
    r = _cli("--quiet", "--data-dir", data, "import", "prometheus", "--url", prom, "--start",
             H.START.isoformat(), "--end", last, "--step", "2m", "--match", GPU_B, "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kind"] == "prometheus:dcgm"  # auto-detected
    assert out["rows"]["gpu_samples"] == sum(len(v) for k, v in H.expected_rows().items() if k[0] == "gpu-b")
    for args, needle in (
        (("--url", "http://127.0.0.1:9", "--start", "2026-01-05", "--end", "2026-01-06"), "Cannot reach"),
        (("--url", prom, "--start", "yesterday", "--end", "2026-01-06"), "--start"),
    ):
        r = _cli("--data-dir", data, "import", "prometheus", *args)
        assert r.returncode == 2, (args, r.stderr)
        assert needle in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_bad_requests_name_the_input(prom: str, tmp_path: Path) -> None:
    from gpulens.ingest.importers.prometheus import parse_duration

    store = Store.open(tmp_path / "data")
    assert parse_duration("2m") == 120.0 and parse_duration("500ms") == 0.5
    with pytest.raises(InputError, match="--step"):
        parse_duration("fast")
    with pytest.raises(InputError, match="--match"):
        import_prometheus(store, _request(prom, match="up"))
    with pytest.raises(InputError, match="holds none of"):
        import_prometheus(store, _request(prom, source="auto", start=H.START - timedelta(days=400),
                                          end=H.START - timedelta(days=399)))
    with pytest.raises(InputError, match="--start"):
        import_prometheus(store, _request(prom, end=H.START - timedelta(days=1)))


def test_nvidia_gpu_exporter_history(prom: str, tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    res = import_prometheus(store, _request(prom, source="nvidia_gpu_exporter"))
    assert res.kind == "prometheus:nvidia_gpu_exporter" and res.rows["nodes"] == 1
    rows = _rows(store)
    node = H.NVSMI_NODE[0]
    assert set(rows) == {(node, 0), (node, 1)}
    for g in (0, 1):
        got = rows[(node, g)]
        assert [r[0] for r in got] == [H.ts(k) for k in range(H.NVSMI_STEPS)]
        assert [r[2] for r in got] == pytest.approx([H.util(node, g, k) for k in range(H.NVSMI_STEPS)])
        assert [r[3] for r in got] == [H.fb_used(node, g, k) * MIB for k in range(H.NVSMI_STEPS)]
        assert {(r[1], r[9]) for r in got} == {(H.nvsmi_uuid(g), "NVIDIA GeForce RTX 4090")}
    # the series stop after six hours: Prometheus repeats them for five minutes, not the import
    assert res.quirks[prom]["stale_series"] == 2

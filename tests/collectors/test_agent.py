from __future__ import annotations

import logging
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.collectors.agent import Agent
from gpulens.collectors.attribution import JobResolver
from gpulens.collectors.gpu.base import GPU_FIELDS, GpuProcess, GpuSample
from gpulens.collectors.gpu.fake import FakeBackend
from gpulens.collectors.net import NetReader
from gpulens.collectors.sink import FlakySink, MemorySink, StoreSink
from gpulens.errors import BackendUnavailableError, InputError
from gpulens.exporters.agent import serve_agent
from gpulens.store import SAMPLE_KINDS, Store

FIX = Path(__file__).resolve().parents[1] / "fixtures"
GPU_LABELS = {"node", "gpu", "uuid", "model"}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make_agent(scenario: dict[str, Any], sink: Any = None, **kw: Any) -> tuple[Agent, Clock]:
    clock = Clock()
    agent = Agent(
        node="gpu-node-01",
        backend=FakeBackend(scenario),
        net=NetReader(FIX / "proc", FIX / "sys", exclude="^veth"),
        resolver=JobResolver(FIX / "proc"),
        sink=sink,
        clock=clock,
        wall=lambda: 1.8e9 + clock.t,
        **kw,
    )
    return agent, clock


def scrape(agent: Agent) -> dict[str, list[tuple[dict[str, str], float]]]:
    """/metrics as ``gpulens collect`` serves it (cached exposition; the registry path is
    checked against it in test_exposition.py)."""
    server = serve_agent(lambda: agent.snapshot, "127.0.0.1", 0)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10).read().decode()
    finally:
        server.stop()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


FULL = {
    "devices": [{"index": 0, "uuid": "GPU-aaaa"}, {"index": 1, "uuid": "GPU-bbbb",
                                                   "values": {"row_remap_failures": 1}}],
    "processes": [
        {"gpu": 0, "pid": 1001, "used_memory_bytes": 2_000_000_000, "sm_util": 30},
        {"gpu": 0, "pid": 1007, "used_memory_bytes": 1_000_000_000, "sm_util": 45},
        {"gpu": 1, "pid": 1001, "used_memory_bytes": 3_000_000_000, "sm_util": 50},
    ],
    "xids": [{"tick": 1, "gpu": 1, "xid": 79, "count": 3}, {"tick": 1, "gpu": 0, "xid": 13}],
}


@pytest.mark.slow
def test_every_gpu_field_lands_in_the_store_and_on_metrics(store: Store) -> None:
    agent, clock = make_agent(FULL, StoreSink(store, "gpu-node-01"))
    agent.tick()
    clock.t = 5.0
    agent.tick()
    agent.close()
    con = store.connect()
    gpu = con.execute("SELECT * FROM gpu_samples WHERE ts = (SELECT max(ts) FROM gpu_samples)").fetchdf()
    assert len(gpu) == 2
    for col, _ in SAMPLE_KINDS["gpu"]:
        assert gpu[col].notna().all(), f"gpu_samples.{col} is NULL"
    assert set(gpu["pcie_source"]) == {"counter"}
    g0 = gpu[gpu.gpu_index == 0].iloc[0]
    assert g0.pcie_tx_bps == pytest.approx(2.5e9 / 5) and g0.nvlink_tx_bps == pytest.approx(1.2e10 / 5)
    procs = con.execute("SELECT pid, job_id, attribution, sm_util FROM gpu_process_samples ORDER BY ts, gpu_index, pid").fetchall()
    assert procs[:3] == [(1001, "4242", "slurm-cgroup", 30.0), (1007, "train-resnet-17", "env", 45.0),
                         (1001, "4242", "slurm-cgroup", 50.0)]
    xids = con.execute("SELECT gpu_index, xid, count(*) FROM xid_events GROUP BY ALL ORDER BY ALL").fetchall()
    assert xids == [(0, 13, 1), (1, 79, 3)]
    assert con.execute("SELECT sum(xid_count) FROM gpu_samples").fetchone() == (4,)
    ib = con.execute("SELECT rx_bytes_total, port FROM net_samples WHERE device = 'mlx5_0' LIMIT 1").fetchone()
    assert ib == (2500000000 * 4, 1)

    m = scrape(agent)
    gpu_metrics = [
        "gpulens_gpu_utilization_ratio", "gpulens_gpu_memory_utilization_ratio", "gpulens_gpu_memory_used_bytes",
        "gpulens_gpu_memory_total_bytes", "gpulens_gpu_pcie_transmit_bytes_total",
        "gpulens_gpu_pcie_receive_bytes_total", "gpulens_gpu_pcie_replay_errors_total", "gpulens_gpu_power_watts",
        "gpulens_gpu_energy_joules_total", "gpulens_gpu_temperature_celsius", "gpulens_gpu_sm_clock_hertz",
        "gpulens_gpu_memory_clock_hertz", "gpulens_gpu_row_remap_failure",
        "gpulens_gpu_nvlink_transmit_bytes_total", "gpulens_gpu_nvlink_receive_bytes_total",
        "gpulens_gpu_sm_active_ratio", "gpulens_gpu_tensor_active_ratio",
    ]
    for name in gpu_metrics:
        assert len(m.get(name, [])) == 2, name
        for labels, _ in m[name]:
            assert set(labels) == GPU_LABELS, (name, labels)  # never a job label
    assert sorted(lab["type"] for lab, _ in m["gpulens_gpu_ecc_errors_total"]) == ["corrected"] * 2 + ["uncorrected"] * 2
    util = {lab["gpu"]: v for lab, v in m["gpulens_gpu_utilization_ratio"]}
    assert util["0"] == pytest.approx(0.72)  # second tick's 72 %
    assert {lab["gpu"]: v for lab, v in m["gpulens_gpu_row_remap_failure"]} == {"0": 0.0, "1": 1.0}
    assert {lab["gpu"]: v for lab, v in m["gpulens_gpu_sm_clock_hertz"]}["0"] == 1755e6
    xid = {(lab["gpu"], lab["xid"]): v for lab, v in m["gpulens_gpu_xid_errors_total"]}
    assert xid == {("0", "13"): 1.0, ("1", "79"): 3.0}  # three identical XIDs count as three
    info = sorted((lab["gpu"], lab["job_id"]) for lab, _ in m["gpulens_gpu_job_info"])
    assert info == [("0", "4242"), ("0", "train-resnet-17"), ("1", "4242")]
    job_util = {lab["job_id"]: v for lab, v in m["gpulens_job_gpu_utilization_ratio"]}
    # per-process utilization, not the device total: job 4242 = mean(30 %, 50 %)
    assert job_util == {"4242": pytest.approx(0.40), "train-resnet-17": pytest.approx(0.45)}
    job_mem = {lab["job_id"]: v for lab, v in m["gpulens_job_gpu_memory_used_bytes"]}
    assert job_mem == {"4242": 5e9, "train-resnet-17": 1e9}
    net = {lab["device"]: v for lab, v in m["gpulens_network_receive_bytes_total"]}
    assert net["eth0"] == 987654321012
    for name in ("gpulens_network_transmit_bytes_total", "gpulens_network_receive_packets_total",
                 "gpulens_network_transmit_packets_total", "gpulens_network_receive_errors_total",
                 "gpulens_network_transmit_errors_total", "gpulens_network_receive_drops_total",
                 "gpulens_network_transmit_drops_total"):
        assert len(m[name]) == 4, name
    sym = {(lab["device"], lab["port"]): v for lab, v in m["gpulens_infiniband_symbol_errors_total"]}
    assert sym == {("mlx5_0", "1"): 5.0, ("mlx5_1", "1"): 0.0}
    assert len(m["gpulens_infiniband_link_downed_total"]) == 2
    assert m["gpulens_agent_store_writable"][0][1] == 1.0
    assert m["gpulens_agent_gpu_backend_info"][0][0]["backend"] == "fake"
    assert m["gpulens_agent_last_sample_timestamp_seconds"][0][1] == 1.8e9 + 5.0
    assert m["gpulens_agent_errors_total"][0][1] == 0
    assert m["gpulens_agent_dropped_samples_total"][0][1] == 0
    assert "gpulens_agent_sample_duration_seconds" in m


@pytest.mark.slow
def test_unsupported_fields_are_null_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    scenario = {"devices": [{"index": 0, "unsupported": ["power_w", "nvlink_tx_bytes", "nvlink_rx_bytes",
                                                         "pcie_tx_bytes", "pcie_rx_bytes"],
                             "values": {"pcie_tx_snapshot_bps": 1.0e9, "pcie_rx_snapshot_bps": 2.0e9},
                             "failing": ["temp_c"]}]}
    sink = MemorySink()
    agent, clock = make_agent(scenario, sink)
    with caplog.at_level(logging.WARNING, logger="gpulens"):
        for i in range(3):
            clock.t = 2.0 * i
            agent.tick()
    agent.flush()
    t = sink.table("gpu")
    assert t is not None and t.num_rows == 3
    rows = t.to_pylist()
    assert all(r["power_w"] is None and r["temp_c"] is None and r["nvlink_tx_bps"] is None for r in rows)
    assert all(r["pcie_source"] == "snapshot" and r["pcie_tx_bps"] == 1.0e9 for r in rows)
    assert all(r["util_gpu"] is not None for r in rows)
    power_logs = [r for r in caplog.records if "power_w is not supported" in r.getMessage()]
    assert len(power_logs) == 1
    # unsupported is not an error; a failing read is (once per tick)
    assert agent.snapshot.errors_total == 3
    m = scrape(agent)
    assert "gpulens_gpu_power_watts" not in m  # no series rather than a fake 0
    # snapshot source: the byte counter integrates 1 GB/s over 4 s
    assert m["gpulens_gpu_pcie_transmit_bytes_total"][0][1] == pytest.approx(4.0e9)


@pytest.mark.slow
def test_gpu_lost_mid_run_keeps_the_rest_going() -> None:
    scenario = {"devices": [{"index": 0}, {"index": 1, "uuid": "GPU-lost", "lost_at_tick": 2}],
                "processes": [{"gpu": 1, "pid": 1006, "used_memory_bytes": 1}]}
    sink = MemorySink()
    agent, clock = make_agent(scenario, sink)
    counts = []
    for i in range(4):
        clock.t = float(i)
        counts.append(agent.tick().count("gpu"))
    assert counts == [2, 2, 1, 1]
    assert agent.snapshot.errors_total == 1  # the loss is counted once
    assert [d.uuid for d in agent.snapshot.lost] == ["GPU-lost"]
    assert agent.tick().count("net") == 6  # network sampling unaffected
    m = scrape(agent)
    assert [lab["uuid"] for lab, _ in m["gpulens_gpu_lost"]] == ["GPU-lost"]
    assert {lab["gpu"] for lab, _ in m["gpulens_gpu_utilization_ratio"]} == {"0"}
    assert "gpulens_gpu_job_info" not in m  # the lost GPU's job mapping is gone


@pytest.mark.slow
def test_gpu_counter_wrap_and_reset_never_negative_or_spiking() -> None:
    step = 1_000_000
    scenario = {"devices": [{"index": 0, "counters": {
        "pcie_tx_bytes": {"start": 2**32 - 2 * step, "step": step, "wrap_bits": 32},
        "pcie_rx_bytes": {"start": 5e12, "step": step, "reset_at_tick": 3},
        "energy_j": {"start": 1000, "step": 10, "reset_at_tick": 2}}}]}
    sink = MemorySink()
    agent, clock = make_agent(scenario, sink)
    for i in range(6):
        clock.t = float(i)
        agent.tick()
    agent.flush()
    rows = sink.table("gpu").to_pylist()  # type: ignore[union-attr]
    tx = [r["pcie_tx_bps"] for r in rows][1:]
    rx = [r["pcie_rx_bps"] for r in rows][1:]
    assert tx == [step] * 5  # across the 32-bit wrap
    assert rx[0] == step and rx[1] == step
    assert rx[2] == 0.0  # the reset tick: counter restarted at 0 -> 0 bytes since, not -5 TB
    assert rx[3:] == [step, step]
    energy = [v for (lab, v) in scrape(agent)["gpulens_gpu_energy_joules_total"]]
    assert energy == [1000 + 10 + 0 + 10 * 3]  # monotonic across the driver reload


def test_missing_library_and_bad_scenarios(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError, match="NVML"):
        FakeBackend({"missing_library": True})
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="bad.json"):
        FakeBackend.from_file(bad)
    with pytest.raises(InputError, match="unknown field 'watts'"):
        FakeBackend({"devices": [{"values": {"watts": 3}}]})
    with pytest.raises(InputError, match="does not exist"):
        FakeBackend.from_file(tmp_path / "nope.json")


def test_fake_fields_cover_every_sample_field() -> None:
    assert set(GPU_FIELDS) == set(GpuSample.__dataclass_fields__) - {"index"}


def test_job_utilization_on_shared_gpu_uses_per_process_values() -> None:
    from gpulens.collectors.agent import job_utilization
    from gpulens.collectors.attribution import Attribution

    samples = [GpuSample(0, util_gpu=90.0), GpuSample(1, util_gpu=60.0), GpuSample(2, util_gpu=80.0)]
    procs = [GpuProcess(0, 1, 10, 20.0), GpuProcess(0, 2, 10, 70.0),  # GPU 0 shared by jobs a and b
             GpuProcess(1, 3, 10, None),  # GPU 1: job c alone, no per-process util -> device util
             GpuProcess(2, 4, 10, None), GpuProcess(2, 5, 10, None)]  # GPU 2 shared, unknown split
    jobs = {1: Attribution("a", "env"), 2: Attribution("b", "env"), 3: Attribution("c", "env"),
            4: Attribution("d", "env"), 5: Attribution("e", "env")}
    util, mem, pairs = job_utilization(samples, procs, jobs)
    assert util == {"a": pytest.approx(0.2), "b": pytest.approx(0.7), "c": pytest.approx(0.6)}
    assert "d" not in util and "e" not in util  # never the device total split by guesswork
    assert mem["a"] == 10 and len(pairs) == 5


def test_batched_flushes_not_a_commit_per_sample() -> None:
    sink = MemorySink()
    agent, clock = make_agent(FULL, sink, flush_seconds=30.0, segment_seconds=300.0)
    for i in range(20):  # 20 ticks at 5 s = 100 s
        clock.t = 5.0 * i
        agent.tick()
        agent.maybe_write()
    assert sink.flushes == 3  # at 30, 60, 90 s
    assert agent.pending_rows > 0  # ticks since the last flush are still queued
    agent.close()
    assert sink.closed and sink.table("net").num_rows == 20 * 6  # type: ignore[union-attr]


@pytest.mark.slow
def test_full_disk_stops_writing_keeps_sampling_and_resumes() -> None:
    inner = MemorySink()
    sink = FlakySink(inner)
    agent, clock = make_agent({"devices": [{"index": 0}]}, sink, flush_seconds=1.0, max_buffer_rows=40)
    agent.tick()
    assert agent.flush()
    sink.full = True
    for i in range(1, 8):
        clock.t = float(i)
        agent.tick()  # 7 rows per tick (1 GPU + 6 net)
        agent.maybe_write()
    assert not agent.store_writable
    assert agent.snapshot.store_writable is False
    assert agent.snapshot.last_sample == 1.8e9 + 7.0  # still sampling
    assert agent.snapshot.dropped_total > 0  # bounded memory: oldest rows dropped
    m = scrape(agent)
    assert m["gpulens_agent_store_writable"][0][1] == 0.0
    assert m["gpulens_agent_dropped_samples_total"][0][1] == agent.snapshot.dropped_total
    sink.full = False
    clock.t = 9.0
    agent.tick()
    agent.maybe_write()
    assert agent.store_writable and agent.snapshot.store_writable
    kept = inner.table("gpu").num_rows
    # 9 ticks sampled; what was not dropped is all there, nothing duplicated
    dropped_gpu_rows = 9 - kept
    assert 0 < dropped_gpu_rows < 9
    assert scrape(agent)["gpulens_agent_store_writable"][0][1] == 1.0


def test_rows_written_counts_rows_retried_after_a_full_disk_once() -> None:
    inner = MemorySink()
    sink = FlakySink(inner)
    agent, clock = make_agent({"devices": [{"index": 0}]}, sink, flush_seconds=1.0)
    agent.tick()
    sink.full = True
    assert not agent.flush()  # the rows are handed to the sink, which cannot write them
    for i in range(1, 4):
        clock.t = float(i)
        agent.tick()
        agent.maybe_write()
    sink.full = False
    clock.t = 5.0
    agent.maybe_write()
    agent.close()
    stored = sum(inner.table(k).num_rows for k in SAMPLE_KINDS if inner.tables.get(k))
    assert stored > 0 and agent.rows_written == stored


@pytest.mark.slow
def test_run_counts_ticks_taken_not_ticks_skipped() -> None:
    import threading

    agent, clock = make_agent({"devices": [{"index": 0}]})
    real_tick = agent.tick

    def slow_tick() -> Any:
        clock.t += 2.5  # each tick overruns 2.5 intervals: the missed slots are skipped
        return real_tick()

    agent.tick = slow_tick  # type: ignore[method-assign]
    taken = agent.run(1.0, threading.Event(), max_ticks=4)
    assert taken == 4 == agent.ticks

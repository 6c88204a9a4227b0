"""/metrics for the node agent: a prometheus-client custom Collector over the agent's snapshot.

Names follow docs/collectors.md and the cross-team contract. GPU series carry
``node, gpu, uuid, model`` and never a job label; the GPU-to-job mapping is the
info metric ``gpulens_gpu_job_info{node,gpu,uuid,job} 1`` plus per-job series
``gpulens_job_gpu_*{node,job}``, so series count stays bounded by
GPUs + jobs-on-this-node instead of GPUs x jobs-ever-seen.
Default port 9847 (not in Prometheus's default-port allocation list).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from collectors.agent import AgentSnapshot

__all__ = ["AgentCollector", "MetricsServer", "make_registry", "serve_metrics"]

_GPU_LABELS = ["node", "gpu", "uuid", "model"]
_NET = (
    ("rx_bytes", "gpulens_network_receive_bytes_total", "Bytes received on the interface."),
    ("tx_bytes", "gpulens_network_transmit_bytes_total", "Bytes transmitted on the interface."),
    ("rx_packets", "gpulens_network_receive_packets_total", "Packets received."),
    ("tx_packets", "gpulens_network_transmit_packets_total", "Packets transmitted."),
    ("rx_errors", "gpulens_network_receive_errors_total", "Receive errors."),
    ("tx_errors", "gpulens_network_transmit_errors_total", "Transmit errors."),
    ("rx_drops", "gpulens_network_receive_drops_total", "Received packets dropped."),
    ("tx_drops", "gpulens_network_transmit_drops_total", "Transmitted packets dropped."),
)
_IB = (
    ("rx_bytes", "gpulens_infiniband_receive_bytes_total", "Bytes received on the port (port_rcv_data x 4)."),
    ("tx_bytes", "gpulens_infiniband_transmit_bytes_total", "Bytes sent on the port (port_xmit_data x 4)."),
    ("rx_packets", "gpulens_infiniband_receive_packets_total", "Packets received on the port."),
    ("tx_packets", "gpulens_infiniband_transmit_packets_total", "Packets sent on the port."),
    ("rx_errors", "gpulens_infiniband_receive_errors_total", "Receive errors on the port."),
    ("tx_drops", "gpulens_infiniband_transmit_discards_total", "Packets discarded on transmit."),
)


class AgentCollector(Collector):
    """Yields the node's metrics from ``source()`` (the agent's latest snapshot) at every scrape."""

    def __init__(self, source: Callable[[], AgentSnapshot]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        snap = self._source()
        yield from self._gpu(snap)
        yield from self._jobs(snap)
        yield from self._net(snap)
        yield from self._health(snap)

    def describe(self) -> Iterator[Metric]:
        return iter(())  # unchecked collector: series depend on the hardware found

    def _gpu(self, snap: AgentSnapshot) -> Iterator[Metric]:
        node = snap.node

        def gauge(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=_GPU_LABELS)

        def counter(name: str, doc: str) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=_GPU_LABELS)

        util = gauge("gpulens_gpu_utilization_ratio", "Fraction of time a kernel ran on the GPU (0-1).")
        mutil = gauge("gpulens_gpu_memory_utilization_ratio", "Fraction of time device memory was read or written (0-1).")
        used = gauge("gpulens_gpu_memory_used_bytes", "Device memory in use.")
        total = gauge("gpulens_gpu_memory_total_bytes", "Device memory size.")
        ptx = counter("gpulens_gpu_pcie_transmit_bytes_total", "PCIe bytes sent by the GPU (integrated from snapshots where the counter is unsupported).")
        prx = counter("gpulens_gpu_pcie_receive_bytes_total", "PCIe bytes received by the GPU.")
        replay = counter("gpulens_gpu_pcie_replay_errors_total", "PCIe replay counter.")
        power = gauge("gpulens_gpu_power_watts", "Power draw.")
        energy = counter("gpulens_gpu_energy_joules_total", "Energy consumed since the driver loaded.")
        temp = gauge("gpulens_gpu_temperature_celsius", "GPU temperature.")
        sm = gauge("gpulens_gpu_sm_clock_hertz", "SM clock.")
        memclk = gauge("gpulens_gpu_memory_clock_hertz", "Memory clock.")
        ecc = CounterMetricFamily("gpulens_gpu_ecc_errors_total", "Volatile ECC errors.", labels=[*_GPU_LABELS, "type"])
        remap = gauge("gpulens_gpu_row_remap_failure", "1 when row remapping failed (the GPU needs service).")
        nvtx = counter("gpulens_gpu_nvlink_transmit_bytes_total", "NVLink bytes sent, all links.")
        nvrx = counter("gpulens_gpu_nvlink_receive_bytes_total", "NVLink bytes received, all links.")
        smact = gauge("gpulens_gpu_sm_active_ratio", "GPM SM activity (0-1; Hopper and newer).")
        tensor = gauge("gpulens_gpu_tensor_active_ratio", "GPM tensor-core activity (0-1; Hopper and newer).")
        for g in snap.gpus:
            lv = [node, str(g.index), g.uuid, g.model]
            s = g.sample

            def put(fam: GaugeMetricFamily | CounterMetricFamily, value: float | None, scale: float = 1.0,
                    labels: list[str] = lv) -> None:
                if value is not None:
                    fam.add_metric(labels, float(value) * scale)

            put(util, s.util_gpu, 0.01)
            put(mutil, s.util_mem, 0.01)
            put(used, s.mem_used_bytes)
            put(total, s.mem_total_bytes)
            put(ptx, g.pcie_tx_total)
            put(prx, g.pcie_rx_total)
            put(replay, s.pcie_replay_total)
            put(power, s.power_w)
            put(energy, g.energy_total)
            put(temp, s.temp_c)
            put(sm, s.sm_clock_mhz, 1e6)
            put(memclk, s.mem_clock_mhz, 1e6)
            put(ecc, s.ecc_corrected_total, labels=[*lv, "corrected"])
            put(ecc, s.ecc_uncorrected_total, labels=[*lv, "uncorrected"])
            put(remap, None if s.row_remap_failures is None else min(s.row_remap_failures, 1))
            put(nvtx, g.nvlink_tx_total)
            put(nvrx, g.nvlink_rx_total)
            put(smact, s.sm_active_ratio)
            put(tensor, s.tensor_active_ratio)
        yield from (util, mutil, used, total, ptx, prx, replay, power, energy, temp, sm, memclk, ecc, remap,
                    nvtx, nvrx, smact, tensor)
        xid = CounterMetricFamily("gpulens_gpu_xid_errors_total", "XID errors reported by the driver, every event counted.",
                                  labels=[*_GPU_LABELS, "xid"])
        devs = {g.index: (g.uuid, g.model) for g in snap.gpus} | {d.index: (d.uuid, d.model) for d in snap.lost}
        for (gpu, code), n in sorted(snap.xid_totals.items()):
            uuid, model = devs.get(gpu, ("", ""))
            xid.add_metric([node, str(gpu), uuid, model, str(code)], float(n))
        yield xid
        lost = GaugeMetricFamily("gpulens_gpu_lost", "1 for a GPU that fell off the bus (no longer sampled).", labels=_GPU_LABELS)
        for d in snap.lost:
            lost.add_metric([node, str(d.index), d.uuid, d.model], 1.0)
        yield lost

    def _jobs(self, snap: AgentSnapshot) -> Iterator[Metric]:
        info = GaugeMetricFamily("gpulens_gpu_job_info", "A job has processes on this GPU (value always 1).",
                                 labels=["node", "gpu", "uuid", "job"])
        for gpu, uuid, job in snap.job_info:
            info.add_metric([snap.node, str(gpu), uuid, job], 1.0)
        util = GaugeMetricFamily("gpulens_job_gpu_utilization_ratio",
                                 "Job's GPU utilization from per-process SM utilization, mean over its GPUs (0-1).",
                                 labels=["node", "job"])
        for job, v in sorted(snap.job_util.items()):
            util.add_metric([snap.node, job], v)
        mem = GaugeMetricFamily("gpulens_job_gpu_memory_used_bytes", "GPU memory used by the job's processes.",
                                labels=["node", "job"])
        for job, b in sorted(snap.job_mem.items()):
            mem.add_metric([snap.node, job], float(b))
        yield from (info, util, mem)

    def _net(self, snap: AgentSnapshot) -> Iterator[Metric]:
        for field, name, doc in _NET:
            fam = CounterMetricFamily(name, doc, labels=["node", "device"])
            for n in snap.net:
                if field in n.totals:
                    fam.add_metric([snap.node, n.device], n.totals[field])
            yield fam
        speed = GaugeMetricFamily("gpulens_network_speed_bytes", "Link speed in bytes per second.", labels=["node", "device"])
        for n in snap.net:
            if n.speed_mbps is not None:
                speed.add_metric([snap.node, n.device], n.speed_mbps * 125_000.0)
        yield speed
        labels = ["node", "device", "port"]
        for field, name, doc in _IB:
            fam = CounterMetricFamily(name, doc, labels=labels)
            for p in snap.ib:
                if field in p.totals:
                    fam.add_metric([snap.node, p.device, str(p.port)], p.totals[field])
            yield fam
        sym = CounterMetricFamily("gpulens_infiniband_symbol_errors_total", "Symbol errors on the port.", labels=labels)
        down = CounterMetricFamily("gpulens_infiniband_link_downed_total", "Times the port link went down.", labels=labels)
        rate = GaugeMetricFamily("gpulens_infiniband_rate_bytes", "Port rate in bytes per second.", labels=labels)
        for p in snap.ib:
            lv = [snap.node, p.device, str(p.port)]
            if p.symbol_errors is not None:
                sym.add_metric(lv, p.symbol_errors)
            if p.link_downed is not None:
                down.add_metric(lv, p.link_downed)
            if p.speed_mbps is not None:
                rate.add_metric(lv, p.speed_mbps * 125_000.0)
        yield from (sym, down, rate)

    def _health(self, snap: AgentSnapshot) -> Iterator[Metric]:
        lv = [snap.node]
        last = GaugeMetricFamily("gpulens_agent_last_sample_timestamp_seconds", "Unix time of the last completed sample.", labels=["node"])
        if snap.last_sample is not None:
            last.add_metric(lv, snap.last_sample)
        dur = GaugeMetricFamily("gpulens_agent_sample_duration_seconds", "Wall time the last sampling tick took.", labels=["node"])
        if snap.sample_duration is not None:
            dur.add_metric(lv, snap.sample_duration)
        errs = CounterMetricFamily("gpulens_agent_errors_total", "Failed reads and writes (unsupported fields excluded).", labels=["node"])
        errs.add_metric(lv, float(snap.errors_total))
        dropped = CounterMetricFamily("gpulens_agent_dropped_samples_total", "Sample rows dropped because the store stayed unwritable.", labels=["node"])
        dropped.add_metric(lv, float(snap.dropped_total))
        writable = GaugeMetricFamily("gpulens_agent_store_writable", "1 while samples can be written to the store, 0 otherwise.", labels=["node"])
        writable.add_metric(lv, 1.0 if snap.store_writable else 0.0)
        backend = GaugeMetricFamily("gpulens_agent_gpu_backend_info", "GPU backend in use (nvml, fake or none).", labels=["node", "backend"])
        backend.add_metric([snap.node, snap.backend], 1.0)
        yield from (last, dur, errs, dropped, writable, backend)


def make_registry(source: Callable[[], AgentSnapshot]) -> CollectorRegistry:
    """A fresh registry holding only the agent's collector (no process/platform defaults)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(source))
    return registry


class MetricsServer:
    """A running /metrics HTTP server; ``port`` is the bound port (useful with port 0)."""

    def __init__(self, httpd: WSGIServer, thread: threading.Thread) -> None:
        self.httpd = httpd
        self.thread = thread

    @property
    def port(self) -> int:
        return int(self.httpd.server_port)

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def serve_metrics(registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 9847) -> MetricsServer:
    """Serve ``registry`` on http://host:port/metrics in a daemon thread."""
    httpd, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(httpd, thread)

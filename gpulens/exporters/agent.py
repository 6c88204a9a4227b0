"""/metrics for the node agent: a cached text exposition, and a prometheus-client Collector.

Names follow docs/collectors.md and the cross-team contract. GPU series carry
``node, gpu, uuid, model`` and never a job label; the GPU-to-job mapping is the
info metric ``gpulens_gpu_job_info{node,gpu,uuid,job} 1`` plus per-job series
``gpulens_job_gpu_*{node,job}``, so series count stays bounded by
GPUs + jobs-on-this-node instead of GPUs x jobs-ever-seen.
Default port 9847 (not in Prometheus's default-port allocation list).

Two ways to expose the same families (both built by :func:`agent_families`):

* :class:`AgentExposition` + :func:`serve_agent` (what ``gpulens collect`` runs):
  the Prometheus text format 0.0.4 rendered at most once per agent snapshot
  (the agent publishes one snapshot per sampling tick) with label strings
  pre-formatted and cached per GPU/device; the plain and gzipped bytes are
  cached and every scrape in between is served from them. Rendering through
  prometheus-client on every scrape cost ~1 s (text) to ~2.2 s (OpenMetrics) for
  1,024 GPUs; see benchmarks/RESULTS.md ``## metrics``. Everyone gets the text
  format, which Prometheus accepts whatever it asks for first.
* :class:`AgentCollector` (prometheus-client custom collector, optionally
  registering itself in an injected ``registry=``) for tests and for programs that
  embed the agent in their own registry. Its output parses to exactly the same
  families and samples as the cached exposition (tested).
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import logging
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import gzip_accepted
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gpulens.collectors.agent import AgentSnapshot

__all__ = [
    "CONTENT_TYPE",
    "AgentCollector",
    "AgentExposition",
    "Family",
    "Labels",
    "MetricSpec",
    "MetricsServer",
    "agent_families",
    "make_registry",
    "render_text",
    "serve_agent",
    "serve_metrics",
]

log = logging.getLogger("gpulens.exporters.agent")

#: Prometheus text exposition format 0.0.4.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

GAUGE, COUNTER = "gauge", "counter"


@dataclasses.dataclass(frozen=True)
class MetricSpec:
    """One metric family: ``name`` as exposed in the text format (counters end in ``_total``)."""

    name: str
    kind: str  # "gauge" or "counter"
    doc: str
    labels: tuple[str, ...]

    @functools.cached_property
    def header(self) -> str:
        """``# HELP`` and ``# TYPE`` lines, escaped like prometheus-client's text format."""
        doc = self.doc.replace("\\", r"\\").replace("\n", r"\n")
        return f"# HELP {self.name} {doc}\n# TYPE {self.name} {self.kind}\n"


class Labels:
    """Label values of one series plus their pre-formatted text (``gpu="0",model="...",...``).

    Built through :func:`_labels`, which caches them, so a GPU's label string is
    formatted once and reused by all its metrics, at every render.
    """

    __slots__ = ("text", "values")

    def __init__(self, names: tuple[str, ...], values: tuple[str, ...]) -> None:
        self.values = values
        # prometheus-client's text format sorts label names and escapes \ newline and "
        pairs = sorted(zip(names, values, strict=True))
        self.text = ",".join(
            '{}="{}"'.format(k, v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\""))
            for k, v in pairs
        )


@functools.lru_cache(maxsize=1 << 16)
def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> Labels:
    return Labels(names, values)


@dataclasses.dataclass(slots=True)
class Family:
    """A metric family and its samples for one snapshot."""

    spec: MetricSpec
    samples: list[tuple[Labels, float]] = dataclasses.field(default_factory=list)


def _spec(name: str, kind: str, doc: str, labels: tuple[str, ...]) -> MetricSpec:
    return MetricSpec(name, kind, doc, labels)


_GPU_LABELS = ("node", "gpu", "uuid", "model")
_NODE = ("node",)
_NET_DEV = ("node", "device")
_IB_PORT = ("node", "device", "port")

# (GpuState/GpuSample attribute, scale, spec); ``g.`` attributes are on GpuState, ``s.`` on its sample.
_GPU_SIMPLE: tuple[tuple[str, float, MetricSpec], ...] = (
    ("s.util_gpu", 0.01, _spec("gpulens_gpu_utilization_ratio", GAUGE,
                               "Fraction of time a kernel ran on the GPU (0-1).", _GPU_LABELS)),
    ("s.util_mem", 0.01, _spec("gpulens_gpu_memory_utilization_ratio", GAUGE,
                               "Fraction of time device memory was read or written (0-1).", _GPU_LABELS)),
    ("s.mem_used_bytes", 1.0, _spec("gpulens_gpu_memory_used_bytes", GAUGE, "Device memory in use.", _GPU_LABELS)),
    ("s.mem_total_bytes", 1.0, _spec("gpulens_gpu_memory_total_bytes", GAUGE, "Device memory size.", _GPU_LABELS)),
    ("g.pcie_tx_total", 1.0, _spec(
        "gpulens_gpu_pcie_transmit_bytes_total", COUNTER,
        "PCIe bytes sent by the GPU (integrated from snapshots where the counter is unsupported).", _GPU_LABELS)),
    ("g.pcie_rx_total", 1.0, _spec("gpulens_gpu_pcie_receive_bytes_total", COUNTER,
                                   "PCIe bytes received by the GPU.", _GPU_LABELS)),
    ("s.pcie_replay_total", 1.0, _spec("gpulens_gpu_pcie_replay_errors_total", COUNTER,
                                       "PCIe replay counter.", _GPU_LABELS)),
    ("s.power_w", 1.0, _spec("gpulens_gpu_power_watts", GAUGE, "Power draw.", _GPU_LABELS)),
    ("g.energy_total", 1.0, _spec("gpulens_gpu_energy_joules_total", COUNTER,
                                  "Energy consumed since the driver loaded.", _GPU_LABELS)),
    ("s.temp_c", 1.0, _spec("gpulens_gpu_temperature_celsius", GAUGE, "GPU temperature.", _GPU_LABELS)),
    ("s.sm_clock_mhz", 1e6, _spec("gpulens_gpu_sm_clock_hertz", GAUGE, "SM clock.", _GPU_LABELS)),
    ("s.mem_clock_mhz", 1e6, _spec("gpulens_gpu_memory_clock_hertz", GAUGE, "Memory clock.", _GPU_LABELS)),
)
_ECC = _spec("gpulens_gpu_ecc_errors_total", COUNTER, "Volatile ECC errors.", (*_GPU_LABELS, "type"))
_REMAP = _spec("gpulens_gpu_row_remap_failure", GAUGE,
               "1 when row remapping failed (the GPU needs service).", _GPU_LABELS)
_GPU_TAIL: tuple[tuple[str, float, MetricSpec], ...] = (
    ("g.nvlink_tx_total", 1.0, _spec("gpulens_gpu_nvlink_transmit_bytes_total", COUNTER,
                                     "NVLink bytes sent, all links.", _GPU_LABELS)),
    ("g.nvlink_rx_total", 1.0, _spec("gpulens_gpu_nvlink_receive_bytes_total", COUNTER,
                                     "NVLink bytes received, all links.", _GPU_LABELS)),
    ("s.sm_active_ratio", 1.0, _spec("gpulens_gpu_sm_active_ratio", GAUGE,
                                     "GPM SM activity (0-1; Hopper and newer).", _GPU_LABELS)),
    ("s.tensor_active_ratio", 1.0, _spec("gpulens_gpu_tensor_active_ratio", GAUGE,
                                         "GPM tensor-core activity (0-1; Hopper and newer).", _GPU_LABELS)),
)
_XID = _spec("gpulens_gpu_xid_errors_total", COUNTER, "XID errors reported by the driver, every event counted.",
             (*_GPU_LABELS, "xid"))
_LOST = _spec("gpulens_gpu_lost", GAUGE, "1 for a GPU that fell off the bus (no longer sampled).", _GPU_LABELS)
_JOB_INFO = _spec("gpulens_gpu_job_info", GAUGE, "A job has processes on this GPU (value always 1).",
                  ("node", "gpu", "uuid", "job_id"))
_JOB_UTIL = _spec("gpulens_job_gpu_utilization_ratio", GAUGE,
                  "Job's GPU utilization from per-process SM utilization, mean over its GPUs (0-1).", ("node", "job_id"))
_JOB_MEM = _spec("gpulens_job_gpu_memory_used_bytes", GAUGE, "GPU memory used by the job's processes.",
                 ("node", "job_id"))
_NET = tuple((field, _spec(name, COUNTER, doc, _NET_DEV)) for field, name, doc in (
    ("rx_bytes", "gpulens_network_receive_bytes_total", "Bytes received on the interface."),
    ("tx_bytes", "gpulens_network_transmit_bytes_total", "Bytes transmitted on the interface."),
    ("rx_packets", "gpulens_network_receive_packets_total", "Packets received."),
    ("tx_packets", "gpulens_network_transmit_packets_total", "Packets transmitted."),
    ("rx_errors", "gpulens_network_receive_errors_total", "Receive errors."),
    ("tx_errors", "gpulens_network_transmit_errors_total", "Transmit errors."),
    ("rx_drops", "gpulens_network_receive_drops_total", "Received packets dropped."),
    ("tx_drops", "gpulens_network_transmit_drops_total", "Transmitted packets dropped."),
))
_NET_SPEED = _spec("gpulens_network_speed_bytes", GAUGE, "Link speed in bytes per second.", _NET_DEV)
_IB = tuple((field, _spec(name, COUNTER, doc, _IB_PORT)) for field, name, doc in (
    ("rx_bytes", "gpulens_infiniband_receive_bytes_total", "Bytes received on the port (port_rcv_data x 4)."),
    ("tx_bytes", "gpulens_infiniband_transmit_bytes_total", "Bytes sent on the port (port_xmit_data x 4)."),
    ("rx_packets", "gpulens_infiniband_receive_packets_total", "Packets received on the port."),
    ("tx_packets", "gpulens_infiniband_transmit_packets_total", "Packets sent on the port."),
    ("rx_errors", "gpulens_infiniband_receive_errors_total", "Receive errors on the port."),
    ("tx_drops", "gpulens_infiniband_transmit_discards_total", "Packets discarded on transmit."),
))
_IB_SYM = _spec("gpulens_infiniband_symbol_errors_total", COUNTER, "Symbol errors on the port.", _IB_PORT)
_IB_DOWN = _spec("gpulens_infiniband_link_downed_total", COUNTER, "Times the port link went down.", _IB_PORT)
_IB_RATE = _spec("gpulens_infiniband_rate_bytes", GAUGE, "Port rate in bytes per second.", _IB_PORT)
_H_LAST = _spec("gpulens_agent_last_sample_timestamp_seconds", GAUGE, "Unix time of the last completed sample.", _NODE)
_H_DUR = _spec("gpulens_agent_sample_duration_seconds", GAUGE, "Wall time the last sampling tick took.", _NODE)
_H_ERR = _spec("gpulens_agent_errors_total", COUNTER, "Failed reads and writes (unsupported fields excluded).", _NODE)
_H_DROP = _spec("gpulens_agent_dropped_samples_total", COUNTER,
                "Sample rows dropped because the store stayed unwritable.", _NODE)
_H_WRITABLE = _spec("gpulens_agent_store_writable", GAUGE,
                    "1 while samples can be written to the store, 0 otherwise.", _NODE)
_H_BACKEND = _spec("gpulens_agent_gpu_backend_info", GAUGE, "GPU backend in use (nvml, fake or none).",
                   ("node", "backend"))


def agent_families(snap: AgentSnapshot) -> list[Family]:
    """Every family the agent exposes for ``snap``, in exposition order (empty families included)."""
    return [
        *_gpu_families(snap),
        *_device_event_families(snap),
        *_job_families(snap),
        *_net_families(snap),
        *_ib_families(snap),
        *_health_families(snap),
    ]


def _gpu_families(snap: AgentSnapshot) -> list[Family]:
    """The per-GPU families of the live GPUs: the simple fields, ECC, row remapping, NVLink and GPM."""
    node = snap.node
    simple = [(attr[0] == "g", attr[2:], scale, Family(spec)) for attr, scale, spec in _GPU_SIMPLE]
    tail = [(attr[0] == "g", attr[2:], scale, Family(spec)) for attr, scale, spec in _GPU_TAIL]
    ecc, remap = Family(_ECC), Family(_REMAP)
    ecc_s, remap_s = ecc.samples, remap.samples
    for g in snap.gpus:
        s = g.sample
        lab = _labels(_GPU_LABELS, (node, str(g.index), g.uuid, g.model))
        for on_state, attr, scale, fam in simple:
            v = getattr(g if on_state else s, attr)
            if v is not None:
                fam.samples.append((lab, float(v) * scale))
        if s.ecc_corrected_total is not None:
            ecc_s.append((_labels(_ECC.labels, (*lab.values, "corrected")), float(s.ecc_corrected_total)))
        if s.ecc_uncorrected_total is not None:
            ecc_s.append((_labels(_ECC.labels, (*lab.values, "uncorrected")), float(s.ecc_uncorrected_total)))
        if s.row_remap_failures is not None:
            remap_s.append((lab, float(min(s.row_remap_failures, 1))))
        for on_state, attr, scale, fam in tail:
            v = getattr(g if on_state else s, attr)
            if v is not None:
                fam.samples.append((lab, float(v) * scale))
    return [*(f for _, _, _, f in simple), ecc, remap, *(f for _, _, _, f in tail)]


def _device_event_families(snap: AgentSnapshot) -> list[Family]:
    """XID totals by GPU and code (lost GPUs included), and the GPUs that fell off the bus."""
    node = snap.node
    xid = Family(_XID)
    devs = {g.index: (g.uuid, g.model) for g in snap.gpus} | {d.index: (d.uuid, d.model) for d in snap.lost}
    for (gpu, code), n in sorted(snap.xid_totals.items()):
        uuid, model = devs.get(gpu, ("", ""))
        xid.samples.append((_labels(_XID.labels, (node, str(gpu), uuid, model, str(code))), float(n)))
    lost = Family(_LOST, [(_labels(_GPU_LABELS, (node, str(d.index), d.uuid, d.model)), 1.0) for d in snap.lost])
    return [xid, lost]


def _job_families(snap: AgentSnapshot) -> list[Family]:
    """Which jobs run on which GPU, and each job's GPU utilization and memory."""
    node = snap.node
    return [
        Family(_JOB_INFO, [(_labels(_JOB_INFO.labels, (node, str(gpu), uuid, job)), 1.0)
                           for gpu, uuid, job in snap.job_info]),
        Family(_JOB_UTIL, [(_labels(_JOB_UTIL.labels, (node, job)), float(v))
                           for job, v in sorted(snap.job_util.items())]),
        Family(_JOB_MEM, [(_labels(_JOB_MEM.labels, (node, job)), float(b))
                          for job, b in sorted(snap.job_mem.items())]),
    ]


def _net_families(snap: AgentSnapshot) -> list[Family]:
    """The network interfaces' counters and link speed."""
    net_labs = [_labels(_NET_DEV, (snap.node, n.device)) for n in snap.net]
    out = [Family(spec, [(lab, float(n.totals[field])) for n, lab in zip(snap.net, net_labs, strict=True)
                         if field in n.totals])
           for field, spec in _NET]
    out.append(Family(_NET_SPEED, [(lab, n.speed_mbps * 125_000.0) for n, lab in zip(snap.net, net_labs, strict=True)
                                   if n.speed_mbps is not None]))
    return out


def _ib_families(snap: AgentSnapshot) -> list[Family]:
    """The InfiniBand ports' counters, symbol errors, link-downed counts and rate."""
    ib_labs = [_labels(_IB_PORT, (snap.node, p.device, str(p.port))) for p in snap.ib]
    out = [Family(spec, [(lab, float(p.totals[field])) for p, lab in zip(snap.ib, ib_labs, strict=True)
                         if field in p.totals])
           for field, spec in _IB]
    sym, down, rate = Family(_IB_SYM), Family(_IB_DOWN), Family(_IB_RATE)
    for p, lab in zip(snap.ib, ib_labs, strict=True):
        if p.symbol_errors is not None:
            sym.samples.append((lab, float(p.symbol_errors)))
        if p.link_downed is not None:
            down.samples.append((lab, float(p.link_downed)))
        if p.speed_mbps is not None:
            rate.samples.append((lab, p.speed_mbps * 125_000.0))
    return [*out, sym, down, rate]


def _health_families(snap: AgentSnapshot) -> list[Family]:
    """The agent's own health: last sample, tick duration, errors, drops, store writability, backend."""
    nl = _labels(_NODE, (snap.node,))
    return [
        Family(_H_LAST, [] if snap.last_sample is None else [(nl, float(snap.last_sample))]),
        Family(_H_DUR, [] if snap.sample_duration is None else [(nl, float(snap.sample_duration))]),
        Family(_H_ERR, [(nl, float(snap.errors_total))]),
        Family(_H_DROP, [(nl, float(snap.dropped_total))]),
        Family(_H_WRITABLE, [(nl, 1.0 if snap.store_writable else 0.0)]),
        Family(_H_BACKEND, [(_labels(_H_BACKEND.labels, (snap.node, snap.backend)), 1.0)]),
    ]


def render_text(snap: AgentSnapshot) -> bytes:
    """``snap`` in the Prometheus text format 0.0.4 (what prometheus-client's generate_latest writes)."""
    parts: list[str] = []
    add = parts.append
    fmt = floatToGoString
    for fam in agent_families(snap):
        spec = fam.spec
        add(spec.header)
        name = spec.name
        for lab, value in fam.samples:
            add(f"{name}{{{lab.text}}} {fmt(value)}\n")
    return "".join(parts).encode("utf-8")


class AgentCollector(Collector):
    """Yields the node's metrics from ``source()`` (the agent's latest snapshot) at every scrape.

    With ``registry=`` the collector registers itself there. Every scrape builds
    prometheus-client metric objects for all series: fine for tests and small
    nodes; ``gpulens collect`` serves :class:`AgentExposition` instead.
    """

    def __init__(self, source: Callable[[], AgentSnapshot], *, registry: CollectorRegistry | None = None) -> None:
        self._source = source
        if registry is not None:
            registry.register(self)

    def collect(self) -> Iterator[Metric]:
        for fam in agent_families(self._source()):
            spec = fam.spec
            metric: GaugeMetricFamily | CounterMetricFamily
            if spec.kind == COUNTER:
                metric = CounterMetricFamily(spec.name, spec.doc, labels=spec.labels)
            else:
                metric = GaugeMetricFamily(spec.name, spec.doc, labels=spec.labels)
            for lab, value in fam.samples:
                metric.add_metric(list(lab.values), value)
            yield metric

    def describe(self) -> Iterator[Metric]:
        return iter(())  # unchecked collector: series depend on the hardware found


def make_registry(source: Callable[[], AgentSnapshot]) -> CollectorRegistry:
    """A fresh registry holding only the agent's collector (no process/platform defaults)."""
    registry = CollectorRegistry(auto_describe=False)
    AgentCollector(source, registry=registry)
    return registry


@dataclasses.dataclass
class _Rendered:
    snap: AgentSnapshot
    plain: bytes
    gzipped: bytes | None = None


class AgentExposition:
    """The agent's /metrics body, rendered at most once per snapshot and cached (plain and gzip).

    ``source()`` returns the agent's current snapshot; the agent replaces it once
    per sampling tick (and when the store's writability changes), so a scrape
    either returns cached bytes or renders the new snapshot once, while
    concurrent scrapes of the same snapshot wait for that one render.
    """

    def __init__(self, source: Callable[[], AgentSnapshot], *, gzip_level: int = 1) -> None:
        self._source = source
        self._gzip_level = gzip_level
        self._lock = threading.Lock()
        self._cur: _Rendered | None = None
        self.renders = 0
        self.compressions = 0

    def _current(self) -> _Rendered:
        snap = self._source()
        cur = self._cur
        if cur is not None and cur.snap is snap:
            return cur
        with self._lock:
            cur = self._cur
            if cur is None or cur.snap is not snap:
                cur = _Rendered(snap, render_text(snap))
                self._cur = cur
                self.renders += 1
            return cur

    def get(self, *, gzipped: bool = False) -> bytes:
        """The exposition of the current snapshot, gzip-compressed if ``gzipped``."""
        cur = self._current()
        if not gzipped:
            return cur.plain
        if cur.gzipped is None:
            with self._lock:
                if cur.gzipped is None:
                    cur.gzipped = gzip.compress(cur.plain, compresslevel=self._gzip_level, mtime=0)
                    self.compressions += 1
        return cur.gzipped


class MetricsServer:
    """A running /metrics HTTP server; ``port`` is the bound port (useful with port 0)."""

    def __init__(self, httpd: HTTPServer, thread: threading.Thread) -> None:
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
    """Serve ``registry`` through prometheus-client's server (renders at every scrape)."""
    httpd, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(httpd, thread)


class _ExpositionServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # Prometheus HA pairs and bursts of ad-hoc curls must not be refused

    def __init__(self, address: tuple[str, int], exposition: AgentExposition) -> None:
        self.exposition = exposition
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN (a DNS lookup); not needed here.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)


class _Handler(BaseHTTPRequestHandler):
    server: _ExpositionServer
    server_version = "gpulens-agent"
    timeout = 30  # a client that connects and sends nothing does not hold a thread for ever

    def _respond(self, with_body: bool) -> None:
        path = urlsplit(self.path).path
        if path == "/":
            self._send(200, b'<html><body><a href="/metrics">/metrics</a></body></html>\n',
                       "text/html; charset=utf-8", with_body)
            return
        if path != "/metrics":
            self._send(404, b"Not found: the agent serves /metrics\n", "text/plain; charset=utf-8", with_body)
            return
        gz = gzip_accepted(self.headers.get("Accept-Encoding", ""))
        try:
            body = self.server.exposition.get(gzipped=gz)
        except Exception:  # a rendering bug must not kill the server thread silently
            log.exception("rendering /metrics failed")
            self._send(500, b"rendering /metrics failed; see the agent's log\n", "text/plain; charset=utf-8",
                       with_body)
            return
        self._send(200, body, CONTENT_TYPE, with_body, encoding="gzip" if gz else None)

    def _send(self, status: int, body: bytes, ctype: str, with_body: bool, encoding: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if encoding:
            self.send_header("Content-Encoding", encoding)
        self.send_header("Vary", "Accept-Encoding")
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def do_GET(self) -> None:
        self._respond(True)

    def do_HEAD(self) -> None:
        self._respond(False)

    def log_message(self, format: str, *args: object) -> None:
        pass  # no line per scrape


def serve_agent(source: Callable[[], AgentSnapshot] | AgentExposition, host: str = "127.0.0.1",
                port: int = 9847) -> MetricsServer:
    """Serve the agent's cached exposition on http://host:port/metrics in daemon threads."""
    exposition = source if isinstance(source, AgentExposition) else AgentExposition(source)
    httpd = _ExpositionServer((host, port), exposition)
    thread = threading.Thread(target=httpd.serve_forever, name="gpulens-metrics", daemon=True)
    thread.start()
    return MetricsServer(httpd, thread)

"""The agent's cached /metrics exposition: same families as the prometheus-client path, rendered
once per snapshot, served plain or gzip in the text format 0.0.4."""

from __future__ import annotations

import gzip
import http.client
import threading
from typing import Any, cast

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.collectors.agent import Agent
from gpulens.collectors.sink import FlakySink, MemorySink
from gpulens.exporters.agent import (
    CONTENT_TYPE,
    AgentCollector,
    AgentExposition,
    make_registry,
    render_text,
    serve_agent,
)
from tests.collectors.test_agent import FULL, make_agent

OPENMETRICS_FIRST = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)

#: Everything a snapshot can hold: a lost GPU, XIDs on a live and on the lost GPU, unsupported
#: fields, shared GPUs with several jobs, network and InfiniBand from the fixture tree.
RICH = {
    "devices": [
        *cast(list[Any], FULL["devices"]),
        {"index": 2, "uuid": "GPU-cccc", "unsupported": ["power_w", "nvlink_tx_bytes", "nvlink_rx_bytes",
                                                         "ecc_corrected_total"]},
        {"index": 3, "uuid": "GPU-dddd", "lost_at_tick": 1},
    ],
    "processes": [*cast(list[Any], FULL["processes"]), {"gpu": 2, "pid": 1007, "used_memory_bytes": 5e8}],
    "xids": [*cast(list[Any], FULL["xids"]), {"tick": 0, "gpu": 3, "xid": 48, "count": 2}],
}


def parsed(text: str) -> list[tuple[str, str, str, list[tuple[str, tuple[tuple[str, str], ...], float]]]]:
    return [
        (f.name, f.type, f.documentation,
         [(s.name, tuple(sorted(s.labels.items())), s.value) for s in f.samples])
        for f in text_string_to_metric_families(text)
    ]


def ticked(scenario: dict[str, Any], ticks: int = 2, **kw: Any) -> Agent:
    agent, clock = make_agent(scenario, **kw)
    for i in range(ticks):
        clock.t = 5.0 * i
        agent.tick()
    return agent


@pytest.mark.parametrize("node", ["gpu-node-01", 'odd "node" \\ with\nnewline'])
def test_cached_exposition_equals_the_registry_path(node: str) -> None:
    agent = ticked(RICH, ticks=3)
    agent.snapshot = agent.snapshot.__class__(**{**agent.snapshot.__dict__, "node": node})
    snap = agent.snapshot
    assert snap.lost and snap.xid_totals and snap.job_info and snap.net and snap.ib  # the rich case really is

    cached = AgentExposition(lambda: snap).get().decode()
    via_registry = generate_latest(make_registry(lambda: snap)).decode()
    ours, theirs = parsed(cached), parsed(via_registry)
    assert ours == theirs
    names = [name for name, *_ in ours]
    assert len(names) == len(set(names)) == 47  # every family of docs/collectors.md, once
    by_name: dict[str, list[tuple[str, tuple[tuple[str, str], ...], float]]] = {}
    for _, _, _, samples in ours:
        for sample in samples:
            by_name.setdefault(sample[0], []).append(sample)
    assert len(by_name["gpulens_gpu_utilization_ratio"]) == 3  # three live GPUs
    assert [dict(lab)["uuid"] for _, lab, _ in by_name["gpulens_gpu_lost"]] == ["GPU-dddd"]
    xids = {(dict(lab)["uuid"], dict(lab)["xid"]): v for _, lab, v in by_name["gpulens_gpu_xid_errors_total"]}
    assert xids == {("GPU-aaaa", "13"): 1.0, ("GPU-bbbb", "79"): 3.0, ("GPU-dddd", "48"): 2.0}
    assert {dict(lab)["node"] for _, lab, _ in by_name["gpulens_agent_errors_total"]} == {node}
    # HELP and TYPE lines too (the parser keeps documentation and type; compare the raw lines)
    assert [ln for ln in cached.splitlines() if ln.startswith("#")] == \
        [ln for ln in via_registry.splitlines() if ln.startswith("#")]


def test_registry_injection_and_empty_snapshot() -> None:
    from prometheus_client import CollectorRegistry

    agent, _ = make_agent({"devices": []})
    reg = CollectorRegistry(auto_describe=False)
    AgentCollector(lambda: agent.snapshot, registry=reg)
    before_tick = parsed(generate_latest(reg).decode())
    assert before_tick == parsed(render_text(agent.snapshot).decode())
    assert reg.get_sample_value("gpulens_agent_errors_total", {"node": "gpu-node-01"}) == 0.0
    agent.tick()
    assert parsed(generate_latest(reg).decode()) == parsed(render_text(agent.snapshot).decode())
    assert reg.get_sample_value("gpulens_agent_last_sample_timestamp_seconds", {"node": "gpu-node-01"}) == 1.8e9


def test_renders_once_per_snapshot_and_gzips_once() -> None:
    agent = ticked(FULL, sink=FlakySink(MemorySink()))
    exp = AgentExposition(lambda: agent.snapshot)
    results: list[bytes] = []

    def scrape() -> None:
        results.append(exp.get())
        results.append(gzip.decompress(exp.get(gzipped=True)))

    threads = [threading.Thread(target=scrape) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and (exp.renders, exp.compressions) == (1, 1)
    assert agent.flush()  # a flush that changes nothing publishes no new snapshot
    exp.get()
    assert exp.renders == 1
    agent.tick()
    body = exp.get()
    assert exp.renders == 2 and body != results[0]
    assert exp.get() is body  # cached bytes, not a copy
    assert isinstance(agent.sink, FlakySink)
    agent.sink.full = True
    assert not agent.flush()  # the disk fills: the gauge changes, so the body does
    assert b'gpulens_agent_store_writable{node="gpu-node-01"} 0.0' in exp.get()
    assert exp.renders == 3


def _get(port: int, path: str = "/metrics", method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, headers=headers)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


@pytest.mark.slow
def test_http_server_plain_gzip_head_and_404() -> None:
    agent = ticked(FULL)
    server = serve_agent(lambda: agent.snapshot, port=0)
    try:
        assert server.httpd.server_address[0] == "127.0.0.1"  # the default host
        status, hdr, plain = _get(server.port, Accept=OPENMETRICS_FIRST)
        assert status == 200 and hdr["content-type"] == CONTENT_TYPE and "content-encoding" not in hdr
        assert int(hdr["content-length"]) == len(plain)
        assert plain == render_text(agent.snapshot)
        status, hdr, gz = _get(server.port, Accept=OPENMETRICS_FIRST, **{"Accept-Encoding": "gzip"})
        assert status == 200 and hdr["content-encoding"] == "gzip" and len(gz) < len(plain)
        assert gzip.decompress(gz) == plain
        status, hdr, empty = _get(server.port, method="HEAD", **{"Accept-Encoding": "gzip"})
        assert status == 200 and empty == b"" and int(hdr["content-length"]) == len(gz)
        assert _get(server.port, "/metrics?name[]=x")[0] == 200
        assert _get(server.port, "/nope")[0] == 404
        assert b"/metrics" in _get(server.port, "/")[2]
    finally:
        server.stop()


@pytest.mark.slow
def test_http_server_reports_a_render_failure_and_keeps_serving() -> None:
    agent = ticked(FULL)
    broken = [True]

    def source() -> Any:
        if broken[0]:
            return None  # not a snapshot: rendering raises
        return agent.snapshot

    server = serve_agent(source, port=0)
    try:
        assert _get(server.port)[0] == 500
        broken[0] = False
        status, _, body = _get(server.port)
        assert status == 200 and b"gpulens_gpu_utilization_ratio{" in body
    finally:
        server.stop()

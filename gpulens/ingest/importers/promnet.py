"""Network samples (the ``net`` kind) from node_exporter or gpulens agents in Prometheus.

node_exporter's series are matched to a GPU node by the host part of the GPU
exporter's ``instance`` label (``10.0.0.1:9400`` -> ``instance=~"10.0.0.1(:[0-9]+)?"``);
gpulens agents' by their ``node`` label. Counters are stored as they come (the
``*_total`` columns, like the agent) and byte counters also as rates (``rx_bps``,
``tx_bps``; a reset counts from zero and is counted in ``counter_resets``). The link
kind is not in the series: ``lo`` is loopback, InfiniBand ports come from the
InfiniBand metrics, ``e*``/``bond*``/``team*`` are ethernet, the rest ``other``.
Unlike GPU series there is no freshness test here: after node_exporter stops,
the last values repeat for Prometheus's lookback (five minutes) with a zero rate.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Final

import pyarrow as pa

from gpulens.ingest.importers.common import Quirks
from gpulens.ingest.importers.promapi import Series, promql_str
from gpulens.store import arrow_schema

__all__ = ["NET_METRICS", "net_owner", "net_probe", "net_regex", "net_rows", "net_selector"]

_NET_SCHEMA = arrow_schema("net")

#: metric -> (column stem, is InfiniBand). ``speed`` is bytes per second.
NET_METRICS: Final[dict[str, dict[str, tuple[str, bool]]]] = {
    "node_exporter": {
        "node_network_receive_bytes_total": ("rx_bytes", False),
        "node_network_transmit_bytes_total": ("tx_bytes", False),
        "node_network_receive_packets_total": ("rx_packets", False),
        "node_network_transmit_packets_total": ("tx_packets", False),
        "node_network_receive_errs_total": ("rx_errors", False),
        "node_network_transmit_errs_total": ("tx_errors", False),
        "node_network_receive_drop_total": ("rx_drops", False),
        "node_network_transmit_drop_total": ("tx_drops", False),
        "node_network_speed_bytes": ("speed", False),
        "node_infiniband_port_data_received_bytes_total": ("rx_bytes", True),
        "node_infiniband_port_data_transmitted_bytes_total": ("tx_bytes", True),
        "node_infiniband_port_packets_received_total": ("rx_packets", True),
        "node_infiniband_port_packets_transmitted_total": ("tx_packets", True),
        "node_infiniband_port_errors_received_total": ("rx_errors", True),
        "node_infiniband_port_discards_transmitted_total": ("tx_drops", True),
        "node_infiniband_rate_bytes_per_second": ("speed", True),
    },
    "gpulens": {
        "gpulens_network_receive_bytes_total": ("rx_bytes", False),
        "gpulens_network_transmit_bytes_total": ("tx_bytes", False),
        "gpulens_network_receive_packets_total": ("rx_packets", False),
        "gpulens_network_transmit_packets_total": ("tx_packets", False),
        "gpulens_network_receive_errors_total": ("rx_errors", False),
        "gpulens_network_transmit_errors_total": ("tx_errors", False),
        "gpulens_network_receive_drops_total": ("rx_drops", False),
        "gpulens_network_transmit_drops_total": ("tx_drops", False),
        "gpulens_network_speed_bytes": ("speed", False),
        "gpulens_infiniband_receive_bytes_total": ("rx_bytes", True),
        "gpulens_infiniband_transmit_bytes_total": ("tx_bytes", True),
        "gpulens_infiniband_receive_packets_total": ("rx_packets", True),
        "gpulens_infiniband_transmit_packets_total": ("tx_packets", True),
        "gpulens_infiniband_receive_errors_total": ("rx_errors", True),
        "gpulens_infiniband_transmit_discards_total": ("tx_drops", True),
        "gpulens_infiniband_symbol_errors_total": ("symbol_errors", True),
        "gpulens_infiniband_link_downed_total": ("link_downed", True),
        "gpulens_infiniband_rate_bytes": ("speed", True),
    },
}


def _family(gpu_source: str) -> str:
    return "gpulens" if gpu_source == "gpulens" else "node_exporter"


def net_regex(gpu_source: str) -> str:
    return "|".join(sorted(NET_METRICS[_family(gpu_source)]))


def net_probe(gpu_source: str) -> tuple[str, str]:
    """(series selector, label) listing who has network series at all: one /series call
    instead of an empty range query per node and chunk."""
    names = [m for m, (stem, _) in NET_METRICS[_family(gpu_source)].items() if stem == "rx_bytes"]
    label = "node" if gpu_source == "gpulens" else "instance"
    return "{" + f'__name__=~"{"|".join(names)}"' + "}", label


def net_owner(label: str, value: str) -> str:
    """The host (node_exporter's instance without port) or node a network series belongs to."""
    return value.rsplit(":", 1)[0] if label == "instance" and ":" in value else value


def net_selector(gpu_source: str, node: str, hosts: set[str]) -> str | None:
    """The matcher selecting a node's network series (None: nothing to match on)."""
    if gpu_source == "gpulens":
        return f'node="{promql_str(node)}"'
    if not hosts:
        return None
    alts = "|".join(promql_str(re.escape(h)) for h in sorted(hosts))
    return f'instance=~"({alts})(:[0-9]+)?"'


def _kind(device: str, ib: bool) -> str:
    if ib:
        return "infiniband"
    if device == "lo":
        return "loopback"
    return "ethernet" if device.startswith(("e", "bond", "team")) else "other"


def _ms(t: float) -> int:
    return int(round(t * 1000))


def net_rows(gpu_source: str, node: str, series: list[Series], lo_ms: int, q: Quirks) -> pa.Table:
    """``net`` rows for one node and chunk: one per device (and IB port) and step >= lo_ms."""
    table = NET_METRICS[_family(gpu_source)]
    per: dict[tuple[str, str, bool], dict[str, list[tuple[float, float]]]] = defaultdict(dict)
    for s in series:
        name = s.labels.get("__name__", "")
        if name not in table:
            continue
        stem, ib = table[name]
        key = (s.labels.get("device", ""), s.labels.get("port", "") if ib else "", ib)
        per[key].setdefault(stem, s.points)
    rows: list[dict[str, Any]] = []
    for (device, port, ib), cols in sorted(per.items()):
        rows += _device_rows(node, device, port, ib, cols, lo_ms, q)
    if not rows:
        return _NET_SCHEMA.empty_table()
    arrays = [pa.array([r.get(f.name) for r in rows], pa.int64()).cast(f.type) if f.name == "ts"
              else pa.array([r.get(f.name) for r in rows], f.type) for f in _NET_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=_NET_SCHEMA)


def _device_rows(node: str, device: str, port: str, ib: bool, cols: dict[str, list[tuple[float, float]]],
                 lo_ms: int, q: Quirks) -> list[dict[str, Any]]:
    rx = cols.get("rx_bytes")
    if not rx:
        return []
    values = {stem: {_ms(t): v for t, v in pts} for stem, pts in cols.items()}
    rates = {stem: _rates(cols.get(stem, []), lo_ms, q) for stem in ("rx_bytes", "tx_bytes")}
    for stem in values:
        if stem not in ("rx_bytes", "tx_bytes", "speed"):
            _rates(cols[stem], lo_ms, q)  # counts resets only
    out = []
    for t, _ in rx:
        tm = _ms(t)
        if tm < lo_ms:
            continue
        row: dict[str, Any] = {"ts": tm * 1000, "node": node, "device": device, "link_kind": _kind(device, ib),
                               "port": int(port) if port.isdigit() else None,
                               "rx_bps": rates["rx_bytes"].get(tm), "tx_bps": rates["tx_bytes"].get(tm)}
        for stem, vals in values.items():
            v = vals.get(tm)
            if stem == "speed":
                row["link_speed_mbps"] = None if v is None else int(round(v * 8 / 1e6))
            else:
                col = {"symbol_errors": "symbol_errors_total", "link_downed": "link_downed_total"}.get(
                    stem, f"{stem}_total")
                row[col] = None if v is None else int(v)
        out.append(row)
    return out


def _rates(points: list[tuple[float, float]], lo_ms: int, q: Quirks) -> dict[int, float]:
    out: dict[int, float] = {}
    prev: tuple[int, float] | None = None
    for t, v in points:
        tm = _ms(t)
        if prev is not None and tm > prev[0]:
            if v < prev[1] and tm >= lo_ms:
                q["counter_resets"] += 1
            out[tm] = (v - prev[1] if v >= prev[1] else v) * 1000.0 / (tm - prev[0])
        prev = (tm, v)
    return out

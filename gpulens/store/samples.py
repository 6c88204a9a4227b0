"""Column definitions of the time-series sample kinds.

Samples are stored as hive-partitioned Parquet under
``samples/kind=<kind>/date=<YYYY-MM-DD>/node=<node>/*.parquet``. ``date`` and
``node`` come from the path (they are not columns inside the files); every other
column below is. Readers see one view per kind: ``gpu_samples``,
``net_samples``, ``gpu_process_samples`` and ``xid_events``.

Units: utilization in percent (0-100, as NVML and the Philly trace report it),
memory and traffic in bytes, rates in bytes per second, power in watts, energy
in joules, temperature in degrees Celsius, clocks in MHz. ``ts`` is UTC.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

__all__ = ["SAMPLE_KINDS", "VIEW_NAMES", "arrow_schema", "duckdb_columns"]

_T = pa.timestamp("us")

#: kind -> ordered (column, arrow type). ``node`` is stored in the path.
SAMPLE_KINDS: Final[dict[str, list[tuple[str, pa.DataType]]]] = {
    "gpu": [
        ("ts", _T),
        ("node", pa.string()),
        ("gpu_index", pa.int16()),
        ("uuid", pa.string()),
        ("model", pa.string()),
        ("util_gpu", pa.float32()),
        ("util_mem", pa.float32()),
        ("mem_used_bytes", pa.int64()),
        ("mem_total_bytes", pa.int64()),
        ("pcie_tx_bps", pa.float64()),
        ("pcie_rx_bps", pa.float64()),
        ("pcie_source", pa.string()),  # counter | snapshot
        ("pcie_replay_total", pa.int64()),
        ("power_w", pa.float32()),
        ("energy_j", pa.float64()),
        ("temp_c", pa.float32()),
        ("sm_clock_mhz", pa.float32()),
        ("mem_clock_mhz", pa.float32()),
        ("ecc_corrected_total", pa.int64()),
        ("ecc_uncorrected_total", pa.int64()),
        ("row_remap_failures", pa.int64()),
        ("nvlink_tx_bps", pa.float64()),
        ("nvlink_rx_bps", pa.float64()),
        ("sm_active_ratio", pa.float32()),
        ("tensor_active_ratio", pa.float32()),
        ("xid_count", pa.int32()),
    ],
    "net": [
        ("ts", _T),
        ("node", pa.string()),
        ("device", pa.string()),
        ("link_kind", pa.string()),  # ethernet | infiniband | loopback | other
        ("rx_bytes_total", pa.int64()),
        ("tx_bytes_total", pa.int64()),
        ("rx_packets_total", pa.int64()),
        ("tx_packets_total", pa.int64()),
        ("rx_errors_total", pa.int64()),
        ("tx_errors_total", pa.int64()),
        ("rx_drops_total", pa.int64()),
        ("tx_drops_total", pa.int64()),
        ("rx_bps", pa.float64()),
        ("tx_bps", pa.float64()),
        ("link_speed_mbps", pa.int64()),
        ("symbol_errors_total", pa.int64()),
        ("link_downed_total", pa.int64()),
        ("port", pa.int16()),  # InfiniBand port number (device = HCA name); NULL otherwise
    ],
    "proc": [
        ("ts", _T),
        ("node", pa.string()),
        ("gpu_index", pa.int16()),
        ("uuid", pa.string()),
        ("pid", pa.int64()),
        ("job_id", pa.string()),
        ("attribution", pa.string()),  # slurm-cgroup | slurm-env | k8s | env | none
        ("used_memory_bytes", pa.int64()),
        ("sm_util", pa.float32()),
    ],
    "xid": [
        ("ts", _T),
        ("node", pa.string()),
        ("gpu_index", pa.int16()),
        ("uuid", pa.string()),
        ("xid", pa.int32()),
    ],
}

VIEW_NAMES: Final[dict[str, str]] = {
    "gpu": "gpu_samples",
    "net": "net_samples",
    "proc": "gpu_process_samples",
    "xid": "xid_events",
}

_DUCK = {
    pa.timestamp("us"): "TIMESTAMP",
    pa.string(): "VARCHAR",
    pa.int16(): "SMALLINT",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
}


def arrow_schema(kind: str, *, with_node: bool = True) -> pa.Schema:
    cols = SAMPLE_KINDS[kind]
    return pa.schema([(n, t) for n, t in cols if with_node or n != "node"])


def duckdb_columns(kind: str) -> list[tuple[str, str]]:
    return [(n, _DUCK[t]) for n, t in SAMPLE_KINDS[kind]]

"""A few days of dcgm-exporter series, written as OpenMetrics for `promtool tsdb create-blocks-from`.

Metric and label names are dcgm-exporter's (etc/default-counters.csv and the GPU
template in internal/pkg/rendermetrics/render_metrics.go; provenance in
docs/import-prometheus.md). Planted, each known to the test by construction:

* a Kubernetes pod (``ml/train-resnet-0``) on gpu-a GPUs 0-3 (pod mapping labels
  ``namespace``/``pod``/``container``; empty outside the pod, as the exporter shows);
* a Slurm job (``hpc_job="4242"``) on gpu-b GPUs 2-3;
* counter resets of ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` and
  ``DCGM_FI_DEV_PCIE_TX_THROUGHPUT`` on gpu-a GPU 1;
* a 30-minute gap on gpu-b GPU 4; gpu-b GPU 5 stops reporting (a stale series);
* gpu-a GPU 2 scraped by two replicas (``replica="prom-0"`` and ``"prom-1"``);
* gpu-b GPU 7 replaced (new UUID) at the start of day 1; an XID 79 on gpu-b GPU 6.

:func:`expected` recomputes what an import must find from the same definitions,
without going through Prometheus.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

START = datetime(2026, 1, 5, tzinfo=UTC)
DAYS = 2
STEP = 120  # scrape interval and import step, seconds
H = 3600 // STEP  # steps per hour
N_STEPS = DAYS * 86400 // STEP
MODEL = "NVIDIA H100 80GB HBM3"
NODES = {"gpu-a": "10.0.0.1:9400", "gpu-b": "10.0.0.2:9400"}
FB_TOTAL_MIB = 81559

POD = ("ml", "train-resnet-0", "trainer")
POD_GPUS = ("gpu-a", (0, 1, 2, 3))
POD_SPAN = (6 * H, 18 * H)  # step indices [start, end)
HPC = "4242"
HPC_GPUS = ("gpu-b", (2, 3))
HPC_SPAN = (20 * H, 32 * H)
RESET = ("gpu-a", 1, 27 * H)  # counters restart from zero at this step
GAP = ("gpu-b", 4, (13 * H, 13 * H + 15))  # 30 minutes
ENDS = ("gpu-b", 5, 36 * H)  # last step + 1
REPLICA = ("gpu-a", 2)
NEW_UUID = ("gpu-b", 7, 24 * H)
XID = ("gpu-b", 6, 34 * H, 79)
NET_RESET = ("gpu-b", "mlx5_0", 30 * H)  # node_exporter's InfiniBand counter restarts here
NET = (("node_network_receive_bytes_total", "eth0", None, 1_000_000),
       ("node_network_transmit_bytes_total", "eth0", None, 400_000),
       ("node_infiniband_port_data_received_bytes_total", "mlx5_0", "1", 9_000_000),
       ("node_infiniband_port_data_transmitted_bytes_total", "mlx5_0", "1", 8_000_000))


def gpu_uuid(node: str, gpu: int, generation: int = 0) -> str:
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{node}/{gpu}/{generation}"))


def util(node: str, gpu: int, k: int) -> int:
    return (k * 7 + gpu * 13 + (5 if node == "gpu-b" else 0)) % 101


def fb_used(node: str, gpu: int, k: int) -> int:
    return 1000 + (k * 37 + gpu * 101) % 70000


def power(node: str, gpu: int, k: int) -> float:
    return 100.0 + util(node, gpu, k) * 5.5


def energy_mj(node: str, gpu: int, k: int) -> int:
    base = 0 if (node, gpu) == RESET[:2] and k >= RESET[2] else 10**9 + gpu * 10**6
    since = k - RESET[2] if (node, gpu) == RESET[:2] and k >= RESET[2] else k
    return base + since * STEP * 300_000  # 300 W for one step, in mJ


def pcie_tx_kb(node: str, gpu: int, k: int) -> int:
    since = k - RESET[2] if (node, gpu) == RESET[:2] and k >= RESET[2] else k + 5000
    return since * (1000 + gpu * 10)


@dataclass
class SeriesDef:
    node: str
    gpu: int
    steps: list[int]
    uuid: str
    extra: dict[str, str] = field(default_factory=dict)


def _present(node: str, gpu: int) -> list[int]:
    ks = list(range(N_STEPS))
    if (node, gpu) == GAP[:2]:
        ks = [k for k in ks if not GAP[2][0] <= k < GAP[2][1]]
    if (node, gpu) == ENDS[:2]:
        ks = [k for k in ks if k < ENDS[2]]
    return ks


def series_defs() -> list[SeriesDef]:
    """Every GPU series identity (the primary metric's; other metrics share them)."""
    out = []
    for node in NODES:
        for gpu in range(8):
            ks = _present(node, gpu)
            spans: list[tuple[range, dict[str, str]]] = []
            if node == POD_GPUS[0] and gpu in POD_GPUS[1]:
                job = {"namespace": POD[0], "pod": POD[1], "container": POD[2]}
                spans = [(range(*POD_SPAN), job)]
            if node == HPC_GPUS[0] and gpu in HPC_GPUS[1]:
                spans = [(range(*HPC_SPAN), {"hpc_job": HPC})]
            inside = {k for r, _ in spans for k in r}
            for r, labels in spans:
                out.append(SeriesDef(node, gpu, [k for k in ks if k in r], gpu_uuid(node, gpu), labels))
            rest = [k for k in ks if k not in inside]
            if (node, gpu) == NEW_UUID[:2]:
                cut = NEW_UUID[2]
                out.append(SeriesDef(node, gpu, [k for k in rest if k < cut], gpu_uuid(node, gpu)))
                out.append(SeriesDef(node, gpu, [k for k in rest if k >= cut], gpu_uuid(node, gpu, 1)))
            elif (node, gpu) == REPLICA:
                for rep in ("prom-0", "prom-1"):
                    out.append(SeriesDef(node, gpu, rest, gpu_uuid(node, gpu), {"replica": rep}))
            else:
                out.append(SeriesDef(node, gpu, rest, gpu_uuid(node, gpu)))
    return out


def _labels(s: SeriesDef) -> str:
    base = {"gpu": str(s.gpu), "UUID": s.uuid, "pci_bus_id": f"00000000:{0x18 + s.gpu:02X}:00.0",
            "device": f"nvidia{s.gpu}", "modelName": MODEL, "Hostname": s.node,
            "instance": NODES[s.node], "job": "dcgm-exporter"}
    if "hpc_job" not in s.extra:
        base.update({"container": "", "namespace": "", "pod": ""})
    base.update(s.extra)
    return ",".join(f'{k}="{v}"' for k, v in base.items() if v != "")


def _values(metric: str, node: str, gpu: int, k: int) -> str:
    if metric == "DCGM_FI_DEV_GPU_UTIL":
        return str(util(node, gpu, k))
    if metric == "DCGM_FI_DEV_FB_USED":
        return str(fb_used(node, gpu, k))
    if metric == "DCGM_FI_DEV_FB_FREE":
        return str(FB_TOTAL_MIB - fb_used(node, gpu, k))
    if metric == "DCGM_FI_DEV_POWER_USAGE":
        return f"{power(node, gpu, k):.3f}"
    if metric == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
        return str(energy_mj(node, gpu, k))
    if metric == "DCGM_FI_DEV_PCIE_TX_THROUGHPUT":
        return str(pcie_tx_kb(node, gpu, k))
    if metric == "DCGM_FI_DEV_XID_ERRORS":
        return str(XID[3] if (node, gpu) == XID[:2] and k >= XID[2] else 0)
    raise KeyError(metric)


METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
           "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
           "DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "DCGM_FI_DEV_XID_ERRORS")


NVSMI_NODE = ("ws-1", "ws-1:9835")  # a workstation with utkuozdemir/nvidia_gpu_exporter
NVSMI_STEPS = 6 * H  # six hours of it


def nvsmi_uuid(gpu: int) -> str:
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"ws-1/{gpu}"))  # the exporter drops "GPU-"


def nvsmi_lines() -> Iterator[str]:
    """nvidia_gpu_exporter series (names and labels as in its METRICS.md) for two GPUs."""
    t0 = int(START.timestamp())
    inst = f'instance="{NVSMI_NODE[1]}",job="nvidia_gpu_exporter"'
    yield "# TYPE nvidia_smi_gpu_info gauge\n"
    for g in (0, 1):
        info = (f'driver_version="535.104.05",index="{g}",name="NVIDIA GeForce RTX 4090",'
                f'pci_bus_id="00000000:0{g + 1}:00.0",uuid="{nvsmi_uuid(g)}",{inst}')
        yield from (f"nvidia_smi_gpu_info{{{info}}} 1 {t0 + k * STEP}\n" for k in range(NVSMI_STEPS))
    for metric, fn in (("nvidia_smi_utilization_gpu_ratio", lambda g, k: util("ws-1", g, k) / 100),
                       ("nvidia_smi_memory_used_bytes", lambda g, k: fb_used("ws-1", g, k) * 2**20)):
        yield f"# TYPE {metric} gauge\n"
        for g in (0, 1):
            lab = f'uuid="{nvsmi_uuid(g)}",{inst}'
            yield from (f"{metric}{{{lab}}} {fn(g, k)} {t0 + k * STEP}\n" for k in range(NVSMI_STEPS))


def openmetrics_lines() -> Iterator[str]:
    yield from node_exporter_lines()
    yield from nvsmi_lines()
    t0 = int(START.timestamp())
    defs = series_defs()
    for metric in METRICS:
        yield f"# TYPE {metric} gauge\n"
        for s in defs:
            lab = _labels(s)
            for k in s.steps:
                yield f"{metric}{{{lab}}} {_values(metric, s.node, s.gpu, k)} {t0 + k * STEP}\n"
    yield "# EOF\n"


def net_total(metric: str, node: str, device: str, per_step: int, k: int) -> int:
    """node_exporter's byte counter (the 'data' counters of the IB port reset once)."""
    if (node, device) == NET_RESET[:2] and "received" in metric and k >= NET_RESET[2]:
        return (k - NET_RESET[2]) * per_step
    return (k + 1000) * per_step + (7 if node == "gpu-b" else 0)


def node_exporter_lines() -> Iterator[str]:
    t0 = int(START.timestamp())
    for metric, device, port, per_step in NET:
        yield f"# TYPE {metric} gauge\n"
        for node, inst in NODES.items():
            lab = f'device="{device}",instance="{inst.split(":")[0]}:9100",job="node"'
            lab += f',port="{port}"' if port else ""
            for k in range(N_STEPS):
                yield f"{metric}{{{lab}}} {net_total(metric, node, device, per_step, k)} {t0 + k * STEP}\n"


def write_openmetrics(path: Path) -> None:
    with open(path, "w") as fh:
        fh.writelines(openmetrics_lines())


def ts(k: int) -> datetime:
    return (START + timedelta(seconds=k * STEP)).replace(tzinfo=None)


def expected_rows() -> dict[tuple[str, int], list[int]]:
    """(node, gpu) -> the steps at which the import must hold exactly one row."""
    return {(n, g): _present(n, g) for n in NODES for g in range(8)}


def expected_stale_series() -> int:
    """Series (each replica copy is one) that stop at least once before the last step:
    Prometheus repeats their last sample for five minutes, which the import must drop."""
    n = 0
    for s in series_defs():
        have = set(s.steps)
        n += any(k + 1 not in have for k in s.steps if k < N_STEPS - 1)
    return n

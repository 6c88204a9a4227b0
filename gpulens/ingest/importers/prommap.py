"""How each exporter's Prometheus series map onto gpulens sample columns.

The tables here are the ones printed in docs/import-prometheus.md (keep both in
step). Units end up as the agent stores them (gpulens/store/samples.py):
utilization in percent, bytes, watts, joules, MHz, rates in bytes per second.

Field kinds:

* ``gauge``: value x scale at each step.
* ``raw_counter``: a cumulative counter stored as it is (x scale), like the agent
  stores NVML's energy and replay counters; resets are counted.
* ``rate``: a cumulative counter turned into a per-second rate between steps
  (x scale); after a reset the new value counts from zero, as Prometheus's
  ``rate()`` does; resets are counted.
* ``xid_last``: dcgm-exporter's ``DCGM_FI_DEV_XID_ERRORS`` (the value of the last
  XID): a change to a non-zero value is one XID event.
* ``xid_total``: gpulens's ``gpulens_gpu_xid_errors_total{xid}``: each increase is
  that many events of that XID.

A field with ``fallback=True`` fills its column only where the primary field of
that column has no value (e.g. DCGM profiling activity when ``DCGM_FI_DEV_GPU_UTIL``
is not collected).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

__all__ = ["JOB_LABELS", "REPLICA_LABELS", "SOURCES", "Field", "Source"]

MIB: Final = float(1 << 20)

#: Labels that tell two Prometheus replicas (or HA pairs behind Thanos) apart.
REPLICA_LABELS: Final = frozenset({"replica", "prometheus_replica", "__replica__"})


@dataclass(frozen=True)
class Field:
    metric: str
    column: str
    scale: float = 1.0
    kind: str = "gauge"  # gauge | raw_counter | rate | xid_last | xid_total
    fallback: bool = False
    label: tuple[str, str] | None = None  # only series with this label value


@dataclass(frozen=True)
class Source:
    name: str
    primary: str  # the metric whose presence defines "this GPU was sampled at this step"
    node_labels: tuple[str, ...]  # first present wins; 'instance' loses its ':port'
    gpu_label: str | None  # GPU index label (None: from info_metric)
    uuid_label: str
    model_label: str | None
    fields: tuple[Field, ...]
    info_metric: str | None = None  # nvidia_smi_gpu_info{uuid, index, name}
    job_labels: tuple[str, ...] = ()  # labels that split one GPU's series by job
    fb_free: str | None = None  # DCGM_FI_DEV_FB_FREE (+ _RESERVED): memory total = used + free
    fb_reserved: str | None = None
    job_info: str | None = None  # gpulens_gpu_job_info{job_id}
    extra_metrics: tuple[str, ...] = field(default=())

    def metrics(self) -> list[str]:
        names = {f.metric for f in self.fields} | {self.primary}
        names |= {m for m in (self.fb_free, self.fb_reserved, self.job_info) if m}
        return sorted(names | set(self.extra_metrics))


_DCGM = Source(
    name="dcgm",
    primary="DCGM_FI_DEV_GPU_UTIL",
    node_labels=("Hostname", "instance"),
    gpu_label="gpu",
    uuid_label="UUID",
    model_label="modelName",
    job_labels=("namespace", "pod", "container", "hpc_job", "pod_namespace", "pod_name",
                "container_name"),
    fb_free="DCGM_FI_DEV_FB_FREE",
    fb_reserved="DCGM_FI_DEV_FB_RESERVED",
    fields=(
        Field("DCGM_FI_DEV_GPU_UTIL", "util_gpu"),
        Field("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "util_gpu", 100.0, fallback=True),
        Field("DCGM_FI_DEV_MEM_COPY_UTIL", "util_mem"),
        Field("DCGM_FI_PROF_DRAM_ACTIVE", "util_mem", 100.0, fallback=True),
        Field("DCGM_FI_DEV_FB_USED", "mem_used_bytes", MIB),
        Field("DCGM_FI_DEV_POWER_USAGE", "power_w"),
        Field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "energy_j", 1e-3, "raw_counter"),
        Field("DCGM_FI_DEV_GPU_TEMP", "temp_c"),
        Field("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz"),
        Field("DCGM_FI_DEV_MEM_CLOCK", "mem_clock_mhz"),
        Field("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "pcie_replay_total", 1.0, "raw_counter"),
        Field("DCGM_FI_PROF_PCIE_TX_BYTES", "pcie_tx_bps"),
        Field("DCGM_FI_PROF_PCIE_RX_BYTES", "pcie_rx_bps"),
        Field("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "pcie_tx_bps", 1024.0, "rate", fallback=True),
        Field("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "pcie_rx_bps", 1024.0, "rate", fallback=True),
        Field("DCGM_FI_PROF_NVLINK_TX_BYTES", "nvlink_tx_bps"),
        Field("DCGM_FI_PROF_NVLINK_RX_BYTES", "nvlink_rx_bps"),
        Field("DCGM_FI_PROF_SM_ACTIVE", "sm_active_ratio"),
        Field("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "tensor_active_ratio"),
        Field("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "ecc_corrected_total", 1.0, "raw_counter"),
        Field("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "ecc_uncorrected_total", 1.0, "raw_counter"),
        Field("DCGM_FI_DEV_ROW_REMAP_FAILURE", "row_remap_failures"),
        Field("DCGM_FI_DEV_XID_ERRORS", "xid", 1.0, "xid_last"),
    ),
)

_NVSMI = Source(
    name="nvidia_gpu_exporter",
    primary="nvidia_smi_utilization_gpu_ratio",
    node_labels=("instance",),
    gpu_label=None,
    uuid_label="uuid",
    model_label=None,
    info_metric="nvidia_smi_gpu_info",
    fields=(
        Field("nvidia_smi_utilization_gpu_ratio", "util_gpu", 100.0),
        Field("nvidia_smi_utilization_memory_ratio", "util_mem", 100.0),
        Field("nvidia_smi_memory_used_bytes", "mem_used_bytes"),
        Field("nvidia_smi_memory_total_bytes", "mem_total_bytes"),
        Field("nvidia_smi_power_draw_watts", "power_w"),
        Field("nvidia_smi_temperature_gpu", "temp_c"),
        Field("nvidia_smi_clocks_current_sm_clock_hz", "sm_clock_mhz", 1e-6),
        Field("nvidia_smi_clocks_current_memory_clock_hz", "mem_clock_mhz", 1e-6),
    ),
)

_GPULENS = Source(
    name="gpulens",
    primary="gpulens_gpu_utilization_ratio",
    node_labels=("node", "instance"),
    gpu_label="gpu",
    uuid_label="uuid",
    model_label="model",
    job_info="gpulens_gpu_job_info",
    fields=(
        Field("gpulens_gpu_utilization_ratio", "util_gpu", 100.0),
        Field("gpulens_gpu_memory_utilization_ratio", "util_mem", 100.0),
        Field("gpulens_gpu_memory_used_bytes", "mem_used_bytes"),
        Field("gpulens_gpu_memory_total_bytes", "mem_total_bytes"),
        Field("gpulens_gpu_pcie_transmit_bytes_total", "pcie_tx_bps", 1.0, "rate"),
        Field("gpulens_gpu_pcie_receive_bytes_total", "pcie_rx_bps", 1.0, "rate"),
        Field("gpulens_gpu_pcie_replay_errors_total", "pcie_replay_total", 1.0, "raw_counter"),
        Field("gpulens_gpu_power_watts", "power_w"),
        Field("gpulens_gpu_energy_joules_total", "energy_j", 1.0, "raw_counter"),
        Field("gpulens_gpu_temperature_celsius", "temp_c"),
        Field("gpulens_gpu_sm_clock_hertz", "sm_clock_mhz", 1e-6),
        Field("gpulens_gpu_memory_clock_hertz", "mem_clock_mhz", 1e-6),
        Field("gpulens_gpu_ecc_errors_total", "ecc_corrected_total", 1.0, "raw_counter",
              label=("type", "corrected")),
        Field("gpulens_gpu_ecc_errors_total", "ecc_uncorrected_total", 1.0, "raw_counter",
              label=("type", "uncorrected")),
        Field("gpulens_gpu_row_remap_failure", "row_remap_failures"),
        Field("gpulens_gpu_nvlink_transmit_bytes_total", "nvlink_tx_bps", 1.0, "rate"),
        Field("gpulens_gpu_nvlink_receive_bytes_total", "nvlink_rx_bps", 1.0, "rate"),
        Field("gpulens_gpu_sm_active_ratio", "sm_active_ratio"),
        Field("gpulens_gpu_tensor_active_ratio", "tensor_active_ratio"),
        Field("gpulens_gpu_xid_errors_total", "xid", 1.0, "xid_total"),
    ),
)

SOURCES: Final[dict[str, Source]] = {s.name: s for s in (_DCGM, _NVSMI, _GPULENS)}

#: Labels that carry a job on each source's GPU series (documentation and tests).
JOB_LABELS: Final[dict[str, tuple[str, ...]]] = {
    "dcgm": ("namespace", "pod", "hpc_job"),
    "gpulens": ("job_id",),
    "nvidia_gpu_exporter": (),
}

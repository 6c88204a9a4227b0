"""Every knob of the simulated cluster, with where its value comes from.

``PHILLY`` marks values calibrated to the published Philly study (Jeon et al.,
"Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads",
USENIX ATC 2019); ``ASSUMED`` marks plausible values chosen by us where the
paper gives no number. docs/simulate.md lists the same table for humans. Tests
and analyses read the planted values from :class:`SimParams` (or from the
``sim_runs.params`` JSON of a data directory) instead of hard-coding them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["GpuModel", "SimParams", "planted_util"]


@dataclasses.dataclass(frozen=True)
class GpuModel:
    """One GPU type (ASSUMED: Pascal-generation cards as in 2017-era Philly)."""

    name: str
    memory_bytes: int
    idle_power_w: float
    max_power_w: float
    base_sm_clock_mhz: float
    boost_sm_clock_mhz: float
    mem_clock_mhz: float
    price_per_hour: float


@dataclasses.dataclass(frozen=True)
class SimParams:
    """Calibration of the simulator. Frozen: build a variant with ``dataclasses.replace``."""

    # ----------------------------------------------------------------- cluster
    #: Fraction of GPUs on 2-GPU servers; the rest sit on 8-GPU servers.
    #: ASSUMED (Philly mixes 8-GPU and 2-GPU servers; the paper gives no split).
    frac_gpus_on_2gpu_servers: float = 0.10
    gpu_model_8: GpuModel = GpuModel("Tesla P40", 24 * 2**30, 50.0, 250.0, 1303.0, 1531.0, 3615.0, 1.10)
    gpu_model_2: GpuModel = GpuModel("Tesla P100-PCIE-12GB", 12 * 2**30, 30.0, 250.0, 1189.0, 1329.0, 715.0, 0.90)
    #: Virtual clusters (Philly: 14 VCs in the released trace) - PHILLY.
    vcs: int = 14
    #: Users per 8 GPUs (ASSUMED), clipped to [min_users, max_users].
    users_per_8_gpus: float = 1.0
    min_users: int = 12
    max_users: int = 400

    # ---------------------------------------------------------------- workload
    #: Requested GPUs and their probabilities. Most jobs use one GPU, sizes are
    #: powers of two up to 64 - PHILLY (shape of the job-size distribution);
    #: exact weights ASSUMED. Sizes above half the cluster are capped to it.
    job_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    job_size_probs: tuple[float, ...] = (0.70, 0.09, 0.09, 0.07, 0.03, 0.015, 0.005)
    #: Planned run time (minutes) of a job: lognormal with this median for a
    #: 1-GPU job, multiplied by gpus ** duration_size_exponent (bigger jobs run
    #: longer, PHILLY Fig. 3 shape); sigma gives the heavy tail (minutes to
    #: weeks, PHILLY). Values ASSUMED.
    duration_median_min: float = 60.0
    duration_sigma: float = 1.9
    duration_size_exponent: float = 0.3
    duration_min_min: int = 2
    duration_max_min: int = 14 * 1440
    #: Offered load as a fraction of GPU capacity; arrivals are Poisson with a
    #: diurnal cycle of this relative amplitude (peak mid-afternoon). ASSUMED,
    #: chosen so the cluster runs hot and jobs queue at the daily peak.
    offered_load: float = 0.85
    diurnal_amplitude: float = 0.5
    #: Jobs arrive from this many days before the period so it opens on a busy
    #: cluster; attempts running at the start are clipped to start there and
    #: jobs submitted earlier keep their earlier ``submitted`` time. ASSUMED.
    warmup_days: float = 2.0

    # ---------------------------------------------------------------- outcomes
    #: Final job statuses - PHILLY Table 2 (69% passed, 13.5% killed, 17%
    #: unsuccessful).
    p_passed: float = 0.695
    p_killed: float = 0.135
    p_failed: float = 0.17
    #: Failure categories of failed jobs (they fail the same way on every
    #: attempt). ASSUMED weights, loosely after the ordering of Philly's
    #: failure table (user/programming errors dominate, then data, then the
    #: framework).
    fail_categories: tuple[str, ...] = (
        "semantic_error", "gpu_oom", "cpu_oom", "import_error", "syntax_error",
        "incorrect_input", "checkpoint_error", "permission_error", "model_diverged",
        "cuda_error", "crash",
    )
    fail_category_probs: tuple[float, ...] = (
        0.16, 0.12, 0.11, 0.10, 0.08, 0.15, 0.06, 0.04, 0.04, 0.07, 0.07,
    )
    #: Attempts: a failed attempt is retried until this many attempts in all
    #: (PHILLY: failed jobs are retried, so one failure costs several attempts).
    max_attempts: int = 4
    #: After each failed attempt of a failing job the user gives up with this
    #: probability (ASSUMED), so failing jobs have 1..max_attempts attempts.
    p_give_up_after_failure: float = 0.3
    #: Minutes from attempt start to a repeatable failure (lognormal median;
    #: PHILLY: most user errors show up within minutes). ASSUMED values.
    user_fail_median_min: float = 4.0
    data_fail_median_min: float = 12.0
    framework_fail_median_min: float = 45.0
    fail_sigma: float = 1.0
    #: Killed jobs are killed after this fraction (uniform) of their planned run.
    kill_fraction: tuple[float, float] = (0.05, 0.95)
    #: Transient infrastructure failures per attempt (retried; ASSUMED):
    #: comm_error only for multi-server attempts, storage_error for any.
    p_transient_comm_multi_server: float = 0.04
    p_transient_storage: float = 0.01
    #: Share of planted crash / cuda_error jobs whose failing frame is the user's own
    #: code (origin user); the rest fail inside the framework (origin framework).
    #: The origin convention of docs/diagnosis.md. ASSUMED.
    p_crash_user_code: float = 0.5

    # ----------------------------------------------------------------- planted
    #: Bad nodes (8-GPU servers) whose GPUs throw XIDs; an attempt placed on one
    #: fails with gpu_hardware after an exponential time with this mean, and is
    #: retried away from that node. Count is min(bad_nodes, servers // 4).
    bad_nodes: int = 2
    bad_node_mttf_min: float = 180.0
    #: Background XIDs on bad nodes (per node, Poisson; xid 63/92/94).
    bad_node_xid_per_hour: float = 0.5
    #: Corrupted datasets: every job declaring one fails with incorrect_input on
    #: every attempt. At least corrupted_min_jobs jobs from 2+ users each.
    corrupted_inputs: int = 3
    corrupted_min_jobs: int = 3
    #: Share of failing incorrect_input jobs whose bad input is a corrupted
    #: shared dataset (the rest have a private bad file).
    corrupted_share_of_incorrect_input: float = 0.5
    datasets: int = 60

    #: Mean GPU utilization (percent) of a job on the fewest servers it fits on,
    #: by job size. The 16-GPU value is PHILLY (43.66% on 2 servers); the
    #: others are ASSUMED (mildly falling with size).
    util_base: tuple[tuple[int, float], ...] = (
        (1, 52.0), (2, 50.0), (4, 48.0), (8, 46.0), (16, 43.66), (32, 41.0), (64, 39.0),
    )
    #: Points of utilization lost per doubling of servers beyond the minimum:
    #: PHILLY, (43.66 - 28.56) / log2(8 / 2) = 7.55 for 16-GPU jobs; applied
    #: to every size (ASSUMED). util = base(g) - slope * log2(servers / min).
    util_spread_slope: float = (43.66 - 28.56) / 2.0
    util_floor: float = 3.0
    #: Concentration of the per-job mean around the model (Beta) and of the
    #: per-minute samples around the job mean (Beta). ASSUMED.
    util_job_concentration: float = 12.0
    util_minute_concentration: float = 10.0
    #: Locality: an attempt of g >= 2 GPUs asks for a relaxed (spread)
    #: placement with this probability, and any multi-GPU job that waited
    #: longer than relax_after_min accepts a spread placement (PHILLY: the
    #: scheduler relaxes locality for jobs that wait too long). ASSUMED values.
    p_relaxed_locality: float = 0.3
    relax_after_min: int = 30
    #: The queue head stops backfill once it waited this long (no starvation).
    reserve_after_min: int = 180

    #: Early stopping: fraction of jobs whose curve is within 0.1% of its best
    #: value by 40% of its epochs - PHILLY (about 75% of jobs).
    early_converge_share: float = 0.75
    early_converge_fraction: float = 0.40
    #: Curves stay >= 2.5x this away from their best value before the
    #: convergence epoch and within 0.3-0.4x of it afterwards, so "within 0.1%"
    #: holds whether read as absolute (accuracy in [0, 1]) or relative.
    converge_tolerance: float = 0.001
    #: Epochs of a job (lognormal median/sigma, clipped). ASSUMED.
    epochs_median: float = 40.0
    epochs_sigma: float = 0.8
    epochs_min: int = 5
    epochs_max: int = 400

    # ----------------------------------------------------------------- samples
    #: GPU samples are always one per minute; network samples every this many seconds.
    net_interval_s: int = 300
    #: GPUs per generated chunk (memory bound of the sample writer).
    chunk_gpus: int = 512

    def to_jsonable(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def util_base_for(self, gpus: int) -> float:
        table = dict(self.util_base)
        if gpus in table:
            return table[gpus]
        keys = sorted(table)
        lo = max((k for k in keys if k <= gpus), default=keys[0])
        hi = min((k for k in keys if k >= gpus), default=keys[-1])
        if lo == hi:
            return table[lo]
        w = (math.log2(gpus) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
        return table[lo] + w * (table[hi] - table[lo])


def planted_util(params: SimParams, gpus: int, servers: int, min_servers: int) -> float:
    """Planted mean utilization (percent) of a job of ``gpus`` on ``servers`` servers."""
    spread = math.log2(max(servers, 1) / max(min_servers, 1))
    return max(params.util_floor, params.util_base_for(gpus) - params.util_spread_slope * max(spread, 0.0))

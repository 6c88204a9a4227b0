"""Live telemetry of multi-node training jobs, with planted machine faults (issue 25).

Each :class:`LiveJob` is one synchronous data-parallel (or pipeline-parallel) job on
``nodes`` machines of 8 GPUs, sampled every ``interval_s`` seconds as the node agents
would: per GPU utilization, memory utilization, SM clock, power, PCIe and NVLink
throughput; per machine Ethernet and InfiniBand throughput, link rates, link errors, XIDs
and ECC events. :func:`job_ticks` yields one ``(ts, raw)`` per tick, ``raw`` in the form
:func:`gpulens.diagnosis.straggler.node_features` takes.

Healthy jobs carry the normal asymmetries of training, which a detector must not flag:

* start-up ramps (each machine starts within a minute of the others) and staggered
  shutdown (machines finish up to 40 s apart);
* job-wide pauses (evaluation, synchronous checkpoints: every 20-45 min, 30-120 s) where
  every machine goes idle together;
* rank 0's extra work: a few percent less GPU utilization and more network traffic
  (logging), and checkpoint writes (every 15-40 min, 20-100 s) during which rank 0's GPUs
  are nearly idle and its NIC busy while the other machines wait in the collective (GPUs
  busy spinning, lower power, no traffic);
* pipeline-parallel stages (half of the jobs): stable per-machine offsets in utilization,
  power, memory utilization and traffic;
* data-loader jitter: single-tick dips on single GPUs (3 %) and whole machines (1 %).

A faulty job has one :class:`LiveFault` on one machine from ``onset_s`` (the recorded
truth) to ``end_s`` (None: until the job ends). Kinds (:data:`FAULT_KINDS`):

* ``clock_throttle``: SM clocks of half or all of the machine's GPUs at 50-80 % (thermal
  or power-brake slowdown); the job slows to that speed;
* ``pcie_downgrade``: the machine's PCIe links at half width: its PCIe throughput at
  40-55 %;
* ``nic_degraded``: an InfiniBand port trained at half rate, or a port with a stream of
  symbol/receive errors (5-60 a minute); the whole job's traffic slows with it;
* ``ib_flap``: the port goes down for 5-15 s every 30-120 s (link-downed counter and an
  error burst each time; the job stalls meanwhile);
* ``gpu_hang``: one GPU at 0 % and idle power, the others spinning in the collective;
* ``xid_storm``: XIDs (5-60 a minute) or a corrected-ECC storm (100-1,000 a minute);
* ``slow_cpu``: the host starves its GPUs (a slow or overloaded CPU, a misbehaving data
  loader): GPU utilization and power at 50-75 %, jittery.

Written by the same people as the detector: agreement measures consistency, not truth on a
real cluster (docs/straggler.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["FAULT_KINDS", "LiveFault", "LiveJob", "job_ticks", "make_cases", "node_names"]

FAULT_KINDS = ("clock_throttle", "pcie_downgrade", "nic_degraded", "ib_flap", "gpu_hang", "xid_storm", "slow_cpu")

GPUS = 8
_SIZES = np.array([2, 3, 4, 4, 6, 8, 8, 16, 32])


@dataclasses.dataclass(frozen=True)
class LiveFault:
    kind: str
    node: int
    onset_s: float
    end_s: float | None = None
    variant: str = ""


@dataclasses.dataclass(frozen=True)
class LiveJob:
    job_id: str
    nodes: int
    duration_s: float
    seed: int
    fault: LiveFault | None = None
    pipeline: bool = False
    interval_s: float = 5.0
    start_ts: float = 1.8e9

    @property
    def node_names(self) -> list[str]:
        return node_names(self.job_id, self.nodes)


def node_names(job_id: str, n: int) -> list[str]:
    return [f"{job_id}-n{i:02d}" for i in range(n)]


def make_cases(seed: int, faulty: int, healthy_hours: float, *, interval_s: float = 5.0) -> list[LiveJob]:
    """``faulty`` jobs with one fault each (kinds in turn) and healthy jobs worth ``healthy_hours``."""
    rng = np.random.default_rng(seed)
    jobs: list[LiveJob] = []
    for i in range(faulty):
        n = int(rng.choice(_SIZES))
        dur = float(rng.uniform(40, 60) * 60)
        kind = FAULT_KINDS[(i + seed) % len(FAULT_KINDS)]
        onset = float(rng.uniform(8 * 60, 0.6 * dur))
        end = float(onset + rng.uniform(10, 20) * 60) if rng.random() < 0.25 else None
        variant = str(rng.choice(["rate", "errors"] if kind == "nic_degraded" else
                                 ["xid", "ecc"] if kind == "xid_storm" else
                                 ["half", "all"] if kind == "clock_throttle" else [""]))
        fault = LiveFault(kind, int(rng.integers(n)), onset, end if end is None or end < dur - 60 else None, variant)
        jobs.append(LiveJob(f"f{seed}-{i:04d}", n, dur, int(rng.integers(2**31)), fault,
                            bool(rng.random() < 0.5), interval_s))
    hours = 0.0
    i = 0
    while hours < healthy_hours:
        n = int(rng.choice(_SIZES))
        dur = float(rng.uniform(1, 4) * 3600)
        jobs.append(LiveJob(f"h{seed}-{i:04d}", n, dur, int(rng.integers(2**31)), None,
                            bool(rng.random() < 0.5), interval_s))
        hours += dur / 3600
        i += 1
    return jobs


def _windows(rng: np.random.Generator, t: np.ndarray, every: tuple[float, float],
             length: tuple[float, float]) -> np.ndarray:
    """A boolean mask over ``t``: recurring windows (first one after one period)."""
    mask = np.zeros(t.shape, dtype=bool)
    at = float(rng.uniform(*every))
    end = float(t[-1]) if t.size else 0.0
    while at < end:
        d = float(rng.uniform(*length))
        mask |= (t >= at) & (t < at + d)
        at += d + float(rng.uniform(*every))
    return mask


def job_ticks(job: LiveJob) -> Iterator[tuple[float, dict[str, np.ndarray]]]:
    """Yield ``(ts, raw)`` for every tick of the job (see the module docstring)."""
    arrays = simulate_job(job)
    for k in range(len(arrays["t"])):
        yield float(arrays["t"][k]), {name: a[k] for name, a in arrays.items() if name != "t"}


_IDLE_POWER = 70.0
_SPEED_IB, _SPEED_NET = 50e9, 3.125e9  # 400 Gb/s IB, 25 Gb/s Ethernet


@dataclasses.dataclass(frozen=True)
class _Levels:
    """The job-wide operating point every machine starts from."""

    util: float
    clock: float
    power: float
    mem: float
    pcie: float
    nvlink: float
    ib: float
    net: float


@dataclasses.dataclass(frozen=True)
class _Activity:
    """Per tick and machine: how active (0-1), and the job-wide pause and checkpoint windows."""

    act: np.ndarray  # (ticks, nodes)
    pause: np.ndarray  # (ticks,)
    ckpt: np.ndarray  # (ticks,)


@dataclasses.dataclass(frozen=True)
class _Offsets:
    """Stable per-machine multipliers: rank 0's extra work and pipeline stages."""

    util: np.ndarray
    power: np.ndarray
    mem: np.ndarray
    traffic: np.ndarray
    net: np.ndarray


@dataclasses.dataclass
class _Signals:
    """The job's signals before activity and noise, which the fault and the collective edit."""

    speed: np.ndarray  # (ticks,) job speed: the slowest machine sets it
    util: np.ndarray  # (ticks, nodes, 8) from here to traffic_gpu
    clock: np.ndarray
    power: np.ndarray
    mem: np.ndarray
    traffic_gpu: np.ndarray
    ib: np.ndarray  # (ticks, nodes) from here on
    net: np.ndarray
    link_speed: np.ndarray
    link_err: np.ndarray
    xid: np.ndarray
    ecc: np.ndarray
    pcie_cap: np.ndarray
    node_ib: np.ndarray


def simulate_job(job: LiveJob) -> dict[str, np.ndarray]:
    """The whole job as arrays: ``t`` (ticks,), per GPU (ticks, nodes, 8), per machine (ticks, nodes)."""
    rng = np.random.default_rng(job.seed)
    rel = np.arange(0.0, job.duration_s, job.interval_s)
    levels = _job_levels(rng)
    activity = _activity(rng, job, rel)
    offsets = _machine_offsets(rng, job)
    sig = _base_signals(levels, offsets, len(rel), job.nodes)
    if job.fault is not None:
        _apply_fault(rng, job, job.fault, rel, sig)
    slow = _collective_waits(job, sig, activity.ckpt)
    return _observed(rng, job, rel, levels, activity, sig, slow)


def _job_levels(rng: np.random.Generator) -> _Levels:
    """The job's utilization, clock, power, memory and traffic levels."""
    return _Levels(
        util=rng.uniform(0.75, 0.97),
        clock=rng.choice([1410.0, 1755.0, 1980.0]),
        power=rng.uniform(420, 660),
        mem=rng.uniform(0.3, 0.6),
        pcie=rng.uniform(2e9, 8e9),
        nvlink=rng.uniform(5e10, 2e11),
        ib=rng.uniform(1e10, 4e10),
        net=rng.uniform(5e7, 5e8),
    )


def _activity(rng: np.random.Generator, job: LiveJob, rel: np.ndarray) -> _Activity:
    """Start-up ramps, staggered shutdown, job-wide pauses and rank 0's checkpoint windows."""
    n = job.nodes
    start = rng.uniform(0, 60, n)
    ramp = rng.uniform(30, 90, n)
    stop = job.duration_s - rng.uniform(0, 40, n)
    act = np.clip((rel[:, None] - start[None, :]) / ramp[None, :], 0, 1)
    act = np.where(rel[:, None] >= stop[None, :], 0.0, act)
    pause = _windows(rng, rel, (20 * 60, 45 * 60), (30, 120))
    act = np.where(pause[:, None], 0.05 * act, act)
    ckpt = _windows(rng, rel, (15 * 60, 40 * 60), (20, 100)) & ~pause
    return _Activity(act, pause, ckpt)


def _machine_offsets(rng: np.random.Generator, job: LiveJob) -> _Offsets:
    """Rank 0's lower utilization and extra traffic, and the pipeline stages' offsets."""
    n = job.nodes
    off = _Offsets(np.ones(n), np.ones(n), np.ones(n), np.ones(n), np.ones(n))
    off.util[0] *= 0.96
    off.net[0] *= 1.3
    if job.pipeline:
        off.util[:] *= 1 + rng.uniform(-0.12, 0.04, n)
        off.power[:] *= 1 + rng.uniform(-0.12, 0.04, n)
        off.mem[:] *= 1 + rng.uniform(-0.25, 0.25, n)
        off.traffic[:] *= 1 + rng.uniform(-0.3, 0.3, n)
        off.net[:] *= 1 + rng.uniform(-0.3, 0.3, n)
    return off


def _base_signals(levels: _Levels, off: _Offsets, T: int, n: int) -> _Signals:
    """Every signal at the job's level times the machine's offset, at full speed."""
    shape = (T, n, GPUS)
    return _Signals(
        speed=np.ones(T),
        util=levels.util * off.util[None, :, None] * np.ones(shape),
        clock=levels.clock * np.ones(shape),
        power=levels.power * off.power[None, :, None] * np.ones(shape),
        mem=levels.mem * off.mem[None, :, None] * np.ones(shape),
        traffic_gpu=np.ones(shape) * off.traffic[None, :, None],
        ib=levels.ib * off.traffic[None, :] * np.ones((T, n)),
        net=levels.net * off.net[None, :] * np.ones((T, n)),
        link_speed=np.full((T, n), _SPEED_IB + _SPEED_NET),
        link_err=np.zeros((T, n)),
        xid=np.zeros((T, n)),
        ecc=np.zeros((T, n)),
        pcie_cap=np.ones((T, n)),
        node_ib=np.ones((T, n)),
    )


_FaultEffect = Callable[[np.random.Generator, LiveJob, LiveFault, np.ndarray, np.ndarray, _Signals], None]


def _apply_fault(rng: np.random.Generator, job: LiveJob, f: LiveFault, rel: np.ndarray, sig: _Signals) -> None:
    """Plant ``f`` on its machine while it lasts (the ticks from onset to end)."""
    m = (rel >= f.onset_s) & (rel < (f.end_s if f.end_s is not None else np.inf))
    effect = _FAULT_EFFECTS.get(f.kind)
    if effect is None:  # pragma: no cover - kinds are a closed list
        raise ValueError(f.kind)
    effect(rng, job, f, rel, m, sig)


def _clock_throttle(rng: np.random.Generator, job: LiveJob, f: LiveFault, rel: np.ndarray, m: np.ndarray,
                    sig: _Signals) -> None:
    factor = rng.uniform(0.5, 0.8)
    gs = slice(0, GPUS // 2) if f.variant == "half" else slice(0, GPUS)
    sig.clock[m, f.node, gs] *= factor
    sig.power[m, f.node, gs] *= 0.5 + 0.3 * factor
    sig.speed[m] = factor


def _pcie_downgrade(rng: np.random.Generator, job: LiveJob, f: LiveFault, rel: np.ndarray, m: np.ndarray,
                    sig: _Signals) -> None:
    sig.pcie_cap[m, f.node] = rng.uniform(0.4, 0.55)
    sig.speed[m] = rng.uniform(0.85, 0.95)


def _nic_degraded(rng: np.random.Generator, job: LiveJob, f: LiveFault, rel: np.ndarray, m: np.ndarray,
                  sig: _Signals) -> None:
    if f.variant == "rate":
        sig.link_speed[m, f.node] -= _SPEED_IB / 2
        sig.speed[m] = rng.uniform(0.55, 0.75)
    else:
        sig.link_err[m, f.node] += rng.poisson(rng.uniform(5, 60) * job.interval_s / 60, int(m.sum()))
        sig.speed[m] = rng.uniform(0.6, 0.85)


def _ib_flap(rng: np.random.Generator, job: LiveJob, f: LiveFault, rel: np.ndarray, m: np.ndarray,
             sig: _Signals) -> None:
    period = rng.uniform(30, 120)
    down = rng.uniform(5, 15)
    phase = (rel - f.onset_s) % period
    is_down = m & (phase < down)
    first = m & (phase < job.interval_s)
    sig.link_err[first, f.node] += 1 + rng.poisson(8, int(first.sum()))
    sig.node_ib[is_down, f.node] = 0.0
    sig.speed[is_down] = 0.02
    sig.speed[m & ~is_down] = 0.9


def _gpu_hang(rng: np.random.Generator, job: LiveJob, f: LiveFault, rel: np.ndarray, m: np.ndarray,
              sig: _Signals) -> None:
    gi = int(rng.integers(GPUS))
    sig.util[m, f.node, gi] = 0.0
    sig.power[m, f.node, gi] = 70.0
    sig.speed[m] = 0.0


def _xid_storm(rng: np.random.Generator, job: LiveJob, f: LiveFault, rel: np.ndarray, m: np.ndarray,
               sig: _Signals) -> None:
    per_min = rng.uniform(5, 60) if f.variant == "xid" else 0.0
    ecc_min = rng.uniform(100, 1000) if f.variant == "ecc" else 0.0
    sig.xid[m, f.node] += rng.poisson(per_min * job.interval_s / 60, int(m.sum()))
    sig.ecc[m, f.node] += rng.poisson(ecc_min * job.interval_s / 60, int(m.sum()))
    sig.speed[m] = rng.uniform(0.85, 1.0)


def _slow_cpu(rng: np.random.Generator, job: LiveJob, f: LiveFault, rel: np.ndarray, m: np.ndarray,
              sig: _Signals) -> None:
    factor = rng.uniform(0.5, 0.75)
    sig.util[m, f.node] *= factor
    sig.util[m, f.node] *= rng.uniform(0.85, 1.15, (int(m.sum()), GPUS))
    sig.power[m, f.node] *= 0.5 + 0.5 * factor
    sig.mem[m, f.node] *= factor
    sig.speed[m] = factor


_FAULT_EFFECTS: dict[str, _FaultEffect] = {
    "clock_throttle": _clock_throttle, "pcie_downgrade": _pcie_downgrade, "nic_degraded": _nic_degraded,
    "ib_flap": _ib_flap, "gpu_hang": _gpu_hang, "xid_storm": _xid_storm, "slow_cpu": _slow_cpu,
}


def _collective_waits(job: LiveJob, sig: _Signals, ckpt: np.ndarray) -> np.ndarray:
    """Machines waiting in the collective and rank 0's checkpoints; returns each machine's speed."""
    T, n = sig.ib.shape
    # the other machines wait in the collective: GPUs busy (spinning), less power, less traffic
    waiting = np.ones((T, n), dtype=bool)
    if job.fault is not None:
        waiting[:, job.fault.node] = False
    slow = sig.speed[:, None] * np.ones((T, n))
    wait_power = np.where(waiting, 0.75 + 0.25 * slow, 1.0)
    sig.power *= wait_power[:, :, None]
    # rank 0 writes a checkpoint: its GPUs nearly idle, NIC busy; the others wait
    sig.util[ckpt, 0] *= 0.15
    sig.power[ckpt, 0] *= 0.45
    sig.net[ckpt, 0] += 2e9
    sig.power[ckpt, 1:] *= 0.7
    slow[ckpt] = 0.02
    return slow


def _observed(rng: np.random.Generator, job: LiveJob, rel: np.ndarray, levels: _Levels, activity: _Activity,
              sig: _Signals, slow: np.ndarray) -> dict[str, np.ndarray]:
    """The signals as the agents record them: scaled by activity and speed, with noise and jitter."""
    act = activity.act
    T, n = act.shape
    shape = (T, n, GPUS)
    a = act[:, :, None]
    util = sig.util * a + rng.normal(0, 0.02, shape)
    jitter = rng.random(shape) < 0.03
    util = np.where(jitter, util * rng.uniform(0.2, 0.7, shape), util)
    node_dip = rng.random((T, n)) < 0.01
    util = np.where(node_dip[:, :, None], util * 0.4, util)
    util = np.clip(util, 0, 1)
    power = _IDLE_POWER + (sig.power - _IDLE_POWER) * a + rng.normal(0, 12, shape)
    clock = np.where(a > 0.05, sig.clock, 1980.0 * 0.3) + rng.normal(0, 10, shape)
    mem = np.clip(sig.mem * a + rng.normal(0, 0.02, shape), 0, 1)
    move = act * slow
    pcie = (levels.pcie * sig.traffic_gpu * move[:, :, None] * sig.pcie_cap[:, :, None]
            * rng.lognormal(0, 0.15, shape))
    nvl = levels.nvlink * sig.traffic_gpu * move[:, :, None] * rng.lognormal(0, 0.1, shape)
    ib = sig.ib * move * sig.node_ib * rng.lognormal(0, 0.1, (T, n))
    net = sig.net * np.maximum(act, 0.05) * rng.lognormal(0, 0.2, (T, n))
    link_err = sig.link_err + rng.poisson(0.01 * job.interval_s / 60, (T, n))
    ecc = sig.ecc + rng.poisson(0.02 * job.interval_s / 60, (T, n))
    return {
        "t": job.start_ts + rel,
        "gpu_util": util, "mem_util": mem, "sm_clock": clock, "power": power,
        "pcie": pcie, "nvlink": nvl, "network": net, "infiniband": ib,
        "link_speed": sig.link_speed, "link_errors": link_err, "xid": sig.xid, "ecc": ecc,
    }

"""The straggler detector: which machine of a running multi-node job is slow or sick, from telemetry.

Machine-to-machine comparison in the manner of Minder (NSDI'25): at every tick each
machine of a job is reduced to one value per signal (:data:`SIGNALS`, computed from the
agents' per-GPU and per-device readings by :func:`node_features`), each value is
denoised (a rolling median, or a rolling mean for event counts), and compared with the
median of the job's *other* machines. A machine is suspected on a signal when that
deviation, in the signal's bad direction and beyond its threshold, persists for most of a
continuity window; the suspicion clears after a quiet period.

What keeps the normal asymmetries of training from being flagged:

* **pipeline stages and rank 0's steady extra work** give a machine a stable offset from
  the others: throughput, utilization and clock signals are compared with the machine's
  own offset (its *baseline*, learnt after the start-up grace period and then followed
  slowly while the machine is not deviating), not with zero;
* **start-up and shutdown ramps**: nothing is judged during ``grace_s`` after the job was
  first seen; a whole machine that goes idle (a rank that finished first) is only a soft
  signal, which needs the long window;
* **job-wide pauses** (checkpoints, evaluation): when the job's median of a signal drops
  below the signal's activity floor the comparison is skipped; all machines stopping
  together is not one machine's fault;
* **rank 0's checkpoint writing** (its GPUs idle for a minute or two while the others
  wait in the collective) shows only in soft signals (utilization, power), which need
  ``soft_window_s`` of persistence, longer than a checkpoint write;
* **data-loader jitter** (one-tick dips) is removed by the rolling median.

Only deviations in the bad direction count: lower utilization, clock, power and
throughput; more errors, XIDs and ECC events, and a wider gap between a machine's busiest
and idlest GPU (one GPU hung at 0%). A signal on which more than ``max_share`` of the
job's machines deviate together is the job's behaviour, not a machine's.

The detector is pure computation over numpy arrays (no I/O): the live watcher
(:mod:`gpulens.diagnosis.live`), the evaluation (``scripts/eval_straggler.py``) and the
benchmark feed it the same way. Costs: O(machines x signals x window) per job and tick.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "SIGNALS",
    "DetectorParams",
    "BatchDetector",
    "JobDetector",
    "Signal",
    "Suspect",
    "node_features",
]


@dataclasses.dataclass(frozen=True)
class Signal:
    """How one signal is compared.

    ``kind``: ``ratio`` (deviation relative to the others' median) or ``rate`` (events per
    minute above the others' median). ``direction``: -1 flags lower values, +1 higher.
    ``klass``: ``hard`` (the short window), ``medium`` or ``soft`` (the long window).
    ``floor``: the denominator's floor for ratios and the activity floor under which the
    job counts as paused for this signal.
    """

    name: str
    kind: str
    direction: int
    threshold: float
    klass: str
    floor: float
    baseline: bool
    unit: str


#: The signals, in the order of the feature matrix's columns.
SIGNALS: tuple[Signal, ...] = (
    Signal("gpu_util", "ratio", -1, 0.20, "soft", 0.2, True, "ratio"),
    Signal("gpu_idle_gap", "diff", +1, 0.40, "hard", 0.2, True, "ratio"),
    Signal("sm_clock", "ratio", -1, 0.12, "hard", 300.0, True, "MHz"),
    Signal("power", "ratio", -1, 0.30, "soft", 80.0, True, "W"),
    Signal("mem_util", "ratio", -1, 0.35, "soft", 0.1, True, "ratio"),
    Signal("pcie", "ratio", -1, 0.35, "medium", 1e8, True, "B/s"),
    Signal("nvlink", "ratio", -1, 0.35, "medium", 1e8, True, "B/s"),
    Signal("network", "ratio", -1, 0.50, "soft", 1e7, True, "B/s"),
    Signal("infiniband", "ratio", -1, 0.35, "medium", 1e8, True, "B/s"),
    Signal("link_speed", "ratio", -1, 0.2, "hard", 1e6, True, "B/s"),
    Signal("link_errors", "rate", +1, 3.0, "hard", 0.0, False, "per min"),
    Signal("xid", "rate", +1, 2.0, "hard", 0.0, False, "per min"),
    Signal("ecc", "rate", +1, 20.0, "hard", 0.0, False, "per min"),
)
_NAMES = tuple(s.name for s in SIGNALS)
#: signals that an idle machine shows anyway (judged through gpu_util instead)
_FOLLOW_UTIL = frozenset({"sm_clock", "power", "mem_util", "pcie", "nvlink", "network", "infiniband"})
_IDX = {s.name: i for i, s in enumerate(SIGNALS)}


@dataclasses.dataclass(frozen=True)
class DetectorParams:
    """Windows in seconds (turned into ticks with the sampling interval)."""

    interval_s: float = 5.0
    #: nothing is judged this long after the job is first seen (start-up ramp)
    grace_s: float = 120.0
    #: after the grace period, baselines are learnt from this long
    learn_s: float = 120.0
    #: rolling median (denoising) of gauges; rolling sum of event counts
    smooth_s: float = 30.0
    count_s: float = 60.0
    #: continuity: a hard / medium signal deviates in ``need`` of the last ``window`` seconds
    hard_window_s: float = 30.0
    hard_need: float = 0.67
    medium_window_s: float = 40.0
    medium_need: float = 0.75
    soft_window_s: float = 150.0
    soft_need: float = 0.9
    #: a suspicion clears after this long without a deviating tick
    clear_s: float = 30.0
    #: baseline follows the machine's offset with this time constant while it is not deviating
    baseline_tau_s: float = 1800.0
    #: at most this share of a job's machines may deviate on one signal (else: the job's behaviour)
    max_share: float = 0.34

    def ticks(self, seconds: float) -> int:
        return max(1, round(seconds / self.interval_s))


@dataclasses.dataclass
class Suspect:
    """A machine suspected in a job (open while ``until`` is None)."""

    job_id: str
    node: str
    signals: list[str]
    #: per signal: how far from the job's other machines, in units of its threshold (>= 1)
    scores: dict[str, float]
    #: per signal: the machine's deviation (relative for ratios, events/min for rates)
    deviations: dict[str, float]
    since: float
    last_seen: float
    until: float | None = None

    @property
    def score(self) -> float:
        return max(self.scores.values()) if self.scores else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "node": self.node, "signals": list(self.signals),
            "score": round(self.score, 3), "scores": {k: round(v, 3) for k, v in self.scores.items()},
            "deviations": {k: round(v, 4) for k, v in self.deviations.items()},
            "since": self.since, "last_seen": self.last_seen, "until": self.until,
        }


_PLAIN: dict[Any, Any] = {np.nanmean: np.mean, np.nanmin: np.min, np.nansum: np.sum, np.nanmax: np.max}


def _nan_reduce(fn: Any, a: np.ndarray, axis: int) -> np.ndarray:
    """``fn`` (a numpy nan-reduction) along ``axis``: the plain reduction when there is no NaN."""
    if fn is np.nanmedian:
        return _median(a, axis)
    if not np.isnan(a).any():
        return np.asarray(_PLAIN[fn](a, axis=axis), dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(fn(a, axis=axis), dtype=float)


def _median(a: np.ndarray, axis: int) -> np.ndarray:
    """Median along ``axis`` ignoring NaNs (NaN where all are NaN); fast on small arrays."""
    if not np.isnan(a).any():
        return np.asarray(np.median(a, axis=axis), dtype=float)
    srt = np.sort(a, axis=axis)  # NaNs last
    cnt = np.sum(~np.isnan(a), axis=axis, keepdims=True)
    lo = np.maximum((cnt - 1) // 2, 0)
    hi = np.maximum(cnt // 2, 0)
    hi = np.minimum(hi, a.shape[axis] - 1)
    v = (np.take_along_axis(srt, lo, axis) + np.take_along_axis(srt, hi, axis)) / 2.0
    v = np.where(cnt == 0, np.nan, v)
    return np.squeeze(v, axis=axis)


_GPU_KEYS = ("gpu_util", "mem_util", "sm_clock", "power", "pcie", "nvlink")
_NODE_KEYS = ("network", "infiniband", "link_speed", "link_errors", "xid", "ecc")


def node_features(raw: Mapping[str, np.ndarray]) -> np.ndarray:
    """Per-machine signal values (machines x :data:`SIGNALS`) from one tick's raw readings.

    ``raw`` holds arrays, NaN where unknown: per GPU (machines x GPUs) ``gpu_util`` and
    ``mem_util`` (0-1), ``sm_clock`` (MHz), ``power`` (W), ``pcie`` and ``nvlink`` (B/s,
    tx + rx); per machine ``network`` and ``infiniband`` (B/s, rx + tx), ``link_speed`` (the sum of
    the NICs' and IB ports' link rates, B/s), and the events
    of this tick ``link_errors`` (IB symbol errors + link downs + receive errors, NIC
    errors), ``xid``, ``ecc``. Missing keys are NaN columns. Leading dimensions (several jobs
    of the same size, :class:`BatchDetector`) are kept: (jobs x machines x GPUs) gives
    (jobs x machines x signals).
    """
    lead = _machines(raw)
    out = np.full((*lead, len(SIGNALS)), np.nan)
    util = raw.get("gpu_util")
    if util is not None:
        u = np.asarray(util, dtype=float).reshape(*lead, -1)
        out[..., _IDX["gpu_util"]] = _nan_reduce(np.nanmean, u, -1)
        out[..., _IDX["gpu_idle_gap"]] = _nan_reduce(np.nanmedian, u, -1) - _nan_reduce(np.nanmin, u, -1)
    for name, fn in (("sm_clock", np.nanmin), ("power", np.nanmean), ("mem_util", np.nanmean),
                     ("pcie", np.nansum), ("nvlink", np.nansum)):
        a = raw.get(name)
        if a is not None:
            arr = np.asarray(a, dtype=float).reshape(*lead, -1)
            vals = _nan_reduce(fn, arr, -1)
            if fn is np.nansum:
                vals = np.where(np.all(np.isnan(arr), axis=-1), np.nan, vals)
            out[..., _IDX[name]] = vals
    for name in _NODE_KEYS:
        a = raw.get(name)
        if a is not None:
            out[..., _IDX[name]] = np.asarray(a, dtype=float).reshape(lead)
    return out


def _machines(raw: Mapping[str, np.ndarray]) -> tuple[int, ...]:
    """The leading shape (..., machines) of one tick's raw readings."""
    for name, a in raw.items():
        shape = np.shape(a)
        return tuple(shape[:-1]) if name in _GPU_KEYS else tuple(shape)
    return (0,)


def _loo_median(v: np.ndarray) -> np.ndarray:
    """For each row i and column s: the median of column s over the other rows (NaNs ignored).

    ``v`` is (rows x columns), or (jobs x rows x columns): each job's rows are compared among themselves.
    """
    if v.ndim == 3:
        b, n, s = v.shape
        flat = np.moveaxis(v, 1, 0).reshape(n, b * s)
        return np.moveaxis(_loo_median(flat).reshape(n, b, s), 0, 1)
    n = v.shape[0]
    if n < 2:
        return np.full(v.shape, np.nan)
    order = np.argsort(v, axis=0, kind="stable")  # NaNs last
    a = np.take_along_axis(v, order, 0)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(n)[:, None] * np.ones((1, v.shape[1]), dtype=order.dtype), 0)
    m = np.sum(~np.isnan(v), axis=0)  # values per column
    k = m - 1  # the others
    lo = np.maximum((k - 1) // 2, 0)
    hi = np.maximum(k // 2, 0)
    top = np.maximum(m - 1, 0)

    def at(p: np.ndarray) -> np.ndarray:
        # the p-th of the others = a[p] below one's own rank, a[p + 1] from it on
        idx = np.where(p[None, :] < rank, p[None, :], np.minimum(p + 1, top)[None, :])
        return np.take_along_axis(a, idx, 0)

    out = (at(lo) + at(hi)) / 2.0
    return np.where((m >= 2)[None, :] & ~np.isnan(v), out, np.nan)


class BatchDetector:
    """The state of several jobs with the same number of machines, judged together.

    Arrays carry a leading job axis: features (jobs x machines x signals). The live watcher
    uses one job per detector (:class:`JobDetector`); the evaluation and the benchmark batch
    the jobs of one size, which runs the same code path at a fraction of the per-tick cost.
    All jobs of a batch share the start time (grace and baseline periods).
    """

    def __init__(self, job_ids: list[str], nodes: list[list[str]], params: DetectorParams | None = None,
                 *, started: float | None = None) -> None:
        if len({len(n) for n in nodes}) > 1 or len(job_ids) != len(nodes):
            raise ValueError("a batch holds jobs with the same number of machines")
        self.job_ids = list(job_ids)
        self.node_lists = [list(n) for n in nodes]
        self.p = params or DetectorParams()
        p = self.p
        b, n, s = len(job_ids), len(nodes[0]) if nodes else 0, len(SIGNALS)
        self._shape = (b, n, s)
        self._smooth = p.ticks(p.smooth_s)
        self._count = p.ticks(p.count_s)
        self._hist = np.full((max(self._smooth, self._count), b, n, s), np.nan)
        self._pos = 0
        self._seen = 0
        self.started = started
        klass = np.array([sig.klass for sig in SIGNALS])
        self._win = np.where(klass == "hard", p.ticks(p.hard_window_s),
                             np.where(klass == "medium", p.ticks(p.medium_window_s), p.ticks(p.soft_window_s)))
        need = np.where(klass == "hard", p.hard_need, np.where(klass == "medium", p.medium_need, p.soft_need))
        self._need = np.maximum(1, np.ceil(self._win * need)).astype(int)
        self._flags = np.zeros((int(self._win.max()) + 1, b, n, s), dtype=bool)
        self._hits = np.zeros((b, n, s), dtype=int)
        self._fpos = 0
        self._rate = np.array([sig.kind == "rate" for sig in SIGNALS])
        self._ratio = np.array([sig.kind == "ratio" for sig in SIGNALS])
        self._dir = np.array([sig.direction for sig in SIGNALS], dtype=float)
        self._thr = np.array([sig.threshold for sig in SIGNALS])
        self._floor = np.array([sig.floor for sig in SIGNALS])
        self._use_base = np.array([sig.baseline for sig in SIGNALS])
        self._follows_util = np.array([sig.name in _FOLLOW_UTIL for sig in SIGNALS])
        self._base = np.zeros((b, n, s))
        self._learn: list[np.ndarray] = []
        self._base_ready = False
        self._quiet = np.zeros((b, n), dtype=int)
        self._first_dev = np.full((b, n, s), np.nan)
        #: open suspicions by (job index, machine index)
        self.open_at: dict[tuple[int, int], Suspect] = {}
        self.closed: list[Suspect] = []
        self.last_dev = np.zeros((b, n, s))

    # -- one tick -------------------------------------------------------------------
    def update(self, ts: float, raw: Mapping[str, np.ndarray]) -> list[Suspect]:
        """Take one tick of raw readings (jobs x machines [x GPUs]); return the open suspects."""
        p = self.p
        if self.started is None:
            self.started = ts
        b, n, _ = self._shape
        features = node_features(raw).reshape(self._shape)
        # the idle gap (median minus lowest GPU of the machine) is kept per tick; _deviation takes its
        # rolling minimum: a hung GPU gaps at every tick, a data loader's dip on one GPU does not
        self._hist[self._pos % len(self._hist)] = features
        self._pos += 1
        self._seen += 1
        if ts - self.started < p.grace_s:
            return []
        dev = self._deviation()
        if not self._base_ready:
            self._learn.append(dev)
            if len(self._learn) * p.interval_s >= p.learn_s:
                stack = np.stack(self._learn)
                base = _nan_reduce(np.nanmedian, stack, 0)
                self._base = np.where(np.isnan(base), 0.0, base) * self._use_base
                self._learn = []
                self._base_ready = True
            dev = np.where(self._use_base, np.nan, dev)  # only the rates before baselines exist
        else:
            dev = dev - self._base
        bad = self._dir * dev / self._thr  # >= 1: beyond threshold in the bad direction
        flag = np.nan_to_num(bad, nan=0.0) >= 1.0
        allowed = max(1, int(self.p.max_share * n))
        flag &= (flag.sum(axis=-2) <= allowed)[..., None, :]
        self._follow_baseline(dev, bad)
        self._count_hits(flag)
        self.last_dev = dev
        now_first = np.isnan(self._first_dev) & flag
        self._first_dev[now_first] = ts
        return self._judge(ts, flag, bad, dev)

    def _deviation(self) -> np.ndarray:
        p = self.p
        k = min(self._seen, len(self._hist))
        last = [(self._pos - 1 - i) % len(self._hist) for i in range(k)]
        recent = self._hist[last]
        ks = min(k, self._smooth)
        smooth = _nan_reduce(np.nanmedian, recent[:ks], 0)
        kc = min(k, self._count)
        counts = _nan_reduce(np.nanmean, recent[:kc], 0) * (60.0 / p.interval_s)  # events per minute
        v = np.where(self._rate, counts, smooth)
        gap = recent[:ks, ..., _IDX["gpu_idle_gap"]]
        enough = np.sum(~np.isnan(gap), axis=0) * 2 >= self._smooth  # a window mostly unread is not judged
        v[..., _IDX["gpu_idle_gap"]] = np.where(enough, _nan_reduce(np.nanmin, gap, 0), np.nan)
        ref = _loo_median(v)
        with np.errstate(all="ignore"):
            rel = (v - ref) / np.maximum(np.abs(ref), self._floor)
        diff = v - ref
        dev = np.where(self._ratio, rel, diff)
        # a machine whose GPUs went idle while the others work (a rank that finished first, a
        # crashed process) is judged on utilization alone, the soft signal with the long window
        gu = _IDX["gpu_util"]
        idle = v[..., gu] < np.maximum(0.3 * ref[..., gu], self._floor[gu])
        dev = np.where(idle[..., None] & self._follows_util, np.nan, dev)
        # a job-wide pause: the others are below the activity floor -> nothing to compare
        paused = self._ratio & (ref < self._floor)
        dev = np.where(paused, np.nan, dev)
        return np.asarray(dev)

    def _follow_baseline(self, dev: np.ndarray, bad: np.ndarray) -> None:
        if not self._base_ready:
            return
        alpha = self.p.interval_s / self.p.baseline_tau_s
        calm = np.nan_to_num(np.abs(bad), nan=9.0) < 0.5
        upd = calm & self._use_base
        self._base = np.where(upd, self._base + alpha * np.nan_to_num(dev, nan=0.0), self._base)

    def _count_hits(self, flag: np.ndarray) -> None:
        """Deviating ticks per (job, machine, signal) within each signal's window, as a running sum."""
        pos, ring = self._fpos, len(self._flags)
        self._flags[pos % ring] = flag
        self._hits += flag
        gone = pos - self._win  # the tick that just left each signal's window
        old = np.moveaxis(self._flags[gone % ring, :, :, np.arange(len(SIGNALS))], 0, -1)
        self._hits -= np.where(gone >= 0, old, False)
        self._fpos += 1

    def _judge(self, ts: float, flag: np.ndarray, bad: np.ndarray, dev: np.ndarray) -> list[Suspect]:
        hits = self._hits
        firing = hits >= self._need
        any_flag = np.asarray(flag.any(axis=-1), dtype=bool)
        self._quiet = np.where(any_flag, 0, self._quiet + 1)
        self._first_dev[~flag & (hits == 0)] = np.nan
        watch = {(int(j), int(i)) for j, i in zip(*np.nonzero(firing.any(axis=-1)), strict=True)} | set(self.open_at)
        for j, i in sorted(watch):
            self._judge_one(ts, j, i, firing[j, i], flag[j, i], bad[j, i], dev[j, i], bool(any_flag[j, i]))
        return list(self.open_at.values())

    def _judge_one(self, ts: float, j: int, i: int, firing: np.ndarray, flag: np.ndarray, bad: np.ndarray,
                   dev: np.ndarray, any_flag: bool) -> None:
        key = (j, i)
        sus = self.open_at.get(key)
        sigs = np.flatnonzero(firing)
        if sigs.size:
            names = [_NAMES[k] for k in sigs]
            # how far: as of the latest tick that deviated (not the quiet ticks of the window's tail)
            now_bad = [k for k in sigs if flag[k]]
            scores = {_NAMES[k]: float(bad[k]) for k in now_bad}
            devs = {_NAMES[k]: float(dev[k]) for k in now_bad}
            if sus is None:
                firsts = self._first_dev[j, i, sigs]
                first = float(np.nanmin(firsts)) if np.any(~np.isnan(firsts)) else ts
                self.open_at[key] = Suspect(self.job_ids[j], self.node_lists[j][i], names, scores, devs, first, ts)
            else:
                sus.signals = sorted(set(sus.signals) | set(names), key=_NAMES.index)
                sus.scores.update(scores)
                sus.deviations.update(devs)
                sus.last_seen = ts
        elif sus is not None:
            cols = [_IDX[name] for name in sus.signals]
            if any_flag or bool(np.all(np.isnan(dev[cols]))):
                # still deviating, or nothing to compare (a job-wide pause): not quiet
                self._quiet[j, i] = 0
                sus.last_seen = ts
            elif self._quiet[j, i] * self.p.interval_s >= self.p.clear_s:
                sus.until = ts
                self.closed.append(self.open_at.pop(key))

    def close_all(self, ts: float) -> list[Suspect]:
        """The jobs ended: close every open suspicion at ``ts``."""
        done = []
        for key in list(self.open_at):
            sus = self.open_at.pop(key)
            sus.until = ts
            self.closed.append(sus)
            done.append(sus)
        return done


class JobDetector(BatchDetector):
    """The state of one job: feed :meth:`update` one tick of raw readings (machines [x GPUs])."""

    def __init__(self, job_id: str, nodes: list[str], params: DetectorParams | None = None,
                 *, started: float | None = None) -> None:
        super().__init__([job_id], [list(nodes)], params, started=started)
        self.job_id = job_id
        self.nodes = list(nodes)

    @property
    def open(self) -> dict[str, Suspect]:
        """Open suspicions by machine."""
        return {s.node: s for s in self.open_at.values()}

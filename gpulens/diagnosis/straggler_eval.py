"""Evaluate the straggler detector on simulated jobs with planted faults (docs/straggler.md).

Per (job, machine): a planted faulty machine is found when a suspicion opens on it at or
after the fault's onset (the latency is open time minus onset); any other suspicion (on
another machine, on a healthy job, or on the faulty machine before onset) is a false
positive. False alarms per 1,000 healthy job-hours count suspicions on jobs without a fault.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from typing import Any

import numpy as np

from gpulens.diagnosis.straggler import BatchDetector, DetectorParams
from gpulens.ingest.simulate.live import FAULT_KINDS, LiveFault, LiveJob, make_cases, simulate_job

__all__ = ["JobOutcome", "evaluate", "outcome_from_json", "outcome_to_json", "run_batch", "run_job", "summarize"]


@dataclasses.dataclass
class JobOutcome:
    job: LiveJob
    #: (node index, opened at (s from start), signals) of every suspicion
    opened: list[tuple[int, float, list[str]]]

    @property
    def hours(self) -> float:
        return self.job.duration_s / 3600


def outcome_to_json(o: JobOutcome) -> dict[str, Any]:
    job = dataclasses.asdict(o.job)
    return {"job": job, "opened": [list(x) for x in o.opened]}


def outcome_from_json(d: dict[str, Any]) -> JobOutcome:
    job = dict(d["job"])
    fault = LiveFault(**job.pop("fault")) if job.get("fault") else None
    job.pop("fault", None)
    return JobOutcome(LiveJob(**job, fault=fault), [(int(n), float(at), list(s)) for n, at, s in d["opened"]])


def run_job(job: LiveJob, params: DetectorParams | None = None) -> JobOutcome:
    return run_batch([job], params)[0]


#: at most this many machines per batch (memory: each job's whole telemetry is held)
BATCH_MACHINES = 96


def run_batch(jobs: list[LiveJob], params: DetectorParams | None = None) -> list[JobOutcome]:
    """Run the detector over jobs with the same number of machines together (one BatchDetector).

    Jobs must share ``nodes``, ``interval_s`` and ``start_ts``; a job that ended earlier than the
    others gets NaN readings (nothing to judge) until the batch's longest job ends.
    """
    p = params or DetectorParams(interval_s=jobs[0].interval_s)
    arrays = [simulate_job(j) for j in jobs]
    det = BatchDetector([j.job_id for j in jobs], [j.node_names for j in jobs], p)
    keys = [k for k in arrays[0] if k != "t"]
    t0 = jobs[0].start_ts
    ticks = max(len(a["t"]) for a in arrays)
    index = {j.job_id: (b, {n: i for i, n in enumerate(j.node_names)}) for b, j in enumerate(jobs)}
    opened: list[list[tuple[int, float, list[str]]]] = [[] for _ in jobs]
    known: set[tuple[str, str, float]] = set()
    blank = {k: np.full(arrays[0][k].shape[1:], np.nan) for k in keys}
    for k in range(ticks):
        ts = t0 + k * p.interval_s
        raw = {name: np.stack([a[name][k] if k < len(a["t"]) else blank[name] for a in arrays]) for name in keys}
        current = set()
        for s in det.update(ts, raw):
            key = (s.job_id, s.node, s.since)
            current.add(key)
            if key not in known:
                b, rows = index[s.job_id]
                opened[b].append((rows[s.node], ts - t0, list(s.signals)))
        known = current  # a closed and reopened suspicion is a new one
    return [JobOutcome(j, o) for j, o in zip(jobs, opened, strict=True)]


def evaluate(seeds: list[int], faulty: int, healthy_hours: float,
             params: DetectorParams | None = None) -> list[JobOutcome]:
    """Every seed's cases, run in batches of jobs of the same size and similar length."""
    out: list[JobOutcome] = []
    for seed in seeds:
        cases = make_cases(seed, faulty, healthy_hours)
        by_size: dict[int, list[LiveJob]] = defaultdict(list)
        for job in cases:
            by_size[job.nodes].append(job)
        for size, group in sorted(by_size.items()):
            group.sort(key=lambda j: j.duration_s)
            per = max(1, BATCH_MACHINES // size)
            for i in range(0, len(group), per):
                out += run_batch(group[i:i + per], params)
    order = {j.job_id: i for i, j in enumerate(o.job for o in out)}
    return sorted(out, key=lambda o: order[o.job.job_id])


@dataclasses.dataclass
class _Tally:
    """Counts over the outcomes: hits and misses on faulty jobs, false (job, machine) pairs,
    latencies, per fault kind, and the healthy jobs' hours and alarms."""

    tp: int = 0
    fn: int = 0
    fp_pairs: set[tuple[str, int]] = dataclasses.field(default_factory=set)
    latencies: list[float] = dataclasses.field(default_factory=list)
    per_kind: dict[str, Counter[str]] = dataclasses.field(default_factory=lambda: defaultdict(Counter))
    lat_kind: dict[str, list[float]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    healthy_hours: float = 0.0
    healthy_alarms: int = 0
    faulty_jobs: int = 0

    def add_healthy(self, o: JobOutcome) -> None:
        """Every suspicion on a healthy job is a false alarm."""
        self.healthy_hours += o.hours
        self.healthy_alarms += len(o.opened)
        self.fp_pairs |= {(o.job.job_id, node) for node, _, _ in o.opened}

    def add_faulty(self, o: JobOutcome, f: LiveFault) -> None:
        """A hit is a suspicion on the faulty machine at or after onset; any other is false."""
        self.faulty_jobs += 1
        hits = [at for node, at, _ in o.opened if node == f.node and at >= f.onset_s]
        wrong = {(o.job.job_id, node) for node, at, _ in o.opened if node != f.node or at < f.onset_s}
        self.fp_pairs |= wrong
        self.per_kind[f.kind]["cases"] += 1
        if hits:
            self.tp += 1
            lat = min(hits) - f.onset_s
            self.latencies.append(lat)
            self.lat_kind[f.kind].append(lat)
            self.per_kind[f.kind]["found"] += 1
        else:
            self.fn += 1
        self.per_kind[f.kind]["false_pairs"] += len(wrong)

    def by_kind(self) -> dict[str, dict[str, Any]]:
        """Cases, found, false pairs and median latency per fault kind that occurred."""
        return {
            k: {"cases": self.per_kind[k]["cases"], "found": self.per_kind[k]["found"],
                "false_pairs": self.per_kind[k]["false_pairs"],
                "median_latency_s": float(np.median(self.lat_kind[k])) if self.lat_kind[k] else None}
            for k in FAULT_KINDS if self.per_kind[k]["cases"]
        }


def summarize(outcomes: list[JobOutcome]) -> dict[str, Any]:
    """Detection counts, precision, recall, latencies and false alarms over the outcomes."""
    t = _Tally()
    for o in outcomes:
        if o.job.fault is None:
            t.add_healthy(o)
        else:
            t.add_faulty(o, o.job.fault)
    tp, fn, fp = t.tp, t.fn, len(t.fp_pairs)
    kinds = t.by_kind()
    return {
        "faulty_jobs": t.faulty_jobs,
        "healthy_jobs": sum(1 for o in outcomes if o.job.fault is None),
        "healthy_job_hours": round(t.healthy_hours, 1),
        "true_positives": tp, "false_negatives": fn, "false_positive_pairs": fp,
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / (tp + fn) if tp + fn else None,
        "median_latency_s": float(np.median(t.latencies)) if t.latencies else None,
        "p90_latency_s": float(np.percentile(t.latencies, 90)) if t.latencies else None,
        "healthy_false_alarms": t.healthy_alarms,
        "false_alarms_per_1000_healthy_job_hours": (
            1000 * t.healthy_alarms / t.healthy_hours if t.healthy_hours else None),
        "by_kind": kinds,
    }

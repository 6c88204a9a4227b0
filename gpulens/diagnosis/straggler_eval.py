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

from gpulens.diagnosis.straggler import DetectorParams, JobDetector
from gpulens.ingest.simulate.live import FAULT_KINDS, LiveFault, LiveJob, make_cases, simulate_job

__all__ = ["JobOutcome", "evaluate", "outcome_from_json", "outcome_to_json", "run_job", "summarize"]


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
    p = params or DetectorParams(interval_s=job.interval_s)
    arrays = simulate_job(job)
    names = job.node_names
    det = JobDetector(job.job_id, names, p)
    keys = [k for k in arrays if k != "t"]
    known: set[str] = set()
    opened: list[tuple[int, float, list[str]]] = []
    t0 = float(arrays["t"][0])
    for k, ts in enumerate(arrays["t"]):
        for s in det.update(float(ts), {name: arrays[name][k] for name in keys}):
            key = f"{s.node}@{s.since}"
            if key not in known:
                known.add(key)
                opened.append((names.index(s.node), float(ts) - t0, list(s.signals)))
        # a closed and reopened suspicion is a new one
        known = {f"{s.node}@{s.since}" for s in det.open.values()}
    return JobOutcome(job, opened)


def evaluate(seeds: list[int], faulty: int, healthy_hours: float,
             params: DetectorParams | None = None) -> list[JobOutcome]:
    out: list[JobOutcome] = []
    for seed in seeds:
        for job in make_cases(seed, faulty, healthy_hours):
            out.append(run_job(job, params))
    return out


def summarize(outcomes: list[JobOutcome]) -> dict[str, Any]:
    tp = fn = 0
    fp_pairs: set[tuple[str, int]] = set()
    latencies: list[float] = []
    per_kind: dict[str, Counter[str]] = defaultdict(Counter)
    lat_kind: dict[str, list[float]] = defaultdict(list)
    healthy_hours = 0.0
    healthy_alarms = 0
    faulty_jobs = 0
    for o in outcomes:
        f = o.job.fault
        if f is None:
            healthy_hours += o.hours
            healthy_alarms += len(o.opened)
            fp_pairs |= {(o.job.job_id, node) for node, _, _ in o.opened}
            continue
        faulty_jobs += 1
        hits = [at for node, at, _ in o.opened if node == f.node and at >= f.onset_s]
        wrong = {(o.job.job_id, node) for node, at, _ in o.opened if node != f.node or at < f.onset_s}
        fp_pairs |= wrong
        per_kind[f.kind]["cases"] += 1
        if hits:
            tp += 1
            lat = min(hits) - f.onset_s
            latencies.append(lat)
            lat_kind[f.kind].append(lat)
            per_kind[f.kind]["found"] += 1
        else:
            fn += 1
        per_kind[f.kind]["false_pairs"] += len(wrong)
    fp = len(fp_pairs)
    kinds = {
        k: {"cases": per_kind[k]["cases"], "found": per_kind[k]["found"],
            "false_pairs": per_kind[k]["false_pairs"],
            "median_latency_s": float(np.median(lat_kind[k])) if lat_kind[k] else None}
        for k in FAULT_KINDS if per_kind[k]["cases"]
    }
    return {
        "faulty_jobs": faulty_jobs,
        "healthy_jobs": sum(1 for o in outcomes if o.job.fault is None),
        "healthy_job_hours": round(healthy_hours, 1),
        "true_positives": tp, "false_negatives": fn, "false_positive_pairs": fp,
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / (tp + fn) if tp + fn else None,
        "median_latency_s": float(np.median(latencies)) if latencies else None,
        "p90_latency_s": float(np.percentile(latencies, 90)) if latencies else None,
        "healthy_false_alarms": healthy_alarms,
        "false_alarms_per_1000_healthy_job_hours": 1000 * healthy_alarms / healthy_hours if healthy_hours else None,
        "by_kind": kinds,
    }

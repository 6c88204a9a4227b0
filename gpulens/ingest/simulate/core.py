"""``simulate()``: plan a cluster, then write state, logs and samples into a store."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from gpulens.errors import InputError
from gpulens.ingest.simulate.logs import LogCorpus, default_sample_logs_dir
from gpulens.ingest.simulate.model import (
    PLAN_NAMES,
    TRUE_ORIGIN,
    Attempt,
    Plan,
    build_cluster,
    build_workload,
    planted_origin,
    schedule,
)
from gpulens.ingest.simulate.params import SimParams, planted_util
from gpulens.ingest.simulate.samples import SampleGenerator, write_partitioned, xid_table
from gpulens.store import Store, insert_batch, quote_ident

__all__ = ["MAX_DAYS", "SimSummary", "clear_simulation", "simulate", "validate_args"]

ProgressFn = Callable[[str, int, int], None]
MAX_DAYS = 366
_MIN_US = 60_000_000
_SIM_TABLES = ("sim_truth", "sim_planted", "sim_job_truth", "sim_runs")
_EXIT = {"cpu_oom": (137, 9), "crash": (139, 11)}


@dataclasses.dataclass
class SimSummary:
    """What a simulation wrote, and what it planted."""

    data_dir: str
    seed: int
    gpus: int
    nodes: int
    days: float
    start: datetime
    end: datetime
    jobs: int
    attempts: int
    placements: int
    failed_attempts: int
    statuses: dict[str, int]
    gpu_samples: int
    net_samples: int
    xid_events: int
    job_metrics: int
    logs: int
    bad_nodes: list[str]
    corrupted_inputs: list[str]
    elapsed_s: float
    params: SimParams


def validate_args(gpus: int, days: float, seed: int) -> None:
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 8:
        raise InputError(
            f"--gpus must be an integer of at least 8 (one 8-GPU server); got {gpus!r}.",
            "Pass e.g. --gpus 64.",
        )
    if not isinstance(days, int | float) or not math.isfinite(days) or days <= 0 or days > MAX_DAYS:
        raise InputError(
            f"--days must be a number above 0 and at most {MAX_DAYS}; got {days!r}.",
            "Pass e.g. --days 7 (fractions such as 0.5 are allowed).",
        )
    if round(days * 1440) < 1:
        raise InputError(f"--days {days!r} is shorter than one minute.", "Pass at least --days 0.001.")
    if not isinstance(seed, int) or seed < 0:
        raise InputError(f"--seed must be a non-negative integer; got {seed!r}.", "Pass e.g. --seed 0.")


def _default_start(days: float) -> datetime:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0, tzinfo=None)
    return today - timedelta(days=math.ceil(days))


def _naive_utc(dt: datetime) -> datetime:
    if dt.tzinfo is not None:
        dt = dt.astimezone(UTC).replace(tzinfo=None)
    return dt.replace(second=0, microsecond=0)


def _existing(store: Store) -> tuple[int, str | None]:
    """(simulated jobs, status of the last sim run) already in the store."""
    con = store.connect()
    try:
        jobs = con.execute("SELECT count(*) FROM jobs WHERE source = 'simulate'").fetchone()
        status = None
        has_runs = con.execute(
            "SELECT count(*) FROM duckdb_views() WHERE view_name = 'sim_runs'"
        ).fetchone()
        if has_runs and has_runs[0]:
            row = con.execute("SELECT status FROM sim_runs ORDER BY run_id DESC LIMIT 1").fetchone()
            status = row[0] if row else None
        return int(jobs[0] if jobs else 0), status
    finally:
        con.close()


def clear_simulation(store: Store) -> int:
    """Remove everything a previous simulation wrote (state rows, samples, logs)."""
    with store.write() as con:
        nodes = [r[0] for r in con.execute("SELECT node FROM nodes WHERE source = 'simulate'").fetchall()]
        n = con.execute("SELECT count(*) FROM jobs WHERE source = 'simulate'").fetchone()
        sim_jobs = "SELECT job_id FROM jobs WHERE source = 'simulate'"
        for table in ("placements", "attempts", "job_metrics", "failures"):
            con.execute(f"DELETE FROM {quote_ident(table)} WHERE job_id IN ({sim_jobs})")  # noqa: S608
        con.execute("DELETE FROM gpus WHERE node IN (SELECT node FROM nodes WHERE source = 'simulate')")
        con.execute("DELETE FROM jobs WHERE source = 'simulate'")
        con.execute("DELETE FROM nodes WHERE source = 'simulate'")
        for table in _SIM_TABLES:
            con.execute(f"DELETE FROM {quote_ident(table)}")  # noqa: S608
    for node in nodes:
        for part in store.samples.glob(f"kind=*/date=*/node={node}"):
            shutil.rmtree(part, ignore_errors=True)
    shutil.rmtree(store.logs / "sim", ignore_errors=True)
    return int(n[0]) if n else 0


def simulate(
    store: Store,
    *,
    gpus: int = 256,
    days: float = 7,
    seed: int = 0,
    start: datetime | None = None,
    progress: ProgressFn | None = None,
    params: SimParams | None = None,
    force: bool = False,
    sample_logs: Path | None = None,
) -> SimSummary:
    """Build a simulated cluster of ``gpus`` GPUs over ``days`` days into ``store``.

    Deterministic for a seed: the same (gpus, days, seed, params) give the same
    rows; ``start`` only shifts the timestamps (default: the period ends at the
    last UTC midnight). A store that already holds a simulation is refused with
    :class:`InputError` unless ``force`` is set, which first removes the previous
    simulation (its jobs, nodes, samples and logs; nothing else).
    """
    t_begin = time.perf_counter()
    validate_args(gpus, days, seed)
    p = params or SimParams()
    report: ProgressFn = progress or (lambda stage, done, total: None)
    start_dt = _naive_utc(start) if start is not None else _default_start(days)
    minutes = int(round(days * 1440))
    _replace_previous(store, force, report)

    report("schedule jobs", 0, 1)
    plan = _plan(gpus, minutes, p, seed)
    report("schedule jobs", 1, 1)
    uuids = _gpu_uuids(seed, plan.cluster.total_gpus)
    job_ids = [f"sim-{i + 1:06d}" for i in range(len(plan.workload))]
    corpus = LogCorpus(sample_logs if sample_logs is not None else default_sample_logs_dir(),
                       list(TRUE_ORIGIN))
    # logs are written before the state rows that point at them
    log_rows = _write_logs(store, plan, job_ids, corpus, start_dt, seed, report)
    report("write state tables", 0, 1)
    run = _Run(plan, job_ids, uuids, log_rows, start_dt, minutes, seed, gpus, float(days), p)
    counts = _write_state(store, run)
    report("write state tables", 1, 1)
    gpu_rows, net_rows = _write_samples(store, run, report)
    xt = xid_table(plan, start_dt, uuids)
    store.write_samples("xid", xt, tag=f"sim{seed}-xid")

    summary = _summary(store, run, counts, (gpu_rows, net_rows, xt.num_rows))
    summary.elapsed_s = round(time.perf_counter() - t_begin, 2)
    _mark_complete(store, summary)
    return summary


def _replace_previous(store: Store, force: bool, report: ProgressFn) -> None:
    """Refuse a store that holds a simulation, or remove it when ``force`` is set."""
    n_jobs, status = _existing(store)
    if not (n_jobs or status):
        return
    if not force:
        what = "an incomplete simulation" if status == "writing" else f"a simulation ({n_jobs} jobs)"
        raise InputError(
            f"Data directory {store.root} already holds {what}.",
            "Pass --force to replace it, or choose another --data-dir.",
        )
    report("remove previous simulation", 0, 1)
    clear_simulation(store)
    report("remove previous simulation", 1, 1)


def _plan(gpus: int, minutes: int, p: SimParams, seed: int) -> Plan:
    """The cluster, its workload and their schedule (one random stream, in that order)."""
    rng = np.random.default_rng([seed, 1])
    cluster = build_cluster(gpus, p, rng)
    wl = build_workload(cluster, minutes, p, rng)
    return schedule(cluster, wl, minutes, p, rng)


def _gpu_uuids(seed: int, n: int) -> list[str]:
    """``n`` GPU UUIDs in nvidia-smi's format, drawn from their own stream."""
    uuid_rng = np.random.default_rng([seed, 2])
    return [
        "GPU-" + "-".join(f"{uuid_rng.integers(0, 16 ** k):0{k}x}" for k in (8, 4, 4, 4, 12))
        for _ in range(n)
    ]


def _write_samples(store: Store, run: _Run, report: ProgressFn) -> tuple[int, int]:
    """Write the gpu and network samples chunk by chunk; returns their (gpu, net) row counts."""
    seed = run.seed
    gen = SampleGenerator(run.plan, run.params, run.start, seed, run.uuids)
    gpu_rows = net_rows = 0
    total = gen.chunks
    report("gpu and network samples", 0, total)
    for i, chunk in enumerate(gen):
        gpu_rows += write_partitioned(store, "gpu", chunk.gpu, chunk.date, chunk.gpu_spans, f"sim{seed}-{i:05d}")
        net_rows += write_partitioned(store, "net", chunk.net, chunk.date, chunk.net_spans, f"sim{seed}-{i:05d}")
        del chunk
        report("gpu and network samples", i + 1, total)
    return gpu_rows, net_rows


def _summary(store: Store, run: _Run, counts: dict[str, int], samples: tuple[int, int, int]) -> SimSummary:
    """What the run wrote and planted; ``samples`` are the (gpu, net, xid) row counts. elapsed_s is 0."""
    plan, cluster = run.plan, run.plan.cluster
    gpu_rows, net_rows, xid_rows = samples
    return SimSummary(
        data_dir=str(store.root), seed=run.seed, gpus=cluster.total_gpus, nodes=len(cluster.names),
        days=run.days, start=run.start, end=run.end,
        jobs=len(run.job_ids), attempts=len(plan.attempts), placements=counts["placements"],
        failed_attempts=len(run.logs), statuses=dict(sorted(Counter(plan.job_status).items())),
        gpu_samples=gpu_rows, net_samples=net_rows, xid_events=xid_rows, job_metrics=counts["job_metrics"],
        logs=len(run.logs), bad_nodes=[cluster.names[i] for i in np.flatnonzero(cluster.bad)],
        corrupted_inputs=list(plan.workload.corrupted), elapsed_s=0.0, params=run.params,
    )


def _mark_complete(store: Store, summary: SimSummary) -> None:
    """Mark the run complete in sim_runs, with its summary."""
    with store.write() as con:
        con.execute(
            "UPDATE sim_runs SET status = 'complete', summary = ? WHERE run_id = 1",
            [json.dumps(_summary_json(summary), default=str)],
        )


def _summary_json(s: SimSummary) -> dict[str, Any]:
    d = dataclasses.asdict(s)
    d.pop("params")
    return d


def _ts(start_us: int, minutes: np.ndarray) -> pa.Array:
    return pa.array(start_us + minutes.astype(np.int64) * _MIN_US, pa.timestamp("us"))


def _write_logs(store: Store, plan: Plan, job_ids: list[str], corpus: LogCorpus, start: datetime,
                seed: int, report: ProgressFn) -> dict[tuple[int, int], tuple[str, str]]:
    """Write one log per failed attempt; returns (job, attempt) -> (relative path, source)."""
    wl, c = plan.workload, plan.cluster
    failed = [a for a in plan.attempts if a.status == "failed"]
    rng = np.random.default_rng([seed, 3])
    job_pick = rng.integers(0, 1 << 30, size=max(len(wl), 1))
    out: dict[tuple[int, int], tuple[str, str]] = {}
    report("failure logs", 0, len(failed))
    for k, a in enumerate(failed):
        cat = a.category or "unknown"
        repeat = a.planted in ("user_repeat", "repeat", "corrupt_input")
        pick = int(job_pick[a.job]) if repeat else int(rng.integers(0, 1 << 30))
        bad_input = wl.corrupted_input[a.job] or (wl.inputs[a.job][-1] if cat == "incorrect_input" else "")
        body, source = corpus.body(cat, pick, input_path=bad_input, bus=f"{(a.gpus[0][1] * 16 + 0x3b) % 256:02x}",
                                   frame=wl.fault_frame[a.job] if a.category == wl.fail_cat[a.job] else None,
                                   user=wl.user[a.job])
        t0 = start + timedelta(minutes=a.start)
        t1 = start + timedelta(minutes=a.end if a.end is not None else a.start)
        placed: dict[int, list[int]] = {}
        for node, gi in a.gpus:
            placed.setdefault(node, []).append(gi)
        where = ", ".join(f"{c.names[n]} GPUs {','.join(map(str, g))}" for n, g in placed.items())
        jid = job_ids[a.job]
        header = (
            f"{t0:%Y-%m-%d %H:%M:%S} INFO launcher: job {jid} attempt {a.attempt} user {wl.user[a.job]} "
            f"vc {wl.vc[a.job]} framework {wl.framework[a.job]}\n"
            f"{t0:%Y-%m-%d %H:%M:%S} INFO launcher: placement {where}\n"
            f"{t0:%Y-%m-%d %H:%M:%S} INFO launcher: inputs {' '.join(wl.inputs[a.job])}\n"
        )
        footer = f"{t1:%Y-%m-%d %H:%M:%S} INFO launcher: attempt {a.attempt} of job {jid} exited\n"
        rel = f"logs/sim/{jid}/attempt-{a.attempt}.log"
        path = store.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(header + body + ("" if body.endswith("\n") else "\n") + footer, encoding="utf-8")
        out[(a.job, a.attempt)] = (rel, source)
        if k % 500 == 0 or k + 1 == len(failed):
            report("failure logs", k + 1, len(failed))
    return out


def _curves(plan: Plan, p: SimParams, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """job_metrics columns and per-job (epochs, converged_epoch)."""
    E = plan.job_epochs_done.astype(np.int64).copy()
    E[E < p.epochs_min] = 0
    rng = np.random.default_rng([seed, 4])
    conv = _converged_epochs(E, plan.workload.converge_fraction, p)
    jobs = np.flatnonzero(E > 0)
    reps = E[jobs]
    job = np.repeat(jobs, reps)
    offs = np.concatenate([[0], np.cumsum(reps)[:-1]]) if len(reps) else np.zeros(0, dtype=np.int64)
    epoch = np.arange(len(job)) - np.repeat(offs, reps) + 1
    loss, acc = _loss_accuracy(rng, len(plan.workload), job, epoch, E, conv, p.converge_tolerance)
    cols = {
        "job": np.concatenate([job, job]),
        "step": np.concatenate([epoch, epoch]),
        "metric": np.concatenate([np.zeros(len(job), dtype=np.int32), np.ones(len(job), dtype=np.int32)]),
        "value": np.concatenate([np.round(loss, 6), np.round(acc, 6)]),
    }
    return cols, E, conv


def _converged_epochs(E: np.ndarray, f: np.ndarray, p: SimParams) -> np.ndarray:
    """The epoch each job converges at (0 for a job without epochs): early converges before the
    ``early_converge_fraction`` of its ``E`` epochs, late ones after."""
    conv = np.clip(np.round(f * E), 1, np.maximum(E, 1)).astype(np.int64)
    early_cap = np.maximum(np.ceil(p.early_converge_fraction * E).astype(np.int64) - 1, 1)
    late_min = np.floor(p.early_converge_fraction * E).astype(np.int64) + 1
    early = f < p.early_converge_fraction
    conv = np.where(early, np.minimum(conv, early_cap), np.minimum(np.maximum(conv, late_min), np.maximum(E, 1)))
    conv[E == 0] = 0
    return conv


def _loss_accuracy(rng: np.random.Generator, n: int, job: np.ndarray, epoch: np.ndarray, E: np.ndarray,
                   conv: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """(loss, accuracy) of each (job, epoch) row: they approach their final values until the job's
    converged epoch, stay within ``tol`` of them afterwards, and reach them at one best epoch."""
    c = conv[job].astype(float)
    a_final = rng.uniform(0.55, 0.95, n)[job]
    a0 = a_final * rng.uniform(0.05, 0.4, n)[job]
    l_final = rng.uniform(0.05, 1.0, n)[job]
    l0 = l_final + rng.uniform(1.5, 4.0, n)[job]
    best_ep = np.floor(conv + rng.random(n) * (E - conv + 1)).astype(np.int64)[job]
    shape = np.clip((c - epoch) / c, 0.0, 1.0) ** 1.5 * rng.uniform(0.9, 1.1, len(job))
    pre = epoch < c
    gap = 2.5 * tol
    acc = np.where(pre, a_final - gap - (a_final - a0 - gap) * shape,
                   a_final - rng.uniform(0, 0.3 * tol, len(job)))
    loss = np.where(pre, l_final + np.maximum(3 * tol * l_final, gap) + (l0 - l_final) * shape,
                    l_final * (1 + rng.uniform(0, 0.4 * tol, len(job))))
    at_best = epoch == best_ep
    return np.where(at_best, l_final, loss), np.where(at_best, a_final, acc)


@dataclasses.dataclass
class _Run:
    """What every state table of one simulation is built from."""

    plan: Plan
    job_ids: list[str]
    uuids: list[str]
    logs: dict[tuple[int, int], tuple[str, str]]
    start: datetime
    minutes: int
    seed: int
    gpus: int
    days: float
    params: SimParams

    @property
    def start_us(self) -> int:
        return int(np.datetime64(self.start, "us").astype(np.int64))

    @property
    def end(self) -> datetime:
        return self.start + timedelta(minutes=self.minutes)

    def end_us(self, a: Attempt) -> int | None:
        return None if a.end is None else self.start_us + a.end * _MIN_US


def _nodes_table(run: _Run) -> pa.Table:
    c = run.plan.cluster
    n = len(c.names)
    return pa.table({
        "node": c.names,
        "gpus": pa.array(c.sizes, pa.int32()),
        "gpu_model": [m.name for m in c.models],
        "gpu_memory_bytes": pa.array([m.memory_bytes for m in c.models], pa.int64()),
        "source": ["simulate"] * n,
        "first_seen": pa.array([run.start] * n, pa.timestamp("us")),
        "last_seen": pa.array([run.end] * n, pa.timestamp("us")),
    })


def _gpus_table(run: _Run) -> pa.Table:
    c = run.plan.cluster
    gnode = c.gpu_node()
    return pa.table({
        "node": [c.names[i] for i in gnode],
        "gpu_index": pa.array(np.arange(c.total_gpus) - c.gpu_offset[gnode], pa.int32()),
        "uuid": run.uuids,
        "model": [c.models[i].name for i in gnode],
        "memory_total_bytes": pa.array([c.models[i].memory_bytes for i in gnode], pa.int64()),
        "price_per_hour": pa.array([c.models[i].price_per_hour for i in gnode], pa.float64()),
    })


def _jobs_table(run: _Run) -> pa.Table:
    wl = run.plan.workload
    return pa.table({
        "job_id": run.job_ids,
        "user": wl.user,
        "vc": wl.vc,
        "name": wl.name,
        "submitted": _ts(run.start_us, wl.submit),
        "status": run.plan.job_status,
        "requested_gpus": pa.array(wl.gpus, pa.int32()),
        "inputs": pa.array(wl.inputs, pa.list_(pa.string())),
        "framework": wl.framework,
        "source": ["simulate"] * len(run.job_ids),
    })


def _exit_status(a: Attempt) -> tuple[int | None, int | None]:
    """(exit code, signal) an attempt ended with."""
    if a.status == "passed":
        return 0, None
    if a.status == "killed":
        return 143, 15
    if a.status == "failed":
        return _EXIT.get(a.category or "", (1, None))
    return None, None


def _attempts_table(run: _Run) -> pa.Table:
    att = run.plan.attempts
    exits = [_exit_status(a) for a in att]
    return pa.table({
        "job_id": [run.job_ids[a.job] for a in att],
        "attempt": pa.array([a.attempt for a in att], pa.int32()),
        "start_time": _ts(run.start_us, np.array([a.start for a in att], dtype=np.int64)),
        "end_time": pa.array([run.end_us(a) for a in att], pa.timestamp("us")),
        "status": [a.status for a in att],
        "exit_code": pa.array([e[0] for e in exits], pa.int32()),
        "signal": pa.array([e[1] for e in exits], pa.int32()),
        "log_path": [run.logs.get((a.job, a.attempt), (None, None))[0] for a in att],
    })


def _placements_table(run: _Run) -> pa.Table:
    cols: dict[str, list[Any]] = {k: [] for k in ("job_id", "attempt", "node", "gpu_index", "start_time", "end_time")}
    names = run.plan.cluster.names
    for a in run.plan.attempts:
        end = run.end_us(a)
        for node, gi in a.gpus:
            cols["job_id"].append(run.job_ids[a.job])
            cols["attempt"].append(a.attempt)
            cols["node"].append(names[node])
            cols["gpu_index"].append(gi)
            cols["start_time"].append(run.start_us + a.start * _MIN_US)
            cols["end_time"].append(end)
    return pa.table({
        "job_id": cols["job_id"],
        "attempt": pa.array(cols["attempt"], pa.int32()),
        "node": cols["node"],
        "gpu_index": pa.array(cols["gpu_index"], pa.int32()),
        "start_time": pa.array(cols["start_time"], pa.timestamp("us")),
        "end_time": pa.array(cols["end_time"], pa.timestamp("us")),
    })


def _metrics_table(run: _Run, cols: dict[str, np.ndarray]) -> pa.Table:
    return pa.table({
        "job_id": pa.DictionaryArray.from_arrays(pa.array(cols["job"].astype(np.int32)), pa.array(run.job_ids)),
        "step": pa.array(cols["step"], pa.int32()),
        "metric": pa.DictionaryArray.from_arrays(pa.array(cols["metric"]), pa.array(["loss", "accuracy"])),
        "value": pa.array(cols["value"], pa.float64()),
    })


def _truth_table(run: _Run) -> pa.Table:
    """sim_truth: why each failed attempt failed, as planted."""
    wl, c = run.plan.workload, run.plan.cluster
    failed = [a for a in run.plan.attempts if a.status == "failed"]
    return pa.table({
        "job_id": [run.job_ids[a.job] for a in failed],
        "attempt": pa.array([a.attempt for a in failed], pa.int32()),
        "category": [a.category or "unknown" for a in failed],
        "origin": [planted_origin(a.category, wl.fault_frame[a.job]) for a in failed],
        "node_fault": pa.array([a.node_fault for a in failed], pa.bool_()),
        "planted": [a.planted for a in failed],
        "node": [c.names[a.fault_node if a.fault_node is not None else a.gpus[0][0]] for a in failed],
        "input": [
            (wl.corrupted_input[a.job] or wl.inputs[a.job][-1]) if a.category == "incorrect_input" else None
            for a in failed
        ],
        "log_source": [run.logs[(a.job, a.attempt)][1] for a in failed],
    })


def _job_truth_table(run: _Run, epochs: np.ndarray, conv: np.ndarray) -> pa.Table:
    """sim_job_truth: per job, the last attempt's spread and drawn utilization."""
    wl, p = run.plan.workload, run.params
    last: dict[int, Attempt] = {}
    for a in run.plan.attempts:
        last[a.job] = a
    servers = [last[j].servers if j in last else None for j in range(len(wl))]
    min_servers = [1 if g <= 8 else int(g) // 8 for g in wl.gpus]
    model_util = [
        None if s is None else round(planted_util(p, int(g), s, m), 4)
        for g, s, m in zip(wl.gpus, servers, min_servers, strict=True)
    ]
    return pa.table({
        "job_id": run.job_ids,
        "gpus": pa.array(wl.gpus, pa.int32()),
        "servers": pa.array(servers, pa.int32()),
        "min_servers": pa.array(min_servers, pa.int32()),
        "model_util": pa.array(model_util, pa.float64()),
        "job_util": pa.array([round(last[j].util_mean * 100, 4) if j in last else None for j in range(len(wl))],
                             pa.float64()),
        "epochs": pa.array(epochs, pa.int32()),
        "converged_epoch": pa.array(conv, pa.int32()),
        "planned_status": [PLAN_NAMES[int(x)] for x in wl.plan],
    })


def _planted_table(run: _Run) -> pa.Table:
    """sim_planted: the bad nodes and the corrupted inputs."""
    wl, c = run.plan.workload, run.plan.cluster
    rows: list[tuple[str, str, str]] = []
    for i in np.flatnonzero(c.bad):
        rows.append(("bad_node", c.names[i], json.dumps({"mttf_min": run.params.bad_node_mttf_min})))
    for ds in wl.corrupted:
        members = [j for j in range(len(wl)) if wl.corrupted_input[j] == ds]
        rows.append(("corrupted_input", ds, json.dumps({
            "jobs": [run.job_ids[j] for j in members], "users": sorted({wl.user[j] for j in members}),
        })))
    return pa.table({"kind": [r[0] for r in rows], "key": [r[1] for r in rows], "detail": [r[2] for r in rows]})


def _write_state(store: Store, run: _Run) -> dict[str, int]:
    """Every state table of the simulation, in one transaction; returns a few row counts."""
    cols, epochs, conv = _curves(run.plan, run.params, run.seed)
    tables = {
        "nodes": _nodes_table(run), "gpus": _gpus_table(run), "jobs": _jobs_table(run),
        "attempts": _attempts_table(run), "placements": _placements_table(run),
        "job_metrics": _metrics_table(run, cols), "sim_truth": _truth_table(run),
        "sim_job_truth": _job_truth_table(run, epochs, conv), "sim_planted": _planted_table(run),
    }
    with store.write() as con:
        con.execute(
            "INSERT INTO sim_runs (run_id, created_at, seed, gpus, days, start_time, end_time, status, params)"
            " VALUES (1, ?, ?, ?, ?, ?, ?, 'writing', ?)",
            [datetime.now(UTC).replace(tzinfo=None), run.seed, run.gpus, float(run.days), run.start, run.end,
             json.dumps(run.params.to_jsonable())],
        )
        for name, table in tables.items():
            insert_batch(con, name, table)
    return {"placements": tables["placements"].num_rows, "job_metrics": tables["job_metrics"].num_rows}

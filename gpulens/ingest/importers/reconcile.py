"""Observed placements (from exporter labels) reconciled with scheduler records.

Rules (docs/import-prometheus.md, "Reconciliation"):

1. A job seen in exporter labels that no scheduler import knows becomes a job of
   source ``prometheus`` with one attempt from its first to its last step seen
   (``end_time`` one step after the last; NULL, status ``running``, when it was
   seen within two steps of the import's end; otherwise status NULL: the labels
   say where it ran, not how it ended) and one placement per GPU seen.
2. A job a scheduler import already holds (``gpulens import slurm`` for
   ``hpc_job``, ``gpulens import kubernetes`` for pods) keeps its jobs and
   attempts rows. Each observed GPU goes to the attempt whose time window
   overlaps the observation (the nearest attempt otherwise, counted as
   ``observed_outside_attempts``). On every node where an attempt has observed
   GPUs, its placements are replaced by the observed ones: the scheduler's
   assumed indices 0..k-1 give way to the real ones (``placements_reconciled``).
   Nodes without observations keep the scheduler's placements.
3. Placements are never duplicated: a job's rows are rewritten as a whole by
   each import that touches it, from ``observed_placements`` (which keeps first
   and last sight per job and GPU) and the scheduler's rows.

Scheduler importers call :func:`reconcile_placements` for their jobs too, so the
order of imports does not matter.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import duckdb
import pyarrow as pa

from gpulens.ingest.importers.common import Quirks
from gpulens.store.tables import delete_matching, insert_batch, replace_batch

__all__ = ["Observed", "merge_observed", "reconcile_placements"]

_T = pa.timestamp("us")
Observed = tuple[str, str, int, str, int, int, str]
Row = tuple[Any, ...]  # job, node, gpu, uuid, first ms, last ms, via


def merge_observed(con: duckdb.DuckDBPyConnection, observed: Sequence[Observed]) -> None:
    """Add sightings to ``observed_placements`` (first = min, last = max per job and GPU)."""
    if not observed:
        return
    spans: dict[tuple[str, str, int], tuple[int, int]] = {}
    meta: dict[tuple[str, str, int], tuple[str, str]] = {}
    for job, node, gpu, uuid, first, last, via in observed:
        key = (job, node, gpu)
        old = spans.get(key)
        spans[key] = (first, last) if old is None else (min(old[0], first), max(old[1], last))
        meta[key] = (uuid, via)
    keys = pa.table({"job_id": [k[0] for k in spans], "node": [k[1] for k in spans],
                     "gpu_index": pa.array([k[2] for k in spans], pa.int32())})
    for key, (first, last) in _existing(con, keys).items():
        if key in spans:
            spans[key] = (min(first, spans[key][0]), max(last, spans[key][1]))
    ks = list(spans)
    batch = pa.table({
        "job_id": [k[0] for k in ks], "node": [k[1] for k in ks],
        "gpu_index": pa.array([k[2] for k in ks], pa.int32()),
        "uuid": [meta[k][0] or None for k in ks],
        "first_seen": pa.array([spans[k][0] * 1000 for k in ks], pa.int64()).cast(_T),
        "last_seen": pa.array([spans[k][1] * 1000 for k in ks], pa.int64()).cast(_T),
        "via": [meta[k][1] for k in ks],
    })
    replace_batch(con, "observed_placements", batch, ["job_id", "node", "gpu_index"])


def _existing(con: duckdb.DuckDBPyConnection, keys: pa.Table) -> dict[tuple[str, str, int], tuple[int, int]]:
    from gpulens.store.tables import registered

    with registered(con, "__obs_keys", keys) as view:
        sql = ("SELECT o.job_id, o.node, o.gpu_index, epoch_ms(o.first_seen), epoch_ms(o.last_seen)"  # noqa: S608
               f" FROM observed_placements o JOIN {view} k USING (job_id, node, gpu_index)")
        rows = con.execute(sql).fetchall()
    return {(str(r[0]), str(r[1]), int(r[2])): (int(r[3]), int(r[4])) for r in rows}


def reconcile_placements(con: duckdb.DuckDBPyConnection, *, step_s: float = 60.0,
                         import_end: datetime | None = None,
                         job_ids: Sequence[str] | None = None) -> dict[str, int]:
    """Apply the rules above to every observed job (or to ``job_ids``). Returns counts."""
    q = Quirks()
    obs = con.execute(
        "SELECT job_id, node, gpu_index, first_seen, last_seen, via FROM observed_placements"
        " ORDER BY job_id, node, gpu_index").fetchall()
    wanted = set(job_ids) if job_ids is not None else None
    by_job: dict[str, list[tuple[str, int, datetime, datetime, str]]] = defaultdict(list)
    for job, node, gpu, first, last, via in obs:
        if wanted is None or job in wanted:
            by_job[str(job)].append((str(node), int(gpu), first, last, str(via)))
    if not by_job:
        return {}
    known = _attempts(con, list(by_job))
    step = timedelta(seconds=step_s)
    end = import_end.replace(tzinfo=None) if import_end else None
    jobs, atts, pls = [], [], []
    for job, rows in by_job.items():
        if job in known:
            pls += _onto_attempts(job, rows, known[job], step, q)
        else:
            j, a, p = _new_job(job, rows, step, end)
            jobs.append(j)
            atts.append(a)
            pls += p
            q["jobs_from_labels"] += 1
    _write(con, jobs, atts, pls)
    return q.as_dict()


def _attempts(con: duckdb.DuckDBPyConnection, job_ids: list[str]) -> dict[str, list[tuple[int, datetime | None, datetime | None]]]:
    from gpulens.store.tables import registered

    out: dict[str, list[tuple[int, datetime | None, datetime | None]]] = defaultdict(list)
    with registered(con, "__recon_jobs", pa.table({"job_id": job_ids})) as view:
        sql = ("SELECT a.job_id, a.attempt, a.start_time, a.end_time FROM attempts a"  # noqa: S608
               f" JOIN jobs j USING (job_id) JOIN {view} k USING (job_id)"
               " WHERE coalesce(j.source, '') <> 'prometheus' ORDER BY a.job_id, a.attempt")
        rows = con.execute(sql).fetchall()
    for job, att, start, end in rows:
        out[str(job)].append((int(att), start, end))
    return dict(out)


def _onto_attempts(job: str, rows: list[tuple[str, int, datetime, datetime, str]],
                   attempts: list[tuple[int, datetime | None, datetime | None]], step: timedelta,
                   q: Quirks) -> list[Row]:
    out = []
    for node, gpu, first, last, _ in rows:
        hit = [a for a, s, e in attempts if (s is None or s <= last) and (e is None or e >= first)]
        if not hit:
            q["observed_outside_attempts"] += 1
            hit = [min(attempts, key=lambda x: abs(((x[1] or first) - first).total_seconds()))[0]]
        out.append((job, hit[0], node, gpu, first, last + step))
    q["placements_reconciled"] += len(out)
    return out


def _new_job(job: str, rows: list[tuple[str, int, datetime, datetime, str]], step: timedelta,
             end: datetime | None) -> tuple[Row, Row, list[Row]]:
    first = min(r[2] for r in rows)
    last = max(r[3] for r in rows)
    running = end is not None and last >= end - 2 * step
    status = "running" if running else None
    ns, _, name = job.rpartition("/")
    gpus = len({(r[0], r[1]) for r in rows})
    j = (job, ns or None, name, first, status, gpus, "prometheus")
    a = (job, 0, first, None if running else last + step, status)
    p = [(job, 0, node, gpu, f, lt + step) for node, gpu, f, lt, _ in rows]
    return j, a, p


def _write(con: duckdb.DuckDBPyConnection, jobs: list[Row], atts: list[Row],
           pls: list[Row]) -> None:
    if jobs:
        jt = pa.table({"job_id": [r[0] for r in jobs], "vc": [r[1] for r in jobs],
                       "name": [r[2] for r in jobs], "submitted": pa.array([r[3] for r in jobs], _T),
                       "status": pa.array([r[4] for r in jobs], pa.string()),
                       "requested_gpus": pa.array([r[5] for r in jobs], pa.int32()),
                       "source": [r[6] for r in jobs]})
        at = pa.table({"job_id": [r[0] for r in atts], "attempt": pa.array([0] * len(atts), pa.int32()),
                       "start_time": pa.array([r[2] for r in atts], _T),
                       "end_time": pa.array([r[3] for r in atts], _T),
                       "status": pa.array([r[4] for r in atts], pa.string())})
        keys = pa.table({"job_id": jt.column("job_id")})
        for table in ("placements", "attempts", "jobs"):
            delete_matching(con, table, keys, ["job_id"])
        insert_batch(con, "jobs", jt)
        insert_batch(con, "attempts", at)
    if not pls:
        return
    pt = pa.table({"job_id": [r[0] for r in pls], "attempt": pa.array([r[1] for r in pls], pa.int32()),
                   "node": [r[2] for r in pls], "gpu_index": pa.array([r[3] for r in pls], pa.int32()),
                   "start_time": pa.array([r[4] for r in pls], _T),
                   "end_time": pa.array([r[5] for r in pls], _T)})
    # on each (job, attempt, node) with observations, the observed GPUs replace the rest
    delete_matching(con, "placements", pt.select(["job_id", "attempt", "node"]),
                    ["job_id", "attempt", "node"])
    insert_batch(con, "placements", pt)

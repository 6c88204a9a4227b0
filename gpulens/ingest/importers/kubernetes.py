"""Import Kubernetes pods (and events) as jobs, attempts, placements and failures.

Input: the output of ``kubectl get pods -A -o json`` and, optionally,
``kubectl get events -A -o json`` (any number of files; each item's ``kind``
says which it is). Pods are read as a stream (``items``), so a large cluster's
dump does not have to fit in memory twice.

* Job ``<namespace>/<pod>`` (the name dcgm-exporter's pod mapping gives the same
  pod, so GPU samples and placements line up), ``vc`` = namespace, ``name`` = the
  owner (Job, PyTorchJob, ...) or the pod, ``requested_gpus`` = the containers'
  ``nvidia.com/gpu`` limits (requests when no limit), source ``kubernetes``.
* Attempts from the GPU container's status (the first container when none asks
  for GPUs): ``restartCount`` restarts; ``lastState.terminated`` is the attempt
  before the current one, ``state`` the current one; earlier restarts keep no
  details in the API (rows with NULL times, counted as ``restarts_without_detail``).
* Failures (method ``kubernetes``), see :data:`REASONS`: ``OOMKilled`` -> cpu_oom
  (a container memory limit is host memory; CUDA OOM shows as ``Error`` and needs
  the log), ``Evicted`` / preemption -> preempted, ``DeadlineExceeded``
  (activeDeadlineSeconds) -> preempted, like Slurm's "DUE TO TIME LIMIT" in
  diagnosis/rules; ``Error`` by exit code (137/143: killed by a signal from
  outside -> preempted; 134/135/136/139: crash) else unknown. A failure already
  diagnosed from logs (another method) is kept.
* Placements: the pod's node with GPU indices 0..k-1 (``gpu_indices_assumed``)
  until observed placements from dcgm-exporter's pod labels replace them
  (reconcile.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from gpulens.errors import InputError
from gpulens.ingest.importers.common import (
    ImportResult,
    Quirks,
    arrow_rows,
    delete_jobs,
    insert_arrow,
    record_import,
)
from gpulens.ingest.importers.jsonstream import iter_array
from gpulens.ingest.importers.reconcile import reconcile_placements
from gpulens.store import Store
from gpulens.store.tables import registered, replace_batch
from gpulens.vocab import DEFAULT_ORIGIN

__all__ = ["REASONS", "category_of", "import_kubernetes"]

_T = pa.timestamp("us")
GPU_RESOURCE = "nvidia.com/gpu"

#: Termination / pod reasons -> failure category (vocab.CATEGORIES).
REASONS: dict[str, str] = {
    "OOMKilled": "cpu_oom",
    "OOMKilling": "cpu_oom",  # node OOM killer (event)
    "Evicted": "preempted",
    "Preempted": "preempted",
    "Preempting": "preempted",
    "PreemptionByScheduler": "preempted",
    "DeadlineExceeded": "preempted",
    "StartError": "cuda_env_error",
    "ContainerCannotRun": "cuda_env_error",
}
_SIGNALLED = {137: "preempted", 143: "preempted", 134: "crash", 135: "crash", 136: "crash", 139: "crash"}
_KILLED = {"Evicted", "DeadlineExceeded", "Preempted", "Preempting", "PreemptionByScheduler"}


def category_of(reason: str | None, exit_code: int | None) -> tuple[str, float]:
    """(category, confidence) for a termination reason and exit code."""
    if reason in REASONS:
        return REASONS[reason], 0.9
    if exit_code in _SIGNALLED:
        return _SIGNALLED[exit_code], 0.6
    return "unknown", 0.2


def _time(value: Any) -> datetime | None:
    if not value:
        return None
    try:
        t = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


@dataclass
class _Tables:
    q: Quirks = field(default_factory=Quirks)
    jobs: list[tuple[Any, ...]] = field(default_factory=list)
    atts: list[tuple[Any, ...]] = field(default_factory=list)
    pls: list[tuple[Any, ...]] = field(default_factory=list)
    fails: dict[tuple[str, int], tuple[str, float, list[str]]] = field(default_factory=dict)
    events: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # job -> (reason, message)
    last_attempt: dict[str, int] = field(default_factory=dict)


def _gpus(spec: dict[str, Any]) -> tuple[int, str | None]:
    total, main = 0, None
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        n = (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE)
        if n:
            total += int(n)
            main = main or c.get("name")
    return total, main


def _status_of(phase: str, reason: str | None, q: Quirks) -> str | None:
    if phase == "Failed":
        return "killed" if reason in _KILLED else "failed"
    out = {"Pending": "queued", "Running": "running", "Succeeded": "passed"}.get(phase)
    if out is None:
        q["pods_in_unknown_phase"] += 1
    return out


def _terminated(t: dict[str, Any], job: str, attempt: int, b: _Tables) -> tuple[Any, ...]:
    code = t.get("exitCode")
    status = "passed" if code == 0 else "failed"
    if code not in (None, 0) or t.get("reason") not in (None, "Completed"):
        cat, conf = category_of(t.get("reason"), code)
        ev = [f"reason={t.get('reason')}", f"exit_code={code}"]
        if t.get("message"):
            ev.append(str(t["message"])[:300])
        b.fails[(job, attempt)] = (cat, conf, ev)
        status = "killed" if cat == "preempted" else "failed"
    return (job, attempt, _time(t.get("startedAt")), _time(t.get("finishedAt")), status, code,
            t.get("signal"))


def _attempts(pod: dict[str, Any], job: str, main: str | None, b: _Tables) -> list[tuple[Any, ...]]:
    st = pod.get("status") or {}
    statuses = st.get("containerStatuses") or []
    cs = next((c for c in statuses if c.get("name") == main), statuses[0] if statuses else None)
    start = _time(st.get("startTime"))
    if cs is None:
        return [(job, 0, start, None, None, None, None)] if start else []
    n = int(cs.get("restartCount") or 0)
    out: list[tuple[Any, ...]] = [(job, i, None, None, "failed", None, None) for i in range(max(n - 1, 0))]
    b.q["restarts_without_detail"] += max(n - 1, 0)
    last = (cs.get("lastState") or {}).get("terminated")
    if n and last:
        out.append(_terminated(last, job, n - 1, b))
    elif n:
        out.append((job, n - 1, None, None, "failed", None, None))
    state = cs.get("state") or {}
    if "terminated" in state:
        out.append(_terminated(state["terminated"], job, n, b))
    elif "running" in state:
        out.append((job, n, _time(state["running"].get("startedAt")), None, "running", None, None))
    if not out and start:
        out.append((job, 0, start, None, None, None, None))
    return out


def _pod(pod: dict[str, Any], where: str, b: _Tables) -> None:
    meta = pod.get("metadata") or {}
    if pod.get("kind", "Pod") != "Pod" or not meta.get("name"):
        raise InputError(f"{where}: not a Pod object.", "Pass `kubectl get pods -A -o json` output.")
    job = f"{meta.get('namespace', 'default')}/{meta['name']}"
    spec = pod.get("spec") or {}
    st = pod.get("status") or {}
    gpus, main = _gpus(spec)
    owners = meta.get("ownerReferences") or []
    name = owners[0].get("name") if owners else (meta.get("labels") or {}).get("job-name", meta["name"])
    status = _status_of(str(st.get("phase", "")), st.get("reason"), b.q)
    b.jobs.append((job, (meta.get("labels") or {}).get("user"), meta.get("namespace"), name,
                   _time(meta.get("creationTimestamp")), status, gpus or None, "kubernetes"))
    atts = _attempts(pod, job, main, b)
    if atts and st.get("reason") in REASONS and status in ("failed", "killed"):
        last = atts[-1]
        cat, conf = REASONS[st["reason"]], 0.9
        b.fails[(job, last[1])] = (cat, conf, [f"pod reason={st['reason']}", str(st.get("message", ""))[:300]])
        atts[-1] = (*last[:4], status, *last[5:])
    b.atts += atts
    node = spec.get("nodeName")
    if gpus and node:
        b.q["gpu_indices_assumed"] += 1
        b.pls += [(job, a[1], node, g) for a in atts for g in range(gpus)]
    elif not gpus:
        b.q["pods_without_gpus"] += 1
    if atts:
        b.last_attempt[job] = atts[-1][1]


def _event(ev: dict[str, Any], b: _Tables) -> None:
    obj = ev.get("involvedObject") or ev.get("regarding") or {}
    if obj.get("kind") != "Pod":
        return
    job = f"{obj.get('namespace', 'default')}/{obj.get('name')}"
    b.events.setdefault(job, []).append((str(ev.get("reason", "")), str(ev.get("message") or ev.get("note") or "")))


def _apply_events(b: _Tables) -> None:
    for job, evs in b.events.items():
        if job not in b.last_attempt:
            b.q["events_for_pods_not_imported"] += len(evs)
            continue
        key = (job, b.last_attempt[job])
        for reason, message in evs:
            cur = b.fails.get(key)
            if reason in REASONS and cur is not None and cur[0] == "unknown":
                b.fails[key] = (REASONS[reason], 0.7, [*cur[2], f"event {reason}: {message[:200]}"])
                b.q["failures_from_events"] += 1


def _read(path: Path, b: _Tables) -> int:
    if not path.is_file():
        raise InputError(f"{path} does not exist.", "Pass files written by `kubectl get pods -A -o json`.")
    n = 0
    for line, item in iter_array(path, "items"):
        where = f"{path}:{line}"
        if not isinstance(item, dict):
            raise InputError(f"{where}: an item is not an object.", "Pass kubectl's JSON output unchanged.")
        if item.get("kind") == "Event" or "involvedObject" in item:
            _event(item, b)
        else:
            _pod(item, where, b)
            n += 1
    return n


def _tables(b: _Tables) -> tuple[pa.Table, pa.Table, pa.Table]:
    return (
        arrow_rows([("job_id", pa.string()), ("user", pa.string()), ("vc", pa.string()),
                    ("name", pa.string()), ("submitted", _T), ("status", pa.string()),
                    ("requested_gpus", pa.int32()), ("source", pa.string())], b.jobs),
        arrow_rows([("job_id", pa.string()), ("attempt", pa.int32()), ("start_time", _T),
                    ("end_time", _T), ("status", pa.string()), ("exit_code", pa.int32()),
                    ("signal", pa.int32())], b.atts),
        arrow_rows([("job_id", pa.string()), ("attempt", pa.int32()), ("node", pa.string()),
                    ("gpu_index", pa.int32())], b.pls),
    )


def _write_failures(con: duckdb.DuckDBPyConnection, b: _Tables) -> int:
    keys = pa.table({"job_id": [k[0] for k in b.fails], "attempt": pa.array([k[1] for k in b.fails], pa.int32())})
    with registered(con, "__k8s_fail_keys", keys) as view:
        sql = ("SELECT f.job_id, f.attempt, f.method FROM failures f"  # noqa: S608
               f" JOIN {view} k USING (job_id, attempt)")
        existing = {(str(r[0]), int(r[1])): str(r[2]) for r in con.execute(sql).fetchall()}
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = []
    for (job, att), (cat, conf, ev) in b.fails.items():
        method = existing.get((job, att))
        if method is not None and method != "kubernetes":
            b.q["failures_kept_from_logs"] += 1
            continue
        rows.append((job, att, cat, DEFAULT_ORIGIN[cat], conf, ev, "kubernetes", now))
    table = arrow_rows([("job_id", pa.string()), ("attempt", pa.int32()), ("category", pa.string()),
                        ("origin", pa.string()), ("confidence", pa.float64()),
                        ("evidence", pa.list_(pa.string())), ("method", pa.string()),
                        ("diagnosed_at", _T)], rows)

    return replace_batch(con, "failures", table, ["job_id", "attempt"])


def import_kubernetes(store: Store, paths: list[Path]) -> ImportResult:
    """Import pod (and event) dumps in one transaction; re-importing replaces the pods' rows."""
    b = _Tables()
    pods = sum(_read(p, b) for p in paths)
    _apply_events(b)
    jobs, atts, pls = _tables(b)
    result = ImportResult("kubernetes", [str(p) for p in paths])
    with store.write() as con:
        delete_jobs(con, jobs.column("job_id"))
        result.rows = {"pods": pods, "jobs": insert_arrow(con, "jobs", jobs),
                       "attempts": insert_arrow(con, "attempts", atts),
                       "placements": insert_arrow(con, "placements", pls),
                       "failures": _write_failures(con, b)}
        b.q.update(reconcile_placements(con, job_ids=jobs.column("job_id").to_pylist()))
        result.quirks[", ".join(result.paths)] = b.q.as_dict()
        record_import(con, "kubernetes", ", ".join(result.paths), pods, b.q.as_dict())
    return result

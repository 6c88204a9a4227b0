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
  diagnosed from logs (another method) is kept. The reason itself is kept in
  ``attempts.reason``: ``gpulens diagnose`` joins it with the log
  (:mod:`gpulens.diagnosis.termination`), so an OOMKilled container whose log shows
  nothing is still cpu_oom after diagnosis.
* Logs (``logs=``, ``--logs``): the kubelet's ``/var/log/pods`` files or ``kubectl logs``
  dumps of the GPU container, restart N = attempt N (:mod:`podlogs`), copied as plain
  text into the data directory and recorded as the attempt's ``log_path``.
* A field of the wrong type (``exitCode`` a string, ``reason`` a list, ...) is one
  :class:`InputError` naming the file, line and field; nothing is stored.
* Placements: the pod's node with GPU indices 0..k-1 (``gpu_indices_assumed``)
  until observed placements from dcgm-exporter's pod labels replace them
  (reconcile.py).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from gpulens.errors import InputError, StoreError
from gpulens.ingest.importers.common import (
    ImportResult,
    Quirks,
    arrow_rows,
    delete_jobs,
    insert_arrow,
    parsing,
    record_import,
)
from gpulens.ingest.importers.jsonstream import iter_array
from gpulens.ingest.importers.podlogs import LogFile, find_logs, stage_copy
from gpulens.ingest.importers.reconcile import reconcile_placements
from gpulens.ingest.termination import REASONS, category_of
from gpulens.store import Store
from gpulens.store.tables import registered, replace_batch
from gpulens.vocab import DEFAULT_ORIGIN

__all__ = ["REASONS", "PodDump", "category_of", "import_kubernetes", "read_pods"]

_T = pa.timestamp("us")
GPU_RESOURCE = "nvidia.com/gpu"
_HINT = "Pass `kubectl get pods -A -o json` output unchanged (or fix or remove that item); nothing was stored."
_KILLED = {"Evicted", "DeadlineExceeded", "Preempted", "Preempting", "PreemptionByScheduler"}
_I32 = (-(2**31), 2**31 - 1)
_MAX_GPUS = 256  # per container: more is a typo, not a node


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), type(value).__name__)


class _F:
    """A JSON object read field by field: a value of the wrong type is one :class:`InputError`
    naming the file, line and field (``status.containerStatuses[0].exitCode``)."""

    __slots__ = ("d", "path", "where")

    def __init__(self, value: Any, path: str, where: str) -> None:
        if value is not None and not isinstance(value, dict):
            raise self._wrong(where, path, value, "an object")
        self.d: dict[str, Any] = value or {}
        self.path, self.where = path, where

    @staticmethod
    def _wrong(where: str, path: str, value: Any, expected: str) -> InputError:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        return InputError(f"{where}: {path or 'the item'} is {_kind_of(value)} ({shown}), expected {expected}.",
                          _HINT)

    def _name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str) -> Any:
        return self.d.get(key)

    def obj(self, key: str) -> _F:
        return _F(self.d.get(key), self._name(key), self.where)

    def objs(self, key: str) -> list[_F]:
        v = self.d.get(key)
        if v is None:
            return []
        if not isinstance(v, list):
            raise self._wrong(self.where, self._name(key), v, "a list")
        return [_F(x, f"{self._name(key)}[{i}]", self.where) for i, x in enumerate(v)]

    def text(self, key: str) -> str | None:
        v = self.d.get(key)
        if v is not None and not isinstance(v, str):
            raise self._wrong(self.where, self._name(key), v, "a string")
        return v

    def num(self, key: str) -> int | None:
        v = self.d.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or not _I32[0] <= v <= _I32[1]:
            raise self._wrong(self.where, self._name(key), v, "a whole number")
        return v

    def count(self, key: str) -> int:
        """A resource quantity such as ``nvidia.com/gpu``: "4" or 4."""
        v = self.d.get(key)
        if v is None or v == "":
            return 0
        n = int(v) if isinstance(v, str) and v.isascii() and v.isdigit() and len(v) < 5 else v
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= _MAX_GPUS:
            raise self._wrong(self.where, self._name(key), v, f"a count of GPUs (0 to {_MAX_GPUS})")
        return n

    def time(self, key: str, q: Quirks) -> datetime | None:
        v = self.text(key)
        if not v:
            return None
        try:
            t = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            q["times_not_understood"] += 1
            return None
        return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


@dataclass
class _Pod:
    """What attaching logs needs of an imported pod."""

    uid: str | None
    container: str | None  # the container whose restarts are the attempts
    restarts: int
    attempts: set[int]


@dataclass
class PodDump:
    """What the pod and event dumps say, ready to be written (:func:`read_pods`)."""

    q: Quirks = field(default_factory=Quirks)
    jobs: list[tuple[Any, ...]] = field(default_factory=list)
    atts: list[tuple[Any, ...]] = field(default_factory=list)  # (..., signal, reason)
    pls: list[tuple[Any, ...]] = field(default_factory=list)
    fails: dict[tuple[str, int], tuple[str, float, list[str]]] = field(default_factory=dict)
    events: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # job -> (reason, message)
    last_attempt: dict[str, int] = field(default_factory=dict)
    reasons: dict[tuple[str, int], str] = field(default_factory=dict)  # termination reason per attempt
    pods: dict[str, _Pod] = field(default_factory=dict)
    n_pods: int = 0

    def forget(self, job: str) -> None:
        """Drop what an earlier item said about ``job`` (a pod listed twice: the later one wins)."""
        self.q["pods_listed_twice"] += 1
        self.jobs = [r for r in self.jobs if r[0] != job]
        self.atts = [r for r in self.atts if r[0] != job]
        self.pls = [r for r in self.pls if r[0] != job]
        for d in (self.fails, self.reasons):
            for key in [k for k in d if k[0] == job]:
                del d[key]

    def tables(self, logs: dict[tuple[str, int], str]) -> tuple[pa.Table, pa.Table, pa.Table]:
        """jobs, attempts and placements as Arrow tables; ``logs``: log_path per attempt."""
        return _tables(self, logs)


def _gpus(spec: _F) -> tuple[int, str | None]:
    total, main = 0, None
    for c in spec.objs("containers"):
        res = c.obj("resources")
        n = res.obj("limits").count(GPU_RESOURCE) or res.obj("requests").count(GPU_RESOURCE)
        if n:
            total += n
            main = main or c.text("name")
    return total, main


def _status_of(phase: str, reason: str | None, q: Quirks) -> str | None:
    if phase == "Failed":
        return "killed" if reason in _KILLED else "failed"
    out = {"Pending": "queued", "Running": "running", "Succeeded": "passed"}.get(phase)
    if out is None:
        q["pods_in_unknown_phase"] += 1
    return out


def _terminated(t: _F, job: str, attempt: int, b: PodDump) -> tuple[Any, ...]:
    code, reason, message = t.num("exitCode"), t.text("reason"), t.text("message")
    status = "passed" if code == 0 else "failed"
    if code not in (None, 0) or reason not in (None, "Completed"):
        cat, conf = category_of(reason, code)
        ev = [f"reason={reason}", f"exit_code={code}"]
        if message:
            ev.append(message[:300])
        b.fails[(job, attempt)] = (cat, conf, ev)
        status = "killed" if cat == "preempted" else "failed"
    if reason:
        b.reasons[(job, attempt)] = reason
    return (job, attempt, t.time("startedAt", b.q), t.time("finishedAt", b.q), status, code, t.num("signal"))


def _attempts(st: _F, job: str, main: str | None, b: PodDump) -> tuple[list[tuple[Any, ...]], _F | None]:
    statuses = st.objs("containerStatuses")
    cs = next((c for c in statuses if c.text("name") == main), statuses[0] if statuses else None)
    start = st.time("startTime", b.q)
    if cs is None:
        return ([(job, 0, start, None, None, None, None)] if start else []), None
    n = cs.num("restartCount") or 0
    if n < 0 or n > 100_000:
        raise _F._wrong(cs.where, f"{cs.path}.restartCount", n, "a restart count (0 or more)")
    out: list[tuple[Any, ...]] = [(job, i, None, None, "failed", None, None) for i in range(max(n - 1, 0))]
    b.q["restarts_without_detail"] += max(n - 1, 0)
    last = cs.obj("lastState")
    if n and last.get("terminated") is not None:
        out.append(_terminated(last.obj("terminated"), job, n - 1, b))
    elif n:
        out.append((job, n - 1, None, None, "failed", None, None))
    state = cs.obj("state")
    if state.get("terminated") is not None:
        out.append(_terminated(state.obj("terminated"), job, n, b))
    elif "running" in state.d:
        out.append((job, n, state.obj("running").time("startedAt", b.q), None, "running", None, None))
    if not out and start:
        out.append((job, 0, start, None, None, None, None))
    return out, cs


def _pod(item: Any, where: str, b: PodDump) -> None:
    pod = _F(item, "", where)
    meta = pod.obj("metadata")
    name = meta.text("name")
    if pod.text("kind") not in (None, "Pod") or not name:
        what = "metadata.name is missing" if not name else f"kind is {pod.text('kind')!r}"
        raise InputError(f"{where}: not a Pod object ({what}).", "Pass `kubectl get pods -A -o json` output.")
    ns = meta.text("namespace") or "default"
    job = f"{ns}/{name}"
    if job in b.pods:
        b.forget(job)
    spec, st, labels = pod.obj("spec"), pod.obj("status"), meta.obj("labels")
    gpus, main = _gpus(spec)
    owners = meta.objs("ownerReferences")
    owner = owners[0].text("name") if owners else labels.text("job-name") or name
    pod_reason = st.text("reason")
    status = _status_of(st.text("phase") or "", pod_reason, b.q)
    b.jobs.append((job, labels.text("user"), ns, owner, meta.time("creationTimestamp", b.q), status, gpus or None,
                   "kubernetes"))
    atts, cs = _attempts(st, job, main, b)
    if atts and pod_reason in REASONS and status in ("failed", "killed"):
        last = atts[-1]
        b.fails[(job, last[1])] = (REASONS[pod_reason], 0.9,
                                   [f"pod reason={pod_reason}", (st.text("message") or "")[:300]])
        b.reasons[(job, last[1])] = pod_reason
        atts[-1] = (*last[:4], status, *last[5:])
    b.atts += atts
    node = spec.text("nodeName")
    if gpus and node:
        b.q["gpu_indices_assumed"] += 1
        b.pls += [(job, a[1], node, g) for a in atts for g in range(gpus)]
    elif not gpus:
        b.q["pods_without_gpus"] += 1
    if atts:
        b.last_attempt[job] = atts[-1][1]
    b.pods[job] = _Pod(meta.text("uid"), cs.text("name") if cs else main,
                       (cs.num("restartCount") or 0) if cs else 0, {int(a[1]) for a in atts})


def _event(item: dict[str, Any], where: str, b: PodDump) -> None:
    ev = _F(item, "", where)
    obj = ev.obj("involvedObject") if ev.get("involvedObject") is not None else ev.obj("regarding")
    if obj.text("kind") != "Pod":
        return
    job = f"{obj.text('namespace') or 'default'}/{obj.text('name')}"
    b.events.setdefault(job, []).append((ev.text("reason") or "", ev.text("message") or ev.text("note") or ""))


def _apply_events(b: PodDump) -> None:
    for job, evs in b.events.items():
        if job not in b.last_attempt:
            b.q["events_for_pods_not_imported"] += len(evs)
            continue
        key = (job, b.last_attempt[job])
        for reason, message in evs:
            cur = b.fails.get(key)
            if reason in REASONS and cur is not None and cur[0] == "unknown":
                b.fails[key] = (REASONS[reason], 0.7, [*cur[2], f"event {reason}: {message[:200]}"])
                b.reasons[key] = reason
                b.q["failures_from_events"] += 1


def _read(path: Path, b: PodDump) -> int:
    if not path.is_file():
        raise InputError(f"{path} does not exist.", "Pass files written by `kubectl get pods -A -o json`.")
    n = 0
    for line, item in iter_array(path, "items"):
        where = f"{path}:{line}"
        if not isinstance(item, dict):
            raise InputError(f"{where}: an item is not an object.", "Pass kubectl's JSON output unchanged.")
        with parsing(where, _HINT):
            if item.get("kind") == "Event" or "involvedObject" in item:
                _event(item, where, b)
            else:
                _pod(item, where, b)
                n += 1
    return n


# ------------------------------------------------------------------ logs
def _attempt_of(lf: LogFile, pod: _Pod | None, q: Quirks) -> int | None:
    if pod is None:
        q["logs_for_pods_not_imported"] += 1
        return None
    if lf.uid and pod.uid and lf.uid != pod.uid:
        q["logs_of_other_pod_instances"] += 1  # a pod of the same name, deleted and created again
        return None
    if lf.container is not None and lf.container != pod.container:
        q["logs_of_other_containers"] += 1
        return None
    attempt = lf.restart if lf.restart is not None else pod.restarts - lf.previous
    if attempt not in pod.attempts:
        q["logs_without_attempt"] += 1  # e.g. a restart after the pods were listed
        return None
    return attempt


def _pick_logs(roots: list[Path], b: PodDump) -> dict[tuple[str, int], LogFile]:
    """The log of each attempt: the kubelet's files before a `kubectl logs` dump of the same run."""
    chosen: dict[tuple[str, int], LogFile] = {}
    for lf in find_logs(roots, b.q):
        attempt = _attempt_of(lf, b.pods.get(lf.job_id), b.q)
        if attempt is None:
            continue
        key = (lf.job_id, attempt)
        if key in chosen:
            b.q["logs_given_twice"] += 1
            if chosen[key].kubelet or not lf.kubelet:
                continue
        chosen[key] = lf
    return chosen


def _stage_logs(store: Store, chosen: dict[tuple[str, int], LogFile], b: PodDump,
                staged: dict[tuple[str, int], tuple[Path, Path]]) -> None:
    """Write each log's plain copy under a temporary name: (temporary, final) per attempt."""
    for (job, attempt), lf in sorted(chosen.items()):
        dest = store.logs / "kubernetes" / lf.namespace / lf.pod / f"{attempt}.log"
        try:
            tmp = stage_copy(lf, dest, b.q)
        except OSError as exc:
            raise StoreError(f"Cannot write the log copy {dest} ({exc.strerror or exc}).",
                             "Free disk space or point --data-dir at a larger volume; nothing was stored.") from None
        if tmp is not None:
            staged[(job, attempt)] = (tmp, dest)


def _log_paths(con: duckdb.DuckDBPyConnection, store: Store, b: PodDump,
               staged: dict[tuple[str, int], tuple[Path, Path]]) -> dict[tuple[str, int], str]:
    """log_path per attempt: this import's copy, else the one an earlier import made (the kubelet
    keeps only the last runs' logs, so an earlier copy is the only one left)."""
    keys = pa.table({"job_id": [j[0] for j in b.jobs]})
    with registered(con, "__k8s_jobs", keys) as view:
        rows = con.execute(f"SELECT job_id, attempt, log_path FROM attempts JOIN {view} k USING (job_id)"  # noqa: S608
                           " WHERE log_path IS NOT NULL").fetchall()
    paths = {(str(r[0]), int(r[1])): str(r[2]) for r in rows}
    for key, (_tmp, dest) in staged.items():
        paths[key] = dest.relative_to(store.root).as_posix()
    return paths


def _tables(b: PodDump, logs: dict[tuple[str, int], str]) -> tuple[pa.Table, pa.Table, pa.Table]:
    atts = [(*a, b.reasons.get((a[0], a[1])), logs.get((a[0], a[1]))) for a in b.atts]
    return (
        arrow_rows([("job_id", pa.string()), ("user", pa.string()), ("vc", pa.string()),
                    ("name", pa.string()), ("submitted", _T), ("status", pa.string()),
                    ("requested_gpus", pa.int32()), ("source", pa.string())], b.jobs),
        arrow_rows([("job_id", pa.string()), ("attempt", pa.int32()), ("start_time", _T),
                    ("end_time", _T), ("status", pa.string()), ("exit_code", pa.int32()),
                    ("signal", pa.int32()), ("reason", pa.string()), ("log_path", pa.string())], atts),
        arrow_rows([("job_id", pa.string()), ("attempt", pa.int32()), ("node", pa.string()),
                    ("gpu_index", pa.int32())], b.pls),
    )


def _write_failures(con: duckdb.DuckDBPyConnection, b: PodDump) -> int:
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


def read_pods(paths: list[Path]) -> PodDump:
    """Read pod and event dumps (nothing is written): a wrongly typed field is an InputError."""
    b = PodDump()
    b.n_pods = sum(_read(p, b) for p in paths)
    _apply_events(b)
    return b


def import_kubernetes(store: Store, paths: list[Path], logs: list[Path] | None = None) -> ImportResult:
    """Import pod (and event) dumps in one transaction; re-importing replaces the pods' rows.

    ``logs``: directories or files holding the pods' container logs (the kubelet's
    /var/log/pods, `kubectl logs` dumps; see :mod:`podlogs`). Each attempt's log is copied,
    as plain text, to ``<data dir>/logs/kubernetes/<namespace>/<pod>/<attempt>.log`` and
    becomes its ``log_path``; an attempt without a log this time keeps the copy it had.
    """
    b = read_pods(paths)
    pods = b.n_pods
    chosen = _pick_logs(list(logs or []), b)
    staged: dict[tuple[str, int], tuple[Path, Path]] = {}
    result = ImportResult("kubernetes", [str(p) for p in paths])
    try:
        _stage_logs(store, chosen, b, staged)
        with store.write() as con:
            jobs, atts, pls = b.tables(_log_paths(con, store, b, staged))
            delete_jobs(con, jobs.column("job_id"))
            result.rows = {"pods": pods, "jobs": insert_arrow(con, "jobs", jobs),
                           "attempts": insert_arrow(con, "attempts", atts),
                           "placements": insert_arrow(con, "placements", pls),
                           "failures": _write_failures(con, b),
                           "logs": len(staged)}
            b.q.update(reconcile_placements(con, job_ids=jobs.column("job_id").to_pylist()))
            result.quirks[", ".join(result.paths)] = b.q.as_dict()
            record_import(con, "kubernetes", ", ".join(result.paths), pods, b.q.as_dict())
            for tmp, dest in staged.values():
                os.replace(tmp, dest)
    finally:
        for tmp, _dest in staged.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
    return result

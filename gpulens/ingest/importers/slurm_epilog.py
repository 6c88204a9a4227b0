"""Record finished Slurm jobs from the slurmd ``Epilog`` (``gpulens slurm epilog``).

The epilog runs on every node of a job after it ends, as root, with the job in its
environment (``SLURM_JOB_ID``, ``SLURM_JOB_EXIT_CODE2``, ``SLURM_JOB_STDOUT`` with its
``%j`` patterns unexpanded, ``SLURM_JOB_WORK_DIR``, ``SLURM_JOB_USER``, ``SLURM_NODELIST``,
``SLURM_JOB_RESTART_COUNT``, ``SLURM_JOB_GPUS``, ``SLURMD_NODENAME``). ``scontrol show job -o``
adds what the environment lacks (Slurm 22.05): the expanded ``StdOut``/``StdErr``, start and
end times, the array and heterogeneous-job ids, ``BatchHost``, the GPU count and the reason a
job ended. A timed-out job reaches the epilog with ``SLURM_JOB_EXIT_CODE2=0:0``; only
``scontrol`` (``Reason=TimeLimit``, ``ExitCode=0:15``) or the log's own slurmstepd line say it
did not pass.

Two steps, so that no record is lost and many nodes can run it at once:

1. :func:`queue_record` writes one small JSON file per job, attempt and node into
   ``<data dir>/inbox/slurm/`` (written under a temporary name and renamed: readers see
   whole files or nothing). No lock, no store.
2. :func:`drain_queue` takes the store's write lock once and records every queued file it
   finds in one transaction (so 50 epilogs finishing at once make a few writes, not 50), then
   deletes the files. Records merge with what the store has for the job (a ``sacct`` import
   or another node's epilog): one job, one attempt per restart, the union of the nodes.

A record that cannot be recorded (the lock stays busy past the epilog's budget, the store is
damaged) stays in the inbox for the next epilog or ``gpulens diagnose --all``.

Job ids match ``sacct``'s: ``123``, ``123_4`` for array task 4, and ``123`` for every
component of heterogeneous job 123 (sacct's ``123+0``, ``123+1``). The attempt is the
restart count (``sacct --duplicates`` lists one record per start, numbered the same way).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

import duckdb
import pyarrow as pa

from gpulens.errors import InputError
from gpulens.ingest.importers.common import record_import
from gpulens.ingest.importers.slurm import expand_hostlist, gpus_from_tres, log_paths
from gpulens.store import Store

__all__ = [
    "QUEUE_DIR",
    "STALE_TAKEN_S",
    "DrainResult",
    "EpilogRecord",
    "drain_queue",
    "ended_by_slurm",
    "parse_scontrol",
    "queue_dir",
    "queue_record",
    "queued",
    "record_from_env",
    "status_from",
]

QUEUE_DIR = Path("inbox") / "slurm"
_T = pa.timestamp("us")
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_:/]*=")
_RANK = {"queued": 0, "running": 0, "passed": 1, "killed": 2, "failed": 3}
#: signals a user or the scheduler sends to end a job (scancel); anything else the job raised
_STOP_SIGNALS = frozenset({9, 15})
#: slurmstepd's line in the job's own log when it ends a job (the environment says 0:0 then)
_CANCELLED = re.compile(rb"\*\*\* (?:JOB|STEP) [\w.+]+ ON \S+ CANCELLED AT \S+(?: DUE TO ([A-Z ]+))?")
#: scontrol's JobState while the epilog of a requeued run runs (the job waits for its next run)
_REQUEUED_STATES = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RUNNING", "CONFIGURING"})
_UNEXPANDED = re.compile(r"%\d*[AajJNnstuxb]")
_FAILED_REASONS = ("TimeLimit", "NodeDown", "NodeFail", "OutOfMemory", "Deadline", "BootFail")


@dataclasses.dataclass
class EpilogRecord:
    """One node's view of one finished attempt of a job."""

    job_id: str
    raw_job_id: str
    attempt: int
    status: str
    node: str | None = None
    nodes: list[str] = dataclasses.field(default_factory=list)
    batch_host: str | None = None
    user: str | None = None
    name: str | None = None
    account: str | None = None
    partition: str | None = None
    submitted: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str | None = None
    gpus: int | None = None
    gpu_indices: list[int] | None = None
    stdout: str | None = None
    stderr: str | None = None
    workdir: str | None = None
    het_offset: int | None = None
    received_at: datetime | None = None

    @property
    def primary(self) -> bool:
        """True on the node that ran the batch script (the one whose record sets the exit)."""
        if self.het_offset:
            return False
        if self.node is None:
            return True
        if self.batch_host:
            return self.node == self.batch_host
        return not self.nodes or self.node == self.nodes[0]

    @property
    def log_path(self) -> str | None:
        """The file diagnosis reads: stderr when it is a file of its own, else stdout."""
        return self.stderr or self.stdout

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for k in ("submitted", "start", "end", "received_at"):
            out[k] = out[k].isoformat() if out[k] is not None else None
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EpilogRecord:
        """A queued record; ValueError for anything that is not one (one bad file must not
        stop the drain that records everyone else's)."""
        if not isinstance(data, Mapping):
            raise ValueError("not a JSON object")
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in names}
        try:
            for k in ("submitted", "start", "end", "received_at"):
                if kw.get(k) is not None:
                    kw[k] = datetime.fromisoformat(str(kw[k]))
            rec = cls(**kw)
        except TypeError as exc:
            raise ValueError(str(exc)) from None
        _check_types(rec)
        return rec


def _check_types(rec: EpilogRecord) -> None:
    texts = ("job_id", "raw_job_id", "status", "node", "batch_host", "user", "name", "account",
             "partition", "reason", "stdout", "stderr", "workdir")
    ints = ("attempt", "exit_code", "signal", "gpus", "het_offset")
    for k in texts:
        v = getattr(rec, k)
        if v is not None and not isinstance(v, str):
            raise ValueError(f"{k} is {type(v).__name__}, expected text")
    for k in ints:
        v = getattr(rec, k)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not -2**31 <= v < 2**31):
            raise ValueError(f"{k} is {v!r}, expected an integer")
    if not rec.job_id or rec.attempt is None or rec.status not in _RANK:
        raise ValueError("job_id, attempt or status missing")
    if not isinstance(rec.nodes, list) or not all(isinstance(n, str) for n in rec.nodes):
        raise ValueError("nodes is not a list of names")
    if rec.gpu_indices is not None and (not isinstance(rec.gpu_indices, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 2**31 for i in rec.gpu_indices)):
        raise ValueError("gpu_indices is not a list of GPU indices")


# ----------------------------------------------------------------- parsing
def parse_scontrol(text: str, job_id: str | None = None) -> dict[str, str]:
    """``scontrol show job -o ID`` -> {field: value} (values with spaces kept whole).

    Asked about an array's master id, scontrol prints one line per task: the line whose
    ``JobId`` is ``job_id`` is read (the first line without ``job_id``).
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if job_id is not None:
        lines = [ln for ln in lines if ln.split(None, 1)[0] == f"JobId={job_id}"]
    out: dict[str, str] = {}
    key: str | None = None
    for token in (lines[0] if lines else "").split():
        if _KEY.match(token):
            key, _, value = token.partition("=")
            out[key] = value
        elif key is not None:
            out[key] += " " + token
    return out


def _null(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in ("", "(null)", "None", "N/A", "Unknown") else value


def _int(value: str | None) -> int | None:
    value = _null(value)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _local_time(value: str | None) -> datetime | None:
    """scontrol's local ``2024-05-01T10:00:00`` -> naive UTC."""
    value = _null(value)
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value).astimezone(UTC).replace(tzinfo=None)
    except ValueError:
        return None


def _exit(env: Mapping[str, str], sc: Mapping[str, str]) -> tuple[int | None, int | None]:
    """(exit code, signal): scontrol's ExitCode, else SLURM_JOB_EXIT_CODE2, else the wait status."""
    for text in (sc.get("ExitCode"), env.get("SLURM_JOB_EXIT_CODE2")):
        m = re.fullmatch(r"(\d+):(\d+)", (text or "").strip())
        if m:
            return int(m[1]), int(m[2])
    raw = _int(env.get("SLURM_JOB_EXIT_CODE"))
    if raw is None:
        return None, None
    return (raw >> 8) & 0xFF, raw & 0x7F


def status_from(exit_code: int | None, signal: int | None, reason: str | None = None) -> str:
    """passed | failed | killed, as sacct's states map (TIMEOUT and OUT_OF_MEMORY are failures)."""
    if reason and any(reason.startswith(r) for r in _FAILED_REASONS):
        return "failed"
    if exit_code:
        return "failed"
    if signal:
        return "killed" if signal in _STOP_SIGNALS else "failed"
    return "passed"


_PER = re.compile(r"gres[:/]gpu(?::[^:,=]+)?[:=](\d+)")


def _gpus(sc: Mapping[str, str], n_nodes: int) -> int | None:
    """The job's GPUs: TRES (with gres/gpu tracked), else TresPerJob, else TresPerNode x nodes."""
    n = gpus_from_tres(sc.get("TRES") or sc.get("AllocTRES") or "")
    if n:
        return n
    per_job = sum(int(m) for m in _PER.findall(sc.get("TresPerJob") or ""))
    if per_job:
        return per_job
    per_node = sum(int(m) for m in _PER.findall(sc.get("TresPerNode") or ""))
    return per_node * max(n_nodes, 1) or None


def _gpu_indices(env: Mapping[str, str]) -> list[int] | None:
    text = env.get("SLURM_JOB_GPUS") or ""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, _, b = part.partition("-")
            if a.isdigit() and b.isdigit():
                out.extend(range(int(a), int(b) + 1))
        elif part.isdigit():
            out.append(int(part))
    return out or None


def _job_ids(raw: str, sc: Mapping[str, str]) -> tuple[str, tuple[str, str] | None, str | None]:
    """(sacct's job id, (array id, task id) of an array task, heterogeneous job id)."""
    array = None
    if _null(sc.get("ArrayJobId")) and _null(sc.get("ArrayTaskId")):
        array = (str(sc["ArrayJobId"]), str(sc["ArrayTaskId"]))
    het = _null(sc.get("HetJobId"))
    job_id = f"{array[0]}_{array[1]}" if array else het or raw
    return job_id, array, het


def _attempt_status(env: Mapping[str, str], sc: Mapping[str, str], code: int | None, sig: int | None,
                    reason: str | None) -> tuple[int, str, str | None]:
    """(attempt, status, reason); the epilog of a requeued run is the earlier attempt, failed."""
    attempt = _int(env.get("SLURM_JOB_RESTART_COUNT")) or _int(sc.get("Restarts")) or 0
    status = status_from(code, sig, reason)
    state = (sc.get("JobState") or "").split("+")[0]
    if attempt and sc and (state in _REQUEUED_STATES or _null(sc.get("EndTime")) is None):
        # the epilog of a run that was requeued (scontrol: EndTime=Unknown, or the job already
        # waits for its next run): Slurm has already counted the next run
        attempt, status, reason = attempt - 1, "failed", "requeued"
    return attempt, status, reason


class _Owner(TypedDict):
    user: str | None
    name: str | None
    account: str | None
    partition: str | None


class _Times(TypedDict):
    submitted: datetime | None
    start: datetime | None
    end: datetime | None


def _owner(env: Mapping[str, str], sc: Mapping[str, str]) -> _Owner:
    """user, name, account and partition (the environment's user first, scontrol's others)."""
    return {
        "user": _null(env.get("SLURM_JOB_USER")) or _null((sc.get("UserId") or "").split("(")[0]),
        "name": _null(sc.get("JobName")) or _null(env.get("SLURM_JOB_NAME")),
        "account": _null(sc.get("Account")) or _null(env.get("SLURM_JOB_ACCOUNT")),
        "partition": _null(sc.get("Partition")) or _null(env.get("SLURM_JOB_PARTITION")),
    }


def _times(env: Mapping[str, str], sc: Mapping[str, str]) -> _Times:
    """submitted, start and end: scontrol's, else the environment's epoch seconds."""
    return {
        "submitted": _local_time(sc.get("SubmitTime")),
        "start": _local_time(sc.get("StartTime")) or _epoch(env.get("SLURM_JOB_START_TIME")),
        "end": _local_time(sc.get("EndTime")) or _epoch(env.get("SLURM_JOB_END_TIME")),
    }


def record_from_env(env: Mapping[str, str], scontrol: str | None = None, *,
                    now: datetime | None = None) -> EpilogRecord:
    """The attempt an epilog environment (and ``scontrol show job -o`` output) describes."""
    raw = (env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "").strip()
    if not raw:
        raise InputError("SLURM_JOB_ID is not set: this is not a Slurm epilog environment.",
                         "Run `gpulens slurm epilog` from slurm.conf's Epilog (docs/slurm.md).")
    sc = parse_scontrol(scontrol, raw) if scontrol else {}
    job_id, array, het = _job_ids(raw, sc)
    code, sig = _exit(env, sc)
    nodes = expand_hostlist(_null(sc.get("NodeList")) or env.get("SLURM_NODELIST")
                            or env.get("SLURM_JOB_NODELIST") or "")
    attempt, status, reason = _attempt_status(env, sc, code, sig, _null(sc.get("Reason")))
    rec = EpilogRecord(
        job_id=job_id, raw_job_id=raw, attempt=attempt, status=status,
        node=_null(env.get("SLURMD_NODENAME")), nodes=nodes,
        batch_host=_null(sc.get("BatchHost")), **_owner(env, sc), **_times(env, sc),
        exit_code=code, signal=sig, reason=reason,
        gpus=_gpus(sc, len(nodes)),
        gpu_indices=_gpu_indices(env),
        workdir=_null(sc.get("WorkDir")) or _null(env.get("SLURM_JOB_WORK_DIR")),
        het_offset=_int(sc.get("HetJobOffset")) if het else None,
        received_at=now or datetime.now(UTC).replace(tzinfo=None),
    )
    if rec.end is None:
        rec.end = rec.received_at
    _log_paths(rec, env, sc, array)
    return rec


def _epoch(value: str | None) -> datetime | None:
    n = _int(value)
    return datetime.fromtimestamp(n, tz=UTC).replace(tzinfo=None) if n else None


def _log_paths(rec: EpilogRecord, env: Mapping[str, str], sc: Mapping[str, str],
               array: tuple[str, str] | None) -> None:
    if rec.het_offset:
        return  # the batch script (and its output) belongs to component 0
    default = "slurm-%A_%a.out" if array else "slurm-%j.out"
    out = _null(sc.get("StdOut")) or _null(env.get("SLURM_JOB_STDOUT")) or default
    err = _null(sc.get("StdErr")) or _null(env.get("SLURM_JOB_STDERR")) or out
    rec.stdout, rec.stderr = log_paths(
        out, err, raw_id=rec.raw_job_id, array=array, user=rec.user, name=rec.name,
        node=rec.batch_host or (rec.nodes[0] if rec.nodes else rec.node), workdir=rec.workdir)


def ended_by_slurm(path: str | os.PathLike[str], tail_bytes: int = 64 * 1024) -> str | None:
    """slurmstepd's ``CANCELLED AT ... DUE TO X`` in the last bytes of a log: 'TIME LIMIT', 'cancelled'.

    For an epilog without ``scontrol``: a timed-out job's environment says exit 0:0.
    """
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - tail_bytes))
            data = fh.read(tail_bytes)
    except OSError:
        return None
    found = list(_CANCELLED.finditer(data))
    if not found:
        return None
    why = found[-1].group(1)
    return why.decode("ascii", "replace").strip() if why else "cancelled"


# ----------------------------------------------------------------- the queue
def queue_dir(root: str | os.PathLike[str]) -> Path:
    return Path(root) / QUEUE_DIR


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", text)[:80]


def queue_record(root: str | os.PathLike[str], rec: EpilogRecord) -> Path:
    """Write the record into the inbox atomically; one file per job, attempt and node."""
    qdir = queue_dir(root)
    qdir.mkdir(parents=True, exist_ok=True)
    name = f"{_safe(rec.job_id)}.{rec.attempt}.{_safe(rec.raw_job_id)}.{_safe(rec.node or 'none')}.json"
    final = qdir / name
    tmp = qdir / f".{name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(rec.to_json(), fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return final


#: a record taken by a drain whose process died before it finished comes back after this long
STALE_TAKEN_S = 600.0


def queued(root: str | os.PathLike[str], *, now: float | None = None) -> list[Path]:
    """The inbox's record files (oldest name first), with records a dead drain left taken."""
    qdir = queue_dir(root)
    now = time.time() if now is None else now
    out = []
    try:
        for p in qdir.iterdir():
            if p.name.startswith("."):
                continue
            if p.suffix == ".json":
                out.append(p)
            elif p.name.endswith(".json.taken"):
                with contextlib.suppress(OSError):
                    if now - p.stat().st_mtime > STALE_TAKEN_S:
                        out.append(p)
    except OSError:
        return []
    return sorted(out)


@dataclasses.dataclass
class DrainResult:
    records: int = 0
    attempts: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    rejected: list[str] = dataclasses.field(default_factory=list)


def _take(path: Path) -> Path | None:
    """Rename a queued record out of the next drainer's sight (None: another drain took it)."""
    if path.name.endswith(".taken"):
        with contextlib.suppress(OSError):
            os.utime(path)
        return path
    taken = path.with_name(path.name + ".taken")
    try:
        os.rename(path, taken)
    except FileNotFoundError:
        return None
    return taken


def _take_records(root: Path, taken: list[Path], rejected: list[str]) -> list[EpilogRecord]:
    """Take (rename ``*.taken``) and parse every queued file; a file that is not a record is
    renamed ``*.rejected`` and named in ``rejected``. ``taken`` grows file by file, so that a
    failure part way puts back what was taken."""
    records: list[EpilogRecord] = []
    for path in queued(root):  # listed under the lock: one drainer at a time
        got = _take(path)
        if got is None:
            continue
        try:
            records.append(EpilogRecord.from_json(json.loads(got.read_text(encoding="utf-8"))))
            taken.append(got)
        except (OSError, ValueError, TypeError) as exc:
            with contextlib.suppress(OSError):
                got.rename(queue_dir(root) / (path.name.removesuffix(".taken") + ".rejected"))
            rejected.append(f"{path}: {type(exc).__name__}: {exc}"[:300])
    return records


def _record_all(con: duckdb.DuckDBPyConnection, root: Path, records: list[EpilogRecord],
                result: DrainResult) -> None:
    """Merge the records into the store, one attempt at a time, and log the import."""
    groups: dict[tuple[str, int], list[EpilogRecord]] = {}
    for rec in records:
        groups.setdefault((rec.job_id, rec.attempt), []).append(rec)
    for (job_id, attempt), recs in sorted(groups.items()):
        _upsert(con, job_id, attempt, recs)
    result.records = len(records)
    result.attempts = sorted(groups)
    record_import(con, "slurm:epilog", queue_dir(root), len(records),
                  {"rejected": len(result.rejected)} if result.rejected else {})


def drain_queue(store: Store, *, warn: Any = None) -> DrainResult:
    """Record every queued epilog file in one store transaction, then delete the files.

    Files are listed and renamed ``*.taken`` under the store's write lock, so each record is
    written once; they are deleted after the commit, or put back when the write fails. A file
    that is not a record (damaged, hand-edited) is renamed ``*.rejected`` with a warning, never
    silently dropped.
    """
    result = DrainResult()
    if not queued(store.root):
        return result
    taken: list[Path] = []
    try:
        with store.write() as con:
            records = _take_records(store.root, taken, result.rejected)
            _record_all(con, store.root, records, result)
    except BaseException:
        for path in taken:  # not stored: back into the queue
            with contextlib.suppress(OSError):
                os.rename(path, path.with_name(path.name.removesuffix(".taken")))
        raise
    for path in taken:
        with contextlib.suppress(OSError):
            path.unlink()
    for line in result.rejected:
        if warn is not None:
            warn(f"rejected queued epilog record {line}")
    return result


def _first(values: Iterable[Any]) -> Any:
    return next((v for v in values if v is not None), None)


class _Stored(NamedTuple):
    """The store's row of an attempt (with its attempt_logs paths)."""

    start_time: datetime | None
    end_time: datetime | None
    status: str | None
    exit_code: int | None
    signal: int | None
    log_path: str | None
    stdout_path: str | None
    stderr_path: str | None


def _stored_attempt(con: duckdb.DuckDBPyConnection, job_id: str, attempt: int) -> _Stored | None:
    prev = con.execute(
        "SELECT a.start_time, a.end_time, a.status, a.exit_code, a.signal, a.log_path, l.stdout_path, "
        "l.stderr_path FROM attempts a LEFT JOIN attempt_logs l USING (job_id, attempt) "
        "WHERE a.job_id = ? AND a.attempt = ?", [job_id, attempt]).fetchall()
    return _Stored(*prev[0]) if prev else None


def _merged_status(main: EpilogRecord, recs: list[EpilogRecord], old: _Stored | None
                   ) -> tuple[str | None, int | None, int | None]:
    """(status, exit code, signal): the primary record's, made worse by any other's failure."""
    worst = max([r.status for r in recs] + ([old.status] if old and old.status else []),
                key=lambda s: _RANK.get(s, 0))
    if main.primary or old is None:
        status, code, sig = main.status, main.exit_code, main.signal
        if _RANK.get(worst, 0) > _RANK.get(status, 0):
            status = worst  # another component or node failed
        return status, code, sig
    # only other nodes' records: they can add nodes and make the status worse
    kept = old.status if _RANK.get(old.status or "", 0) >= _RANK.get(worst, 0) else worst
    return kept, old.exit_code, old.signal


def _merged_logs(main: EpilogRecord, old: _Stored | None) -> tuple[str | None, str | None, str | None]:
    """(stdout, stderr, log_path): a path whose %x/%u the epilog could not expand (no scontrol)
    yields to one that names a file."""
    sure = main.primary and not _UNEXPANDED.search(main.log_path or "")
    stdout = _first([main.stdout if sure else None, old.stdout_path if old else None, main.stdout])
    stderr = _first([main.stderr if sure else None, old.stderr_path if old else None, main.stderr])
    log_path = _first([main.log_path if sure else None, old.log_path if old else None, main.log_path])
    return stdout, stderr, log_path


def _upsert(con: duckdb.DuckDBPyConnection, job_id: str, attempt: int, recs: list[EpilogRecord]) -> None:
    """Merge one attempt's records with the store's rows for it."""
    recs = sorted(recs, key=lambda r: (not r.primary, r.het_offset or 0))
    main = recs[0]
    old = _stored_attempt(con, job_id, attempt)
    status, code, sig = _merged_status(main, recs, old)
    starts = [r.start for r in recs if r.start] + ([old.start_time] if old and old.start_time else [])
    ends = [r.end for r in recs if r.end] + ([old.end_time] if old and old.end_time else [])
    stdout, stderr, log_path = _merged_logs(main, old)
    con.execute("DELETE FROM attempts WHERE job_id = ? AND attempt = ?", [job_id, attempt])
    con.execute(
        "INSERT INTO attempts (job_id, attempt, start_time, end_time, status, exit_code, signal, "
        "log_path) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [job_id, attempt, min(starts) if starts else None, max(ends) if ends else None, status,
         code, sig, log_path])
    con.execute("DELETE FROM attempt_logs WHERE job_id = ? AND attempt = ?", [job_id, attempt])
    if stdout or stderr:
        con.execute("INSERT INTO attempt_logs (job_id, attempt, stdout_path, stderr_path) VALUES (?, ?, ?, ?)",
                    [job_id, attempt, stdout, stderr])
    _placements(con, job_id, attempt, recs)
    _job(con, job_id, recs, status)


def _placements(con: duckdb.DuckDBPyConnection, job_id: str, attempt: int, recs: list[EpilogRecord]) -> None:
    """One row per node and GPU: a node's own epilog knows its GPU indices; others are assumed."""
    have: dict[str, list[int]] = {}
    for node, gpu in con.execute(
            "SELECT node, gpu_index FROM placements WHERE job_id = ? AND attempt = ? ORDER BY gpu_index",
            [job_id, attempt]).fetchall():
        have.setdefault(node, []).append(int(gpu))
    known = {r.node: r.gpu_indices for r in recs if r.node and r.gpu_indices}
    nodes: list[str] = []
    for r in recs:
        nodes += [n for n in r.nodes + ([r.node] if r.node and not r.nodes else []) if n not in nodes]
    gpus = sum({(r.het_offset or 0): r.gpus or 0 for r in recs}.values())
    per = max(gpus // len(nodes), 1) if gpus and nodes else 0
    rows: list[tuple[Any, ...]] = []
    for node in nodes:
        idx = known.get(node) or have.get(node) or list(range(per))
        rows += [(job_id, attempt, node, i) for i in idx]
    con.execute("DELETE FROM placements WHERE job_id = ? AND attempt = ?", [job_id, attempt])
    if rows:  # a few rows, as parameters: registering a batch makes DuckDB import pandas (0.3 s)
        con.executemany("INSERT INTO placements (job_id, attempt, node, gpu_index) VALUES (?, ?, ?, ?)",
                        rows)


def _job(con: duckdb.DuckDBPyConnection, job_id: str, recs: list[EpilogRecord], status: str | None) -> None:
    main = recs[0]
    old = con.execute(
        'SELECT "user", vc, name, submitted, status, requested_gpus, inputs, framework, source '
        "FROM jobs WHERE job_id = ?", [job_id]).fetchall()
    latest = con.execute("SELECT max(attempt) FROM attempts WHERE job_id = ?", [job_id]).fetchall()
    is_latest = not latest or latest[0][0] is None or latest[0][0] <= main.attempt
    gpus = sum({(r.het_offset or 0): r.gpus or 0 for r in recs}.values()) or None
    new = (main.user, main.account or main.partition, main.name, main.submitted, status, gpus)
    if old:
        o = old[0]
        merged = [_first([n, p]) for n, p in zip(new, o[:6], strict=True)]
        merged[4] = status if is_latest else o[4]
        row = [job_id, *merged, o[6], o[7], o[8] or "slurm"]
    else:
        row = [job_id, *new, None, None, "slurm"]
    con.execute("DELETE FROM jobs WHERE job_id = ?", [job_id])
    con.execute(
        'INSERT INTO jobs (job_id, "user", vc, name, submitted, status, requested_gpus, inputs, '
        "framework, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)

"""Import Slurm job history from ``sacct``.

Text (``--parsable2``; run sacct with ``TZ=UTC`` so times match the store's UTC)::

    TZ=UTC sacct --allusers --duplicates --parsable2 --starttime 2024-01-01 --endtime now \\
      --format=JobID,JobName,User,Account,Partition,Submit,Start,End,State,ExitCode,AllocTRES,NodeList

Required fields: JobID, User, Start, End, State, NodeList and AllocTRES (for the
GPU count, ``gres/gpu=N`` or ``gres/gpu:TYPE=N``); optional: JobName, Account
(-> vc; Partition when Account is absent), Partition, Submit, ExitCode, and JobIDRaw,
WorkDir, StdOut, StdErr (Slurm 23.02+): the job's log files, with sacct's unexpanded
``%j``/``%A_%a``/``%x``/``%u`` patterns expanded as sbatch does, fill the attempts' log
paths so that ``gpulens diagnose --all`` reads them.
``--duplicates`` lists each requeue of a job as its own record: they become the
job's attempts in start order. Step records (``123.batch``, ``123.0``) are skipped.
The components of a heterogeneous job (``123+0``, ``123+1``) are one job ``123``: their
nodes and GPUs add up and the attempt fails when any component failed.

The Slurm epilog (``gpulens slurm epilog``, slurm_epilog.py) records the same jobs under
the same ids and attempts; an import keeps the log paths and the GPU indices the epilog
recorded where sacct has none, so the two never make two jobs of one.

JSON (``sacct --json``, Slurm 21.08+): the ``jobs`` list is read as a stream;
times are epoch seconds (plain or ``{"set": true, "number": N}``), converted to UTC.

Slurm does not record which GPU indices a job got; placements use indices
0..k-1 on each node (k = GPUs / nodes), counted as the quirk
``gpu_indices_assumed``. Join with collector samples that carry job ids
(``gpu_process_samples``) when exact GPUs matter.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
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
    parse_local_time,
    parsing,
    record_import,
)
from gpulens.ingest.importers.jsonstream import iter_array
from gpulens.ingest.importers.reconcile import reconcile_placements
from gpulens.store import Store, registered
from gpulens.store.tables import delete_matching

__all__ = ["SACCT_FORMAT", "expand_hostlist", "expand_log_pattern", "gpus_from_tres", "import_slurm",
           "log_paths", "map_state"]

SACCT_FORMAT = ("JobID,JobIDRaw,JobName,User,Account,Partition,Submit,Start,End,State,ExitCode,"
                "AllocTRES,NodeList,WorkDir")
_REQUIRED = ("JobID", "User", "Start", "End", "State", "NodeList", "AllocTRES")
_T = pa.timestamp("us")
_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")
_JOB_COLS = [("job_id", pa.string()), ("user", pa.string()), ("vc", pa.string()), ("name", pa.string()),
             ("submitted", _T), ("status", pa.string()), ("requested_gpus", pa.int32()),
             ("source", pa.string())]
_ATT_COLS = [("job_id", pa.string()), ("attempt", pa.int32()), ("start_time", _T), ("end_time", _T),
             ("status", pa.string()), ("exit_code", pa.int32()), ("signal", pa.int32()),
             ("log_path", pa.string()), ("stdout_path", pa.string()), ("stderr_path", pa.string())]
_PL_COLS = [("job_id", pa.string()), ("attempt", pa.int32()), ("node", pa.string()),
            ("gpu_index", pa.int32())]

_STATES = {
    "COMPLETED": "passed",
    "CANCELLED": "killed",
    "PREEMPTED": "killed",
    "DEADLINE": "killed",
    "FAILED": "failed",
    "TIMEOUT": "failed",
    "OUT_OF_MEMORY": "failed",
    "NODE_FAIL": "failed",
    "BOOT_FAIL": "failed",
    "RUNNING": "running",
    "REQUEUED": "failed",
    "SUSPENDED": "running",
    "PENDING": "queued",
}


def map_state(state: str, quirks: Quirks) -> str:
    """'CANCELLED by 1000' -> killed, 'COMPLETED' -> passed, ..."""
    word = (state or "").strip().split(" ")[0].upper().rstrip("+")
    out = _STATES.get(word)
    if out is None:
        quirks["unknown_state"] += 1
        return word.lower() or "unknown"
    return out


def expand_hostlist(text: str) -> list[str]:
    """'gpu[01-03,07],cpu5' -> ['gpu01', 'gpu02', 'gpu03', 'gpu07', 'cpu5']."""
    text = (text or "").strip()
    if not text or text in ("None assigned", "(null)", "None"):
        return []
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    parts.append(cur)
    out: list[str] = []
    for part in parts:
        m = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", part)
        if not m:
            out.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            if "-" in r:
                a, b = r.split("-", 1)
                width = len(a)
                out.extend(f"{prefix}{i:0{width}d}{suffix}" for i in range(int(a), int(b) + 1))
            else:
                out.append(f"{prefix}{r}{suffix}")
    return out


_RANK = {"queued": 0, "running": 0, "passed": 1, "killed": 2, "failed": 3}
_PATTERN = re.compile(r"%(\d*)([AajJNnstuxb%])")


def expand_log_pattern(pattern: str, *, raw_id: str, array: tuple[str, str] | None = None,
                       user: str | None = None, name: str | None = None, node: str | None = None,
                       workdir: str | None = None) -> str:
    """Expand sbatch's filename patterns (%j %J %A %a %u %x %N %n %s %t %b %%, with widths).

    ``raw_id`` is the job's own id (JobIDRaw), ``array`` (array job id, task id) for an array
    task. A relative result is taken against the job's working directory.
    """
    def one(m: re.Match[str]) -> str:
        width, what = m.group(1), m.group(2)
        if what == "%":
            return "%"
        value = {
            "j": raw_id, "J": raw_id, "A": array[0] if array else raw_id,
            "a": array[1] if array else "4294967294",
            "b": str(int(array[1]) % 10) if array and array[1].isdigit() else "0",
            "u": user, "x": name, "N": node, "n": "0", "t": "0", "s": "batch",
        }.get(what)
        if value is None:
            return m.group(0)
        return value.zfill(int(width)) if width and value.isdigit() else value

    # sbatch: a backslash anywhere in the name turns the patterns off (and is dropped)
    out = pattern.replace("\\", "") if "\\" in pattern else _PATTERN.sub(one, pattern)
    if not os.path.isabs(out) and workdir:
        out = os.path.join(workdir, out)
    return out


def log_paths(stdout: str | None, stderr: str | None, **kw: Any) -> tuple[str | None, str | None]:
    """(stdout, stderr) expanded; stderr None when it is the stdout file."""
    if not stdout and not stderr:
        return None, None
    out = expand_log_pattern(stdout, **kw) if stdout else None
    err = expand_log_pattern(stderr, **kw) if stderr else out
    return out, (err if err != out else None)


class _Builder:
    def __init__(self) -> None:
        self.q = Quirks()
        self.records: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def add(self, rec: dict[str, Any]) -> None:
        base, plus, comp = rec["job_id"].partition("+")
        rec["component"] = int(comp) if plus and comp.isdigit() else 0
        if plus and comp.isdigit():
            self.q["het_components_merged"] += rec["component"] > 0
            rec["job_id"] = base
        self.records[rec["job_id"]].append(rec)

    @staticmethod
    def _merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
        """One attempt of a heterogeneous job from its components' records."""
        if len(parts) == 1:
            return parts[0]
        parts = sorted(parts, key=lambda r: r["component"])
        out = dict(parts[0])
        out["start"] = min(r["start"] for r in parts)
        ends = [r["end"] for r in parts]
        out["end"] = None if any(e is None for e in ends) else max(ends)
        out["status"] = max((r["status"] for r in parts), key=lambda s: _RANK.get(s, 0))
        out["nodes"] = list(dict.fromkeys(n for r in parts for n in r["nodes"]))
        out["gpus"] = sum(r["gpus"] or 0 for r in parts)
        return out

    def _attempts(self, recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        by_comp: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for r in recs:
            if r["start"] is not None:
                by_comp[r["component"]].append(r)
        for comp in by_comp.values():
            comp.sort(key=lambda r: r["start"])
        n = max((len(c) for c in by_comp.values()), default=0)
        return [self._merge([c[i] for c in by_comp.values() if i < len(c)]) for i in range(n)]

    def _attempt_row(self, job_id: str, i: int, r: dict[str, Any]) -> tuple[Any, ...]:
        """The attempts row of started attempt ``i`` (log_path: stderr, else stdout)."""
        status = r["status"]
        if r["end"] is None and status not in ("running",):
            self.q["end_missing"] += 1
        out, err = r.get("stdout"), r.get("stderr")
        return (job_id, i, r["start"], r["end"], status, r["exit_code"], r["signal"],
                err or out, out, err)

    def _placement_rows(self, job_id: str, i: int, r: dict[str, Any]) -> list[tuple[Any, ...]]:
        """GPUs 0..k-1 on each node of attempt ``i`` (k = GPUs / nodes, at least 1)."""
        nodes = r["nodes"]
        gpus = r["gpus"]
        if not (gpus and nodes):
            if gpus == 0:
                self.q["attempts_without_gpus"] += 1
            return []
        per = gpus // len(nodes)
        if per * len(nodes) != gpus:
            self.q["gpus_not_divisible_by_nodes"] += 1
            per = max(per, 1)
        self.q["gpu_indices_assumed"] += 1
        return [(job_id, i, node, g) for node in nodes for g in range(per)]

    def tables(self) -> tuple[pa.Table, pa.Table, pa.Table]:
        """(jobs, attempts, placements) of the records added: one job per id, its started
        records as attempts in start order."""
        jobs, atts, pls = [], [], []
        for job_id, recs in self.records.items():
            recs.sort(key=lambda r: (r["start"] is None, r["start"] or datetime.min))
            last = recs[-1]
            started = self._attempts(recs)
            if len(started) > 1:
                self.q["requeued_attempts"] += len(started) - 1
            for i, r in enumerate(started):
                atts.append(self._attempt_row(job_id, i, r))
                pls.extend(self._placement_rows(job_id, i, r))
            if not started:
                self.q["jobs_without_start"] += 1
            final = started[-1] if started else last
            jobs.append((job_id, last["user"], last["vc"], last["name"], last["submitted"],
                         final["status"], final["gpus"] or None, "slurm"))
        return arrow_rows(_JOB_COLS, jobs), arrow_rows(_ATT_COLS, atts), arrow_rows(_PL_COLS, pls)


def gpus_from_tres(tres: str) -> int:
    """GPUs in a TRES string: ``gres/gpu=2`` or ``gres/gpu:a100=2`` (summed)."""
    return sum(int(m) for m in _GPU_TRES.findall(tres or ""))


def _read_parsable(path: Path, b: _Builder) -> int:
    n = 0
    with open(path, encoding="utf-8") as fh:
        header = fh.readline().rstrip("\r\n").split("|")
        missing = [f for f in _REQUIRED if f not in header]
        if missing:
            raise InputError(
                f"{path}:1: sacct header lacks {', '.join(missing)}.",
                f"Run: TZ=UTC sacct --allusers --duplicates --parsable2 --format={SACCT_FORMAT}",
            )
        idx = {name: i for i, name in enumerate(header)}
        for line_no, raw in enumerate(fh, start=2):
            line = raw.rstrip("\r\n")
            if not line.strip():
                b.q["blank_lines"] += 1
                continue
            fields = line.split("|")
            if len(fields) != len(header):
                raise InputError(f"{path}:{line_no}: {len(fields)} fields, expected {len(header)}.",
                                 "Export with --parsable2 (no trailing '|') and the same --format.")
            row = {k: fields[i] for k, i in idx.items()}
            job_id = row["JobID"].strip()
            if not job_id:
                raise InputError(f"{path}:{line_no}: empty JobID.", "Fix that line and import again.")
            if "." in job_id:
                b.q["steps_skipped"] += 1
                continue
            where = f"{path}:{line_no}"
            with parsing(where, "Fix that line and import again; nothing was stored."):
                n += _parsable_row(row, job_id, where, b)
    return n


def _parsable_row(row: dict[str, str], job_id: str, where: str, b: _Builder) -> int:
    status = map_state(row["State"], b.q)
    start = parse_local_time(row["Start"].replace("T", " "), where, b.q, "start")
    end = parse_local_time(row["End"].replace("T", " "), where, b.q, "end")
    if status == "running":
        end = None
    exit_code = sig = None
    if row.get("ExitCode"):
        m = re.fullmatch(r"(\d+):(\d+)", row["ExitCode"].strip())
        if not m:
            raise InputError(f"{where}: ExitCode {row['ExitCode']!r} is not CODE:SIGNAL.",
                             "Fix that line and import again.")
        exit_code, sig = int(m[1]), int(m[2])
    nodes = expand_hostlist(row["NodeList"])
    raw = (row.get("JobIDRaw") or "").strip() or job_id.partition("+")[0]
    base, us, task = job_id.partition("_")
    out, err = log_paths(
        row.get("StdOut") or None, row.get("StdErr") or None, raw_id=raw,
        array=(base, task) if us and task.isdigit() else None, user=row["User"] or None,
        name=row.get("JobName") or None, node=nodes[0] if nodes else None,
        workdir=row.get("WorkDir") or None)
    b.add({
        "stdout": out, "stderr": err,
        "job_id": job_id, "user": row["User"] or None,
        "vc": row.get("Account") or row.get("Partition") or None,
        "name": row.get("JobName") or None,
        "submitted": parse_local_time(row.get("Submit", "").replace("T", " "), where, b.q,
                                      "submit") if "Submit" in row else None,
        "status": status, "start": start, "end": end, "exit_code": exit_code, "signal": sig,
        "nodes": nodes, "gpus": gpus_from_tres(row["AllocTRES"]),
    })
    return 1


def _num(v: Any) -> Any:
    if isinstance(v, dict):
        if v.get("set") is False or v.get("infinite"):
            return None
        return v.get("number")
    return v


def _text(v: Any, name: str) -> str | None:
    """A text field of a JSON record: scalars become text, objects and lists are an error."""
    if v is None or v == "":
        return None
    if isinstance(v, dict | list):
        raise TypeError(f"{name} is a JSON {'object' if isinstance(v, dict) else 'list'}, expected text")
    return str(v)


def _epoch(v: Any) -> datetime | None:
    v = _num(v)
    if v in (None, 0):
        return None
    return datetime.fromtimestamp(int(v), tz=UTC).replace(tzinfo=None)


def _json_ids(job: dict[str, Any]) -> tuple[str, tuple[str, str] | None]:
    """(sacct's job id: ``A_T`` for an array task, ``H+O`` for a het component; (array id, task))."""
    job_id = str(job["job_id"])
    arr = job.get("array") or {}
    task = _num(arr.get("task_id") if isinstance(arr, dict) else None)
    array = None
    if task is not None and _num(arr.get("job_id")):
        array = (str(_num(arr["job_id"])), str(task))
        job_id = f"{array[0]}_{array[1]}"
    het = job.get("het") or {}
    offset = _num(het.get("job_offset")) if isinstance(het, dict) else None
    if offset is not None and _num(het.get("job_id")):
        job_id = f"{_num(het['job_id'])}+{int(offset)}"
    return job_id, array


def _json_status(job: dict[str, Any], q: Quirks) -> str:
    """The mapped state: a plain word or the first of ``state.current``."""
    st = job.get("state")
    if isinstance(st, dict):
        cur = st.get("current")
        st = cur[0] if isinstance(cur, list) and cur else cur
    return map_state(str(st or ""), q)


def _json_exit(ec: Any) -> tuple[Any, Any]:
    """(exit code, signal) of ``exit_code``: an object (Slurm 21.08+) or a plain number."""
    code = sig = None
    if isinstance(ec, dict):
        code = _num(ec.get("return_code"))
        s = ec.get("signal") or {}
        sig = _num(s.get("id")) if isinstance(s, dict) else None
    elif isinstance(ec, int):
        code = ec
    return code, sig


def _json_gpus(job: dict[str, Any]) -> int:
    """The GPUs of the allocated ``gres/gpu*`` TRES."""
    gpus = 0
    tres = (job.get("tres") or {}).get("allocated") or []
    for item in tres if isinstance(tres, list) else []:
        if isinstance(item, dict) and item.get("type") == "gres" and \
                str(item.get("name", "")).startswith("gpu"):
            gpus += int(item.get("count") or 0)
    return gpus


def _json_log_paths(job: dict[str, Any], array: tuple[str, str] | None, user: str | None,
                    nodes: list[str]) -> tuple[str | None, str | None]:
    return log_paths(
        _text(job.get("stdout_expanded") or job.get("stdout"), "stdout"),
        _text(job.get("stderr_expanded") or job.get("stderr"), "stderr"),
        raw_id=str(job["job_id"]), array=array, user=user, name=_text(job.get("name"), "name"),
        node=nodes[0] if nodes else None,
        workdir=_text(job.get("current_working_directory") or job.get("working_directory"),
                      "working_directory"))


def _json_record(job: dict[str, Any], q: Quirks) -> dict[str, Any]:
    """The builder record of one ``sacct --json`` job."""
    job_id, array = _json_ids(job)
    status = _json_status(job, q)
    t = job.get("time") or {}
    code, sig = _json_exit(job.get("exit_code"))
    gpus = _json_gpus(job)
    start = _epoch(t.get("start"))
    end = None if status == "running" else _epoch(t.get("end"))
    nodes = expand_hostlist(str(job.get("nodes") or ""))
    user = _text(job.get("user"), "user")
    out, err = _json_log_paths(job, array, user, nodes)
    return {
        "stdout": out, "stderr": err,
        "job_id": job_id, "user": user,
        "vc": _text(job.get("account") or job.get("partition"), "account"),
        "name": _text(job.get("name"), "name"),
        "submitted": _epoch(t.get("submission")), "status": status, "start": start, "end": end,
        "exit_code": code, "signal": sig, "nodes": nodes, "gpus": gpus,
    }


def _read_json(path: Path, b: _Builder) -> int:
    """Add the jobs of a ``sacct --json`` file to ``b``; the number of records."""
    n = 0
    for line, job in iter_array(path, "jobs"):
        where = f"{path}:{line}"
        if not isinstance(job, dict) or "job_id" not in job:
            raise InputError(f"{where}: sacct JSON job without job_id.",
                             "Pass the output of `sacct --json` unchanged.")
        with parsing(where, "Pass the output of `sacct --json` unchanged; nothing was stored."):
            b.add(_json_record(job, b.q))
        n += 1
    return n


@contextmanager
def _keeping_epilog_facts(con: duckdb.DuckDBPyConnection, job_ids: pa.Array) -> Iterator[None]:
    """Re-importing jobs keeps what only the epilog knew: log paths, real GPU indices, inputs.

    Around the delete + insert of the jobs: the attempts' log paths and the placements of
    (job, attempt, node)s that the new rows also place are put back where sacct has none.
    """
    with registered(con, "reimported", pa.table({"job_id": job_ids})):
        con.execute("CREATE OR REPLACE TEMP TABLE kept_logs AS SELECT job_id, attempt, log_path "
                    "FROM attempts WHERE job_id IN (SELECT job_id FROM reimported) AND log_path IS NOT NULL")
        con.execute("CREATE OR REPLACE TEMP TABLE kept_pl AS SELECT * FROM placements "
                    "WHERE job_id IN (SELECT job_id FROM reimported)")
        con.execute("CREATE OR REPLACE TEMP TABLE kept_jobs AS SELECT job_id, inputs, framework FROM jobs "
                    "WHERE job_id IN (SELECT job_id FROM reimported)")
    try:
        yield
        con.execute(
            "UPDATE attempts a SET log_path = coalesce(a.log_path, k.log_path) "
            "FROM kept_logs k WHERE a.job_id = k.job_id AND a.attempt = k.attempt")
        con.execute("UPDATE jobs j SET inputs = coalesce(j.inputs, k.inputs), "
                    "framework = coalesce(j.framework, k.framework) FROM kept_jobs k WHERE j.job_id = k.job_id")
        both = ("(job_id, attempt, node) IN (SELECT job_id, attempt, node FROM kept_pl) AND "
                "(job_id, attempt, node) IN (SELECT job_id, attempt, node FROM placements)")
        con.execute(f"CREATE OR REPLACE TEMP TABLE kept_pl2 AS SELECT * FROM kept_pl WHERE {both}")  # noqa: S608
        con.execute("DELETE FROM placements WHERE (job_id, attempt, node) IN "
                    "(SELECT job_id, attempt, node FROM kept_pl2)")
        con.execute("INSERT INTO placements BY NAME SELECT * FROM kept_pl2")
    finally:
        for t in ("kept_logs", "kept_pl", "kept_pl2", "kept_jobs"):
            con.execute(f"DROP TABLE IF EXISTS {t}")


def import_slurm(store: Store, path: Path) -> ImportResult:
    """Import a ``sacct --parsable2`` or ``sacct --json`` file (one transaction)."""
    if not path.is_file():
        raise InputError(f"{path} does not exist.", "Pass a file written by sacct.")
    with open(path, encoding="utf-8", errors="replace") as fh:
        head = fh.read(64).lstrip()
    import pyarrow.compute as pc  # here, not at import: every Slurm epilog imports this module

    b = _Builder()
    is_json = head.startswith("{")
    with parsing(path, "Pass the output of `sacct --parsable2` or `sacct --json` unchanged."):
        records = _read_json(path, b) if is_json else _read_parsable(path, b)
        jobs, atts, pls = b.tables()
    kind = "slurm:json" if is_json else "slurm:parsable2"
    result = ImportResult(kind, [str(path)])
    with store.write() as con:
        with _keeping_epilog_facts(con, jobs.column("job_id")):
            delete_jobs(con, jobs.column("job_id"))
            logs = atts.select(["job_id", "attempt", "stdout_path", "stderr_path"]).filter(
                pc.is_valid(atts.column("stdout_path")))
            result.rows = {"records": records,
                           "jobs": insert_arrow(con, "jobs", jobs),
                           "attempts": insert_arrow(con, "attempts", atts.drop_columns(["stdout_path",
                                                                                         "stderr_path"])),
                           "placements": insert_arrow(con, "placements", pls)}
            if logs.num_rows:  # the epilog's rows stay where sacct names no files
                delete_matching(con, "attempt_logs", logs.select(["job_id", "attempt"]), ["job_id", "attempt"])
                insert_arrow(con, "attempt_logs", logs)
        # GPUs seen in exporter labels (hpc_job) replace the assumed indices: reconcile.py
        b.q.update(reconcile_placements(con, job_ids=jobs.column("job_id").to_pylist()))
        result.quirks[str(path)] = b.q.as_dict()
        record_import(con, kind, path, records, b.q.as_dict())
    return result

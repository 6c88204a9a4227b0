"""Import Slurm job history from ``sacct``.

Text (``--parsable2``; run sacct with ``TZ=UTC`` so times match the store's UTC)::

    TZ=UTC sacct --allusers --duplicates --parsable2 --starttime 2024-01-01 --endtime now \\
      --format=JobID,JobName,User,Account,Partition,Submit,Start,End,State,ExitCode,AllocTRES,NodeList

Required fields: JobID, User, Start, End, State, NodeList and AllocTRES (for the
GPU count, ``gres/gpu=N`` or ``gres/gpu:TYPE=N``); optional: JobName, Account
(-> vc; Partition when Account is absent), Partition, Submit, ExitCode.
``--duplicates`` lists each requeue of a job as its own record: they become the
job's attempts in start order. Step records (``123.batch``, ``123.0``) are skipped.

JSON (``sacct --json``, Slurm 21.08+): the ``jobs`` list is read as a stream;
times are epoch seconds (plain or ``{"set": true, "number": N}``), converted to UTC.

Slurm does not record which GPU indices a job got; placements use indices
0..k-1 on each node (k = GPUs / nodes), counted as the quirk
``gpu_indices_assumed``. Join with collector samples that carry job ids
(``gpu_process_samples``) when exact GPUs matter.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

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
from gpulens.store import Store

__all__ = ["SACCT_FORMAT", "expand_hostlist", "import_slurm", "map_state"]

SACCT_FORMAT = ("JobID,JobName,User,Account,Partition,Submit,Start,End,State,ExitCode,"
                "AllocTRES,NodeList")
_REQUIRED = ("JobID", "User", "Start", "End", "State", "NodeList", "AllocTRES")
_T = pa.timestamp("us")
_GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")

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


class _Builder:
    def __init__(self) -> None:
        self.q = Quirks()
        self.records: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def add(self, rec: dict[str, Any]) -> None:
        self.records[rec["job_id"]].append(rec)

    def tables(self) -> tuple[pa.Table, pa.Table, pa.Table]:
        jobs, atts, pls = [], [], []
        for job_id, recs in self.records.items():
            recs.sort(key=lambda r: (r["start"] is None, r["start"] or datetime.min))
            last = recs[-1]
            started = [r for r in recs if r["start"] is not None]
            if len(started) > 1:
                self.q["requeued_attempts"] += len(started) - 1
            for i, r in enumerate(started):
                status = r["status"]
                if r["end"] is None and status not in ("running",):
                    self.q["end_missing"] += 1
                atts.append((job_id, i, r["start"], r["end"], status, r["exit_code"], r["signal"]))
                nodes = r["nodes"]
                gpus = r["gpus"]
                if gpus and nodes:
                    per = gpus // len(nodes)
                    if per * len(nodes) != gpus:
                        self.q["gpus_not_divisible_by_nodes"] += 1
                        per = max(per, 1)
                    self.q["gpu_indices_assumed"] += 1
                    for node in nodes:
                        for g in range(per):
                            pls.append((job_id, i, node, g))
                elif gpus == 0:
                    self.q["attempts_without_gpus"] += 1
            if not started:
                self.q["jobs_without_start"] += 1
            jobs.append((job_id, last["user"], last["vc"], last["name"], last["submitted"],
                         last["status"], last["gpus"] or None, "slurm"))
        return (
            arrow_rows([("job_id", pa.string()), ("user", pa.string()), ("vc", pa.string()),
                        ("name", pa.string()), ("submitted", _T), ("status", pa.string()),
                        ("requested_gpus", pa.int32()), ("source", pa.string())], jobs),
            arrow_rows([("job_id", pa.string()), ("attempt", pa.int32()), ("start_time", _T),
                        ("end_time", _T), ("status", pa.string()), ("exit_code", pa.int32()),
                        ("signal", pa.int32())], atts),
            arrow_rows([("job_id", pa.string()), ("attempt", pa.int32()), ("node", pa.string()),
                        ("gpu_index", pa.int32())], pls),
        )


def _gpus_from_tres(tres: str) -> int:
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
    b.add({
        "job_id": job_id, "user": row["User"] or None,
        "vc": row.get("Account") or row.get("Partition") or None,
        "name": row.get("JobName") or None,
        "submitted": parse_local_time(row.get("Submit", "").replace("T", " "), where, b.q,
                                      "submit") if "Submit" in row else None,
        "status": status, "start": start, "end": end, "exit_code": exit_code, "signal": sig,
        "nodes": expand_hostlist(row["NodeList"]), "gpus": _gpus_from_tres(row["AllocTRES"]),
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


def _read_json(path: Path, b: _Builder) -> int:
    n = 0
    for line, job in iter_array(path, "jobs"):
        where = f"{path}:{line}"
        if not isinstance(job, dict) or "job_id" not in job:
            raise InputError(f"{where}: sacct JSON job without job_id.",
                             "Pass the output of `sacct --json` unchanged.")
        with parsing(where, "Pass the output of `sacct --json` unchanged; nothing was stored."):
            job_id = str(job["job_id"])
            arr = job.get("array") or {}
            task = _num(arr.get("task_id") if isinstance(arr, dict) else None)
            if task is not None and _num(arr.get("job_id")):
                job_id = f"{_num(arr['job_id'])}_{task}"
            st = job.get("state")
            if isinstance(st, dict):
                cur = st.get("current")
                st = cur[0] if isinstance(cur, list) and cur else cur
            status = map_state(str(st or ""), b.q)
            t = job.get("time") or {}
            ec = job.get("exit_code")
            code = sig = None
            if isinstance(ec, dict):
                code = _num(ec.get("return_code"))
                s = ec.get("signal") or {}
                sig = _num(s.get("id")) if isinstance(s, dict) else None
            elif isinstance(ec, int):
                code = ec
            gpus = 0
            tres = (job.get("tres") or {}).get("allocated") or []
            for item in tres if isinstance(tres, list) else []:
                if isinstance(item, dict) and item.get("type") == "gres" and \
                        str(item.get("name", "")).startswith("gpu"):
                    gpus += int(item.get("count") or 0)
            start = _epoch(t.get("start"))
            end = None if status == "running" else _epoch(t.get("end"))
            b.add({
                "job_id": job_id, "user": _text(job.get("user"), "user"),
                "vc": _text(job.get("account") or job.get("partition"), "account"),
                "name": _text(job.get("name"), "name"),
                "submitted": _epoch(t.get("submission")), "status": status, "start": start, "end": end,
                "exit_code": code, "signal": sig, "nodes": expand_hostlist(str(job.get("nodes") or "")),
                "gpus": gpus,
            })
        n += 1
    return n


def import_slurm(store: Store, path: Path) -> ImportResult:
    """Import a ``sacct --parsable2`` or ``sacct --json`` file (one transaction)."""
    if not path.is_file():
        raise InputError(f"{path} does not exist.", "Pass a file written by sacct.")
    with open(path, encoding="utf-8", errors="replace") as fh:
        head = fh.read(64).lstrip()
    b = _Builder()
    is_json = head.startswith("{")
    with parsing(path, "Pass the output of `sacct --parsable2` or `sacct --json` unchanged."):
        records = _read_json(path, b) if is_json else _read_parsable(path, b)
        jobs, atts, pls = b.tables()
    kind = "slurm:json" if is_json else "slurm:parsable2"
    result = ImportResult(kind, [str(path)])
    with store.write() as con:
        delete_jobs(con, jobs.column("job_id"))
        result.rows = {"records": records,
                       "jobs": insert_arrow(con, "jobs", jobs),
                       "attempts": insert_arrow(con, "attempts", atts),
                       "placements": insert_arrow(con, "placements", pls)}
        # GPUs seen in exporter labels (hpc_job) replace the assumed indices: reconcile.py
        b.q.update(reconcile_placements(con, job_ids=jobs.column("job_id").to_pylist()))
        result.quirks[str(path)] = b.q.as_dict()
        record_import(con, kind, path, records, b.q.as_dict())
    return result

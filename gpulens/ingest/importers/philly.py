"""Import the Microsoft Philly public trace (msr-fiddle/philly-traces).

Files (any may be missing; a ``.gz`` suffix is accepted):

- ``cluster_job_log``: one JSON list of jobs ``{status: Pass|Killed|Failed, vc,
  jobid, user, submitted_time, attempts: [{start_time, end_time, detail:
  [{ip, gpus: ["gpu0", ...]}]}]}``. Parsed as a stream (see jsonstream.py).
- ``cluster_gpu_util``: CSV ``time,machineId,gpu0_util,...,gpu7_util,`` with a
  trailing comma, times ending in " PDT"/" PST", "NA" for an offline or absent
  GPU; one row per machine per minute. Loaded with DuckDB ``read_csv`` and
  written as gpu samples (``util_gpu`` only).
- ``cluster_machine_list``: CSV ``machineId,number of GPUs,single GPU mem``
  (values like " 24GB") -> nodes and gpus.
- ``cluster_cpu_util`` (``time,machine_id,cpu_util``) and ``cluster_mem_util``
  (``time,machine_id,mem_total,mem_free``): validated and counted, not stored
  (the store has no node CPU/memory sample kind yet).

Time: the job log's times and the utilization files' times are the same local
clock; like the trace's own notebook we drop the zone suffix and compare them
directly (so DST changes show up as a repeated or a missing hour; counted).

One import is one state transaction; the GPU samples are staged as Parquet
first and published into the samples tree only after that transaction
commits, so a malformed record (reported as ``file:line``) leaves nothing.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
import shutil
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

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
from gpulens.store import Store
from gpulens.store.samples import duckdb_columns
from gpulens.store.tables import registered

__all__ = ["PHILLY_FILES", "PhillyFiles", "find_files", "import_philly", "read_job_log"]

PHILLY_FILES = ("cluster_job_log", "cluster_gpu_util", "cluster_machine_list",
                "cluster_cpu_util", "cluster_mem_util")

_STATUS = {"pass": "passed", "passed": "passed", "killed": "killed", "failed": "failed"}
_GPU = re.compile(r"^gpu(\d+)$")
_MEM = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*$", re.IGNORECASE)
_T = pa.timestamp("us")

Progress = Callable[[str, int, int], None]


@dataclass
class PhillyFiles:
    job_log: Path | None = None
    gpu_util: Path | None = None
    machine_list: Path | None = None
    cpu_util: Path | None = None
    mem_util: Path | None = None

    def paths(self) -> list[Path]:
        return [p for p in (self.job_log, self.gpu_util, self.machine_list, self.cpu_util,
                            self.mem_util) if p is not None]


def find_files(root: Path) -> PhillyFiles:
    """Locate the trace files in a directory (names as in the public trace)."""
    if not root.is_dir():
        raise InputError(f"{root} is not a directory.",
                         "Pass the directory that holds cluster_job_log and cluster_gpu_util.")
    found: dict[str, Path] = {}
    for name in PHILLY_FILES:
        for cand in sorted(root.iterdir()):
            if cand.is_file() and (cand.name == name or cand.name.startswith(name + ".")):
                found[name] = cand
                break
    if not found:
        raise InputError(f"{root} holds none of the Philly trace files {', '.join(PHILLY_FILES)}.",
                         "Extract trace-data.tar.gz from msr-fiddle/philly-traces there first.")
    return PhillyFiles(found.get("cluster_job_log"), found.get("cluster_gpu_util"),
                       found.get("cluster_machine_list"), found.get("cluster_cpu_util"),
                       found.get("cluster_mem_util"))


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


# ------------------------------------------------------------------ job log
_JOB_COLS = [("job_id", pa.string()), ("user", pa.string()), ("vc", pa.string()),
             ("submitted", _T), ("status", pa.string()), ("requested_gpus", pa.int32()),
             ("source", pa.string())]
_ATT_COLS = [("job_id", pa.string()), ("attempt", pa.int32()), ("start_time", _T),
             ("end_time", _T), ("status", pa.string())]
_PL_COLS = [("job_id", pa.string()), ("attempt", pa.int32()), ("node", pa.string()),
            ("gpu_index", pa.int32())]


@dataclass
class JobLog:
    jobs: pa.Table
    attempts: pa.Table
    placements: pa.Table
    nodes: set[str] = field(default_factory=set)
    quirks: Quirks = field(default_factory=Quirks)


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


_RECORD_HINT = "Fix that record and import again."
_Attempt = tuple[datetime | None, datetime | None, list[tuple[str, int]]]


def _check_jobid(rec: Any, where: str) -> None:
    """InputError unless ``rec`` is an object with a scalar, non-empty jobid."""
    if not isinstance(rec, dict) or rec.get("jobid") in (None, "") or isinstance(rec["jobid"], dict | list):
        raise InputError(f"{where}: job record without a jobid.",
                         "Each element must be an object with jobid, status and attempts.")


def _job_status(rec: dict[str, Any], q: Quirks) -> str:
    """passed | killed | failed, or the trace's own word (lower case) when it is another."""
    raw_status = str(rec.get("status") or "").strip()
    status = _STATUS.get(raw_status.lower())
    if status is None:
        q["unknown_status"] += 1
        status = raw_status.lower() or "unknown"
    return status


def _attempt_list(rec: dict[str, Any], job_id: str, where: str, q: Quirks) -> list[Any]:
    attempts = rec.get("attempts") or []
    if not isinstance(attempts, list):
        raise InputError(f"{where}: attempts of job {job_id} is not a list.", _RECORD_HINT)
    if not attempts:
        q["jobs_without_attempts"] += 1
    return attempts


def _detail_gpus(detail: list[Any], q: Quirks) -> list[tuple[str, int]]:
    """(node, GPU index) of an attempt's detail entries, in their order."""
    gpus: list[tuple[str, int]] = []
    for d in detail:
        if not isinstance(d, dict) or not d.get("ip"):
            q["detail_without_ip"] += 1
            continue
        node = str(d["ip"])
        for g in d.get("gpus") or []:
            m = _GPU.match(str(g))
            if not m:
                q["unparsable_gpu_name"] += 1
                continue
            gpus.append((node, int(m[1])))
    return gpus


def _parse_attempt(a: Any, job_id: str, where: str, q: Quirks) -> _Attempt:
    """(start, end, distinct (node, GPU)s) of one attempt record."""
    if not isinstance(a, dict):
        raise InputError(f"{where}: an attempt of job {job_id} is not an object.", _RECORD_HINT)
    start = parse_local_time(a.get("start_time"), where, q, "attempt_start_time")
    end = parse_local_time(a.get("end_time"), where, q, "attempt_end_time")
    detail = a.get("detail") or []
    if not isinstance(detail, list):
        raise InputError(f"{where}: detail of job {job_id} is not a list.", _RECORD_HINT)
    gpus = _detail_gpus(detail, q)
    if not gpus:
        q["attempts_without_gpus"] += 1
    if len(set(gpus)) != len(gpus):
        q["duplicate_gpu_in_attempt"] += 1
        gpus = list(dict.fromkeys(gpus))
    return start, end, gpus


def _attempt_status(is_last: bool, start: datetime | None, end: datetime | None, status: str,
                    q: Quirks) -> str:
    """An earlier attempt failed (it was retried); the last one has the job's status, or runs."""
    if not is_last:
        q["retried_attempts"] += 1
        return "failed"
    a_status = "running" if (end is None and start is not None) else status
    if a_status == "running":
        q["running_attempts"] += 1
    return a_status


@dataclass
class _JobLogRows:
    """The rows of the job log's tables, added record by record."""

    q: Quirks = field(default_factory=Quirks)
    jobs: list[tuple[Any, ...]] = field(default_factory=list)
    atts: list[tuple[Any, ...]] = field(default_factory=list)
    pls: list[tuple[Any, ...]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)

    def add(self, rec: dict[str, Any], where: str) -> None:
        """One job record: its job row, attempts and placements (a repeated jobid is skipped)."""
        job_id = str(rec["jobid"])
        if job_id in self.seen:
            self.q["duplicate_jobid_skipped"] += 1
            return
        self.seen.add(job_id)
        status = _job_status(rec, self.q)
        attempts = _attempt_list(rec, job_id, where, self.q)
        submitted = parse_local_time(rec.get("submitted_time"), where, self.q, "submitted_time")
        parsed = [_parse_attempt(a, job_id, where, self.q) for a in attempts]
        self._add_attempts(job_id, parsed, status)
        job_status = "running" if parsed and parsed[-1][1] is None and parsed[-1][0] else status
        requested = max((len(g) for _, _, g in parsed), default=0) or None
        self.jobs.append((job_id, _str(rec.get("user")), _str(rec.get("vc")), submitted, job_status,
                          requested, "philly"))

    def _add_attempts(self, job_id: str, parsed: list[_Attempt], status: str) -> None:
        last = len(parsed) - 1
        for i, (start, end, gpus) in enumerate(parsed):
            if end is None and i < last:
                self.q["open_attempt_closed_by_retry"] += 1
                end = parsed[i + 1][0]
            if start is not None and end is not None and end < start:
                self.q["attempt_ends_before_start"] += 1
            a_status = _attempt_status(i == last, start, end, status, self.q)
            self.atts.append((job_id, i, start, end, a_status))
            for node, g in gpus:
                self.nodes.add(node)
                self.pls.append((job_id, i, node, g))


def read_job_log(path: Path, progress: Progress | None = None) -> JobLog:
    """Parse cluster_job_log into Arrow tables (jobs, attempts, placements)."""
    rows = _JobLogRows()
    with _open_text(path) as fh:
        for n, (line, rec) in enumerate(iter_array(path, fh=fh), start=1):
            where = f"{path}:{line}"
            if progress and n % 5000 == 0:
                progress("job log", n, 0)
            _check_jobid(rec, where)
            with parsing(where, "Fix that record and import again; nothing was stored."):
                rows.add(rec, where)
    with parsing(path, "Fix the records of wrong type and import again; nothing was stored."):
        return JobLog(arrow_rows(_JOB_COLS, rows.jobs), arrow_rows(_ATT_COLS, rows.atts),
                      arrow_rows(_PL_COLS, rows.pls), rows.nodes, rows.q)


# ------------------------------------------------------------ machine list
def _mem_bytes(text: str) -> int | None:
    m = _MEM.match(text or "")
    if not m:
        return None
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m[2].upper()]
    return int(float(m[1]) * mult)


def read_machine_list(path: Path) -> tuple[list[tuple[str, int, int | None]], Quirks]:
    q = Quirks()
    out: list[tuple[str, int, int | None]] = []
    with _open_text(path) as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        if len(header) < 2 or header[0] not in ("machineId", "machine_id"):
            raise InputError(f"{path}:1: header {','.join(header)!r} is not a Philly machine list.",
                             "Expected 'machineId,number of GPUs,single GPU mem'.")
        for line, row in enumerate(reader, start=2):
            if not row or not "".join(row).strip():
                q["blank_lines"] += 1
                continue
            try:
                gpus = int(row[1].strip())
            except (IndexError, ValueError):
                raise InputError(f"{path}:{line}: number of GPUs {row[1:2]!r} is not an integer.",
                                 "Fix that line and import again.") from None
            mem = _mem_bytes(row[2]) if len(row) > 2 else None
            if len(row) > 2 and row[2].strip() and mem is None:
                q["unparsable_gpu_memory"] += 1
            if len(row) > 2 and row[2] != row[2].strip():
                q["padded_values"] += 1
            out.append((row[0].strip(), gpus, mem))
    return out, q


# ------------------------------------------------------------- gpu util
def _header(path: Path) -> list[str]:
    with _open_text(path) as fh:
        first = fh.readline()
    return [h.strip() for h in next(csv.reader([first]), [])]


def _first_bad_line(path: Path, gpu_cols: list[int], ncols: int, node_col: int) -> tuple[int, str]:
    """Python re-scan of a CSV that failed validation, to name the first bad line."""
    zone = re.compile(r"\s+[A-Z]{2,4}$")
    with _open_text(path) as fh:
        reader = csv.reader(fh)
        next(reader, None)
        for line, row in enumerate(reader, start=2):
            if len(row) > ncols:
                return line, f"{len(row)} fields, expected at most {ncols}"
            try:
                datetime.strptime(zone.sub("", row[0].strip()), "%Y-%m-%d %H:%M:%S")
            except (ValueError, IndexError):
                return line, f"time {row[0] if row else ''!r} is not a time"
            if len(row) <= node_col or not row[node_col].strip():
                return line, "machine id is empty"
            for c in gpu_cols:
                v = row[c].strip() if c < len(row) else "NA"
                if v in ("", "NA"):
                    continue
                try:
                    float(v)
                except ValueError:
                    return line, f"utilization {v!r} is not a number or NA"
    return 0, "unknown problem"


def _sql_str(text: str) -> str:
    """Escape a string literal for DuckDB statements that cannot take parameters."""
    return text.replace("'", "''")


def _duck_error_line(exc: duckdb.Error) -> int | None:
    m = re.search(r"[Ll]ine:?\s*(\d+)", str(exc))
    return int(m[1]) if m else None


_GPU_UTIL_HINT = "Expected 'time,machineId,gpu0_util,...'."
_BAD_ROW_HINT = "Fix or remove that line and import again; nothing was stored."
_TS_EXPR = ("try_strptime(regexp_replace(trim(\"time\"), '\\s+[A-Z]{2,4}$', ''),"
            " '%Y-%m-%d %H:%M:%S')")


@dataclass
class _UtilHeader:
    """A validated cluster_gpu_util header: column names (blanks named) and the GPU columns."""

    names: list[str]
    node_name: str
    gpu_cols: list[tuple[int, int]]

    @property
    def ncol(self) -> str:
        return f'"{self.node_name}"'

    @property
    def gpu_positions(self) -> list[int]:
        return [i for i, _ in self.gpu_cols]


def _util_header(path: Path, q: Quirks) -> _UtilHeader:
    """The header of cluster_gpu_util, checked (InputError naming line 1 otherwise)."""
    header = _header(path)
    if not header or header[0] != "time" or len(header) < 3:
        raise InputError(f"{path}:1: header {','.join(header)!r} is not a Philly gpu util file.",
                         _GPU_UTIL_HINT)
    node_name = header[1]
    if node_name not in ("machineId", "machine_id"):
        raise InputError(f"{path}:1: second column {node_name!r} is not machineId.", _GPU_UTIL_HINT)
    if node_name == "machine_id":
        q["machine_id_spelling"] += 1
    names = [h if h else f"__empty{i}" for i, h in enumerate(header)]
    if any(not re.fullmatch(r"[A-Za-z0-9_ ]+", n) for n in names):
        raise InputError(f"{path}:1: header {','.join(header)!r} has unexpected characters.",
                         _GPU_UTIL_HINT)
    if header[-1] == "":
        q["trailing_comma_header"] += 1
    gpu_cols = [(i, int(m[1])) for i, h in enumerate(header) if (m := re.match(r"^gpu(\d+)_util$", h))]
    if not gpu_cols:
        raise InputError(f"{path}:1: no gpuN_util columns in the header.", _GPU_UTIL_HINT)
    return _UtilHeader(names, node_name, gpu_cols)


def _create_raw_view(con: duckdb.DuckDBPyConnection, path: Path, names: list[str], tmp_dir: Path) -> None:
    """View ``raw``: the CSV as text columns (no sniffing: the columns are known)."""
    con.execute("SET preserve_insertion_order = false")
    con.execute(f"SET temp_directory = '{_sql_str(str(tmp_dir))}'")
    columns = "{" + ", ".join(f"'{_sql_str(n)}': 'VARCHAR'" for n in names) + "}"
    con.execute(  # no sniffing: the columns are known, and a short row must not fail it
        f"CREATE TEMP VIEW raw AS SELECT * FROM read_csv('{_sql_str(str(path))}', header = true,"  # noqa: S608
        f" columns = {columns}, null_padding = true, quote = '\"', delim = ',',"
        " strict_mode = true, nullstr = '', auto_detect = false)"
    )


def _stats_sql(h: _UtilHeader) -> str:
    """One row of counts over ``raw``: rows, bad times/nodes, zones, and per GPU column NA/empty/bad/out of range."""
    tcol = '"time"'
    ncol = h.ncol
    checks = []
    for i, _ in h.gpu_cols:
        c = f'"{h.names[i]}"'
        checks.append(
            f"count(*) FILTER (WHERE trim({c}) = 'NA') AS na_{i},"
            f" count(*) FILTER (WHERE {c} IS NULL) AS empty_{i},"
            f" count(*) FILTER (WHERE {c} IS NOT NULL AND trim({c}) <> 'NA'"
            f" AND try_cast(trim({c}) AS DOUBLE) IS NULL) AS bad_{i},"
            f" count(*) FILTER (WHERE try_cast(trim({c}) AS DOUBLE) NOT BETWEEN 0 AND 100) AS oor_{i}"
        )
    extra = [f'"{n}"' for j, n in enumerate(h.names) if j > 1 and j not in dict(h.gpu_cols)]
    extra_check = " OR ".join(f"{c} IS NOT NULL" for c in extra) or "false"
    return (
        f"SELECT count(*) AS rows_, count(*) FILTER (WHERE {_TS_EXPR} IS NULL) AS bad_time,"  # noqa: S608
        f" count(*) FILTER (WHERE {ncol} IS NULL OR trim({ncol}) = '') AS bad_node,"
        f" count(*) FILTER (WHERE {tcol} LIKE '% PDT') AS pdt,"
        f" count(*) FILTER (WHERE {tcol} LIKE '% PST') AS pst,"
        f" count(*) FILTER (WHERE {extra_check}) AS extra_values, "
        + ", ".join(checks) + " FROM raw"
    )


def _util_stats(con: duckdb.DuckDBPyConnection, path: Path, h: _UtilHeader) -> dict[Hashable, Any]:
    """The counts of :func:`_stats_sql`; InputError naming the first bad line of a file that fails them."""
    try:
        stats = con.execute(_stats_sql(h)).df().iloc[0].to_dict()
    except duckdb.Error as exc:
        line = _duck_error_line(exc)
        if line is None:
            line, why = _first_bad_line(path, h.gpu_positions, len(h.names), 1)
        else:
            why = str(exc).splitlines()[0]
        raise InputError(f"{path}:{line}: malformed CSV row ({why}).", _BAD_ROW_HINT) from None
    bad = int(stats["bad_time"]) + int(stats["bad_node"]) + sum(
        int(stats[f"bad_{i}"]) for i, _ in h.gpu_cols)
    if bad:
        line, why = _first_bad_line(path, h.gpu_positions, len(h.names), 1)
        raise InputError(f"{path}:{line}: malformed CSV row ({why}).", _BAD_ROW_HINT)
    return stats


def _count_util_quirks(stats: dict[Hashable, Any], h: _UtilHeader, q: Quirks) -> None:
    q["zone_pdt_stripped"] += int(stats["pdt"])
    q["zone_pst_stripped"] += int(stats["pst"])
    q["extra_trailing_values"] += int(stats["extra_values"])
    for i, _ in h.gpu_cols:
        q["na_values_skipped"] += int(stats[f"na_{i}"])
        q["empty_values_skipped"] += int(stats[f"empty_{i}"])
        q["util_out_of_range"] += int(stats[f"oor_{i}"])


def _copy_samples(con: duckdb.DuckDBPyConnection, h: _UtilHeader, staging: Path) -> None:
    """COPY ``raw`` long-form (one row per GPU value, NA dropped) into Parquet by date and node."""
    unpivot_cols = ", ".join(f'"{h.names[i]}"' for i, _ in h.gpu_cols)
    other = ", ".join(
        f"CAST(NULL AS {typ}) AS {col}" for col, typ in duckdb_columns("gpu")
        if col not in ("ts", "node", "gpu_index", "util_gpu")
    )
    con.execute(
        f"""
        COPY (
            SELECT ts, CAST(regexp_extract(g, '(\\d+)', 1) AS SMALLINT) AS gpu_index,
                   CAST(trim(u) AS FLOAT) AS util_gpu, {other},
                   CAST(ts AS DATE) AS date, node
            FROM (
                UNPIVOT (SELECT {_TS_EXPR} AS ts, trim({h.ncol}) AS node, {unpivot_cols} FROM raw)
                ON {unpivot_cols} INTO NAME g VALUE u
            )
            WHERE trim(u) <> 'NA'
        ) TO '{_sql_str(str(staging))}' (FORMAT parquet, PARTITION_BY (date, node), COMPRESSION zstd)
        """  # noqa: S608 - column names come from the validated header; path is ours
    )


def _count_written(con: duckdb.DuckDBPyConnection, h: _UtilHeader, staging: Path, q: Quirks) -> None:
    """Count the staged samples and the rows that repeat a (time, machine)."""
    samples = con.execute(
        f"SELECT count(*) FROM read_parquet('{_sql_str(str(staging))}/*/*/*.parquet')"  # noqa: S608
    ).fetchone() if any(staging.glob("*/*/*.parquet")) else None  # no rows: no files
    q["samples_written"] += int(samples[0]) if samples else 0
    dup = con.execute(
        f"SELECT count(*) - count(DISTINCT ({_TS_EXPR}, {h.ncol})) FROM raw"  # noqa: S608
    ).fetchone()
    if dup and dup[0]:
        q["duplicate_time_machine_rows"] += int(dup[0])


def stage_gpu_util(path: Path, staging: Path, tmp_dir: Path) -> tuple[int, Quirks]:
    """Validate cluster_gpu_util and COPY it, long-form, into hive-partitioned Parquet."""
    q = Quirks()
    h = _util_header(path, q)
    con = duckdb.connect(":memory:")
    try:
        _create_raw_view(con, path, h.names, tmp_dir)
        stats = _util_stats(con, path, h)
        _count_util_quirks(stats, h, q)
        _copy_samples(con, h, staging)
        _count_written(con, h, staging, q)
        return int(stats["rows_"]), q
    finally:
        con.close()


def count_csv(path: Path, expected: tuple[str, ...]) -> tuple[int, Quirks]:
    """Validate a cpu/mem util file's header and count its rows (not stored)."""
    q = Quirks()
    header = _header(path)
    if tuple(header[: len(expected)]) != expected and not (
        header[:1] == ["time"] and header[1:2] in (["machineId"], ["machine_id"])
    ):
        raise InputError(f"{path}:1: header {','.join(header)!r} is not {','.join(expected)!r}.",
                         "Pass the cluster_cpu_util / cluster_mem_util file of the Philly trace.")
    with _open_text(path) as fh:
        rows = sum(1 for _ in fh) - 1
    q["rows_not_stored"] += rows
    return rows, q


# ----------------------------------------------------------------- import
_HINT = "Pass the original Philly trace file; nothing was stored."
_OTHER_HEADERS = {"cpu_util": ("time", "machine_id", "cpu_util"),
                  "mem_util": ("time", "machine_id", "mem_total", "mem_free")}


@dataclass
class _Read:
    """What the files held, before the store transaction."""

    log: JobLog | None = None
    machines: list[tuple[str, int, int | None]] = field(default_factory=list)
    util_rows: int = 0
    other_rows: dict[str, int] = field(default_factory=dict)


def _other_files(files: PhillyFiles) -> list[tuple[str, Path | None]]:
    """(label, path) of the cpu and mem util files (counted, not stored)."""
    return [("cpu_util", files.cpu_util), ("mem_util", files.mem_util)]


def _read_files(files: PhillyFiles, staging: Path, tmp_dir: Path, result: ImportResult,
                progress: Progress | None) -> _Read:
    """Parse the job log and machine list, stage the GPU samples, count the other files;
    each file's quirks go into ``result``."""
    read = _Read()
    if files.job_log:
        if progress:
            progress("job log", 0, 0)
        with parsing(files.job_log, _HINT):
            read.log = read_job_log(files.job_log, progress)
        result.quirks[str(files.job_log)] = read.log.quirks.as_dict()
    if files.machine_list:
        with parsing(files.machine_list, _HINT):
            read.machines, mq = read_machine_list(files.machine_list)
        result.quirks[str(files.machine_list)] = mq.as_dict()
    if files.gpu_util:
        if progress:
            progress("gpu util", 0, 0)
        with parsing(files.gpu_util, _HINT):
            read.util_rows, uq = stage_gpu_util(files.gpu_util, staging, tmp_dir)
        result.quirks[str(files.gpu_util)] = uq.as_dict()
        result.rows["gpu_samples"] = uq["samples_written"]
    for label, other in _other_files(files):
        if other:
            with parsing(other, _HINT):
                n, oq = count_csv(other, _OTHER_HEADERS[label])
            read.other_rows[str(other)] = n
            result.quirks[str(other)] = oq.as_dict()
    return read


def _write_jobs(con: duckdb.DuckDBPyConnection, log: JobLog, path: Path, result: ImportResult) -> None:
    """Replace the log's jobs with their new jobs, attempts and placements rows."""
    delete_jobs(con, log.jobs.column("job_id"))
    result.rows["jobs"] = insert_arrow(con, "jobs", log.jobs)
    result.rows["attempts"] = insert_arrow(con, "attempts", log.attempts)
    result.rows["placements"] = insert_arrow(con, "placements", log.placements)
    record_import(con, "philly:job_log", path, log.jobs.num_rows, result.quirks[str(path)])


def _node_rows(read: _Read, staging: Path | None) -> dict[str, tuple[int | None, int | None]]:
    """node -> (GPUs, GPU memory bytes): the machine list's, else unknown for the nodes the
    job log or the staged samples name."""
    node_rows: dict[str, tuple[int | None, int | None]] = {
        n: (None, None) for n in (read.log.nodes if read.log else set())}
    for name, gpus, mem in read.machines:
        node_rows[name] = (gpus, mem)
    if staging is not None and staging.exists():
        for d in staging.glob("date=*/node=*"):
            node_rows.setdefault(d.name[5:], (None, None))
    return node_rows


def _upsert_nodes(con: duckdb.DuckDBPyConnection, node_rows: dict[str, tuple[int | None, int | None]]) -> None:
    """Insert the nodes; a known node keeps what this import does not say."""
    tbl = pa.table({
        "node": list(node_rows),
        "gpus": pa.array([v[0] for v in node_rows.values()], pa.int32()),
        "gpu_memory_bytes": pa.array([v[1] for v in node_rows.values()], pa.int64()),
    })
    with registered(con, "__philly_nodes", tbl):
        con.execute(
            "INSERT INTO nodes (node, gpus, gpu_memory_bytes, source) "
            "SELECT node, gpus, gpu_memory_bytes, 'philly' FROM __philly_nodes "
            "ON CONFLICT (node) DO UPDATE SET "
            "gpus = coalesce(excluded.gpus, nodes.gpus), "
            "gpu_memory_bytes = coalesce(excluded.gpu_memory_bytes, nodes.gpu_memory_bytes)"
        )


def _upsert_gpus(con: duckdb.DuckDBPyConnection, machines: list[tuple[str, int, int | None]]) -> int:
    """One gpus row per machine-list GPU (indices 0..n-1); the number of rows."""
    gpu_rows = [(n, i, m) for n, g, m in machines for i in range(g)]
    gpus_t = arrow_rows(
        [("node", pa.string()), ("gpu_index", pa.int32()), ("mem", pa.int64())], gpu_rows)
    with registered(con, "__philly_gpus", gpus_t):
        con.execute(
            "INSERT INTO gpus (node, gpu_index, memory_total_bytes) "
            "SELECT node, gpu_index, mem FROM __philly_gpus "
            "ON CONFLICT (node, gpu_index) DO UPDATE SET "
            "memory_total_bytes = coalesce(excluded.memory_total_bytes, gpus.memory_total_bytes)"
        )
    return len(gpu_rows)


def _write(con: duckdb.DuckDBPyConnection, files: PhillyFiles, read: _Read, staging: Path,
           result: ImportResult) -> None:
    """The store transaction: jobs, nodes, GPUs and one imports row per file."""
    if read.log is not None and files.job_log is not None:
        _write_jobs(con, read.log, files.job_log, result)
    node_rows = _node_rows(read, staging if files.gpu_util else None)
    if node_rows:
        _upsert_nodes(con, node_rows)
        result.rows["nodes"] = len(node_rows)
    if read.machines:
        result.rows["gpus"] = _upsert_gpus(con, read.machines)
        record_import(con, "philly:machine_list", files.machine_list or "", len(read.machines),
                      result.quirks[str(files.machine_list)])
    if files.gpu_util:
        record_import(con, "philly:gpu_util", files.gpu_util, read.util_rows,
                      result.quirks[str(files.gpu_util)])
    for label, other in _other_files(files):
        if other:
            record_import(con, f"philly:{label}", other, read.other_rows[str(other)],
                          result.quirks[str(other)])


def import_philly(store: Store, files: PhillyFiles, *, progress: Progress | None = None) -> ImportResult:
    """Import the Philly trace files into ``store`` (one transaction; see module doc)."""
    result = ImportResult("philly", [str(p) for p in files.paths()])
    for p in files.paths():
        if not p.is_file():
            raise InputError(f"{p} does not exist.", "Check the path of the Philly trace file.")
    tag = uuid.uuid4().hex
    staging = store.tmp / f"seg-gpu-{tag}"
    try:
        read = _read_files(files, staging, store.tmp, result, progress)
        if progress:
            progress("writing", 0, 0)
        with store.write() as con:
            _write(con, files, read, staging, result)
        result.sample_files = len(store.publish_staged("gpu", staging, tag))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result

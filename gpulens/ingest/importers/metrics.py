"""Import job metric curves (job, step or epoch, metric, value) into ``job_metrics``.

Formats:

- CSV with a header naming ``job`` (or ``job_id``), ``step`` (or ``epoch``),
  ``metric`` and ``value`` columns, in any order; other columns are ignored.
- JSONL: one object per line with the same keys.
- TensorBoard event files (a directory or a single ``events.out.tfevents.*``
  file) when the ``tensorboard`` package is installed; scalar tags become
  metrics, ``--job`` names the job. Without ``tensorboard`` this raises
  MissingExtraError (it is not a gpulens dependency).

Existing rows of each imported (job, metric) pair are replaced, so importing a
file twice is idempotent. Empty, NaN or infinite values are skipped (counted).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from gpulens.errors import InputError, MissingExtraError
from gpulens.ingest.importers.common import (
    ImportResult,
    Quirks,
    arrow_rows,
    insert_arrow,
    parsing,
    record_import,
)
from gpulens.store import Store
from gpulens.store.tables import delete_matching, registered

__all__ = ["import_metrics", "read_curves", "read_tensorboard"]

_JOB = ("job", "job_id", "jobid")
_STEP = ("step", "epoch")
_COLS = [("job_id", pa.string()), ("step", pa.int32()), ("metric", pa.string()),
         ("value", pa.float64())]


def _row(where: str, job: Any, step: Any, metric: Any, value: Any, q: Quirks
         ) -> tuple[str, int, str, float] | None:
    if job in (None, "") or metric in (None, ""):
        raise InputError(f"{where}: job and metric must not be empty.",
                         "Each record needs job, step (or epoch), metric and value.")
    try:
        step_i = int(float(step))
    except (TypeError, ValueError):
        raise InputError(f"{where}: step {step!r} is not a number.",
                         "Fix that record and import again; nothing was stored.") from None
    if value in (None, "", "NA", "nan", "NaN"):
        q["empty_values_skipped"] += 1
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{where}: value {value!r} is not a number.",
                         "Fix that record and import again; nothing was stored.") from None
    if not math.isfinite(v):
        q["non_finite_values_skipped"] += 1
        return None
    return (str(job), step_i, str(metric), v)


_Curve = tuple[str, int, str, float]


def _jsonl_curves(fh: IO[str], path: Path, q: Quirks) -> list[_Curve]:
    """Rows of a JSONL curve file: one object per line, blank lines skipped."""
    rows: list[_Curve] = []
    for line_no, line in enumerate(fh, start=1):
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: malformed JSON ({exc.msg}).",
                             "Fix that line and import again; nothing was stored.") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: not a JSON object.", "One object per line.")
        job = next((obj[k] for k in _JOB if k in obj), None)
        step = next((obj[k] for k in _STEP if k in obj), None)
        r = _row(where, job, step, obj.get("metric"), obj.get("value"), q)
        if r:
            rows.append(r)
    return rows


def _csv_columns(header: list[str], path: Path) -> tuple[int, int, int, int]:
    """Positions of the job, step (or epoch), metric and value columns."""
    try:
        ji = next(header.index(k) for k in _JOB if k in header)
        si = next(header.index(k) for k in _STEP if k in header)
        mi, vi = header.index("metric"), header.index("value")
    except (StopIteration, ValueError):
        raise InputError(f"{path}:1: header {','.join(header)!r} lacks job, step/epoch, metric "
                         "or value.", "Write a header line: job,epoch,metric,value") from None
    return ji, si, mi, vi


def _csv_curves(fh: IO[str], path: Path, q: Quirks) -> list[_Curve]:
    """Rows of a CSV curve file with a header line; blank lines skipped."""
    rows: list[_Curve] = []
    reader = csv.reader(fh)
    header = [h.strip().lower() for h in next(reader, [])]
    ji, si, mi, vi = _csv_columns(header, path)
    for line_no, rec in enumerate(reader, start=2):
        if not rec or not "".join(rec).strip():
            continue
        if len(rec) < len(header):
            raise InputError(f"{path}:{line_no}: {len(rec)} fields, expected {len(header)}.",
                             "Fix that line and import again; nothing was stored.")
        r = _row(f"{path}:{line_no}", rec[ji], rec[si], rec[mi], rec[vi], q)
        if r:
            rows.append(r)
    return rows


def read_curves(path: Path) -> tuple[list[tuple[str, int, str, float]], Quirks]:
    """Parse a CSV or JSONL curve file (streaming, line by line)."""
    q = Quirks()
    with open(path, encoding="utf-8") as fh:
        first = fh.readline()
        fh.seek(0)
        if first.lstrip().startswith("{"):
            return _jsonl_curves(fh, path, q), q
        return _csv_curves(fh, path, q), q


def read_tensorboard(path: Path, job_id: str) -> tuple[list[tuple[str, int, str, float]], Quirks]:
    """Scalars of TensorBoard event files (needs the ``tensorboard`` package)."""
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        raise MissingExtraError("tensorboard is not installed, and reading event files needs it.",
                                "Install it with: pip install tensorboard") from None
    q = Quirks()
    acc = event_accumulator.EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    rows: list[tuple[str, int, str, float]] = []
    for tag in acc.Tags().get("scalars", []):
        for ev in acc.Scalars(tag):
            r = _row(f"{path}:{tag}", job_id, ev.step, tag, ev.value, q)
            if r:
                rows.append(r)
    return rows, q


def import_metrics(store: Store, path: Path, *, job_id: str | None = None) -> ImportResult:
    """Import one curve file (CSV/JSONL) or TensorBoard events (with ``job_id``)."""
    if not path.exists():
        raise InputError(f"{path} does not exist.", "Pass a CSV, JSONL or TensorBoard event path.")
    is_tb = path.is_dir() or "tfevents" in path.name
    if is_tb:
        if not job_id:
            raise InputError(f"{path} is a TensorBoard log; which job is it?", "Pass --job ID.")
        rows, q = read_tensorboard(path, job_id)
        kind = "metrics:tensorboard"
    else:
        with parsing(path, "Pass a CSV or JSONL file of (job, step|epoch, metric, value)."):
            rows, q = read_curves(path)
            with open(path, encoding="utf-8") as fh:
                kind = "metrics:jsonl" if fh.readline().lstrip().startswith("{") else "metrics:csv"
    table = arrow_rows(_COLS, rows)
    result = ImportResult(kind, [str(path)])
    with store.write() as con:
        pairs = table.select(["job_id", "metric"]).group_by(["job_id", "metric"]).aggregate([])
        delete_matching(con, "job_metrics", pairs, ["job_id", "metric"])
        jobs = pa.table({"job_id": pa.array(sorted({r[0] for r in rows}), pa.string())})
        with registered(con, "__metric_jobs", jobs):
            unknown = con.execute(
                "SELECT count(*) FROM __metric_jobs WHERE job_id NOT IN (SELECT job_id FROM jobs)"
            ).fetchone()
        if unknown and unknown[0]:
            q["jobs_not_in_store"] += int(unknown[0])
        result.rows = {"job_metrics": insert_arrow(con, "job_metrics", table)}
        result.quirks[str(path)] = q.as_dict()
        record_import(con, kind, path, len(rows), q.as_dict())
    return result

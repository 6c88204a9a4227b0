"""Diagnose jobs in the store: classify each failed attempt's log, gather the
job's context, infer the origin with the Bayesian network, write ``failures``.

Context of a failed attempt (each becomes one evidence variable of
:mod:`gpulens.diagnosis.origin`; docs/diagnosis.md has the details):

* ``exit``: the exit code / signal class (137 = SIGKILL, 143 = SIGTERM, ...).
* ``stage``: ``checkpoint`` when the category or the evidence lines point at
  saving/loading a checkpoint, else by run time: start-up (under
  ``diagnose.startup_seconds``), first iteration (under
  ``diagnose.first_iteration_seconds``), mid-training.
* ``retry``: how the job's other attempts ended: the same failure (same
  category, or same exit class when the log says nothing) on disjoint nodes, a
  later attempt that passed, the same failure on overlapping nodes, a different
  failure, or no other attempt.
* ``node_health``: XID events on the attempt's nodes at the time it failed:
  from ``diagnose.failure_xid_window_s`` before its end (but not before its
  start less ``diagnose.xid_margin_s``) to ``xid_margin_s`` after it (XIDs
  earlier in a run that went on are not what ended it), and uncorrectable ECC
  increases in those hours.
  Hardware XIDs (anything not
  in :data:`APP_XIDS`) or ECC give ``xid_or_ecc``; only application-caused XIDs
  (13, 31, 43, 45, 68) give ``app_xid``; nothing while GPU telemetry or XID
  monitoring covers the node gives ``clean``; no telemetry leaves it unobserved.
* ``node_cofailures``: other users' jobs whose failed attempts ended on the
  same node within ``diagnose.cofailure_window_s``, leaving out failures
  already classified as deterministic user/data errors (syntax, import,
  semantic, incorrect input, divergence, permission).
* For such a deterministic failure itself, ``node_health`` and
  ``node_cofailures`` are left unobserved (a note lists what the node showed):
  hardware does not produce a semantic error; the job merely ran on the node.
* ``input_cofailures``: other jobs whose ``incorrect_input`` failures blame one
  of this job's inputs (declared or named in its log); a blacklisted input
  counts as several. A failure blames the inputs its log names, else the job's
  declared inputs less those that passing jobs also read (exonerated: a popular
  dataset is not the suspect when a job also read a corrupt shard). Unobserved
  when the inputs that could be at fault are read by no other job: then no
  co-failure could have shown.
* ``multi_node``: more than one node in the attempt's placement.
* ``fault_frame``: for ``crash`` and ``cuda_error`` only, whether the failing
  frame of the log is the user's code or the framework's
  (:func:`gpulens.diagnosis.frames.fault_frame`; the origin convention of
  docs/diagnosis.md).
* ``clue``: what the log's own lines say about whose fault it is
  (:attr:`Diagnosis.clue`, from :func:`gpulens.diagnosis.origin.clue_from_lines`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from gpulens.config import DiagnoseConfig
from gpulens.diagnosis.blacklist import (
    blame_inputs,
    covers,
    is_global,
    normalize_input,
    used_by_passing_jobs,
)
from gpulens.diagnosis.frames import fault_frame_of_file
from gpulens.diagnosis.origin import (
    FRAME_CATEGORIES,
    OriginModel,
    OriginResult,
    cached_model,
    default_model,
    synthetic_history,
)
from gpulens.diagnosis.termination import METHOD as TERMINATION
from gpulens.diagnosis.termination import with_termination
from gpulens.diagnosis.types import CATEGORIES, ORIGINS, Diagnosis
from gpulens.errors import GpulensError, InputError
from gpulens.store import Store, registered
from gpulens.store.scan import node_source
from gpulens.vocab import NO_FAILURE

__all__ = [
    "APP_XIDS",
    "AttemptDiagnosis",
    "JobDiagnosis",
    "Progress",
    "diagnose_all",
    "diagnose_job",
    "exit_class",
    "format_job",
    "label_failure",
    "labeled_history",
    "model_for_store",
    "named_rows",
    "stage_of",
]

Classify = Callable[[Path], Diagnosis]
Progress = Callable[[str, int, int], None]
Key = tuple[str, int]

#: XIDs usually caused by the application rather than the GPU or driver
#: (NVIDIA XID catalogue: 13 graphics engine exception, 31 MMU fault, 43 GPU
#: stopped processing, 45 preemptive cleanup, 68 video processor exception).
APP_XIDS: Final[frozenset[int]] = frozenset({13, 31, 43, 45, 68})
#: categories whose failures say nothing about the node they ran on
DETERMINISTIC: Final[frozenset[str]] = frozenset(
    {"syntax_error", "import_error", "semantic_error", "incorrect_input", "model_diverged", "permission_error"}
)
#: attempts to diagnose: failed, or killed by the platform for a reason it names (SQL, alias a)
_ENDED_BADLY = "(a.status = 'failed' OR (a.status = 'killed' AND a.reason IS NOT NULL))"
_CHECKPOINT = re.compile(
    r"checkpoint|\.ckpt\b|\.pth?\b|torch\.save|torch\.load|save_pretrained|from_pretrained|state_dict|safetensors",
    re.IGNORECASE,
)


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


# ----------------------------------------------------------------- evidence
def exit_class(exit_code: int | None, signal: int | None) -> str | None:
    """Class of an attempt's exit status (None when unknown)."""
    sig: int | None = None
    if signal is not None and not _isnan(signal) and int(signal) > 0:
        sig = int(signal)
    elif exit_code is not None and not _isnan(exit_code):
        code = int(exit_code)
        if code < 0:
            sig = -code
        elif 128 < code < 160:
            sig = code - 128
        elif code == 0:
            return "zero"
        elif code == 1:
            return "error"
        else:
            return "other_code"
    if sig is None:
        return None
    return {9: "sigkill", 15: "sigterm", 11: "sigsegv", 7: "sigsegv", 6: "sigabrt"}.get(sig, "signal_other")


def _isnan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


def stage_of(
    category: str | None,
    runtime_s: float | None,
    evidence: Iterable[str] = (),
    config: DiagnoseConfig | None = None,
) -> str | None:
    """Stage at failure: checkpoint, startup, first_iteration or mid_training (None if unknown)."""
    cfg = config or DiagnoseConfig()
    if category == "checkpoint_error" or any(_CHECKPOINT.search(line) for line in evidence):
        return "checkpoint"
    if runtime_s is None or _isnan(runtime_s) or runtime_s < 0:
        return None
    if runtime_s < cfg.startup_seconds:
        return "startup"
    if runtime_s < cfg.first_iteration_seconds:
        return "first_iteration"
    return "mid_training"


def _count_state(n: int) -> str:
    return "none" if n == 0 else "one" if n == 1 else "several"


# ----------------------------------------------------------------- results
@dataclasses.dataclass
class AttemptDiagnosis:
    job_id: str
    attempt: int
    status: str
    nodes: list[str]
    diagnosis: Diagnosis
    origin: OriginResult
    context: dict[str, str | None]
    notes: list[str]

    @property
    def category(self) -> str:
        return self.diagnosis.category

    @property
    def evidence(self) -> list[str]:
        """Log evidence lines, then the context notes."""
        return [*self.diagnosis.evidence, *self.notes]

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "attempt": self.attempt,
            "status": self.status,
            "nodes": self.nodes,
            "category": self.diagnosis.category,
            "origin": self.origin.origin,
            "confidence": self.diagnosis.confidence,
            "origin_confidence": self.origin.probability,
            "origin_posterior": self.origin.posterior,
            "method": self.diagnosis.method,
            "rule_id": self.diagnosis.rule_id,
            "reason": self.diagnosis.reason,
            "inputs": self.diagnosis.inputs,
            "context": self.context,
            "influence": [dataclasses.asdict(i) for i in self.origin.influence],
            "evidence": self.evidence,
            "indicator_lines": list(self.diagnosis.indicator_lines),
            "first_rank": self.diagnosis.first_rank,
            "first_node": self.diagnosis.first_node,
            "phase": self.diagnosis.phase,
            "step": self.diagnosis.step,
            "story": self.diagnosis.story,
        }


@dataclasses.dataclass
class JobDiagnosis:
    job_id: str
    user: str | None
    status: str | None
    attempts: list[AttemptDiagnosis]

    @property
    def final(self) -> AttemptDiagnosis | None:
        """The last failed attempt's diagnosis (the job's failure reason)."""
        return self.attempts[-1] if self.attempts else None

    def to_dict(self) -> dict[str, Any]:
        final = self.final
        # no failed attempt and the scheduler recorded the job as passed: the healthy verdict
        healthy = NO_FAILURE if final is None and self.status == "passed" else None
        return {
            "job_id": self.job_id,
            "user": self.user,
            "status": self.status,
            "category": final.category if final else healthy,
            "origin": final.origin.origin if final else healthy,
            "attempts": [a.to_dict() for a in self.attempts],
        }


def format_job(jd: JobDiagnosis) -> list[str]:
    """Human-readable lines for ``gpulens diagnose --job``."""
    out = [f"job {jd.job_id}  user={jd.user or '?'}  status={jd.status or '?'}"]
    if not jd.attempts:
        out.append(f"  no failed attempt{' (category none: it passed)' if jd.status == 'passed' else ''}")
    for a in jd.attempts:
        post = ", ".join(f"{o} {p:.2f}" for o, p in sorted(a.origin.posterior.items(), key=lambda kv: -kv[1]))
        out.append(
            f"  attempt {a.attempt} on {', '.join(a.nodes) or '?'}: {a.category} "
            f"({a.diagnosis.method}, {a.diagnosis.confidence:.2f}) -> origin {a.origin.origin} "
            f"({a.origin.probability:.2f})"
        )
        out.append(f"    posterior: {post}")
        if a.diagnosis.story:
            out.append(f"    {a.diagnosis.story}")
        for inf in a.origin.top_influence(3):
            out.append(f"    {inf.delta_log_odds:+.2f} log-odds  {inf.text}")
        if a.diagnosis.inputs:
            out.append(f"    inputs named in the log: {', '.join(a.diagnosis.inputs)}")
        for note in a.notes:
            out.append(f"    - {note}")
        if a.diagnosis.evidence:
            out.append("    evidence (log lines):")
        for line in a.diagnosis.evidence[:_EVIDENCE_LINES]:
            out.append(f"    | {line}")
        if len(a.diagnosis.evidence) > _EVIDENCE_LINES:
            out.append(f"    | ... {len(a.diagnosis.evidence) - _EVIDENCE_LINES} more (--json shows all)")
        if a.diagnosis.reason and not a.diagnosis.evidence:
            out.append(f"    ({a.diagnosis.reason})")
    return out


#: evidence lines shown per attempt by ``diagnose --job`` in text mode
_EVIDENCE_LINES = 10


# ----------------------------------------------------------------- store view
@dataclasses.dataclass
class _Attempt:
    job_id: str
    attempt: int
    status: str
    start: datetime | None
    end: datetime | None
    exit_code: int | None
    signal: int | None
    log_path: str | None
    user: str | None
    declared: list[str]
    job_status: str | None
    nodes: list[str]
    reason: str | None = None  # the scheduler's termination reason (attempts.reason)


@dataclasses.dataclass
class _Known:
    """What is known of a failed attempt: its category and the inputs its log names."""

    category: str
    inputs: list[str]
    evidence: list[str] = dataclasses.field(default_factory=list)
    log_read: bool = True
    frame: str | None = None  # fault_frame of the log (crash / cuda_error only)
    clue: str | None = None  # what the log's lines say about whose fault it is (origin.CLUES)


def named_rows(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """The rows of a query as dicts by column name."""
    cur = con.execute(sql, list(params))
    names = [d[0] for d in cur.description or []]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


class _View:
    """The slice of the store the context builder needs, read once, step by step."""

    def __init__(self, con: duckdb.DuckDBPyConnection, job_ids: list[str] | None, cfg: DiagnoseConfig) -> None:
        self.cfg = cfg
        self.attempts: dict[str, list[_Attempt]] = {}
        self.xids: dict[Key, Counter[tuple[str, int]]] = {}
        self.monitored_nodes: set[str] = set()
        self.ecc: dict[Key, int] = {}
        self.telemetry: set[Key] = set()
        self.cofail: dict[Key, list[tuple[str, int, str | None, str]]] = {}
        self.prior: dict[Key, _Known] = {}
        self.job_meta: dict[str, tuple[str | None, list[str]]] = {}
        self._select_jobs(con, job_ids)
        self._read_attempts(con)
        self._mark_failed_attempts(con)
        self._read_xids(con)
        self._read_ecc(con)
        self._read_cofailures(con)
        self._read_prior(con)
        self.exonerated: set[str] = used_by_passing_jobs(con)
        # jobs reading each input: every (job, declared input) pair counts once for the input's
        # normalized name (a distinct declared name is normalized once, not once per job)
        self.readers: Counter[str] = Counter()
        for r in named_rows(con, "SELECT input, count(*) AS jobs FROM (SELECT DISTINCT job_id, unnest(inputs)"
                                 " AS input FROM jobs) GROUP BY input"):
            for name in _inputs_of([r["input"]]):
                self.readers[name] += int(r["jobs"])
        self.blacklisted: list[str] = [
            r["input"] for r in named_rows(con, "SELECT input FROM blacklist WHERE state = 'blacklisted'")
        ]
        con.execute("DROP TABLE IF EXISTS fa")
        con.execute("DROP TABLE IF EXISTS sel_jobs")

    @staticmethod
    def _select_jobs(con: duckdb.DuckDBPyConnection, job_ids: list[str] | None) -> None:
        con.execute("CREATE OR REPLACE TEMP TABLE sel_jobs (job_id VARCHAR)")
        if job_ids is None:
            con.execute(f"INSERT INTO sel_jobs SELECT DISTINCT job_id FROM attempts a WHERE {_ENDED_BADLY}")  # noqa: S608
        else:
            con.executemany("INSERT INTO sel_jobs VALUES (?)", [[j] for j in job_ids])

    def _read_attempts(self, con: duckdb.DuckDBPyConnection) -> None:
        nodes: dict[Key, list[str]] = {}
        for r in named_rows(
            con,
            "SELECT job_id, attempt, list(DISTINCT node ORDER BY node) AS nodes FROM placements "
            "WHERE job_id IN (SELECT job_id FROM sel_jobs) GROUP BY job_id, attempt",
        ):
            nodes[(r["job_id"], int(r["attempt"]))] = list(r["nodes"])
        for r in named_rows(
            con,
            """
            SELECT a.job_id, a.attempt, a.status, a.start_time, a.end_time, a.exit_code, a.signal,
                   a.log_path, a.reason, j."user", j.inputs AS declared, j.status AS job_status
            FROM attempts a LEFT JOIN jobs j USING (job_id)
            WHERE a.job_id IN (SELECT job_id FROM sel_jobs)
            ORDER BY a.job_id, a.attempt
            """,
        ):
            key = (r["job_id"], int(r["attempt"]))
            self.attempts.setdefault(key[0], []).append(_Attempt(
                job_id=key[0], attempt=key[1], status=r["status"] or "", start=r["start_time"],
                end=r["end_time"], exit_code=r["exit_code"], signal=r["signal"], log_path=r["log_path"],
                user=r["user"], declared=list(r["declared"] or []), job_status=r["job_status"],
                nodes=nodes.get(key, []), reason=r["reason"],
            ))

    def _mark_failed_attempts(self, con: duckdb.DuckDBPyConnection) -> None:
        """Temp table ``fa``: the failed attempts' nodes and the window around the failure (its end)."""
        before, after = float(self.cfg.failure_xid_window_s), float(self.cfg.xid_margin_s)
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE fa AS
            SELECT DISTINCT a.job_id, a.attempt, p.node, a.start_time, a.end_time,
                   greatest(a.start_time - to_microseconds(CAST(? * 1e6 AS BIGINT)),
                            coalesce(a.end_time, a.start_time) - to_microseconds(CAST(? * 1e6 AS BIGINT))) AS t0,
                   coalesce(a.end_time, a.start_time) + to_microseconds(CAST(? * 1e6 AS BIGINT)) AS t1
            FROM attempts a JOIN placements p USING (job_id, attempt)
            WHERE {_ENDED_BADLY} AND a.start_time IS NOT NULL
              AND a.job_id IN (SELECT job_id FROM sel_jobs)
            """,  # noqa: S608
            [after, before, after],
        )

    def _read_xids(self, con: duckdb.DuckDBPyConnection) -> None:
        for r in named_rows(
            con,
            "SELECT fa.job_id, fa.attempt, fa.node, x.xid, count(*) AS n FROM fa JOIN xid_events x "
            "ON x.node = fa.node AND x.ts BETWEEN fa.t0 AND fa.t1 GROUP BY ALL",
        ):
            xid = int(r["xid"]) if r["xid"] is not None else -1
            self.xids.setdefault((r["job_id"], int(r["attempt"])), Counter())[(r["node"], xid)] += int(r["n"])
        self.monitored_nodes = {
            r["node"] for r in named_rows(
                con, "SELECT DISTINCT node FROM xid_events WHERE node IN (SELECT node FROM fa)")
        }

    def _read_ecc(self, con: duckdb.DuckDBPyConnection) -> None:
        """Uncorrectable ECC increases per failed attempt, and whether its nodes had telemetry then.

        Per (node, GPU, hour): the increase of the counter's hourly maximum over the GPU's previous
        hour with samples (or over the hour's minimum when there is none). Only the attempts'
        nodes and hours are read (:func:`_ecc_hours`), so one job's diagnosis reads its own
        nodes' samples around its failure, not the store's.
        """
        if not _ecc_hours(con):
            return
        for r in named_rows(
            con,
            """
            WITH d AS (
                SELECT node, h, greatest(coalesce(mx - coalesce(
                    lag(mx) OVER (PARTITION BY node, gpu_index ORDER BY h), mn), 0), 0) AS inc
                FROM ecc_g),
            nh AS (SELECT node, h, sum(inc) AS inc FROM d GROUP BY node, h)
            SELECT fa.job_id, fa.attempt, count(*) AS node_hours, sum(nh.inc) AS ecc
            FROM fa JOIN nh ON nh.node = fa.node
                AND nh.h BETWEEN date_trunc('hour', fa.t0) AND fa.t1
            GROUP BY fa.job_id, fa.attempt
            """,
        ):
            key = (r["job_id"], int(r["attempt"]))
            if r["node_hours"]:
                self.telemetry.add(key)
            self.ecc[key] = int(r["ecc"] or 0)
        con.execute("DROP TABLE IF EXISTS ecc_g")

    def _read_cofailures(self, con: duckdb.DuckDBPyConnection) -> None:
        # in a fixed order: the note names the first node each other job failed on
        for r in named_rows(
            con,
            """
            SELECT DISTINCT fa.job_id, fa.attempt, a.job_id AS other_job, a.attempt AS other_attempt,
                   j."user" AS other_user, p.node
            FROM fa
            JOIN placements p ON p.node = fa.node AND p.job_id <> fa.job_id
            JOIN attempts a ON a.job_id = p.job_id AND a.attempt = p.attempt
            LEFT JOIN jobs j ON j.job_id = a.job_id
            WHERE a.status = 'failed' AND a.end_time IS NOT NULL AND fa.end_time IS NOT NULL
              AND abs(epoch(a.end_time) - epoch(fa.end_time)) <= ?
            ORDER BY ALL
            """,
            [float(self.cfg.cofailure_window_s)],
        ):
            self.cofail.setdefault((r["job_id"], int(r["attempt"])), []).append(
                (r["other_job"], int(r["other_attempt"]), r["other_user"], r["node"]))

    def _read_prior(self, con: duckdb.DuckDBPyConnection) -> None:
        for r in named_rows(
            con,
            'SELECT f.job_id, f.attempt, f.category, f.inputs AS named, j.inputs AS declared, j."user", '
            "f.origin_evidence->>'$.clue' AS clue FROM failures f LEFT JOIN jobs j USING (job_id)",
        ):
            self.prior[(r["job_id"], int(r["attempt"]))] = _Known(
                r["category"], list(r["named"] or []), clue=r["clue"])
            self.job_meta[r["job_id"]] = (r["user"], list(r["declared"] or []))
        for job, atts in self.attempts.items():
            if atts:
                self.job_meta[job] = (atts[0].user, atts[0].declared)

    def failed(self) -> list[_Attempt]:
        """Failed attempts, and those the platform killed for a reason it names (an eviction)."""
        return [a for atts in self.attempts.values() for a in atts
                if a.status == "failed" or (a.status == "killed" and a.reason is not None)]


#: per (node, GPU, hour) of the failed attempts' nodes: the hourly max and min of the ECC counter
_ECC_HOURS = """
    SELECT node, gpu_index, date_trunc('hour', ts) AS h,
           max(ecc_uncorrected_total) AS mx, min(ecc_uncorrected_total) AS mn
    FROM {src}
    WHERE list_contains($nodes, node) AND ts >= $lo AND ts < $hi
    GROUP BY ALL
"""


def _ecc_hours(con: duckdb.DuckDBPyConnection) -> bool:
    """Temp table ``ecc_g``: the hours :meth:`_View._read_ecc` needs; False when there are none.

    The hours of the failed attempts' windows on their nodes, from the hour before the first one
    (only those nodes' files of those days are read: :func:`gpulens.store.scan.node_source`), and, for a GPU with
    no samples in that hour, its last hour with samples before it: the lag of the window's first
    hour is then the same row as over the whole history.
    """
    span = con.execute("SELECT list(DISTINCT node ORDER BY node), min(date_trunc('hour', t0)),"
                       " max(t1) FROM fa").fetchone()
    if span is None or not span[0] or span[1] is None:
        return False
    nodes, first, last = list(span[0]), span[1] - timedelta(hours=1), span[2]
    hi = last.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    src, files = node_source(con, "gpu", nodes, first.date(), hi.date())
    con.execute(f"CREATE OR REPLACE TEMP TABLE ecc_g AS {_ECC_HOURS.format(src=src)}",
                {"nodes": nodes, "lo": first, "hi": hi, **files})
    gaps = [r[0] for r in con.execute(
        "SELECT DISTINCT node FROM ecc_g GROUP BY node, gpu_index HAVING min(h) > $lo ORDER BY 1",
        {"lo": first}).fetchall()]
    if gaps:
        src, files = node_source(con, "gpu", gaps, None, first.date())
        con.execute(
            f"""
            INSERT INTO ecc_g
            WITH prev AS (
                SELECT node, gpu_index, date_trunc('hour', max(ts)) AS h FROM {src}
                WHERE list_contains($nodes, node) AND ts < $lo GROUP BY ALL)
            SELECT s.node, s.gpu_index, prev.h, max(s.ecc_uncorrected_total), min(s.ecc_uncorrected_total)
            FROM {src} s JOIN prev ON s.node = prev.node
                AND s.gpu_index IS NOT DISTINCT FROM prev.gpu_index AND date_trunc('hour', s.ts) = prev.h
            WHERE list_contains($nodes, s.node) AND s.ts < $lo
              AND s.ts >= (SELECT min(h) FROM prev)
            GROUP BY ALL
            """,  # noqa: S608 - src is store.scan's source; values are parameters
            {"nodes": gaps, "lo": first, **files},
        )
    return True


def _signature(known: _Known | None, att: _Attempt) -> str | None:
    if known is not None and known.category != "unknown":
        return known.category
    ec = exit_class(att.exit_code, att.signal)
    return f"exit:{ec}" if ec else None


Context = tuple[dict[str, str | None], list[str]]


def _log_context(att: _Attempt, me: _Known | None, cfg: DiagnoseConfig) -> Context:
    """category, exit, stage, multi_node and fault_frame: what the attempt itself shows."""
    runtime = (att.end - att.start).total_seconds() if att.start and att.end else None
    category = me.category if me is not None and me.log_read else None
    ctx: dict[str, str | None] = {
        "category": category,
        "exit": exit_class(att.exit_code, att.signal),
        "stage": stage_of(me.category if me else None, runtime, me.evidence if me else (), cfg),
        "multi_node": None if not att.nodes else ("multi" if len(att.nodes) > 1 else "single"),
        "fault_frame": me.frame if me is not None and category in FRAME_CATEGORIES else None,
        "clue": me.clue if category is not None and me is not None else None,
    }
    notes = [f"the failing frame is in {ctx['fault_frame'].replace('_', ' ')}"] if ctx["fault_frame"] else []
    return ctx, notes


def _retry_context(att: _Attempt, me: _Known | None, view: _View, known: Mapping[Key, _Known]) -> Context:
    """retry: how the job's other attempts ended."""
    sig = _signature(me, att)
    same_other: list[_Attempt] = []
    same_same: list[_Attempt] = []
    different: list[_Attempt] = []
    passed_later: list[_Attempt] = []
    for other in view.attempts.get(att.job_id, []):
        if other.attempt == att.attempt:
            continue
        if other.status == "passed" and other.attempt > att.attempt:
            passed_later.append(other)
        elif other.status == "failed":
            osig = _signature(known.get((other.job_id, other.attempt)), other)
            if sig is not None and osig == sig:
                disjoint = bool(att.nodes) and bool(other.nodes) and not set(att.nodes) & set(other.nodes)
                (same_other if disjoint else same_same).append(other)
            else:
                different.append(other)
    if same_other:
        o = same_other[0]
        return {"retry": "same_failure_other_node"}, [
            f"attempt {o.attempt} failed the same way ({sig}) on other node(s) {', '.join(o.nodes)}"]
    if passed_later:
        o = passed_later[0]
        return {"retry": "succeeded_on_retry"}, [f"attempt {o.attempt} passed on {', '.join(o.nodes) or '?'}"]
    if same_same:
        return {"retry": "same_failure_same_node"}, [
            f"attempt {same_same[0].attempt} failed the same way ({sig}) on overlapping node(s)"]
    if different:
        return {"retry": "different_failure"}, [f"attempt {different[0].attempt} failed differently"]
    return {"retry": "no_retry"}, []


def _node_health_context(att: _Attempt, key: Key, view: _View) -> Context:
    """node_health: hardware / application XIDs and ECC errors on the attempt's nodes."""
    xids = view.xids.get(key, Counter())
    hw = {k: n for k, n in xids.items() if k[1] not in APP_XIDS}
    app = {k: n for k, n in xids.items() if k[1] in APP_XIDS}
    ecc = view.ecc.get(key, 0)
    if hw or ecc:
        state: str | None = "xid_or_ecc"
    elif app:
        state = "app_xid"
    elif key in view.telemetry or any(n in view.monitored_nodes for n in att.nodes):
        state = "clean"
    else:
        state = None
    notes = [
        f"node {node}: XID {xid} ({'application' if xid in APP_XIDS else 'hardware'}) x{n} during the attempt"
        for (node, xid), n in sorted(xids.items())
    ]
    if ecc:
        notes.append(f"{ecc} uncorrectable ECC error(s) on the attempt's nodes while it ran")
    return {"node_health": state}, notes


def _cofailure_context(att: _Attempt, key: Key, view: _View, known: Mapping[Key, _Known]) -> Context:
    """node_cofailures: other users' non-deterministic failures on the same node at the same time."""
    others: dict[str, str] = {}
    for ojob, oatt, ouser, node in view.cofail.get(key, []):
        if att.user is not None and ouser == att.user:
            continue
        ok = known.get((ojob, oatt))
        if ok is not None and ok.category in DETERMINISTIC:
            continue
        others.setdefault(ojob, node)
    notes = []
    if others:
        minutes = view.cfg.cofailure_window_s / 60
        notes.append(
            f"{len(others)} other job(s) failed on {', '.join(sorted(set(others.values())))} "
            f"within {minutes:g} min: {', '.join(sorted(others)[:5])}"
        )
    return {"node_cofailures": _count_state(len(others)) if att.nodes else None}, notes


def _blamed_inputs(view: _View, known: Mapping[Key, _Known]) -> dict[str, set[str]]:
    """input -> jobs whose incorrect_input failures blame it."""
    blamed: dict[str, set[str]] = {}
    for (job, _att), k in known.items():
        if k.category == "incorrect_input":
            declared = view.job_meta.get(job, (None, []))[1]
            for name in blame_inputs(declared, k.inputs, view.exonerated):
                blamed.setdefault(name, set()).add(job)
    return blamed


def _input_context(att: _Attempt, me: _Known | None, view: _View, blamed: Mapping[str, set[str]]) -> Context:
    """input_cofailures: other jobs failing on one of this attempt's inputs; blacklisted inputs."""
    mine = set(_inputs_of(att.declared) + [n for n in _inputs_of(me.inputs if me else []) if is_global(n)])
    bad: set[str] = set()
    hit_inputs: list[str] = []
    for name, jobs in blamed.items():
        if any(covers(name, m) or covers(m, name) for m in mine):
            extra = jobs - {att.job_id}
            if extra:
                bad |= extra
                hit_inputs.append(name)
    listed = [m for m in mine if any(covers(e, m) for e in view.blacklisted)]
    suspects = blame_inputs(att.declared, me.inputs if me else [], view.exonerated)
    notes = [f"suspect input(s) if the data is at fault: {', '.join(sorted(suspects)[:5])}"] if suspects else []
    if not bad and not listed and not any(view.readers[s] > 1 for s in suspects):
        # the inputs that could be at fault are read by no other job: no co-failure could have
        # shown, so 'none' would be no evidence (inputs that passing jobs read are not suspects)
        return {"input_cofailures": None}, notes
    if hit_inputs:
        notes.append(f"input(s) {', '.join(sorted(hit_inputs)[:3])} also failed {len(bad)} other job(s)")
    if listed:
        notes.append(f"blacklisted input(s): {', '.join(sorted(listed)[:3])}")
    return {"input_cofailures": _count_state(len(bad) + (2 if listed else 0))}, notes


def _contexts(view: _View, known: Mapping[Key, _Known]) -> dict[Key, Context]:
    """Evidence variables and human notes for every failed attempt of the view."""
    blamed = _blamed_inputs(view, known)
    out: dict[Key, Context] = {}
    for att in view.failed():
        key = (att.job_id, att.attempt)
        me = known.get(key)
        ctx: dict[str, str | None] = {}
        notes: list[str] = []
        for part, part_notes in (
            _log_context(att, me, view.cfg),
            _retry_context(att, me, view, known),
            _node_health_context(att, key, view),
            _cofailure_context(att, key, view, known),
            _input_context(att, me, view, blamed),
        ):
            ctx.update(part)
            notes += part_notes
        notes += _unblame_node(ctx)
        out[key] = (ctx, notes)
    return out


def _unblame_node(ctx: dict[str, str | None]) -> list[str]:
    """Leave the node's state out of the evidence of a deterministic failure.

    A syntax, import, semantic, input, divergence or permission error is not a symptom hardware
    produces: XIDs or other jobs failing on the node at the time mean only that the job ran on a
    bad node, not that the node made it fail (the same reason such failures are not counted as
    other jobs' node co-failures). The notes still list what the node showed.
    """
    if ctx.get("category") not in DETERMINISTIC:
        return []
    hw = [v for v in ("node_health", "node_cofailures") if ctx.get(v) not in (None, "clean", "none")]
    ctx["node_health"] = ctx["node_cofailures"] = None
    if not hw:
        return []
    return [f"not counted: {', '.join(hw)} (a {ctx['category']} is not a hardware symptom)"]


def _inputs_of(values: Iterable[str]) -> list[str]:
    out = []
    for v in values:
        try:
            out.append(normalize_input(v))
        except InputError:
            continue
    return out


# ----------------------------------------------------------------- classify
def _default_classify() -> Classify:
    from gpulens.diagnosis.logread import diagnose_file

    return diagnose_file


def _failed_anyway(d: Diagnosis, att: _Attempt) -> Diagnosis:
    """The scheduler recorded the attempt as failed but its log shows a normal end (a failure
    after the program's own end, a kill without a trace): ``unknown``, saying so."""
    if not d.healthy:
        return d
    code = f"exit code {att.exit_code}" if att.exit_code is not None else "no exit code"
    why = (f"the log shows a normal end ({d.evidence[0] if d.evidence else 'no failure line'}) but the attempt "
           f"is recorded as {att.status} ({code}); the cause is not in the log")
    return Diagnosis("unknown", "unknown", 0.0, list(d.evidence), method="none", reason=why, file=d.file,
                     step=d.step)


def _log_file(store: Store, log_path: str | None) -> Path | None:
    if not log_path:
        return None
    p = Path(log_path)
    return p if p.is_absolute() else store.root / p


def _classify_attempt(store: Store, att: _Attempt, classify: Classify) -> Diagnosis:
    path = _log_file(store, att.log_path)
    if path is None:
        return Diagnosis("unknown", "unknown", 0.0, method="none", reason="no log recorded for the attempt")
    if not path.exists():
        return Diagnosis("unknown", "unknown", 0.0, method="none", reason=f"log file {path} is missing", file=str(path))
    try:
        return classify(path)
    except GpulensError as exc:
        return Diagnosis("unknown", "unknown", 0.0, method="none", reason=str(exc), file=str(path))
    except OSError as exc:
        return Diagnosis("unknown", "unknown", 0.0, method="none",
                         reason=f"log file {path} cannot be read ({exc.strerror})", file=str(path))


# ----------------------------------------------------------------- the model
def labeled_history(store: Store, con: duckdb.DuckDBPyConnection | None = None) -> pd.DataFrame:
    """Labeled rows (network variables + ``origin``) from the store's operator labels.

    Source: ``failures`` rows with ``method = 'manual'``. The simulator's ``sim_truth`` is never
    read here: it is the answer key that evaluations compare with, and fitting on it would
    make every simulated accuracy an in-sample one. Context variables are computed exactly as
    for diagnosis. Empty when the store has no labels.
    """
    own = con is None
    con = con or store.connect()
    try:
        labels: dict[Key, tuple[str, str]] = {}
        for job, att, cat, origin in con.execute(
            "SELECT job_id, attempt, category, origin FROM failures WHERE method = 'manual'"
        ).fetchall():
            labels[(job, int(att))] = (cat, origin)
        labels = {k: v for k, v in labels.items() if v[1] in ORIGINS and v[1] != "unknown"}
        cols = ["origin", "category", "multi_node", "exit", "stage", "retry", "node_health",
                "node_cofailures", "input_cofailures", "fault_frame", "clue"]
        if not labels:
            return pd.DataFrame(columns=cols, dtype="object")
        view = _View(con, sorted({j for j, _ in labels}), DiagnoseConfig())
        known: dict[Key, _Known] = dict(view.prior)
        logs = {(a.job_id, a.attempt): a.log_path for atts in view.attempts.values() for a in atts}
        for key, (cat, _o) in labels.items():
            prev = view.prior.get(key)
            path = _log_file(store, logs.get(key)) if cat in FRAME_CATEGORIES else None
            frame = fault_frame_of_file(path) if path is not None else None
            known[key] = _Known(cat, prev.inputs if prev else [], frame=frame, clue=prev.clue if prev else None)
        rows = []
        for key, (ctx, _notes) in _contexts(view, known).items():
            if key in labels:
                ctx = dict(ctx)
                ctx["category"] = labels[key][0]
                rows.append({"origin": labels[key][1], **ctx})
        return pd.DataFrame(rows, columns=cols, dtype="object")
    finally:
        if own:
            con.close()


def _check_label(origin: str, category: str | None) -> None:
    """InputError unless ``origin`` is an origin and ``category`` (when given) a category."""
    if origin not in ORIGINS:
        raise InputError(f"{origin!r} is not an origin.", f"Use one of: {', '.join(ORIGINS)}.")
    if category is not None and category not in CATEGORIES:
        raise InputError(f"{category!r} is not a category.", f"Use one of: {', '.join(CATEGORIES)}.")


def _failed_attempt(con: duckdb.DuckDBPyConnection, store: Store, job_id: str,
                    attempt: int | None) -> dict[str, Any]:
    """The failed attempt to label (``attempt``, else the job's last failed one) with its diagnosed
    category (None when undiagnosed); InputError when there is none."""
    rows = named_rows(
        con,
        "SELECT a.attempt, f.category FROM attempts a LEFT JOIN failures f USING (job_id, attempt) "
        "WHERE a.job_id = ? AND a.status = 'failed' AND (? IS NULL OR a.attempt = ?) "
        "ORDER BY a.attempt DESC LIMIT 1",
        [job_id, attempt, attempt],
    )
    if not rows:
        which = f"attempt {attempt} of job {job_id!r}" if attempt is not None else f"job {job_id!r}"
        raise InputError(f"No failed {which} in the store {store.root}.",
                         "Label a failed attempt: JOB or JOB:ATTEMPT (gpulens diagnose --job JOB lists them).")
    return rows[0]


def label_failure(
    store: Store,
    job_id: str,
    attempt: int | None,
    origin: str,
    category: str | None = None,
    *,
    clock: Callable[[], datetime] = _now,
) -> tuple[int, str, str]:
    """Record an operator's verdict on a failed attempt (``failures.method = 'manual'``).

    ``attempt`` None means the job's last failed attempt; ``category`` None keeps the
    diagnosed one. Manual rows survive ``diagnose --all`` and are what
    :func:`model_for_store` refits the network with. Returns (attempt, category, origin).
    """
    _check_label(origin, category)
    with store.write() as con:
        att = _failed_attempt(con, store, job_id, attempt)
        cat = category or att["category"]
        if cat is None:
            raise InputError(
                f"Job {job_id!r} attempt {att['attempt']} has not been diagnosed, so its category is unknown.",
                "Give --category, or run `gpulens diagnose --all` first.")
        con.execute("DELETE FROM failures WHERE job_id = ? AND attempt = ?", [job_id, att["attempt"]])
        con.execute(
            "INSERT INTO failures (job_id, attempt, category, origin, confidence, method, diagnosed_at) "
            "VALUES (?, ?, ?, ?, 1.0, 'manual', ?)",
            [job_id, att["attempt"], cat, origin, clock()],
        )
    return int(att["attempt"]), str(cat), origin


def _has_labels(store: Store) -> bool:
    """Whether the store holds operator labels (a state-only read, no sample views)."""
    con = store.connect(samples=False)
    try:
        row = con.execute("SELECT count(*) FROM failures WHERE method = 'manual'").fetchone()
    finally:
        con.close()
    return bool(row and row[0])


def model_for_store(store: Store, config: DiagnoseConfig | None = None) -> OriginModel:
    """The built-in network, refitted with the store's labels when it has any.

    The synthetic history then acts as a prior worth ``diagnose.bn_prior_rows`` rows. Either
    network is kept as JSON tables under ``<data dir>/models/`` (:func:`cached_model`, keyed by
    the code, the settings and the labels), so a later process reads it instead of importing
    pgmpy and learning it again.
    """
    cfg = config or DiagnoseConfig()
    ess = cfg.bn_equivalent_sample_size
    folder = store.root / "models"
    history = labeled_history(store) if _has_labels(store) else pd.DataFrame()
    if history.empty:
        return cached_model(folder, "" if ess == 10.0 else f"ess{ess:g}",
                            lambda: default_model(equivalent_sample_size=ess), shared=True)
    key = hashlib.sha256(f"{ess!r} {cfg.bn_prior_rows!r}\n".encode() + history.to_csv().encode())

    def learn() -> OriginModel:
        synth = synthetic_history()
        weights = np.concatenate(
            [np.full(len(synth), cfg.bn_prior_rows / len(synth)), np.ones(len(history))]
        )
        data = pd.concat([synth, history], ignore_index=True)
        return OriginModel.learn(
            data,
            equivalent_sample_size=ess,
            sample_weight=weights,
            source=f"synthetic+store({len(history)} labeled attempts)",
        )

    return cached_model(folder, f"labels-{key.hexdigest()[:16]}", learn)


# ----------------------------------------------------------------- pipeline
def _run(
    store: Store,
    job_ids: list[str] | None,
    classify: Classify | None,
    model: OriginModel | None,
    config: DiagnoseConfig | None,
    progress: Progress | None,
) -> tuple[_View, dict[Key, Diagnosis], dict[Key, AttemptDiagnosis]]:
    """The store's view of the jobs, each failed attempt's log diagnosis, and its full diagnosis."""
    cfg = config or DiagnoseConfig()
    con = store.connect()
    try:
        view = _View(con, job_ids, cfg)
    finally:
        con.close()
    failed = view.failed()
    diags, known = _classify_failed(store, view, failed, classify or _default_classify(), progress)
    contexts = _contexts(view, known)
    if model is None:
        model = model_for_store(store, cfg)
    results: dict[Key, AttemptDiagnosis] = {}
    for i, att in enumerate(failed):
        key = (att.job_id, att.attempt)
        results[key] = _attempt_diagnosis(att, diags[key], contexts[key], model)
        if progress is not None:
            progress("origin", i + 1, len(failed))
    return view, diags, results


def _classify_failed(
    store: Store, view: _View, failed: list[_Attempt], classify_fn: Classify, progress: Progress | None
) -> tuple[dict[Key, Diagnosis], dict[Key, _Known]]:
    """Each failed attempt's log diagnosis, and what is known of every attempt (prior and new)."""
    diags: dict[Key, Diagnosis] = {}
    known: dict[Key, _Known] = {k: v for k, v in view.prior.items()}
    for i, att in enumerate(failed):
        key = (att.job_id, att.attempt)
        d = _failed_anyway(with_termination(_classify_attempt(store, att, classify_fn), att.reason, att.exit_code), att)
        diags[key] = d
        path = _log_file(store, att.log_path)
        # a missing log leaves the category unobserved (unless the termination record names it);
        # an unreadable one is 'unknown'
        readable = (path is not None and path.exists()) or d.method == TERMINATION
        frame = fault_frame_of_file(path) if readable and path and d.category in FRAME_CATEGORIES else None
        known[key] = _Known(d.category, list(d.inputs), list(d.evidence), log_read=readable, frame=frame,
                            clue=d.clue if readable else None)
        if progress is not None:
            progress("classify", i + 1, len(failed))
    return diags, known


def _attempt_diagnosis(att: _Attempt, d: Diagnosis, context: Context, model: OriginModel) -> AttemptDiagnosis:
    """The attempt's log diagnosis with the origin the network infers from its context."""
    ctx, notes = context
    res = model.infer(ctx)
    top = res.influence[0] if res.influence else None
    summary = f"origin {res.origin} (p={res.probability:.2f})"
    if top is not None:
        summary += f"; most influential: {top.text} ({top.delta_log_odds:+.2f} log-odds)"
    return AttemptDiagnosis(
        job_id=att.job_id, attempt=att.attempt, status=att.status, nodes=att.nodes,
        diagnosis=d, origin=res, context=ctx, notes=[*notes, summary],
    )


def _failures_table(rows: list[AttemptDiagnosis]) -> pa.Table:
    """The diagnoses as rows of the ``failures`` table (all but ``diagnosed_at``)."""
    return pa.table(
        {
            "job_id": [r.job_id for r in rows],
            "attempt": pa.array([r.attempt for r in rows], pa.int32()),
            "category": [r.category for r in rows],
            "origin": [r.origin.origin for r in rows],
            "confidence": pa.array([float(r.diagnosis.confidence) for r in rows], pa.float64()),
            "evidence": pa.array([r.evidence for r in rows], pa.list_(pa.string())),
            "origin_posterior": [json.dumps({o: round(p, 6) for o, p in r.origin.posterior.items()}) for r in rows],
            "method": [f"{r.diagnosis.method}+bn" for r in rows],
            "inputs": pa.array([list(r.diagnosis.inputs) for r in rows], pa.list_(pa.string())),
            "origin_confidence": pa.array([r.origin.probability for r in rows], pa.float64()),
            "origin_evidence": [json.dumps(r.origin.evidence) for r in rows],
            "origin_influence": [json.dumps([dataclasses.asdict(i) for i in r.origin.influence]) for r in rows],
            "first_node": [r.diagnosis.first_node for r in rows],
            "first_rank": pa.array([r.diagnosis.first_rank for r in rows], pa.int32()),
            "indicator_lines": pa.array([list(r.diagnosis.indicator_lines) for r in rows], pa.list_(pa.int32())),
            "phase": [r.diagnosis.phase for r in rows],
            "step": [r.diagnosis.step for r in rows],
            "story": [r.diagnosis.story for r in rows],
        }
    )


def _write(store: Store, results: Iterable[AttemptDiagnosis], now: datetime) -> int:
    """Replace the attempts' ``failures`` rows (operator labels are kept); the rows now written."""
    rows = list(results)
    if not rows:
        return 0
    with store.write() as con:
        with registered(con, "new_failures", _failures_table(rows)):
            con.execute(
                "DELETE FROM failures WHERE coalesce(method, '') <> 'manual' AND (job_id, attempt) IN "
                "(SELECT job_id, attempt FROM new_failures)"
            )
            con.execute(_INSERT_NEW_FAILURES, [now])
            written = con.execute(
                "SELECT count(*) FROM failures f JOIN new_failures n USING (job_id, attempt) "
                "WHERE coalesce(f.method, '') <> 'manual'"
            ).fetchall()
    return int(written[0][0]) if written else 0


#: insert the registered ``new_failures`` rows that have no ``failures`` row (labels win)
_INSERT_NEW_FAILURES: Final = """
                INSERT INTO failures (job_id, attempt, category, origin, confidence, evidence,
                    origin_posterior, method, diagnosed_at, inputs, origin_confidence,
                    origin_evidence, origin_influence, first_node, first_rank, indicator_lines,
                    phase, step, story)
                SELECT n.job_id, n.attempt, n.category, n.origin, n.confidence, n.evidence,
                    CAST(n.origin_posterior AS JSON), n.method, ?, n.inputs, n.origin_confidence,
                    CAST(n.origin_evidence AS JSON), CAST(n.origin_influence AS JSON), n.first_node,
                    n.first_rank, n.indicator_lines, n.phase, n.step, n.story
                FROM new_failures n
                WHERE NOT EXISTS (SELECT 1 FROM failures f WHERE f.job_id = n.job_id AND f.attempt = n.attempt)
                """


def diagnose_job(
    store: Store,
    job_id: str,
    *,
    classify: Classify | None = None,
    model: OriginModel | None = None,
    config: DiagnoseConfig | None = None,
    write: bool = True,
    clock: Callable[[], datetime] = _now,
) -> JobDiagnosis:
    """Diagnose every failed attempt of one job with the store's context.

    ``classify`` maps a log path to a :class:`Diagnosis` (default:
    ``gpulens.diagnosis.classify_file``). With ``write`` the ``failures`` rows of the
    job are replaced in one transaction (operator labels, method 'manual', are kept).
    """
    con = store.connect(samples=False)  # state tables only: no sample views to build
    try:
        row = con.execute(
            'SELECT j."user", j.status FROM jobs j WHERE j.job_id = ?', [job_id]
        ).fetchone()
        has_attempts = con.execute("SELECT count(*) FROM attempts WHERE job_id = ?", [job_id]).fetchone()
    finally:
        con.close()
    if row is None and not (has_attempts and has_attempts[0]):
        raise InputError(
            f"Job {job_id!r} is not in the store {store.root}.",
            "Check the id (`gpulens analyze jobs --status failed` lists the failed jobs, "
            "`gpulens analyze jobs --json` every job) or the --data-dir.",
        )
    _view, _diags, results = _run(store, [job_id], classify, model, config, None)
    attempts = sorted(results.values(), key=lambda a: a.attempt)
    if write:
        _write(store, attempts, clock())
    return JobDiagnosis(job_id, row[0] if row else None, row[1] if row else None, attempts)


def diagnose_all(
    store: Store,
    *,
    classify: Classify | None = None,
    progress: Progress | None = None,
    model: OriginModel | None = None,
    config: DiagnoseConfig | None = None,
    clock: Callable[[], datetime] = _now,
) -> int:
    """Batch mode: diagnose every failed attempt in the store and fill ``failures``.

    Returns the number of rows written. ``progress(stage, done, total)`` is
    called per attempt for the stages 'classify' and 'origin'.
    """
    _view, _diags, results = _run(store, None, classify, model, config, progress)
    return _write(store, results.values(), clock())

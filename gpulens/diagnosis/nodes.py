"""Bad nodes: drain candidates from failures and hardware signals, and a
telemetry anomaly score per node and hour.

**Flagging** (:func:`flag_nodes`). By rate against the rest of the cluster,
not by count (:mod:`gpulens.diagnosis.badnodes`): infrastructure-origin failures
blamed on the node per node-hour of allocation and per job that ran on it, and
its hardware events (hardware XIDs, uncorrectable ECC, row-remap failures) per
day, each a Poisson tail probability against the others' rate; the blame of a
multi-node failure goes to the nodes with hardware signals during the attempt,
or away from nodes a later attempt passed on. A node is flagged when its
Benjamini-Hochberg q-value is at most ``diagnose.node_fdr`` and it has at least
``diagnose.node_min_jobs`` blamed jobs or ``diagnose.node_min_hw_events``
hardware events; ``confidence`` = 1 - q. The flag keeps its explanation as
JSON (rates vs the cluster's, blamed jobs with share and reason, signals with
times, p-values); ``score`` = -log10(q) ranks them. An active flag is updated
in place; a flag an operator cleared comes back only with jobs or events that
were not part of its evidence.

**Anomaly score** (:func:`score_anomalies`). Per node and hour, a feature vector
from the sample views: mean and spread of GPU utilization, memory use, PCIe
throughput and replay errors, power, mean and max temperature, SM clock,
corrected/uncorrected ECC increase, XIDs; network errors, drops, InfiniBand
symbol errors and link-downs. Counters become increases within the hour; heavy
tailed values are log-scaled, then every feature is robust-scaled (median,
IQR). A One-Class SVM (RBF kernel, ``nu = diagnose.anomaly_nu``) learns the
normal region from all node-hours (at most 5,000 sampled). The score maps the
SVM's signed distance d (decision function: positive inside the normal region)
into [0, 1] as ``1 / (1 + exp(d / s))``, with ``s`` the median |d| of the fitted
node-hours: 0.5 is the boundary of the normal region, lower is more typical, and
0.8 (the alert threshold in rules/) is about 1.4 typical distances outside it.
The raw decision value is not used directly because its scale changes with every
fit; this keeps one threshold meaningful across clusters and refits.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import duckdb
import numpy as np
import pandas as pd

from gpulens.config import DiagnoseConfig
from gpulens.diagnosis.badnodes import NodeTest, assess_nodes, read_evidence
from gpulens.errors import InputError
from gpulens.extras import require
from gpulens.store import Store, replace_batch

__all__ = [
    "FEATURES",
    "TimeFilter",
    "anomaly_score",
    "anomaly_scores",
    "clear_flag",
    "flag_details",
    "flag_nodes",
    "flagged_nodes",
    "hourly_features",
    "node_evidence",
    "score_anomalies",
]

Clock = Callable[[], datetime]


class TimeFilter(Protocol):
    """Anything with optional ``start`` / ``end`` datetimes (e.g. analysis.Filters)."""

    start: datetime | None
    end: datetime | None


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


# ---------------------------------------------------------------- flagging
def node_evidence(con: duckdb.DuckDBPyConnection, config: DiagnoseConfig | None = None) -> list[NodeTest]:
    """Every node's blame, rates against the cluster, signals and confidence (see badnodes)."""
    cfg = config or DiagnoseConfig()
    known = [r[0] for r in con.execute("SELECT node FROM nodes").fetchall()]
    return assess_nodes(read_evidence(con, cfg), cfg, known)


def _signal_counts(t: NodeTest) -> tuple[dict[str, int], dict[str, int]]:
    """The node's signals counted by kind, and its XIDs counted by code."""
    by_kind: dict[str, int] = {}
    xids: dict[str, int] = {}
    for s in t.signals:
        by_kind[s.kind] = by_kind.get(s.kind, 0) + 1
        if s.kind == "xid":
            code = s.detail.split()[1]
            xids[code] = xids.get(code, 0) + 1
    return by_kind, xids


def _rates(t: NodeTest) -> dict[str, float]:
    """The node's failure, blame and hardware-event rates next to the cluster's."""
    return {
        "infra_failures_per_1000_node_hours": t.rate_per_1000h,
        "cluster_per_1000_node_hours": t.cluster_rate_per_1000h,
        "blamed_jobs_per_job": t.job_rate,
        "cluster_blamed_jobs_per_job": t.cluster_job_rate,
        "hardware_events_per_day": t.hw_rate_per_day,
        "cluster_hardware_events_per_day": t.cluster_hw_rate_per_day,
    }


def _blamed_job_ids(t: NodeTest) -> list[str]:
    """The jobs whose failure put a share of blame on the node, sorted."""
    return sorted({f["job_id"] for f in t.failures if f["share"] > 0})


def _explain(t: NodeTest) -> dict[str, Any]:
    """The evidence JSON of a flag: rates vs the cluster's, jobs, signals with times, confidence."""
    by_kind, xids = _signal_counts(t)
    return {
        "confidence": round(t.confidence, 6),
        "q_value": t.q_value,
        "p_value": t.p_value,
        "p_failures": t.p_failures,
        "p_hardware": t.p_hardware,
        "rate": _rates(t),
        "node_hours": t.node_hours,
        "jobs_touched": t.jobs_touched,
        "blame": t.blame,
        "blamed_jobs": t.blamed_jobs,
        "jobs": _blamed_job_ids(t),
        "infra_failures": [f for f in t.failures if f["share"] > 0][:50],
        "cleared_by_evidence": [f for f in t.failures if f["share"] == 0][:20],
        "signals": [s.to_dict() for s in t.signals[:100]],
        "signal_counts": by_kind,
        "xids": xids,
        "ecc_uncorrected": by_kind.get("ecc", 0),
        "hw_events": t.hw_events,
        "p_straggler": t.p_straggler,
        "straggler_jobs": t.straggler_jobs,
        "straggler_rate": {"straggler_jobs_per_job": t.straggler_rate,
                           "cluster_straggler_jobs_per_job": t.cluster_straggler_rate},
        "stragglers": t.stragglers[:50],
    }


def _reason(t: NodeTest) -> str:
    parts = []
    if t.blame > 0 and t.p_failures < 0.5:
        n_jobs = len(_blamed_job_ids(t))
        parts.append(
            f"{n_jobs} job(s) failed from infrastructure here ({t.blame:.1f} after sharing the "
            f"blame with their other nodes): {t.rate_per_1000h:.1f} per 1000 node-hours vs cluster "
            f"{t.cluster_rate_per_1000h:.1f}"
        )
    if t.hw_events:
        kinds: dict[str, int] = {}
        for s in t.signals:
            if s.kind != "anomaly":
                kinds[s.kind] = kinds.get(s.kind, 0) + 1
        parts.append(", ".join(f"{n} {k.replace('_', '-')} event(s)" for k, n in sorted(kinds.items()))
                     + f" ({t.hw_rate_per_day:.2f}/day vs cluster {t.cluster_hw_rate_per_day:.2f})")
    if t.straggler_jobs and t.p_straggler < 0.5:
        parts.append(f"straggler in {t.straggler_jobs} job(s) ({t.straggler_rate:.2f} per job vs cluster "
                     f"{t.cluster_straggler_rate:.2f})")
    return "; ".join(parts) or "flagged"


def _meets_floor(t: NodeTest, seen_jobs: set[str], seen_hw: int, k: int, k_hw: int) -> bool:
    """Enough new evidence: ``k`` blamed jobs not seen in a cleared flag, ``k_hw`` new events,
    or straggling in ``k`` jobs not seen in a cleared flag."""
    new = {f["job_id"]: f["share"] for f in t.failures if f["share"] > 0 and f["job_id"] not in seen_jobs}
    enough_jobs = len(new) >= min(2, k) and sum(new.values()) >= k * 0.5
    new_strag = {d["job_id"] for d in t.stragglers} - seen_jobs
    return enough_jobs or t.hw_events - seen_hw >= k_hw or len(new_strag) >= k


def _upsert(con: duckdb.DuckDBPyConnection, t: NodeTest, ts: datetime, flags: list[Any]) -> bool | None:
    active = next((f for f in flags if f[0]), None)
    ev = _explain(t)
    score = _score(t)
    if active is not None:
        con.execute(
            "UPDATE node_flags SET reason = ?, evidence = ?, score = ?, confidence = ? WHERE node = ? AND active",
            [_reason(t), json.dumps(ev, default=str), score, t.confidence, t.node],
        )
        return False
    con.execute(
        "INSERT INTO node_flags (node, flagged_at, reason, evidence, score, active, confidence) "
        "VALUES (?, ?, ?, ?, ?, TRUE, ?)",
        [t.node, ts, _reason(t), json.dumps(ev, default=str), score, t.confidence],
    )
    return True


def _score(t: NodeTest) -> float:
    """-log10 of the node's q-value, the rank of a flag."""
    return round(-math.log10(max(t.q_value, 1e-300)), 4)


def _thresholds(cfg: DiagnoseConfig, min_jobs: int | None, min_hw_events: int | None,
                fdr: float | None) -> tuple[int, int, float]:
    """(min blamed jobs, min hardware events, q-value bound): the arguments, else the settings; checked."""
    k = cfg.node_min_jobs if min_jobs is None else min_jobs
    k_hw = cfg.node_min_hw_events if min_hw_events is None else min_hw_events
    q_max = cfg.node_fdr if fdr is None else fdr
    if k < 1 or k_hw < 1:
        raise InputError("Node flag thresholds must be at least 1.", "Set diagnose.node_min_jobs >= 1.")
    if not 0 < q_max < 1:
        raise InputError(f"Node false-discovery rate {q_max} is outside (0, 1).", "Set diagnose.node_fdr to e.g. 0.01.")
    return k, k_hw, q_max


def _flag_one(con: duckdb.DuckDBPyConnection, t: NodeTest, ts: datetime, k: int, k_hw: int) -> dict[str, Any] | None:
    """Flag or update the node of ``t``; its output row, or None when a cleared flag's evidence
    leaves too little new evidence."""
    flags = con.execute(
        "SELECT active, evidence FROM node_flags WHERE node = ? ORDER BY flagged_at DESC", [t.node]
    ).fetchall()
    cleared = [json.loads(f[1]) for f in flags if not f[0] and f[1]]
    seen_jobs = {j for ev in cleared for j in ev.get("jobs", [])}
    seen_jobs |= {d["job_id"] for ev in cleared for d in ev.get("stragglers", [])}
    seen_hw = max((int(ev.get("hw_events", 0)) for ev in cleared), default=0)
    if not any(f[0] for f in flags) and not _meets_floor(t, seen_jobs, seen_hw, k, k_hw):
        return None
    new = _upsert(con, t, ts, flags)
    return {"node": t.node, "reason": _reason(t), "confidence": t.confidence, "q_value": t.q_value,
            "score": _score(t), "jobs": _blamed_job_ids(t), "hw_events": t.hw_events, "new": bool(new)}


def flag_nodes(
    store: Store,
    *,
    min_jobs: int | None = None,
    min_hw_events: int | None = None,
    fdr: float | None = None,
    config: DiagnoseConfig | None = None,
    clock: Clock = _now,
) -> pd.DataFrame:
    """Flag drain candidates in ``node_flags``; returns the nodes flagged or updated now.

    A node is flagged when its Benjamini-Hochberg q-value is at most ``fdr``
    (``diagnose.node_fdr``) and it has at least ``min_jobs`` blamed jobs or
    ``min_hw_events`` hardware events not already in a cleared flag's evidence.
    """
    cfg = config or DiagnoseConfig()
    k, k_hw, q_max = _thresholds(cfg, min_jobs, min_hw_events, fdr)
    con = store.connect()
    try:
        tests = node_evidence(con, cfg)
    finally:
        con.close()
    ts = clock()
    out = []
    with store.write() as con:
        for t in sorted(tests, key=lambda t: t.q_value):
            row = _flag_one(con, t, ts, k, k_hw) if t.q_value <= q_max else None
            if row is not None:
                out.append(row)
    return pd.DataFrame(out, columns=["node", "reason", "confidence", "q_value", "score", "jobs", "hw_events", "new"])


def flagged_nodes(con: duckdb.DuckDBPyConnection, *, include_cleared: bool = False) -> pd.DataFrame:
    """node_flags rows (node, flagged_at, reason, evidence, score, confidence, active), most confident first."""
    sql = "SELECT node, flagged_at, reason, evidence, score, confidence, active FROM node_flags"
    if not include_cleared:
        sql += " WHERE active"
    return con.execute(sql + " ORDER BY active DESC, score DESC, node").df()


def flag_details(evidence: str | Mapping[str, Any] | None) -> dict[str, pd.DataFrame]:
    """A flag's evidence as tables: ``rates`` (node vs cluster), ``jobs`` (blamed failures with
    their share and why) and ``signals`` (hardware signals with their times)."""
    ev: Mapping[str, Any] = json.loads(evidence) if isinstance(evidence, str) else (evidence or {})
    rate = ev.get("rate") or {}
    pairs = [
        ("infrastructure failures per 1000 node-hours", "infra_failures_per_1000_node_hours",
         "cluster_per_1000_node_hours"),
        ("blamed jobs per job that ran on it", "blamed_jobs_per_job", "cluster_blamed_jobs_per_job"),
        ("hardware events per day", "hardware_events_per_day", "cluster_hardware_events_per_day"),
    ]
    rates = pd.DataFrame(
        [{"measure": label, "node": rate.get(mine), "cluster": rate.get(theirs)} for label, mine, theirs in pairs
         if mine in rate],
        columns=["measure", "node", "cluster"],
    )
    jobs = pd.DataFrame(
        [{k: f.get(k) for k in ("job_id", "attempt", "category", "start", "end", "nodes", "share", "why")}
         for f in ev.get("infra_failures", [])],
        columns=["job_id", "attempt", "category", "start", "end", "nodes", "share", "why"],
    )
    signals = pd.DataFrame(ev.get("signals", []), columns=["ts", "kind", "detail"])
    return {"rates": rates, "jobs": jobs, "signals": signals}


def clear_flag(store: Store, node: str, actor: str, reason: str, *, clock: Clock = _now) -> int:
    """Deactivate a node's active flag (after repair). Returns the flags cleared."""
    if not actor.strip() or not reason.strip():
        raise InputError("Clearing a node flag needs an actor and a reason.", "Pass --actor and --reason.")
    with store.write() as con:
        rows = con.execute(
            "SELECT flagged_at, evidence FROM node_flags WHERE node = ? AND active", [node]
        ).fetchall()
        if not rows:
            raise InputError(f"Node {node!r} has no active flag.", "`gpulens nodes list` shows the flagged nodes.")
        for flagged_at, ev in rows:
            data = json.loads(ev) if ev else {}
            data["cleared"] = {"by": actor, "at": clock().isoformat(), "reason": reason}
            con.execute(
                "UPDATE node_flags SET active = FALSE, evidence = ? WHERE node = ? AND flagged_at = ?",
                [json.dumps(data), node, flagged_at],
            )
    return len(rows)


# ---------------------------------------------------------------- anomalies
#: feature name -> (log-scale?, description)
FEATURES: dict[str, tuple[bool, str]] = {
    "util_mean": (False, "mean GPU utilization (%)"),
    "util_std": (False, "spread of GPU utilization across the node's GPUs and the hour"),
    "mem_frac": (False, "mean memory used / total"),
    "pcie_bps": (True, "mean PCIe tx+rx bytes/s"),
    "pcie_replay": (True, "PCIe replay counter increase"),
    "power_w": (False, "mean power (W)"),
    "temp_mean": (False, "mean temperature (C)"),
    "temp_max": (False, "max temperature (C)"),
    "sm_clock": (False, "mean SM clock (MHz)"),
    "ecc_corrected": (True, "corrected ECC increase"),
    "ecc_uncorrected": (True, "uncorrectable ECC increase"),
    "xids": (True, "XID events"),
    "net_errors": (True, "network rx+tx error increase"),
    "net_drops": (True, "network rx+tx drop increase"),
    "ib_errors": (True, "InfiniBand symbol errors + link downs increase"),
}


def _where_time(filters: TimeFilter | None, column: str) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if filters is not None and getattr(filters, "start", None) is not None:
        clauses.append(f"{column} >= ?")
        params.append(filters.start)
    if filters is not None and getattr(filters, "end", None) is not None:
        clauses.append(f"{column} < ?")
        params.append(filters.end)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def hourly_features(con: duckdb.DuckDBPyConnection, filters: TimeFilter | None = None) -> pd.DataFrame:
    """One row per (node, hour) with the :data:`FEATURES` columns (0 where unmeasured)."""
    frame = _outer_merge([_gpu_hourly(con, filters), _xid_hourly(con, filters), _net_hourly(con, filters)])
    if frame.empty:
        return pd.DataFrame(columns=["node", "hour", *FEATURES])
    return _feature_columns(frame)


def _gpu_hourly(con: duckdb.DuckDBPyConnection, filters: TimeFilter | None) -> pd.DataFrame:
    """Per (node, hour): the GPU sample aggregates, first per GPU, then over the node's GPUs."""
    where, params = _where_time(filters, "ts")
    return con.execute(
        f"""
        WITH per_gpu AS (
            SELECT node, gpu_index, date_trunc('hour', ts) AS hour,
                   avg(util_gpu) AS util, stddev_pop(util_gpu) AS util_sd,
                   avg(mem_used_bytes / nullif(mem_total_bytes, 0)) AS mem_frac,
                   avg(coalesce(pcie_tx_bps, 0) + coalesce(pcie_rx_bps, 0)) AS pcie_bps,
                   max(pcie_replay_total) - min(pcie_replay_total) AS pcie_replay,
                   avg(power_w) AS power_w, avg(temp_c) AS temp_mean, max(temp_c) AS temp_max,
                   avg(sm_clock_mhz) AS sm_clock,
                   max(ecc_corrected_total) - min(ecc_corrected_total) AS ecc_corrected,
                   max(ecc_uncorrected_total) - min(ecc_uncorrected_total) AS ecc_uncorrected,
                   sum(xid_count) AS xid_count
            FROM gpu_samples{where} GROUP BY ALL)
        SELECT node, hour, avg(util) AS util_mean,
               coalesce(sqrt(avg(util_sd * util_sd) + var_pop(util)), 0) AS util_std,
               avg(mem_frac) AS mem_frac, avg(pcie_bps) AS pcie_bps, sum(pcie_replay) AS pcie_replay,
               avg(power_w) AS power_w, avg(temp_mean) AS temp_mean, max(temp_max) AS temp_max,
               avg(sm_clock) AS sm_clock, sum(ecc_corrected) AS ecc_corrected,
               sum(ecc_uncorrected) AS ecc_uncorrected, sum(xid_count) AS xid_count
        FROM per_gpu GROUP BY node, hour
        """,  # noqa: S608 - only our own column names are formatted in
        params,
    ).df()


def _xid_hourly(con: duckdb.DuckDBPyConnection, filters: TimeFilter | None) -> pd.DataFrame:
    """Per (node, hour): the number of XID events."""
    where, params = _where_time(filters, "ts")
    return con.execute(
        f"SELECT node, date_trunc('hour', ts) AS hour, count(*) AS xid_events FROM xid_events{where} GROUP BY ALL",  # noqa: S608
        params,
    ).df()


def _net_hourly(con: duckdb.DuckDBPyConnection, filters: TimeFilter | None) -> pd.DataFrame:
    """Per (node, hour): network error, drop and InfiniBand error increases, summed over devices."""
    where, params = _where_time(filters, "ts")
    return con.execute(
        f"""
        WITH per_dev AS (
            SELECT node, device, date_trunc('hour', ts) AS hour,
                   max(coalesce(rx_errors_total, 0) + coalesce(tx_errors_total, 0))
                     - min(coalesce(rx_errors_total, 0) + coalesce(tx_errors_total, 0)) AS errs,
                   max(coalesce(rx_drops_total, 0) + coalesce(tx_drops_total, 0))
                     - min(coalesce(rx_drops_total, 0) + coalesce(tx_drops_total, 0)) AS drops,
                   max(coalesce(symbol_errors_total, 0) + coalesce(link_downed_total, 0))
                     - min(coalesce(symbol_errors_total, 0) + coalesce(link_downed_total, 0)) AS ib
            FROM net_samples{where} GROUP BY ALL)
        SELECT node, hour, sum(errs) AS net_errors, sum(drops) AS net_drops, sum(ib) AS ib_errors
        FROM per_dev GROUP BY node, hour
        """,  # noqa: S608
        params,
    ).df()


def _outer_merge(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The non-empty frames outer-joined on (node, hour), in order."""
    frame = frames[0]
    for other in frames[1:]:
        if frame.empty:
            frame = other
        elif not other.empty:
            frame = frame.merge(other, on=["node", "hour"], how="outer")
    return frame


def _feature_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` reduced to node, hour and every feature as float (0 where missing), sorted."""
    zeros = pd.Series(0.0, index=frame.index)
    counted = [
        pd.to_numeric(frame[c], errors="coerce").fillna(0.0) if c in frame else zeros
        for c in ("xid_count", "xid_events")
    ]
    frame["xids"] = np.maximum(counted[0], counted[1])
    for col in FEATURES:
        if col not in frame:
            frame[col] = 0.0
        frame[col] = pd.to_numeric(frame[col], errors="coerce").astype(float).fillna(0.0)
    return frame[["node", "hour", *FEATURES]].sort_values(["node", "hour"]).reset_index(drop=True)


def _matrix(frame: pd.DataFrame) -> np.ndarray:
    cols = []
    for name, (log, _) in FEATURES.items():
        v = frame[name].to_numpy(dtype=float)
        v = np.where(np.isfinite(v), v, 0.0)
        cols.append(np.log1p(np.maximum(v, 0.0)) if log else v)
    x = np.column_stack(cols)
    med = np.median(x, axis=0)
    q75, q25 = np.percentile(x, [75, 25], axis=0)
    scale = q75 - q25
    std = x.std(axis=0)
    scale = np.where(scale > 0, scale, np.where(std > 0, std, 1.0))
    return np.asarray((x - med) / scale)


def anomaly_score(decision: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Map One-Class SVM decision values into [0, 1]; 0.5 at the boundary (see module doc)."""
    scale = float(np.median(np.abs(reference)))
    if not np.isfinite(scale) or scale <= 0:
        scale = 1.0
    z = np.clip(np.asarray(decision, dtype=float) / scale, -50.0, 50.0)
    return np.asarray(1.0 / (1.0 + np.exp(z)))


def score_anomalies(
    store: Store,
    *,
    filters: TimeFilter | None = None,
    nu: float | None = None,
    max_fit_rows: int = 5000,
    seed: int = 0,
    config: DiagnoseConfig | None = None,
) -> int:
    """Fit the One-Class SVM on per-node hourly features and write ``node_anomaly``.

    Returns the number of (node, hour) scores written (existing hours are replaced).
    """
    cfg = config or DiagnoseConfig()
    nu = cfg.anomaly_nu if nu is None else nu
    if not 0 < nu <= 1:
        raise InputError(f"anomaly nu {nu} is outside (0, 1].", "Set diagnose.anomaly_nu to e.g. 0.05.")
    require("sklearn")
    from sklearn.svm import OneClassSVM

    con = store.connect()
    try:
        frame = hourly_features(con, filters)
    finally:
        con.close()
    if len(frame) < 2:
        return 0
    x = _matrix(frame)
    rng = np.random.default_rng(seed)
    fit_x = x if len(x) <= max_fit_rows else x[rng.choice(len(x), max_fit_rows, replace=False)]
    model = OneClassSVM(kernel="rbf", gamma="scale", nu=nu)
    model.fit(fit_x)
    scores = anomaly_score(model.decision_function(x), model.decision_function(fit_x))
    out = pd.DataFrame({"node": frame["node"].astype(str), "hour": pd.to_datetime(frame["hour"]),
                        "score": scores.astype(float)})
    with store.write() as con:
        replace_batch(con, "node_anomaly", out, ["node", "hour"])
    return len(out)


def anomaly_scores(
    con: duckdb.DuckDBPyConnection,
    filters: TimeFilter | None = None,
    *,
    node: str | None = None,
) -> pd.DataFrame:
    """node_anomaly rows (node, hour, score) in the filter's time range."""
    where, params = _where_time(filters, "hour")
    if node is not None:
        where = (where + " AND " if where else " WHERE ") + "node = ?"
        params.append(node)
    return con.execute(
        f"SELECT node, hour, score FROM node_anomaly{where} ORDER BY node, hour",  # noqa: S608
        params,
    ).df()

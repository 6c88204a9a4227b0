"""Bad-node evidence: blame shared by hardware signals, rates against the cluster,
tail probabilities and false-discovery control (docs/diagnosis.md, "Bad nodes").

Steps, each a function below:

1. :func:`read_evidence` reads, per node, its **exposure** (node-hours of
   allocation and the jobs that ran on it), its **hardware signals** with their
   times (hardware XIDs, XID 79 = fell off the bus, uncorrectable ECC and
   row-remap-failure increases per hour, node-hours whose anomaly score reaches
   ``diagnose.node_anomaly_signal``), and the failed attempts of
   ``infrastructure`` origin with their nodes and the nodes of later attempts
   that passed.
2. :func:`share_blame` splits each infrastructure failure over its nodes: the
   nodes with hardware signals during the attempt (from ``xid_margin_s`` before
   its start to as long after its end) take it in proportion to their signals
   and the others get none; with no signal anywhere, a later attempt that passed
   on some of the nodes clears them and the rest share it; else it is split
   evenly.
3. :func:`assess_nodes` compares each node with its peers (the other nodes,
   less those an earlier round found significant, so neither the node nor
   another bad node raises its baseline): blamed
   failures per node-hour and blamed jobs per job that touched the node, each a
   Poisson tail probability of at least the observed blame given the rest's
   rate (the failure p-value is the larger of the two: both must be high), and
   hardware events per node-hour of the period the same way. A node's p-value is
   ``min(1, 2 * min(p_failures, p_hardware))`` (Bonferroni over the two
   families), Benjamini-Hochberg adjusts across all nodes, and the confidence is
   ``1 - q``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

import duckdb

from gpulens.config import DiagnoseConfig
from gpulens.diagnosis.jobs import APP_XIDS, named_rows

__all__ = [
    "BUS_XIDS",
    "Evidence",
    "InfraFailure",
    "NodeTest",
    "Signal",
    "assess_nodes",
    "benjamini_hochberg",
    "poisson_tail",
    "read_evidence",
    "share_blame",
    ]

#: XIDs reporting that a GPU fell off the bus (it weighs double in blame).
BUS_XIDS: Final[frozenset[int]] = frozenset({79})
#: pseudo-count added to the rest of the cluster's events, so a cluster where
#: only one node has any still has a (small) baseline rate
_PSEUDO: Final = 0.5


# ----------------------------------------------------------------- evidence
@dataclasses.dataclass(frozen=True)
class Signal:
    """One hardware signal on a node: kind (xid, ecc, row_remap, anomaly), when, detail."""

    ts: datetime
    kind: str
    detail: str
    weight: float

    def to_dict(self) -> dict[str, Any]:
        return {"ts": self.ts.isoformat(sep=" "), "kind": self.kind, "detail": self.detail}


@dataclasses.dataclass
class InfraFailure:
    """A failed attempt of infrastructure origin, its nodes, and where a later attempt passed."""

    job_id: str
    attempt: int
    category: str
    start: datetime
    end: datetime
    nodes: list[str]
    passed_on: set[str]


@dataclasses.dataclass
class Evidence:
    """Everything the test needs, read once from the store."""

    node_hours: dict[str, float]
    jobs_touched: dict[str, set[str]]
    signals: dict[str, list[Signal]]
    failures: list[InfraFailure]
    period_hours: float
    #: node -> live straggler detections (job_id, since, signals), one per job (docs/straggler.md)
    stragglers: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)


def _exposure(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, float], dict[str, set[str]], float]:
    """Node-hours of allocation and jobs per node; the period's length in hours."""
    bounds = named_rows(con, "SELECT min(start_time) AS t0, max(coalesce(end_time, start_time)) AS t1 FROM attempts")
    t0, t1 = (bounds[0]["t0"], bounds[0]["t1"]) if bounds else (None, None)
    hours: dict[str, float] = defaultdict(float)
    jobs: dict[str, set[str]] = defaultdict(set)
    for r in named_rows(
        con,
        """
        SELECT p.node, a.job_id,
               sum(epoch(coalesce(a.end_time, CAST(? AS TIMESTAMP))) - epoch(a.start_time)) / 3600 AS h
        FROM (SELECT DISTINCT job_id, attempt, node FROM placements) p
        JOIN attempts a USING (job_id, attempt)
        WHERE a.start_time IS NOT NULL
        GROUP BY ALL
        """,
        [t1],
    ):
        hours[r["node"]] += max(float(r["h"] or 0.0), 0.0)
        jobs[r["node"]].add(r["job_id"])
    period = (t1 - t0).total_seconds() / 3600 if t0 is not None and t1 is not None else 0.0
    return dict(hours), dict(jobs), max(period, 1.0)


def _xid_signals(con: duckdb.DuckDBPyConnection) -> Iterable[tuple[str, Signal]]:
    for r in named_rows(
        con,
        "SELECT node, ts, gpu_index, xid FROM xid_events "
        "WHERE xid IS NULL OR NOT list_contains(?, xid) ORDER BY node, ts",
        [sorted(APP_XIDS)],
    ):
        xid = r["xid"]
        bus = xid in BUS_XIDS
        what = "fell off the bus" if bus else "hardware"
        yield r["node"], Signal(r["ts"], "xid", f"XID {xid} ({what}) on GPU {r['gpu_index']}", 2.0 if bus else 1.0)


def _counter_signals(con: duckdb.DuckDBPyConnection) -> Iterable[tuple[str, Signal]]:
    """Hourly increases of the uncorrectable-ECC and row-remap-failure counters."""
    for r in named_rows(
        con,
        """
        WITH g AS (
            SELECT node, gpu_index, date_trunc('hour', ts) AS h,
                   max(ecc_uncorrected_total) AS ecc_mx, min(ecc_uncorrected_total) AS ecc_mn,
                   max(row_remap_failures) AS rr_mx, min(row_remap_failures) AS rr_mn
            FROM gpu_samples
            WHERE ecc_uncorrected_total IS NOT NULL OR row_remap_failures IS NOT NULL
            GROUP BY ALL),
        d AS (
            SELECT node, gpu_index, h,
                   greatest(coalesce(ecc_mx - coalesce(lag(ecc_mx) OVER w, ecc_mn), 0), 0) AS ecc,
                   greatest(coalesce(rr_mx - coalesce(lag(rr_mx) OVER w, rr_mn), 0), 0) AS rr
            FROM g WINDOW w AS (PARTITION BY node, gpu_index ORDER BY h))
        SELECT node, gpu_index, h, ecc, rr FROM d WHERE ecc > 0 OR rr > 0 ORDER BY node, h
        """,
    ):
        if r["ecc"]:
            yield r["node"], Signal(r["h"], "ecc", f"{int(r['ecc'])} uncorrectable ECC error(s) on GPU "
                                    f"{r['gpu_index']}", float(r["ecc"]))
        if r["rr"]:
            yield r["node"], Signal(r["h"], "row_remap", f"{int(r['rr'])} row-remap failure(s) on GPU "
                                    f"{r['gpu_index']}", float(r["rr"]))


def _anomaly_signals(con: duckdb.DuckDBPyConnection, threshold: float) -> Iterable[tuple[str, Signal]]:
    for r in named_rows(con, "SELECT node, hour, score FROM node_anomaly WHERE score >= ? ORDER BY node, hour",
                   [threshold]):
        yield r["node"], Signal(r["hour"], "anomaly", f"anomaly score {float(r['score']):.2f}", 0.5)


def _infra_failures(con: duckdb.DuckDBPyConnection) -> list[InfraFailure]:
    nodes: dict[tuple[str, int], list[str]] = {}
    for r in named_rows(con, "SELECT job_id, attempt, list(DISTINCT node ORDER BY node) AS nodes FROM placements "
                        "WHERE job_id IN (SELECT job_id FROM failures WHERE origin = 'infrastructure') GROUP BY ALL"):
        nodes[(r["job_id"], int(r["attempt"]))] = list(r["nodes"])
    passed: dict[str, list[tuple[int, list[str]]]] = defaultdict(list)
    for r in named_rows(con, "SELECT job_id, attempt FROM attempts WHERE status = 'passed' AND job_id IN "
                        "(SELECT job_id FROM failures WHERE origin = 'infrastructure')"):
        key = (r["job_id"], int(r["attempt"]))
        passed[key[0]].append((key[1], nodes.get(key, [])))
    out = []
    for r in named_rows(
        con,
        """
        SELECT f.job_id, f.attempt, f.category, a.start_time, coalesce(a.end_time, a.start_time) AS end_time,
            f.first_node
        FROM failures f JOIN attempts a USING (job_id, attempt)
        WHERE f.origin = 'infrastructure' AND a.start_time IS NOT NULL
        ORDER BY f.job_id, f.attempt
        """,
    ):
        att = int(r["attempt"])
        ns = nodes.get((r["job_id"], att), [])
        if not ns:
            continue
        first = _placed(r["first_node"], ns)
        if first is not None:  # the log names the node that failed first: charge it alone
            ns = [first]
        later = {n for a, pn in passed.get(r["job_id"], []) if a > att for n in pn}
        out.append(InfraFailure(r["job_id"], att, r["category"] or "unknown", r["start_time"], r["end_time"],
                                ns, later))
    return out


def _placed(named: str | None, nodes: Sequence[str]) -> str | None:
    """The node of ``nodes`` a log names (``gpu07`` for ``gpu07.cluster``, or the reverse)."""
    if not named:
        return None
    short = named.split(".")[0]
    return next((n for n in nodes if n == named or n.split(".")[0] == short), None)


def _stragglers(con: duckdb.DuckDBPyConnection) -> dict[str, list[dict[str, Any]]]:
    """Per node, the jobs in which the live watcher found it straggling (first detection per job)."""
    exists = con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'straggler_detections'").fetchall()
    exists2 = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'straggler_detections'").fetchall()
    if not (exists[0][0] or exists2[0][0]):
        return {}
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in named_rows(
        con,
        """
        SELECT node, job_id, min(since) AS since, list(DISTINCT sig ORDER BY sig) AS signals, max(score) AS score
        FROM (SELECT node, job_id, since, score, unnest(signals) AS sig FROM straggler_detections)
        GROUP BY node, job_id ORDER BY node, since
        """,
    ):
        out[r["node"]].append({"job_id": r["job_id"], "since": r["since"].isoformat(sep=" "),
                               "signals": list(r["signals"]), "score": round(float(r["score"] or 0.0), 2)})
    return dict(out)


def read_evidence(con: duckdb.DuckDBPyConnection, cfg: DiagnoseConfig) -> Evidence:
    """Exposure, hardware signals, infrastructure failures and straggler detections of every node (step 1)."""
    hours, jobs, period = _exposure(con)
    signals: dict[str, list[Signal]] = defaultdict(list)
    for source in (_xid_signals(con), _counter_signals(con), _anomaly_signals(con, cfg.node_anomaly_signal)):
        for node, sig in source:
            signals[node].append(sig)
    for sigs in signals.values():
        sigs.sort(key=lambda s: s.ts)
    return Evidence(hours, jobs, dict(signals), _infra_failures(con), period, _stragglers(con))


# ----------------------------------------------------------------- blame
def _during(sigs: Sequence[Signal], t0: datetime, t1: datetime) -> list[Signal]:
    out = []
    for s in sigs:
        # hourly signals (ECC, row remap, anomaly) cover the whole hour they start
        t_end = s.ts + timedelta(hours=1) if s.kind != "xid" else s.ts
        if s.ts <= t1 and t_end >= t0:
            out.append(s)
    return out


def share_blame(
    failure: InfraFailure, signals: Mapping[str, Sequence[Signal]], margin_s: float
) -> dict[str, tuple[float, str, list[Signal]]]:
    """node -> (share of the failure, why, the signals during the attempt) (step 2)."""
    margin = timedelta(seconds=margin_s)
    t0, t1 = failure.start - margin, failure.end + margin
    during = {n: _during(signals.get(n, ()), t0, t1) for n in failure.nodes}
    weight = {n: sum(s.weight for s in sigs) for n, sigs in during.items()}
    total = sum(weight.values())
    if len(failure.nodes) == 1:
        node = failure.nodes[0]
        why = "single-node attempt" + (" with hardware signals" if total else "")
        return {node: (1.0, why, during[node])}
    if total > 0:
        return {
            n: (weight[n] / total, "hardware signals during the attempt" if weight[n] else
                "another node of the attempt had the hardware signals", during[n])
            for n in failure.nodes
        }
    suspects = [n for n in failure.nodes if n not in failure.passed_on]
    if suspects and len(suspects) < len(failure.nodes):
        return {
            n: (1.0 / len(suspects), "not on the later attempt that passed", []) if n in suspects
            else (0.0, "a later attempt passed on this node", [])
            for n in failure.nodes
        }
    share = 1.0 / len(failure.nodes)
    return {n: (share, f"no signal on any of the {len(failure.nodes)} nodes: even share", [])
            for n in failure.nodes}


# ----------------------------------------------------------------- statistics
def _lower_gamma_regularized(a: float, x: float) -> float:
    """P(a, x), the regularized lower incomplete gamma function (a > 0, x >= 0)."""
    if x <= 0:
        return 0.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # series
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return min(1.0, total * math.exp(log_front))
    # continued fraction for Q = 1 - P (modified Lentz)
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return max(0.0, 1.0 - math.exp(log_front) * h)


def poisson_tail(k: float, mu: float) -> float:
    """P(X >= k) for X ~ Poisson(mu), continuous in k (the regularized gamma P(k, mu))."""
    if k <= 0:
        return 1.0
    if mu <= 0:
        return 0.0
    return _lower_gamma_regularized(k, mu)


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (q-values), in the input's order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    q = [1.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, pvalues[i] * m / rank)
        q[i] = min(running, 1.0)
    return q


@dataclasses.dataclass
class NodeTest:
    """One node's numbers, its p-values and its confidence."""

    node: str
    node_hours: float
    jobs_touched: int
    blame: float
    blamed_jobs: float
    hw_weight: float
    rate_per_1000h: float
    cluster_rate_per_1000h: float
    job_rate: float
    cluster_job_rate: float
    hw_rate_per_day: float
    cluster_hw_rate_per_day: float
    p_failures: float
    p_hardware: float
    p_value: float
    q_value: float = 1.0
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    signals: list[Signal] = dataclasses.field(default_factory=list)
    #: jobs in which the live watcher found the node straggling, per job that touched it, vs the peers
    straggler_jobs: int = 0
    straggler_rate: float = 0.0
    cluster_straggler_rate: float = 0.0
    p_straggler: float = 1.0
    stragglers: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    @property
    def confidence(self) -> float:
        return 1.0 - self.q_value

    @property
    def hw_events(self) -> int:
        return sum(1 for s in self.signals if s.kind != "anomaly")


def _blame_by_node(ev: Evidence, margin_s: float) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for f in ev.failures:
        for node, (share, why, sigs) in share_blame(f, ev.signals, margin_s).items():
            out[node].append({
                "job_id": f.job_id, "attempt": f.attempt, "category": f.category,
                "start": f.start.isoformat(sep=" "), "end": f.end.isoformat(sep=" "),
                "nodes": len(f.nodes), "share": round(share, 4), "why": why,
                "signals": [s.to_dict() for s in sigs[:5]],
            })
    return out


def _job_blame(rows: Sequence[Mapping[str, Any]]) -> float:
    best: dict[str, float] = {}
    for r in rows:
        best[r["job_id"]] = max(best.get(r["job_id"], 0.0), float(r["share"]))
    return sum(best.values())


@dataclasses.dataclass
class _Totals:
    """Per-node blame, hardware weight and exposure, the inputs of the rate tests."""

    blame: dict[str, float]
    jblame: dict[str, float]
    hw: dict[str, float]
    hours: dict[str, float]
    touched: dict[str, int]
    up: float
    strag: dict[str, int] = dataclasses.field(default_factory=dict)


def _test_one(n: str, t: _Totals, peers: Sequence[str]) -> tuple[float, float, float, float, float]:
    """(p_failures, p_hardware, failure rate, job rate, hardware rate) of node n against ``peers``."""
    rest_h = sum(t.hours[m] for m in peers)
    rest_t = sum(t.touched[m] for m in peers)
    rest_up = t.up * len(peers)
    rate = (sum(t.blame[m] for m in peers) + _PSEUDO) / rest_h if rest_h > 0 else 0.0
    jrate = min((sum(t.jblame[m] for m in peers) + _PSEUDO) / rest_t, 1.0) if rest_t > 0 else 0.0
    hrate = (sum(t.hw[m] for m in peers) + _PSEUDO) / rest_up if rest_up > 0 else 0.0
    p_fail = max(poisson_tail(t.blame[n], rate * t.hours[n]), poisson_tail(t.jblame[n], jrate * t.touched[n]))
    return p_fail, poisson_tail(t.hw[n], hrate * t.up), rate, jrate, hrate


def _straggler_test(n: str, t: _Totals, peers: Sequence[str]) -> tuple[float, float]:
    """(p-value, peers' rate): straggler jobs per job touched against the peers' rate (Poisson tail)."""
    rest_t = sum(t.touched[m] for m in peers)
    rate = min((sum(t.strag.get(m, 0) for m in peers) + _PSEUDO) / rest_t, 1.0) if rest_t > 0 else 0.0
    return poisson_tail(t.strag.get(n, 0), rate * t.touched[n]), rate


def _round(every: Sequence[str], t: _Totals, outliers: set[str],
           blamed: Mapping[str, list[dict[str, Any]]], ev: Evidence) -> list[NodeTest]:
    tests = []
    for n in every:
        peers = [m for m in every if m != n and m not in outliers] or [m for m in every if m != n]
        p_fail, p_hw, rate, jrate, hrate = _test_one(n, t, peers)
        hours, touched = t.hours[n], t.touched[n]
        # a third family (Bonferroni over three) only where the watcher has stored detections
        families = [p_fail, p_hw]
        p_strag, srate = 1.0, 0.0
        if t.strag:
            p_strag, srate = _straggler_test(n, t, peers)
            families.append(p_strag)
        tests.append(NodeTest(
            node=n, node_hours=round(hours, 2), jobs_touched=touched, blame=round(t.blame[n], 4),
            blamed_jobs=round(t.jblame[n], 4), hw_weight=t.hw[n],
            rate_per_1000h=round(1000 * t.blame[n] / hours, 4) if hours else 0.0,
            cluster_rate_per_1000h=round(1000 * rate, 4),
            job_rate=round(t.jblame[n] / touched, 4) if touched else 0.0,
            cluster_job_rate=round(jrate, 4),
            hw_rate_per_day=round(24 * t.hw[n] / t.up, 4), cluster_hw_rate_per_day=round(24 * hrate, 4),
            p_failures=p_fail, p_hardware=p_hw, p_value=min(1.0, len(families) * min(families)),
            failures=sorted(blamed.get(n, []), key=lambda r: -float(r["share"])),
            signals=list(ev.signals.get(n, [])),
            straggler_jobs=t.strag.get(n, 0),
            straggler_rate=round(t.strag.get(n, 0) / touched, 4) if touched else 0.0,
            cluster_straggler_rate=round(srate, 4), p_straggler=p_strag,
            stragglers=list(ev.stragglers.get(n, [])),
        ))
    for test, q in zip(tests, benjamini_hochberg([x.p_value for x in tests]), strict=True):
        test.q_value = q
    return tests


def assess_nodes(ev: Evidence, cfg: DiagnoseConfig, nodes: Iterable[str] = ()) -> list[NodeTest]:
    """Rates against the rest of the cluster, p-values and BH q-values for every node (step 3).

    The baseline of each node is its peers: every other node, less the nodes an
    earlier round found significant (q <= ``diagnose.node_fdr``), so one bad node
    does not raise the baseline another is tested against; rounds repeat until the
    significant set stops changing (at most five).
    """
    blamed = _blame_by_node(ev, cfg.xid_margin_s)
    every = sorted(set(nodes) | set(ev.node_hours) | set(ev.signals) | set(blamed) | set(ev.stragglers))
    if not every:
        return []
    totals = _Totals(
        blame={n: sum(float(r["share"]) for r in blamed.get(n, [])) for n in every},
        jblame={n: _job_blame(blamed.get(n, [])) for n in every},
        hw={n: sum(s.weight for s in ev.signals.get(n, []) if s.kind != "anomaly") for n in every},
        hours={n: ev.node_hours.get(n, 0.0) for n in every},
        touched={n: len(ev.jobs_touched.get(n, ())) for n in every},
        up=ev.period_hours,
        strag={n: len({d["job_id"] for d in ev.stragglers.get(n, [])}) for n in every} if ev.stragglers else {},
    )
    outliers: set[str] = set()
    for _ in range(5):
        tests = _round(every, totals, outliers, blamed, ev)
        found = {x.node for x in tests if x.q_value <= cfg.node_fdr}
        if found == outliers:
            break
        outliers = found
    return tests

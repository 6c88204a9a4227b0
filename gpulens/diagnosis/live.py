"""The live straggler watcher: running jobs from the store, telemetry from the agents' /metrics.

Data path (docs/straggler.md): every ``live.interval`` seconds (5) the watcher reads the
running multi-node jobs and their machines from the store (placements of attempts with no
end: simulator, Slurm, Kubernetes and Prometheus imports all fill them), scrapes the
``/metrics`` of those machines' agents (``live.agent_url``, ``{node}`` replaced by the
node name; or a JSON file naming each node's URL), turns counters into rates, and feeds
one :class:`~gpulens.diagnosis.straggler.JobDetector` per job. Telemetry is at most one
agent interval plus one watcher interval old (10 s at the defaults) when it is judged; no
Prometheus is needed. (The agents' spool is flushed every ``collect.flush_seconds``, 30 s,
and lives on the shared filesystem: scraping is fresher and cheaper.)

Detections are written to the ``straggler_detections`` state table when a suspicion opens,
when its signals change, every ``live.heartbeat_s`` (``last_seen``), and when it clears or
the job ends. ``gpulens nodes live`` and the cluster exporter read that table; a row whose
``last_seen`` is older than ``live.stale_s`` belongs to a watcher that stopped and is not
shown as current.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from gpulens.config import LiveConfig
from gpulens.diagnosis.straggler import DetectorParams, JobDetector, Suspect
from gpulens.errors import GpulensError, InputError
from gpulens.store import Store
from gpulens.store.lake import live_files
from gpulens.store.scan import node_source

__all__ = [
    "AgentReading",
    "LiveWatcher",
    "current_suspects",
    "detection_history",
    "job_machine_signals",
    "latest_sample",
    "parse_agent_metrics",
    "params_from_config",
    "running_jobs",
]

log = logging.getLogger("gpulens.diagnosis.live")

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_GAUGES = {
    "gpulens_gpu_utilization_ratio": ("gpu_util", 1.0),
    "gpulens_gpu_memory_utilization_ratio": ("mem_util", 1.0),
    "gpulens_gpu_sm_clock_hertz": ("sm_clock", 1e-6),
    "gpulens_gpu_power_watts": ("power", 1.0),
}
_GPU_COUNTERS = {
    "gpulens_gpu_pcie_transmit_bytes_total": "pcie",
    "gpulens_gpu_pcie_receive_bytes_total": "pcie",
    "gpulens_gpu_nvlink_transmit_bytes_total": "nvlink",
    "gpulens_gpu_nvlink_receive_bytes_total": "nvlink",
}
_NODE_COUNTERS = {
    "gpulens_gpu_xid_errors_total": "xid",
    "gpulens_gpu_ecc_errors_total": "ecc",
    "gpulens_network_receive_bytes_total": "network",
    "gpulens_network_transmit_bytes_total": "network",
    "gpulens_network_receive_errors_total": "link_errors",
    "gpulens_network_transmit_errors_total": "link_errors",
    "gpulens_infiniband_receive_bytes_total": "infiniband",
    "gpulens_infiniband_transmit_bytes_total": "infiniband",
    "gpulens_infiniband_symbol_errors_total": "link_errors",
    "gpulens_infiniband_link_downed_total": "link_errors",
    "gpulens_infiniband_receive_errors_total": "link_errors",
}
_SPEEDS = {"gpulens_network_speed_bytes", "gpulens_infiniband_rate_bytes"}
_EVENTS = {"xid", "ecc", "link_errors"}  # counted per tick, not per second
_WANTED = set(_GAUGES) | set(_GPU_COUNTERS) | set(_NODE_COUNTERS) | _SPEEDS | {
    "gpulens_gpu_lost", "gpulens_agent_last_sample_timestamp_seconds"}


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC).replace(tzinfo=None)


@dataclass
class AgentReading:
    """One scrape of one agent: gauges per GPU, counter totals per series, the sample time."""

    sampled_at: float | None
    gpu: dict[str, dict[int, float]] = field(default_factory=dict)
    counters: dict[tuple[str, str], float] = field(default_factory=dict)  # (signal, series key) -> total
    speed: float = 0.0
    lost: set[int] = field(default_factory=set)


def parse_agent_metrics(text: str, *, skip_devices: tuple[str, ...] = ("lo",)) -> AgentReading:
    """Read the families the detector uses from an agent's /metrics text (format 0.0.4)."""
    r = AgentReading(None)
    speed = 0.0
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        space = line.find(" ")
        name = line[:brace] if 0 <= brace < space or (brace >= 0 > space) else line[:space]
        if name not in _WANTED:
            continue
        close = line.rfind("}")
        labels = dict(_LABEL.findall(line[brace + 1:close])) if brace >= 0 else {}
        try:
            value = float(line[(close + 1 if brace >= 0 else space):].split()[0])
        except (ValueError, IndexError):
            continue
        if labels.get("device") in skip_devices:
            continue
        if name == "gpulens_agent_last_sample_timestamp_seconds":
            r.sampled_at = value
        elif name == "gpulens_gpu_lost":
            if value > 0:
                r.lost.add(int(labels.get("gpu", "0")))
        elif name in _GAUGES:
            sig, scale = _GAUGES[name]
            r.gpu.setdefault(sig, {})[int(labels.get("gpu", "0"))] = value * scale
        elif name in _GPU_COUNTERS:
            key = (_GPU_COUNTERS[name], f"{name}|{labels.get('gpu', '')}")
            r.counters[key] = value
        elif name in _NODE_COUNTERS:
            key = (_NODE_COUNTERS[name], name + "|" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
            r.counters[key] = value
        elif name in _SPEEDS:
            speed += value
    r.speed = speed
    return r


class _NodeRates:
    """Turns successive readings of one agent into one raw tick (rates, events since last)."""

    def __init__(self) -> None:
        self.prev: AgentReading | None = None
        self.last: dict[str, Any] | None = None

    def step(self, cur: AgentReading) -> dict[str, Any] | None:
        prev = self.prev
        if prev is not None and cur.sampled_at is not None and cur.sampled_at == prev.sampled_at:
            return self.last  # the agent has not sampled since: same tick
        self.prev = cur
        out: dict[str, Any] = {k: dict(v) for k, v in cur.gpu.items()}
        for gi in cur.lost:
            out.setdefault("gpu_util", {})[gi] = 0.0
        if prev is None or prev.sampled_at is None or cur.sampled_at is None or cur.sampled_at <= prev.sampled_at:
            self.last = out
            return out
        dt = cur.sampled_at - prev.sampled_at
        per_gpu: dict[str, dict[int, float]] = {}
        per_node: dict[str, float] = {}
        for (sig, key), total in cur.counters.items():
            before = prev.counters.get((sig, key))
            if before is None or total < before:
                continue  # new series or a reset: no rate this tick
            delta = total - before
            if sig in ("pcie", "nvlink"):
                gi = int(key.rsplit("|", 1)[1] or 0)
                per_gpu.setdefault(sig, {})[gi] = per_gpu.get(sig, {}).get(gi, 0.0) + delta / dt
            else:
                per_node[sig] = per_node.get(sig, 0.0) + (delta if sig in _EVENTS else delta / dt)
        out.update(per_gpu)
        for sig in ("network", "infiniband", "link_errors", "xid", "ecc"):
            out[sig] = per_node.get(sig, 0.0 if sig in _EVENTS else np.nan)
        out["link_speed"] = cur.speed if cur.speed > 0 else np.nan
        self.last = out
        return out


def _raw_for_job(nodes: list[str], ticks: Mapping[str, dict[str, Any] | None]) -> dict[str, np.ndarray]:
    """Stack the machines' ticks into the arrays node_features takes (NaN where unknown)."""
    gpus = 1
    for node in nodes:
        t = ticks.get(node)
        if t:
            for sig in ("gpu_util", "mem_util", "sm_clock", "power", "pcie", "nvlink"):
                if isinstance(t.get(sig), dict) and t[sig]:
                    gpus = max(gpus, max(t[sig]) + 1)
    n = len(nodes)
    raw: dict[str, np.ndarray] = {}
    for sig in ("gpu_util", "mem_util", "sm_clock", "power", "pcie", "nvlink"):
        a = np.full((n, gpus), np.nan)
        for i, node in enumerate(nodes):
            vals = (ticks.get(node) or {}).get(sig) or {}
            for gi, v in vals.items():
                if gi < gpus:
                    a[i, gi] = v
        raw[sig] = a
    for sig in ("network", "infiniband", "link_speed", "link_errors", "xid", "ecc"):
        raw[sig] = np.array([float((ticks.get(node) or {}).get(sig, np.nan)) for node in nodes])
    return raw


def running_jobs(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[int, list[str], datetime | None]]:
    """Running attempts on two or more machines: job -> (attempt, machines, start)."""
    rows = con.execute(
        """
        SELECT a.job_id, a.attempt, a.start_time, list(DISTINCT p.node ORDER BY p.node) AS nodes
        FROM attempts a JOIN placements p ON p.job_id = a.job_id AND p.attempt = a.attempt
        WHERE a.end_time IS NULL AND coalesce(a.status, 'running') = 'running' AND p.end_time IS NULL
        GROUP BY a.job_id, a.attempt, a.start_time
        HAVING count(DISTINCT p.node) >= 2
        ORDER BY a.job_id
        """
    ).fetchall()
    return {str(j): (int(a), [str(n) for n in nodes], s) for j, a, s, nodes in rows}


def params_from_config(cfg: LiveConfig) -> DetectorParams:
    return DetectorParams(
        interval_s=cfg.interval, grace_s=cfg.grace_s, learn_s=cfg.learn_s, smooth_s=cfg.smooth_s,
        count_s=cfg.count_s, hard_window_s=cfg.hard_window_s, medium_window_s=cfg.medium_window_s,
        soft_window_s=cfg.soft_window_s, clear_s=cfg.clear_s,
    )


def _agent_urls(cfg: LiveConfig) -> Callable[[str], str]:
    mapping: dict[str, str] = {}
    if cfg.agents_file:
        path = Path(cfg.agents_file)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"Agents file {path} cannot be read as JSON ({exc}).",
                             'Pass a JSON object {"node": "http://host:9847/metrics", ...}.') from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise InputError(f"Agents file {path} must map node names to URLs.",
                             'Pass a JSON object {"node": "http://host:9847/metrics", ...}.')
        mapping = {str(k): v for k, v in data.items()}
    if "{node}" not in cfg.agent_url and not mapping:
        raise InputError(f"live.agent_url {cfg.agent_url!r} has no {{node}} placeholder.",
                         "Use e.g. http://{node}:9847/metrics, or name each node's URL in live.agents_file.")
    return lambda node: mapping.get(node) or cfg.agent_url.replace("{node}", node)


class LiveWatcher:
    """Scrape, detect, persist. ``step()`` is one tick; ``run()`` loops until stopped."""

    def __init__(self, store: Store, cfg: LiveConfig, *, wall: Callable[[], float] = time.time,
                 fetch: Callable[[str], str] | None = None) -> None:
        self.store = store
        self.cfg = cfg
        self.params = params_from_config(cfg)
        self.wall = wall
        self.url = _agent_urls(cfg)
        self.fetch = fetch or self._http
        self.jobs: dict[str, tuple[int, list[str], datetime | None]] = {}
        self.detectors: dict[str, JobDetector] = {}
        self.rates: dict[str, _NodeRates] = {}
        self._jobs_read = -1e18
        self._written: dict[tuple[str, str, float], tuple[float, tuple[str, ...]]] = {}
        self._pool = ThreadPoolExecutor(max_workers=max(1, cfg.scrape_threads))
        self.scrape_errors = 0
        self.write_errors = 0
        self._pending_closed: list[Suspect] = []

    def _http(self, url: str) -> str:
        with urllib.request.urlopen(url, timeout=self.cfg.scrape_timeout) as resp:
            return str(resp.read().decode("utf-8", "replace"))

    def _scrape(self, node: str) -> AgentReading | None:
        try:
            return parse_agent_metrics(self.fetch(self.url(node)))
        except (OSError, urllib.error.URLError, ValueError) as exc:
            self.scrape_errors += 1
            log.warning("scraping %s (%s) failed: %s", node, self.url(node), exc)
            return None

    def refresh_jobs(self, now: float) -> None:
        con = self.store.connect(samples=False)
        try:
            jobs = running_jobs(con)
        finally:
            con.close()
        ended = [j for j in self.detectors if j not in jobs or jobs[j][1] != self.detectors[j].nodes]
        closed: list[Suspect] = []
        for j in ended:
            closed += self.detectors.pop(j).close_all(now)
        for j, (_, nodes, _start) in jobs.items():
            if j not in self.detectors:
                self.detectors[j] = JobDetector(j, nodes, self.params)
        self.jobs = jobs
        self._jobs_read = now
        if closed:
            self._persist([], closed, now)

    def step(self) -> list[Suspect]:
        """One tick: (re)read jobs when due, scrape their machines, update, persist changes."""
        now = self.wall()
        if now - self._jobs_read >= self.cfg.jobs_every_s:
            self.refresh_jobs(now)
        nodes = sorted({n for det in self.detectors.values() for n in det.nodes})
        readings = dict(zip(nodes, self._pool.map(self._scrape, nodes), strict=True))
        ticks: dict[str, dict[str, Any] | None] = {}
        for node, reading in readings.items():
            if reading is None:
                ticks[node] = None
                continue
            ticks[node] = self.rates.setdefault(node, _NodeRates()).step(reading)
        open_now: list[Suspect] = []
        closed: list[Suspect] = []
        for det in self.detectors.values():
            before = len(det.closed)
            open_now += det.update(now, _raw_for_job(det.nodes, ticks))
            closed += det.closed[before:]
            del det.closed[:before]
        self._persist(open_now, closed, now)
        return open_now

    def _persist(self, open_now: list[Suspect], closed: list[Suspect], now: float) -> None:
        closed = closed + [s for s in self._pending_closed if s not in closed]
        due = []
        for s in open_now:
            key = (s.job_id, s.node, s.since)
            seen = self._written.get(key)
            if seen is None or seen[1] != tuple(s.signals) or now - seen[0] >= self.cfg.heartbeat_s:
                due.append(s)
        if not due and not closed:
            return
        try:
            with self.store.write() as con:
                for s in due + closed:
                    self._upsert(con, s, now)
        except GpulensError as exc:  # a full disk or a busy lock: keep detecting, write next tick
            self.write_errors += 1
            log.warning("cannot store straggler detections (%s); retrying next tick", exc)
            self._pending_closed = closed
            return
        self._pending_closed = []
        for s in due:
            self._written[(s.job_id, s.node, s.since)] = (now, tuple(s.signals))
        for s in closed:
            self._written.pop((s.job_id, s.node, s.since), None)

    def _upsert(self, con: duckdb.DuckDBPyConnection, s: Suspect, now: float) -> None:
        attempt, nodes, _ = self.jobs.get(s.job_id, (None, [], None))
        detail = json.dumps({k: {"score": round(s.scores.get(k, 0.0), 3),
                                 "deviation": round(s.deviations.get(k, 0.0), 4)} for k in s.signals})
        con.execute(
            "INSERT INTO straggler_detections (job_id, attempt, node, since, detected_at, last_seen, until_ts,"
            " signals, score, detail, nodes, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'live')"
            " ON CONFLICT (job_id, node, since) DO UPDATE SET last_seen = excluded.last_seen,"
            " until_ts = excluded.until_ts, signals = excluded.signals, score = excluded.score,"
            " detail = excluded.detail",
            [s.job_id, attempt, s.node, _utc(s.since), _utc(now), _utc(s.last_seen),
             None if s.until is None else _utc(s.until), s.signals, s.score, detail, len(nodes) or None],
        )

    def run(self, stop: threading.Event) -> int:
        ticks = 0
        next_at = time.monotonic()
        while not stop.is_set():
            self.step()
            ticks += 1
            next_at += self.cfg.interval
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind: skip missed ticks instead of bursting
                next_at = time.monotonic()
                delay = 0
            stop.wait(delay)
        self.close()
        return ticks

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


_COLUMNS = ["job_id", "attempt", "node", "signals", "score", "detail", "since", "detected_at", "last_seen",
            "until_ts", "nodes", "source"]


def _has_table(con: duckdb.DuckDBPyConnection) -> bool:
    """False on a snapshot written before the straggler_detections migration."""
    rows = con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'straggler_detections'").fetchall()
    rows2 = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'straggler_detections'").fetchall()
    return bool(rows[0][0] or rows2[0][0])


def current_suspects(con: duckdb.DuckDBPyConnection, *, now: datetime | None = None,
                     stale_s: float = 120.0) -> pd.DataFrame:
    """Open suspicions refreshed within ``stale_s`` (job, node, signals, score, since, ...)."""
    ref = now or datetime.now(UTC).replace(tzinfo=None)
    if not _has_table(con):
        return pd.DataFrame(columns=[c for c in _COLUMNS if c not in ("until_ts", "source")])
    return con.execute(
        """
        SELECT job_id, attempt, node, signals, score, detail, since, detected_at, last_seen, nodes
        FROM straggler_detections
        WHERE until_ts IS NULL AND last_seen >= ? - to_microseconds(CAST(? * 1e6 AS BIGINT))
        ORDER BY score DESC, job_id, node
        """,
        [ref, stale_s],
    ).df()


def detection_history(con: duckdb.DuckDBPyConnection, *, job_id: str | None = None,
                      node: str | None = None) -> pd.DataFrame:
    """Every stored detection (newest first), optionally of one job or node."""
    if not _has_table(con):
        return pd.DataFrame(columns=_COLUMNS)
    return con.execute(
        """
        SELECT job_id, attempt, node, signals, score, detail, since, detected_at, last_seen, until_ts, nodes, source
        FROM straggler_detections
        WHERE (? IS NULL OR job_id = ?) AND (? IS NULL OR node = ?)
        ORDER BY since DESC, job_id, node
        """,
        [job_id, job_id, node, node],
    ).df()


#: what the job page shows per machine: (label, SQL aggregate over gpu_samples per node and bucket)
MACHINE_SIGNALS = (
    ("GPU utilization %", "avg(util_gpu)"),
    ("lowest GPU utilization %", "min(util_gpu)"),
    ("SM clock MHz (lowest GPU)", "min(sm_clock_mhz)"),
    ("power W (mean GPU)", "avg(power_w)"),
    ("PCIe GB/s (sum of GPUs)", "sum(coalesce(pcie_tx_bps, 0) + coalesce(pcie_rx_bps, 0)) / count(DISTINCT ts) / 1e9"),
    ("XIDs", "sum(coalesce(xid_count, 0))"),
)


def latest_sample(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """The newest GPU sample's time (``max(ts)`` of ``gpu_samples``), reading the newest day only.

    The lake's listing names the days; a sample lives in the partition of its own day, so the
    newest day with a sample holds the newest sample. A connection without the lake's listing (or
    a newest day without a time) is scanned whole.
    """
    listing = live_files(con, "gpu")
    if listing is not None and listing.files:
        newest = max(day for _, day in listing.files)
        src, files = node_source(con, "gpu", None, newest, None)
        row = con.execute(f"SELECT max(ts) FROM {src}", files).fetchone()  # noqa: S608 - store.scan's
        if row and row[0] is not None:
            return row[0]
    row = con.execute("SELECT max(ts) FROM gpu_samples").fetchone()
    return row[0] if row else None


def job_machine_signals(con: duckdb.DuckDBPyConnection, job_id: str, *, max_points: int = 240) -> pd.DataFrame:
    """Each machine's signals over the job's last attempt, side by side (node, ts, signal, value).

    Per machine and time bucket (the attempt split into at most ``max_points`` buckets): the
    aggregates of :data:`MACHINE_SIGNALS` over the machine's GPUs in the job.
    """
    att = con.execute(
        "SELECT attempt, start_time, end_time FROM attempts WHERE job_id = ? AND start_time IS NOT NULL"
        " ORDER BY attempt DESC LIMIT 1",
        [job_id],
    ).fetchall()
    if not att:
        return pd.DataFrame(columns=["node", "ts", "signal", "value"])
    attempt, t0, t1 = att[0]
    t1 = t1 if t1 is not None else latest_sample(con)  # still running: up to the newest sample
    nodes = [r[0] for r in con.execute(
        "SELECT DISTINCT node FROM placements WHERE job_id = ? AND attempt = ? ORDER BY node",
        [job_id, attempt]).fetchall()]
    if t1 is None or not nodes:
        return pd.DataFrame(columns=["node", "ts", "signal", "value"])
    span = max((t1 - t0).total_seconds(), 60.0)
    bucket = max(60, int(span // max_points) // 60 * 60 or 60)
    aggs = ", ".join(f"{expr} AS s{i}" for i, (_, expr) in enumerate(MACHINE_SIGNALS))
    # only the job's nodes' files of its days are read (store.scan)
    src, files = node_source(con, "gpu", nodes, t0.date(), t1.date())
    df = con.execute(
        f"""
        WITH p AS (SELECT DISTINCT node, gpu_index FROM placements WHERE job_id = $job AND attempt = $attempt)
        SELECT g.node, time_bucket(to_seconds($bucket), g.ts, CAST($t0 AS TIMESTAMP)) AS ts, {aggs}
        FROM {src} g JOIN p ON g.node = p.node AND g.gpu_index = p.gpu_index
        WHERE list_contains($nodes, g.node) AND g.ts >= $t0 AND g.ts <= $t1
          AND g.date >= CAST($t0 AS DATE) AND g.date <= CAST($t1 AS DATE)
        GROUP BY ALL ORDER BY g.node, ts
        """,  # noqa: S608 - aggregates are this module's constants
        {"job": job_id, "attempt": attempt, "bucket": bucket, "t0": t0, "t1": t1, "nodes": nodes, **files},
    ).df()
    if df.empty:
        return pd.DataFrame(columns=["node", "ts", "signal", "value"])
    long = df.melt(id_vars=["node", "ts"], var_name="col", value_name="value")
    labels = {f"s{i}": label for i, (label, _) in enumerate(MACHINE_SIGNALS)}
    long["signal"] = long["col"].map(labels)
    return long.drop(columns=["col"])[["node", "ts", "signal", "value"]]

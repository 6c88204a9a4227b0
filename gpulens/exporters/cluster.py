"""``gpulens exporter``: cluster-level Prometheus metrics computed from the store.

The node agents export what each GPU is doing right now; this exporter adds
what only the store knows: the goodput waterfall and effective utilization by
virtual cluster, failures by category and origin, the input blacklist, flagged
and anomalous nodes, and pre-submission validator outcomes.

Design:

* A custom collector (:class:`ClusterCollector`) registered on an injected
  ``CollectorRegistry``. Every refresh opens a new ``store.connect()`` (so it
  sees the newest snapshot), computes the sections and keeps the resulting
  metric families in memory; a scrape serialises that cache and never waits
  for the store (except the very first one). The cheap sections (SQL over
  the state tables, milliseconds) are refreshed when older than
  ``cache_seconds`` (15 s); the goodput waterfall and failure GPU-hours scan
  the window's GPU samples (seconds on a large store) and are refreshed when
  older than ``slow_cache_seconds`` (300 s). Both TTLs are stated in HELP.
  The server refreshes in a background thread while scrapes keep getting the
  previous snapshot, so a slow store never makes Prometheus time out.
* Each section (``utilization``, ``goodput``, ``failures``, ``blacklist``,
  ``nodes``, ``validations``, ``stragglers``) is computed independently; a failing section
  sets ``gpulens_cluster_exporter_section_up{section}`` to 0 and drops only
  its own metrics. ``gpulens_cluster_exporter_up`` is 1 when the store could be
  read and every section succeeded.
* Cardinality is bounded: no label takes arbitrary job or user values except
  the top-N (``exporter.top_n``) list of queued/running jobs that use a
  flagged input; virtual clusters beyond the top N by allocated GPU-hours are
  summed into ``vc="other"``; nodes appear only when flagged or among the
  top N anomaly scores; ``gpulens_job_node_suspect`` carries only the top N
  current straggler suspects (written by ``gpulens nodes live --watch``).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import duckdb
from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpulens.cliapp import App, pass_app
from gpulens.config import DiagnoseConfig, ExporterConfig, LiveConfig
from gpulens.diagnosis.live import current_suspects
from gpulens.errors import GpulensError, InputError
from gpulens.store import Store
from gpulens.store.quarantine import count_quarantined, quarantine_named_in_error
from gpulens.vocab import BLACKLIST_STATES, JOB_STATUSES

__all__ = [
    "METRIC_NAMES",
    "FAST_SECTIONS",
    "SECTIONS",
    "SLOW_SECTIONS",
    "ClusterCollector",
    "ExporterServer",
    "exporter",
    "serve",
]

log = logging.getLogger("gpulens.exporters.cluster")

#: cheap SQL over the state tables, recomputed every ``cache_seconds``
FAST_SECTIONS = ("utilization", "failures", "blacklist", "nodes", "validations", "stragglers")
#: scans the GPU samples of the window (seconds on a large store), every ``slow_cache_seconds``
SLOW_SECTIONS = ("goodput",)
SECTIONS = FAST_SECTIONS + SLOW_SECTIONS

#: Every sample name this exporter can emit (rules and dashboards are checked against it).
METRIC_NAMES = (
    "gpulens_cluster_exporter_up",
    "gpulens_cluster_exporter_section_up",
    "gpulens_cluster_exporter_refresh_duration_seconds",
    "gpulens_cluster_exporter_section_duration_seconds",
    "gpulens_cluster_exporter_last_refresh_timestamp_seconds",
    "gpulens_cluster_exporter_cache_ttl_seconds",
    "gpulens_cluster_exporter_refreshes_total",
    "gpulens_cluster_exporter_refresh_errors_total",
    "gpulens_cluster_store_generation",
    "gpulens_cluster_store_quarantined_segments",
    "gpulens_cluster_gpus",
    "gpulens_cluster_jobs",
    "gpulens_cluster_goodput_gpu_hours",
    "gpulens_cluster_vc_gpu_hours",
    "gpulens_cluster_vc_effective_utilization_ratio",
    "gpulens_cluster_effective_utilization_ratio",
    "gpulens_cluster_window_seconds",
    "gpulens_cluster_failures_total",
    "gpulens_cluster_recent_failures",
    "gpulens_cluster_failure_allocated_gpu_hours",
    "gpulens_cluster_failure_busy_gpu_hours",
    "gpulens_cluster_blacklist_entries",
    "gpulens_cluster_jobs_with_flagged_inputs",
    "gpulens_cluster_job_flagged_inputs",
    "gpulens_cluster_flagged_nodes",
    "gpulens_cluster_node_flagged",
    "gpulens_cluster_node_flag_confidence",
    "gpulens_cluster_node_flag_alert_confidence",
    "gpulens_cluster_node_anomaly_score",
    "gpulens_cluster_validations_total",
    "gpulens_job_node_suspect",
)

RECENT_WINDOWS = (("1h", timedelta(hours=1)), ("24h", timedelta(hours=24)))


def _utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


@dataclass
class _Snapshot:
    families: list[Metric] = field(default_factory=list)
    taken_at: float = float("-inf")  # monotonic clock


class ClusterCollector(Collector):
    """A prometheus-client collector over a gpulens store, cached for ``cache_seconds``.

    ``open_store`` returns the Store (called once per refresh, so a store that
    does not exist yet is retried later); ``monotonic``/``wall``/``now`` are the
    clocks (injectable for tests).
    """

    def __init__(
        self,
        open_store: Callable[[], Store],
        config: ExporterConfig | None = None,
        *,
        registry: CollectorRegistry | None = None,
        background: bool = False,
        diagnose: DiagnoseConfig | None = None,
        live: LiveConfig | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.config = config or ExporterConfig()
        #: diagnose.node_alert_confidence: the bad-node alert's threshold, exported as a gauge
        self.diagnose = diagnose or DiagnoseConfig()
        #: live.stale_s: straggler suspects not refreshed by the watcher for this long are not exported
        self.live = live or LiveConfig()
        self.background = background
        self._open_store = open_store
        self._monotonic = monotonic
        self._wall = wall
        self._now = now
        self._lock = threading.Lock()
        self._snap = _Snapshot()
        #: slow sections' last result: name -> (families, ok, seconds), and when it was taken
        self._slow: dict[str, tuple[list[Metric], bool, float]] = {}
        self._slow_taken_at = float("-inf")
        self.refreshes = 0
        self.refresh_errors = 0
        if registry is not None:
            registry.register(self)

    # ------------------------------------------------------------ collector API
    def describe(self) -> Iterable[Metric]:
        return []  # names depend on the data; do not run a refresh at registration

    def collect(self) -> Iterable[Metric]:
        """The cached families; refreshes them when older than ``cache_seconds``.

        The first scrape waits for the first refresh. Later, with
        ``background=True`` (the server), a stale cache is refreshed in a
        background thread while scrapes keep getting the previous snapshot
        immediately, so a slow store never makes a scrape time out. With
        ``background=False`` the scrape that finds the cache stale refreshes it.
        """
        snap = self._snap
        if self._monotonic() - snap.taken_at < self.config.cache_seconds:
            return list(snap.families)
        if snap.taken_at == float("-inf") or not self.background:
            with self._lock:
                if self._monotonic() - self._snap.taken_at >= self.config.cache_seconds:
                    self._snap = self._refresh()
            return list(self._snap.families)
        if self._lock.acquire(blocking=False):
            threading.Thread(target=self._refresh_in_background, name="gpulens-exporter-refresh",
                             daemon=True).start()
        return list(snap.families)

    def _refresh_in_background(self) -> None:
        try:
            self._snap = self._refresh()
        finally:
            self._lock.release()

    # ---------------------------------------------------------------- refresh
    def refresh(self) -> list[Metric]:
        """Recompute every section now, ignoring both caches. Returns the new families."""
        with self._lock:
            self._slow_taken_at = float("-inf")
            self._snap = self._refresh()
        return list(self._snap.families)

    def _help(self, text: str, slow: bool = False) -> str:
        ttl = self.config.slow_cache_seconds if slow else self.config.cache_seconds
        return f"{text} Computed from the gpulens store, cached {ttl:g} s."

    def _refresh(self) -> _Snapshot:
        """A new snapshot: every section (slow ones from their cache when fresh), then the meta families."""
        t0 = time.perf_counter()
        self.refreshes += 1
        fams: list[Metric] = []
        section_ok: dict[str, bool] = {}
        seconds: dict[str, float] = {}
        quarantined = 0
        store, con, generation = self._open_connection()
        if store is not None and con is not None:
            self._compute_sections(con, fams, section_ok, seconds)
            # after the sections: a kind is listed (and its damaged files quarantined) when a
            # section first reads it (gpulens.store.lake.attach_views)
            with contextlib.suppress(OSError):
                quarantined = count_quarantined(store.root)
        up = con is not None and all(section_ok.get(s, False) for s in SECTIONS)
        if not up:
            self.refresh_errors += 1
        fams.extend(self._meta(up, section_ok, seconds, generation, time.perf_counter() - t0))
        fams.append(GaugeMetricFamily(
            "gpulens_cluster_store_quarantined_segments",
            "Sample segments moved to quarantine/ because they could not be read "
            "(see `gpulens store check`).",
            value=quarantined,
        ))
        return _Snapshot(fams, self._monotonic())

    def _open_connection(self) -> tuple[Store | None, duckdb.DuckDBPyConnection | None, int]:
        """The store, a connection to its newest snapshot and its generation (None, None, 0 when unreadable)."""
        store: Store | None = None
        generation = 0
        try:
            store = self._open_store()
            generation = store.generation()
            store.warn = log.warning
            return store, store.connect(), generation
        except (GpulensError, duckdb.Error, OSError) as exc:
            log.warning("cluster exporter cannot read the store: %s", exc)
            return store, None, generation

    def _compute_sections(
        self, con: duckdb.DuckDBPyConnection, fams: list[Metric], section_ok: dict[str, bool],
        seconds: dict[str, float],
    ) -> None:
        """Append every section's families (slow sections from their cache unless due); closes ``con``."""
        slow_due = (
            self._monotonic() - self._slow_taken_at >= self.config.slow_cache_seconds
            or not all(ok for _, ok, _ in self._slow.values())
        )
        try:
            for name in SECTIONS:
                if name in SLOW_SECTIONS and not slow_due and name in self._slow:
                    cached, section_ok[name], seconds[name] = self._slow[name]
                    fams.extend(cached)
                    continue
                out, section_ok[name], seconds[name] = self._run_section(name, con)
                fams.extend(out)
                if name in SLOW_SECTIONS:
                    self._slow[name] = (out, section_ok[name], seconds[name])
            if slow_due:
                self._slow_taken_at = self._monotonic()
        finally:
            con.close()

    def _run_section(self, name: str, con: duckdb.DuckDBPyConnection) -> tuple[list[Metric], bool, float]:
        builder: Callable[[duckdb.DuckDBPyConnection], list[Metric]] = getattr(self, f"_section_{name}")
        t0 = time.perf_counter()
        for attempt in range(2):
            try:
                return builder(con), True, time.perf_counter() - t0
            except Exception as exc:  # one bad section must not stop the rest
                if attempt == 0 and quarantine_named_in_error(exc, log.warning):
                    continue  # a damaged segment: quarantined, computed again without it
                log.warning("cluster exporter section %s failed: %s", name, exc)
        return [], False, time.perf_counter() - t0

    def _meta(
        self, up: bool, section_ok: dict[str, bool], seconds: dict[str, float], generation: int,
        total_seconds: float,
    ) -> list[Metric]:
        """The exporter's own health families: up, per-section up and duration, refresh timings and counts."""
        return [
            GaugeMetricFamily(
                "gpulens_cluster_exporter_up",
                self._help("1 when the last refresh read the store and computed every section, else 0."),
                value=1.0 if up else 0.0,
            ),
            *self._section_health(section_ok, seconds),
            *self._refresh_health(generation, total_seconds),
        ]

    def _section_health(self, section_ok: dict[str, bool], seconds: dict[str, float]) -> list[Metric]:
        """Whether each section was computed in its last refresh, and how long it took."""
        sec = GaugeMetricFamily(
            "gpulens_cluster_exporter_section_up",
            self._help("1 when the section was computed in its last refresh, else 0."),
            labels=["section"],
        )
        dur = GaugeMetricFamily(
            "gpulens_cluster_exporter_section_duration_seconds",
            "Wall time of each section's last computation (sections "
            f"{', '.join(SLOW_SECTIONS)} are recomputed every {self.config.slow_cache_seconds:g} s).",
            labels=["section"],
        )
        for s in SECTIONS:
            sec.add_metric([s], 1.0 if section_ok.get(s) else 0.0)
            if s in seconds:
                dur.add_metric([s], seconds[s])
        return [sec, dur]

    def _refresh_health(self, generation: int, total_seconds: float) -> list[Metric]:
        """When and how long the last refresh ran, the cache TTL, the refresh counters and the store generation."""
        return [
            GaugeMetricFamily(
                "gpulens_cluster_exporter_refresh_duration_seconds",
                "Wall time of the last refresh of the cluster metrics (store queries included).",
                value=total_seconds,
            ),
            GaugeMetricFamily(
                "gpulens_cluster_exporter_last_refresh_timestamp_seconds",
                "Unix time of the last refresh of the cluster metrics.",
                value=self._wall(),
            ),
            GaugeMetricFamily(
                "gpulens_cluster_exporter_cache_ttl_seconds",
                "Scrapes within this many seconds of a refresh are served from the cache.",
                value=self.config.cache_seconds,
            ),
            CounterMetricFamily(
                "gpulens_cluster_exporter_refreshes",
                "Refreshes of the cluster metrics since the exporter started.",
                value=self.refreshes,
            ),
            CounterMetricFamily(
                "gpulens_cluster_exporter_refresh_errors",
                "Refreshes in which the store or a section could not be read.",
                value=self.refresh_errors,
            ),
            GaugeMetricFamily(
                "gpulens_cluster_store_generation",
                "Generation of the store's state snapshot the metrics were computed from.",
                value=generation,
            ),
        ]

    # --------------------------------------------------------------- sections
    def _section_utilization(self, con: duckdb.DuckDBPyConnection) -> list[Metric]:
        total = con.execute("SELECT count(*) FROM gpus").fetchone()
        alloc = con.execute(
            "SELECT count(*) FROM (SELECT DISTINCT p.node, p.gpu_index FROM placements p "
            "JOIN attempts a USING (job_id, attempt) "
            "WHERE a.end_time IS NULL AND p.end_time IS NULL AND a.start_time IS NOT NULL)"
        ).fetchone()
        gpus = GaugeMetricFamily(
            "gpulens_cluster_gpus",
            self._help("GPUs known to the store (state=total) and held by running attempts (state=allocated)."),
            labels=["state"],
        )
        gpus.add_metric(["total"], float(total[0] if total else 0))
        gpus.add_metric(["allocated"], float(alloc[0] if alloc else 0))
        counts = dict(
            con.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall()
        )
        jobs = GaugeMetricFamily(
            "gpulens_cluster_jobs", self._help("Jobs in the store by status."), labels=["status"]
        )
        other = sum(v for k, v in counts.items() if k not in JOB_STATUSES)
        for status in JOB_STATUSES:
            jobs.add_metric([status], float(counts.get(status, 0)))
        if other:
            jobs.add_metric(["other"], float(other))
        return [gpus, jobs]

    def _window(self, con: duckdb.DuckDBPyConnection) -> tuple[datetime | None, datetime | None]:
        """The analysis window: ``window_days`` ending at the newest attempt activity."""
        row = con.execute(
            "SELECT max(greatest(coalesce(end_time, start_time), start_time)) FROM attempts"
        ).fetchone()
        ref = row[0] if row else None
        if ref is None or self.config.window_days <= 0:
            return None, ref
        return ref - timedelta(days=self.config.window_days), ref

    def _section_goodput(self, con: duckdb.DuckDBPyConnection) -> list[Metric]:
        """The goodput waterfall (cluster and per vc), effective utilization, failure GPU-hours, window length."""
        from gpulens.analysis.filters import Filters

        start, ref = self._window(con)
        filters = Filters(start=start, now=self._now())
        hours, keep = self._top_vc_hours(con, filters)
        window_note = (
            f"over the {self.config.window_days:g} days ending at the newest attempt in the store"
            if start is not None
            else "over all attempts in the store"
        )
        fams = self._waterfall_families(hours, keep, window_note)
        fams += self._failure_hours(con, filters, window_note)
        if start is not None and ref is not None:
            fams.append(
                GaugeMetricFamily(
                    "gpulens_cluster_window_seconds",
                    self._help("Length of the window the goodput and failure GPU-hours cover.", slow=True),
                    value=(ref - start).total_seconds(),
                )
            )
        return fams

    def _top_vc_hours(self, con: duckdb.DuckDBPyConnection,
                      filters: Any) -> tuple[dict[str, dict[str, float]], list[str]]:
        """GPU-hours by vc and stage, and the vcs to export: the top N by allocated GPU-hours, then 'other'.

        The vcs beyond the top N are summed into ``hours["other"]``.
        """
        from gpulens.analysis.goodput import goodput

        hours: dict[str, dict[str, float]] = {}
        records: list[dict[Any, Any]] = goodput(con, filters, by="vc").to_dict("records")
        for rec in records:
            raw = rec["vc"]
            vc = str(raw) if isinstance(raw, str) and raw else "none"
            hours.setdefault(vc, {})[str(rec["stage"])] = float(rec["gpu_hours"] or 0.0)
        top = sorted(hours, key=lambda v: -hours[v].get("allocated", 0.0))
        keep, rest = top[: self.config.top_n], top[self.config.top_n :]
        if rest:
            merged: dict[str, float] = {}
            for vc in rest:
                for stage, value in hours.pop(vc).items():
                    merged[stage] = merged.get(stage, 0.0) + value
            hours["other"] = merged
            keep.append("other")
        return hours, keep

    def _waterfall_families(self, hours: dict[str, dict[str, float]], keep: list[str],
                            window_note: str) -> list[Metric]:
        """The cluster and per-vc waterfall, per-vc and whole-cluster effective utilization of ``keep``."""
        from gpulens.analysis import accounting as acc
        from gpulens.analysis.goodput import STAGES

        cluster, per_vc, ratio = self._waterfall_shells(window_note)
        totals = {s: 0.0 for s in STAGES}
        for vc in keep:
            for stage in STAGES:
                value = hours[vc].get(stage, 0.0)
                per_vc.add_metric([vc, stage, acc.STAGE_BASIS[stage]], value)
                totals[stage] += value
            alloc = hours[vc].get("allocated", 0.0)
            if alloc > 0:
                ratio.add_metric([vc], acc.share(hours[vc].get("effective", 0.0), alloc))
        for stage in STAGES:
            cluster.add_metric([stage, acc.STAGE_BASIS[stage]], totals[stage])
        fams: list[Metric] = [cluster, per_vc, ratio]
        if totals["allocated"] > 0:
            fams.append(
                GaugeMetricFamily(
                    "gpulens_cluster_effective_utilization_ratio",
                    self._help(f"Effective / allocated GPU-hours of the whole cluster {window_note}.",
                               slow=True),
                    value=acc.share(totals["effective"], totals["allocated"]),
                )
            )
        return fams

    def _waterfall_shells(self, window_note: str) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        """The empty cluster waterfall, per-vc waterfall and per-vc effective utilization families."""
        cluster = GaugeMetricFamily(
            "gpulens_cluster_goodput_gpu_hours",
            self._help(
                "Goodput waterfall in GPU-hours "
                f"{window_note}: allocated = idle + failed_or_killed + post_convergence + effective; "
                "idle is allocated minus busy, the last three are busy GPU-hours (label basis; "
                "docs/accounting.md).",
                slow=True,
            ),
            labels=["stage", "basis"],
        )
        per_vc = GaugeMetricFamily(
            "gpulens_cluster_vc_gpu_hours",
            self._help(
                f"Goodput waterfall in GPU-hours per virtual cluster {window_note} "
                f"(top {self.config.top_n} vcs by allocated GPU-hours, the rest as vc=other).",
                slow=True,
            ),
            labels=["vc", "stage", "basis"],
        )
        ratio = GaugeMetricFamily(
            "gpulens_cluster_vc_effective_utilization_ratio",
            self._help(f"Effective / allocated GPU-hours per virtual cluster {window_note}.", slow=True),
            labels=["vc"],
        )
        return cluster, per_vc, ratio

    def _failure_hours(self, con: duckdb.DuckDBPyConnection, filters: Any,
                       window_note: str) -> list[Metric]:
        """Allocated and busy GPU-hours of failed or killed attempts by category and origin."""
        from gpulens.analysis.goodput import failure_cost

        cost: list[dict[Any, Any]] = failure_cost(con, filters).to_dict("records")
        fams: list[Metric] = []
        for basis in ("allocated", "busy"):
            fam = GaugeMetricFamily(
                f"gpulens_cluster_failure_{basis}_gpu_hours",
                self._help(f"{basis.capitalize()} GPU-hours of failed or killed attempts by "
                           f"category and origin {window_note}"
                           + (" (their sum is the failed_or_killed goodput stage)."
                              if basis == "busy" else "."), slow=True),
                labels=["category", "origin"],
            )
            rows = [(str(r["category"]), str(r["origin"]), float(r[f"{basis}_gpu_hours"] or 0.0))
                    for r in cost]
            rows.sort(key=lambda r: -r[2])
            for category, origin, value in self._cap(rows, 2):
                fam.add_metric([category, origin], value)
            fams.append(fam)
        return fams

    def _section_failures(self, con: duckdb.DuckDBPyConnection) -> list[Metric]:
        total = CounterMetricFamily(
            "gpulens_cluster_failures",
            self._help("Diagnosed failed job attempts in the store by category and origin."),
            labels=["category", "origin"],
        )
        rows = con.execute(
            "SELECT category, origin, count(*) FROM failures GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2"
        ).fetchall()
        for category, origin, n in self._cap(rows, 2):
            total.add_metric([category, origin], float(n))

        now = self._now()
        recent = GaugeMetricFamily(
            "gpulens_cluster_recent_failures",
            self._help(
                "Failed job attempts that ended within the window (1h, 24h) before now, by "
                "category ('undiagnosed' when the failures table has no row for the attempt)."
            ),
            labels=["category", "window"],
        )
        counts: dict[str, dict[str, int]] = {}
        for label, span in RECENT_WINDOWS:
            for category, n in con.execute(
                "SELECT coalesce(f.category, 'undiagnosed'), count(*) FROM attempts a "
                "LEFT JOIN failures f USING (job_id, attempt) "
                "WHERE a.status = 'failed' AND a.end_time > ? AND a.end_time <= ? GROUP BY 1",
                [now - span, now],
            ).fetchall():
                counts.setdefault(str(category), {})[label] = int(n)
        ranked = sorted(counts, key=lambda c: -counts[c].get("24h", 0))
        for category in ranked[: self._cap_rows]:
            for label, _ in RECENT_WINDOWS:
                recent.add_metric([category, label], float(counts[category].get(label, 0)))

        return [total, recent]

    #: categories x origins are a closed set (gpulens.diagnosis.types); this cap guards against drift
    _cap_rows = 100

    def _cap(self, rows: list[Any], n_keys: int) -> list[Any]:
        """Keep the first ``_cap_rows`` rows; sum the rest into an ('other', ...) row."""
        if len(rows) <= self._cap_rows:
            return [tuple(str(x) for x in r[:n_keys]) + tuple(r[n_keys:]) for r in rows]
        kept = [tuple(str(x) for x in r[:n_keys]) + tuple(r[n_keys:]) for r in rows[: self._cap_rows]]
        rest = sum(float(r[n_keys]) for r in rows[self._cap_rows :])
        kept.append(("other",) * n_keys + (rest,))
        return kept

    def _section_blacklist(self, con: duckdb.DuckDBPyConnection) -> list[Metric]:
        states = dict(con.execute("SELECT state, count(*) FROM blacklist GROUP BY 1").fetchall())
        entries = GaugeMetricFamily(
            "gpulens_cluster_blacklist_entries",
            self._help("Inputs in the blacklist by state."),
            labels=["state"],
        )
        for state in BLACKLIST_STATES:
            entries.add_metric([state], float(states.get(state, 0)))
        rows = con.execute(
            """
            SELECT j.job_id, coalesce(j."user", ''), coalesce(j.vc, ''), b.state,
                   count(DISTINCT b.input) AS n, max(j.submitted) AS submitted
            FROM jobs j, unnest(j.inputs) AS u(input)
            JOIN blacklist b ON b.input = u.input
            WHERE j.status IN ('queued', 'running') AND b.state IN ('blacklisted', 'suspected')
            GROUP BY 1, 2, 3, 4
            ORDER BY (b.state = 'blacklisted') DESC, submitted DESC NULLS LAST, 1
            """
        ).fetchall()
        jobs_total = GaugeMetricFamily(
            "gpulens_cluster_jobs_with_flagged_inputs",
            self._help("Queued or running jobs that read at least one blacklisted or suspected input."),
            labels=["state"],
        )
        for state in ("blacklisted", "suspected"):
            jobs_total.add_metric([state], float(len({r[0] for r in rows if r[3] == state})))
        per_job = GaugeMetricFamily(
            "gpulens_cluster_job_flagged_inputs",
            self._help(
                "Blacklisted or suspected inputs read by a queued or running job "
                f"(at most {self.config.top_n} jobs, blacklisted first, newest first)."
            ),
            labels=["job_id", "user", "vc", "state"],
        )
        for job, user, vc, state, n, _ in rows[: self.config.top_n]:
            per_job.add_metric([str(job), str(user), str(vc), str(state)], float(n))
        return [entries, jobs_total, per_job]

    def _section_nodes(self, con: duckdb.DuckDBPyConnection) -> list[Metric]:
        """Flagged nodes (count, per node, confidence), the alert threshold, and the top anomaly scores."""
        flags = self._node_flag_families(con)
        threshold = GaugeMetricFamily(
            "gpulens_cluster_node_flag_alert_confidence",
            self._help("diagnose.node_alert_confidence: GpulensNodeFlaggedBad fires at or above it."),
            value=float(self.diagnose.node_alert_confidence),
        )
        return [*flags, threshold, self._node_anomaly_family(con)]

    def _node_flag_families(self, con: duckdb.DuckDBPyConnection) -> list[Metric]:
        """Nodes with an active flag, and the top N flagged nodes with their flag's confidence."""
        flags = con.execute(
            """
            SELECT node, bool_or(coalesce(active, TRUE)) AS active, max(flagged_at) AS last,
                   max(confidence) FILTER (WHERE coalesce(active, TRUE)) AS confidence
            FROM node_flags GROUP BY node
            ORDER BY active DESC, last DESC, node
            """
        ).fetchall()
        count = GaugeMetricFamily(
            "gpulens_cluster_flagged_nodes",
            self._help("Nodes with an active bad-node flag."),
            value=float(sum(1 for r in flags if r[1])),
        )
        flagged = GaugeMetricFamily(
            "gpulens_cluster_node_flagged",
            self._help(
                "1 when the node has an active bad-node flag, 0 when its flags were cleared "
                f"(at most {self.config.top_n} nodes, active first)."
            ),
            labels=["node"],
        )
        confidence = GaugeMetricFamily(
            "gpulens_cluster_node_flag_confidence",
            self._help(
                "Confidence (1 - Benjamini-Hochberg q) of the node's active bad-node flag "
                f"(at most {self.config.top_n} nodes)."
            ),
            labels=["node"],
        )
        for node, active, _, conf in flags[: self.config.top_n]:
            flagged.add_metric([str(node)], 1.0 if active else 0.0)
            if active and conf is not None:
                confidence.add_metric([str(node)], float(conf))
        return [count, flagged, confidence]

    def _node_anomaly_family(self, con: duckdb.DuckDBPyConnection) -> Metric:
        """The top N nodes by their highest anomaly score over the latest ``anomaly_hours`` scored hours."""
        hours = self.config.anomaly_hours
        rows = con.execute(
            """
            WITH ref AS (SELECT max(hour) AS h FROM node_anomaly)
            SELECT node, max(score) AS s FROM node_anomaly, ref
            WHERE score IS NOT NULL AND NOT isnan(score)
              AND hour > ref.h - to_microseconds(CAST(? * 3600e6 AS BIGINT))
            GROUP BY node ORDER BY s DESC, node LIMIT ?
            """,
            [hours, self.config.top_n],
        ).fetchall()
        score = GaugeMetricFamily(
            "gpulens_cluster_node_anomaly_score",
            self._help(
                f"Highest anomaly score of the node over the latest {hours:g} scored hours "
                f"(top {self.config.top_n} nodes by score)."
            ),
            labels=["node"],
        )
        for node, s in rows:
            score.add_metric([str(node)], float(s))
        return score

    def _section_stragglers(self, con: duckdb.DuckDBPyConnection) -> list[Metric]:
        """Machines the live watcher suspects in running jobs (docs/straggler.md)."""
        fam = GaugeMetricFamily(
            "gpulens_job_node_suspect",
            self._help(
                "1 while the straggler watcher suspects the node of slowing the running job, per deviating "
                f"signal (`gpulens nodes live`; at most {self.config.top_n} suspects, highest score first)."
            ),
            labels=["job_id", "node", "signal"],
        )
        df = current_suspects(con, now=self._now(), stale_s=self.live.stale_s)
        for r in df.head(self.config.top_n).to_dict("records"):
            for sig in r["signals"]:
                fam.add_metric([str(r["job_id"]), str(r["node"]), str(sig)], 1.0)
        return [fam]

    def _section_validations(self, con: duckdb.DuckDBPyConnection) -> list[Metric]:
        rows = con.execute(
            "SELECT verdict, coalesce(category, 'none'), count(*) FROM validations "
            "GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2"
        ).fetchall()
        total = CounterMetricFamily(
            "gpulens_cluster_validations",
            self._help("Pre-submission validations by verdict and failure category ('none' on pass)."),
            labels=["verdict", "category"],
        )
        for verdict, category, n in self._cap(rows, 2):
            total.add_metric([verdict, category], float(n))
        return [total]


# ---------------------------------------------------------------------- server
class ExporterServer:
    """The HTTP server around a collector: ``/metrics`` on ``host:port`` (port 0 = any free)."""

    def __init__(self, collector: ClusterCollector, registry: CollectorRegistry,
                 host: str, port: int) -> None:
        self.collector = collector
        self.registry = registry
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise InputError(
                f"Cannot listen on {host}:{port} ({exc.strerror or exc}).",
                "Pick another port with --port (or exporter.port in gpulens.toml).",
            ) from None
        self.host = host
        self.port = int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(store_opener: Callable[[], Store], config: ExporterConfig,
          diagnose: DiagnoseConfig | None = None, live: LiveConfig | None = None) -> ExporterServer:
    """Compute the first snapshot, then serve it on its own registry (background refreshes)."""
    registry = CollectorRegistry(auto_describe=False)
    collector = ClusterCollector(store_opener, config, registry=registry, background=True, diagnose=diagnose,
                                 live=live)
    collector.refresh()
    return ExporterServer(collector, registry, config.host, config.port)


@click.command("exporter")
@click.option("--host", default=None, help="Address to bind (default: exporter.host, 127.0.0.1).")
@click.option("--port", type=int, default=None,
              help="Port to listen on (default: exporter.port, 9848; 0 = any free port).")
@click.option("--cache-seconds", type=float, default=None,
              help="Refresh the cheap store queries after this many seconds (default 15).")
@click.option("--slow-cache-seconds", type=float, default=None,
              help="Refresh the goodput waterfall (scans GPU samples) after this many seconds (default 300).")
@click.option("--top-n", type=int, default=None,
              help="Bound on vcs, jobs and nodes exported as label values (default 20).")
@click.option("--once", is_flag=True,
              help="Print the metrics once in the Prometheus text format and exit.")
@pass_app
def exporter(app: App, host: str | None, port: int | None, cache_seconds: float | None,
             slow_cache_seconds: float | None, top_n: int | None, once: bool) -> None:
    """Serve cluster-level metrics from the store on /metrics (gpulens_cluster_*)."""
    cfg = app.config.exporter
    for name, value in (("host", host), ("port", port), ("cache_seconds", cache_seconds),
                        ("slow_cache_seconds", slow_cache_seconds), ("top_n", top_n)):
        if value is not None:
            setattr(cfg, name, value)
    if (cfg.top_n < 1 or cfg.cache_seconds < 0 or cfg.slow_cache_seconds < 0
            or not 0 <= cfg.port <= 65535):
        raise InputError(
            f"Invalid exporter settings (top_n={cfg.top_n}, cache_seconds={cfg.cache_seconds}, "
            f"slow_cache_seconds={cfg.slow_cache_seconds}, port={cfg.port}).",
            "Use --top-n >= 1, cache durations >= 0 and a port in 0..65535.",
        )
    store = app.store()  # fail fast (exit 2) when the data directory is unusable
    if once:
        registry = CollectorRegistry(auto_describe=False)
        ClusterCollector(lambda: store, cfg, registry=registry, diagnose=app.config.diagnose, live=app.config.live)
        sys.stdout.write(generate_latest(registry).decode())
        return
    server = serve(lambda: store, cfg, app.config.diagnose, app.config.live)
    app.console.print(f"gpulens exporter: serving {server.url} (data dir {store.root})")
    stop = threading.Event()

    def _stop(*_: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.close()


"""`gpulens import prometheus`: GPU history from dcgm-exporter, nvidia_gpu_exporter or gpulens agents.

Reads ``/api/v1/query_range`` one node and one time chunk at a time (1,440 steps
per chunk, well under Prometheus's 11,000 points per series), writes the rows
into the samples lake exactly as the agent does (``Store.write_samples``), and
records finished chunks in ``prometheus_import_chunks`` (committed every 16 chunks
or 30 s, at the end, and when interrupted). Segment files are
named after (URL, source, selector, node, chunk), so a chunk imported twice
replaces its files instead of adding samples: a re-run after an interruption
continues where it stopped and never stores a sample twice.

Job labels on the GPU series (dcgm-exporter's pod mapping and ``hpc_job``,
``gpulens_gpu_job_info``) become ``observed_placements`` and are reconciled with
the jobs already in the store (see reconcile.py and docs/import-prometheus.md).
The rules for gaps, stale series, replicas, UUID changes and counter resets are
in promseries.py; each is counted in the import summary.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

import duckdb
import pyarrow as pa

from gpulens.errors import InputError
from gpulens.ingest.importers.common import ImportResult, Quirks, record_import
from gpulens.ingest.importers.promapi import PromClient, Series, promql_str
from gpulens.ingest.importers.prommap import SOURCES, Source
from gpulens.ingest.importers.promnet import net_owner, net_probe, net_regex, net_rows, net_selector
from gpulens.ingest.importers.promseries import NodeView, build_rows, node_name
from gpulens.ingest.importers.reconcile import Observed, merge_observed, reconcile_placements
from gpulens.store import Store
from gpulens.store.tables import registered, replace_batch

__all__ = ["CHUNK_STEPS", "PromImport", "detect_source", "import_prometheus", "parse_duration"]

#: Steps per query_range chunk (a day at 60 s; far below the 11,000-point limit).
CHUNK_STEPS = 1440
#: Chunks whose queries run ahead of the one being written.
PREFETCH = 2
#: Progress is committed every this many chunks or seconds (and at the end).
FLUSH_CHUNKS = 16
FLUSH_SECONDS = 30.0
_T = pa.timestamp("us")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_MATCHER = re.compile(r'^\s*[A-Za-z_][A-Za-z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*$')


def parse_duration(text: str) -> float:
    """'60s', '1m', '15' (seconds), '500ms' -> seconds."""
    m = _DURATION.match(text.strip())
    if not m or float(m[1]) <= 0:
        raise InputError(f"--step {text!r} is not a duration.", "Use e.g. 60s, 1m or 15s.")
    return float(m[1]) * _UNIT[m[2]]


def _selector(match: str) -> str:
    """'{a="x", b=~"y"}' or 'a="x",b=~"y"' -> 'a="x",b=~"y"' (validated matchers)."""
    inner = match.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1]
    parts = [p for p in re.split(r',(?=(?:[^"]*"[^"]*")*[^"]*$)', inner) if p.strip()]
    for p in parts:
        if not _MATCHER.match(p):
            raise InputError(f"--match {match!r}: {p.strip()!r} is not a label matcher.",
                             'Use label matchers only, e.g. --match \'{cluster="prod"}\'.')
    return ",".join(p.strip() for p in parts)


@dataclass(frozen=True)
class PromImport:
    """One import request (what the CLI options say)."""

    url: str
    start: datetime
    end: datetime
    step: float = 60.0
    source: str = "auto"
    match: str = ""

    def bounds(self) -> tuple[int, int, int]:
        """(first step ms, last step ms, step ms), steps aligned to multiples of the step."""
        step_ms = int(round(self.step * 1000))
        lo = math.ceil(_epoch_ms(self.start) / step_ms) * step_ms
        hi = math.floor(_epoch_ms(self.end) / step_ms) * step_ms
        if step_ms < 1 or hi < lo:
            raise InputError(f"--start {self.start} .. --end {self.end} holds no {self.step:g} s step.",
                             "Pass --start before --end (ISO times, UTC) and a step shorter than the range.")
        return lo, hi, step_ms


def _naive(t: datetime) -> datetime:
    """UTC without a zone, as the state tables store times."""
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def _epoch_ms(t: datetime) -> int:
    aware = t if t.tzinfo else t.replace(tzinfo=UTC)
    return int(round(aware.timestamp() * 1000))


def detect_source(client: PromClient, req: PromImport) -> Source:
    if req.source != "auto":
        if req.source not in SOURCES:
            raise InputError(f"--source {req.source!r} is not known.",
                             f"Use one of: auto, {', '.join(SOURCES)}.")
        return SOURCES[req.source]
    names = client.names(_epoch_ms(req.start) / 1000, _epoch_ms(req.end) / 1000)
    for src in SOURCES.values():
        if src.primary in names:
            return src
    wanted = ", ".join(s.primary for s in SOURCES.values())
    raise InputError(f"Prometheus at {client.url} holds none of {wanted} between {req.start} and {req.end}.",
                     "Check the time range, or pass --source and --match for your exporter.")


@dataclass
class _Run:
    store: Store
    client: PromClient
    req: PromImport
    source: Source
    sel: str
    quirks: Quirks
    view: NodeView
    chunk_steps: int = CHUNK_STEPS
    hosts: dict[str, set[str]] = field(default_factory=dict)
    net_nodes: set[str] = field(default_factory=set)  # gpulens agents with network series
    samples: int = 0
    net_samples: int = 0
    xids: int = 0
    chunks_done: int = 0
    chunks_skipped: int = 0
    pending: list[pa.Table] = field(default_factory=list)  # progress rows not yet committed
    observed: list[Observed] = field(default_factory=list)
    flushed_at: float = field(default_factory=time.monotonic)

    def vector(self, metric_or_regex: str, node_sel: str, *, regex: bool = False) -> str:
        parts = [p for p in (node_sel, self.sel) if p]
        if regex:
            return "{" + ",".join([f'__name__=~"{metric_or_regex}"', *parts]) + "}"
        return metric_or_regex + "{" + ",".join(parts) + "}"

    def tag(self, node: str, chunk_ms: int) -> str:
        key = "|".join((self.client.url, self.source.name, self.sel, node, str(chunk_ms)))
        return "prom-" + hashlib.sha1(key.encode()).hexdigest()[:20]


def _nodes(run: _Run, lo: int, hi: int) -> dict[str, str]:
    """node name -> PromQL matcher selecting its series (and ``run.hosts``: its instance hosts)."""
    found = run.client.series(run.vector(run.source.primary, ""), lo / 1000, hi / 1000)
    values: dict[str, tuple[str, set[str]]] = {}
    for labels in found:
        node = node_name(labels, run.source)
        if node is None:
            run.quirks["series_without_node_label"] += 1
            continue
        lab = next(lab for lab in run.source.node_labels if labels.get(lab))
        values.setdefault(node, (lab, set()))[1].add(labels[lab])
        if labels.get("instance"):
            run.hosts.setdefault(node, set()).add(labels["instance"].rsplit(":", 1)[0])
    out = {}
    for node, (lab, vals) in sorted(values.items()):
        alts = "|".join(promql_str(re.escape(v)) for v in sorted(vals))
        out[node] = f'{lab}=~"{alts}"' if len(vals) > 1 else f'{lab}="{promql_str(next(iter(vals)))}"'
    return out



def _probe_net(run: _Run, lo: int, hi: int) -> None:
    """Keep in ``run.hosts`` only what has network series (no empty query per node and chunk)."""
    match, label = net_probe(run.source.name)
    owners = {net_owner(label, s.get(label, "")) for s in run.client.series(match, lo / 1000, hi / 1000)}
    if run.source.name == "gpulens":
        run.net_nodes = owners
    else:
        run.hosts = {n: hs & owners for n, hs in run.hosts.items() if hs & owners}


def _load_info(run: _Run, lo: int, hi: int) -> None:
    info = run.source.info_metric
    if not info:
        return
    for labels in run.client.series(run.vector(info, ""), lo / 1000, hi / 1000):
        idx = labels.get("index", "")
        if idx.isdigit():
            run.view.uuid_index[labels.get("uuid", "")] = (int(idx), labels.get("name"))


def _progress(run: _Run) -> dict[tuple[str, int], bool]:
    con = run.store.connect()
    try:
        rows = con.execute(
            "SELECT node, epoch_ms(chunk_start), complete, step_s,"
            " epoch_ms(chunk_end) - epoch_ms(chunk_start) FROM prometheus_import_chunks"
            " WHERE url = ? AND source = ? AND selector = ?",
            [run.client.url, run.source.name, run.sel]).fetchall()
        for node, idx, uuid in con.execute(
                "SELECT node, gpu_index, uuid FROM gpus WHERE uuid IS NOT NULL").fetchall():
            run.view.last_uuid[(str(node), int(idx))] = str(uuid)
    finally:
        con.close()
    steps = {float(r[3]) for r in rows}
    if steps and steps != {run.req.step}:
        raise InputError(
            f"This store already holds an import of {run.client.url} at step {sorted(steps)[0]:g} s.",
            f"Re-run with --step {sorted(steps)[0]:g}s so samples are neither duplicated nor mixed.")
    spans = {int(r[4]) for r in rows}
    if spans and spans != {run.chunk_steps * run.view.step_ms}:
        raise InputError(f"This store holds an import of {run.client.url} in other chunks.",
                         "Re-run with the chunk size of the first import.")
    return {(str(r[0]), int(r[1])): bool(r[2]) for r in rows}


@dataclass(frozen=True)
class _Chunk:
    """One node and one time chunk: steps ``a``..``b`` (ms) of the chunk starting at ``start``."""

    node: str
    sel: str
    start: int
    a: int
    b: int
    complete: bool


@dataclass
class _Fetched:
    primary: list[Series]
    stamps: list[Series]
    rest: list[Series]
    net: list[Series]


def _fetch(run: _Run, c: _Chunk) -> _Fetched:
    """The chunk's four queries (from two steps before its first step: rates and freshness)."""
    a, b, step = (c.a - 2 * run.view.step_ms) / 1000, c.b / 1000, run.req.step
    vector = run.vector(run.source.primary, c.sel)
    others = [m for m in run.source.metrics() if m != run.source.primary]
    net: list[Series] = []
    net_sel = net_selector(run.source.name, c.node, run.hosts.get(c.node, set()))
    if net_sel is not None and (run.source.name != "gpulens" or c.node in run.net_nodes):
        query = "{" + f'__name__=~"{net_regex(run.source.name)}",{net_sel}' + "}"
        net = run.client.query_range(query, a, b, step)
    return _Fetched(run.client.query_range(vector, a, b, step),
                    run.client.query_range(f"timestamp({vector})", a, b, step),
                    run.client.query_range(run.vector("|".join(others), c.sel, regex=True), a, b, step),
                    net)


def _observed_job_info(run: _Run, rest: list[Series], lo_ms: int) -> list[tuple[str, str, int, str, int, int, str]]:
    """gpulens_gpu_job_info{node,gpu,uuid,job_id} series -> observed placements."""
    out = []
    for s in rest:
        if s.labels.get("__name__") != run.source.job_info or not s.labels.get("job_id"):
            continue
        got = run.view.gpu_of(s.labels)
        ts = [int(round(t * 1000)) for t, _ in s.points if int(round(t * 1000)) >= lo_ms]
        if got and ts:
            (node, gpu), uuid = got
            out.append((s.labels["job_id"], node, gpu, uuid, min(ts), max(ts), "gpulens"))
    return out


def _store_chunk(run: _Run, c: _Chunk, f: _Fetched) -> None:
    """Rows of one chunk into the lake (files named after the chunk), then its progress row."""
    rows = build_rows(run.view, f.primary, f.stamps, f.rest, c.a, run.quirks)
    observed = rows.observed + _observed_job_info(run, f.rest, c.a)
    net = net_rows(run.source.name, c.node, f.net, c.a, run.quirks)
    tag = run.tag(c.node, c.start)
    for kind, table in (("gpu", rows.gpu), ("xid", rows.xid), ("net", net)):
        run.store.write_samples(kind, table, tag=tag)
    span = run.chunk_steps * run.view.step_ms
    progress = pa.table({
        "url": [run.client.url], "source": [run.source.name], "selector": [run.sel], "node": [c.node],
        "chunk_start": pa.array([c.start * 1000], pa.int64()).cast(_T),
        "chunk_end": pa.array([(c.start + span) * 1000], pa.int64()).cast(_T),
        "covered_end": pa.array([c.b * 1000], pa.int64()).cast(_T),
        "step_s": [run.req.step], "complete": [c.complete], "samples": [rows.samples],
        "imported_at": pa.array([datetime.now(UTC).replace(tzinfo=None)], _T),
    })
    run.pending.append(progress)
    run.observed += observed
    if len(run.pending) >= FLUSH_CHUNKS or time.monotonic() - run.flushed_at >= FLUSH_SECONDS:
        _flush(run)
    run.samples += rows.samples
    run.net_samples += net.num_rows
    run.xids += rows.xid.num_rows
    run.chunks_done += 1


def _flush(run: _Run) -> None:
    """Commit the progress of the chunks written since the last flush (one state transaction:
    each commit publishes a snapshot of the state database, so not one per chunk). Chunks
    written but not yet committed are simply imported again by a re-run, into the same files."""
    if not run.pending:
        return
    with run.store.write() as con:
        replace_batch(con, "prometheus_import_chunks", pa.concat_tables(run.pending),
                      ["url", "source", "selector", "node", "chunk_start"])
        merge_observed(con, run.observed)
    run.pending, run.observed, run.flushed_at = [], [], time.monotonic()


def _todo(run: _Run, nodes: dict[str, str], lo: int, hi: int, done: dict[tuple[str, int], bool]) -> list[_Chunk]:
    step_ms = run.view.step_ms
    span = run.chunk_steps * step_ms
    out = []
    for node, sel in nodes.items():
        for start in range(lo // span * span, hi + 1, span):
            if done.get((node, start)):
                run.chunks_skipped += 1
                continue
            b = min(start + span - step_ms, hi)
            out.append(_Chunk(node, sel, start, max(start, lo), b, b >= start + span - step_ms))
    return out


def import_prometheus(store: Store, req: PromImport, *, client: PromClient | None = None,
                      progress: Callable[[str, int, int], None] | None = None,
                      on_chunk: Callable[[str, int], None] | None = None,
                      chunk_steps: int = CHUNK_STEPS) -> ImportResult:
    """Import GPU samples and observed placements for ``req`` (resumable; see module doc)."""
    client = client or PromClient(req.url)
    lo, hi, step_ms = req.bounds()
    source = detect_source(client, req)
    run = _Run(store, client, req, source, _selector(req.match), Quirks(), NodeView(source, step_ms),
               chunk_steps)
    nodes = _nodes(run, lo, hi)
    if not nodes:
        raise InputError(f"No {source.primary} series on {client.url} between {req.start} and {req.end}"
                         + (f" matching {req.match}" if req.match else "") + ".",
                         "Check the time range and --match.")
    _load_info(run, lo, hi)
    _probe_net(run, lo, hi)
    todo = _todo(run, nodes, lo, hi, _progress(run))
    total = len(todo) + run.chunks_skipped
    # the next chunks' queries run while this one is turned into rows and written
    pool = ThreadPoolExecutor(max_workers=PREFETCH, thread_name_prefix="gpulens-prom")
    try:
        pending = [pool.submit(_fetch, run, c) for c in todo[:PREFETCH]]
        for i, c in enumerate(todo):
            fetched = pending[i].result()
            if i + PREFETCH < len(todo):
                pending.append(pool.submit(_fetch, run, todo[i + PREFETCH]))
            _store_chunk(run, c, fetched)
            if on_chunk is not None:
                on_chunk(c.node, c.start)
            if progress is not None:
                progress("chunks", run.chunks_skipped + i + 1, total)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _flush(run)  # also when interrupted: what was written is recorded
    return _finish(run, nodes)


def _finish(run: _Run, nodes: dict[str, str]) -> ImportResult:
    q = run.quirks
    q["stale_series"] += len(run.view.stale)
    q["chunks_imported"] += run.chunks_done
    q["chunks_skipped_already_imported"] += run.chunks_skipped
    q["http_requests"] += run.client.requests
    result = ImportResult(f"prometheus:{run.source.name}", [run.client.url])
    with run.store.write() as con:
        _register(con, run)
        recon = reconcile_placements(con, step_s=run.req.step, import_end=run.req.end)
        q.update(recon)
        result.rows = {"nodes": len(nodes), "gpu_samples": run.samples, "xid_events": run.xids,
                       "net_samples": run.net_samples,
                       "observed_placements": int(con.execute(
                           "SELECT count(*) FROM observed_placements").fetchall()[0][0])}
        record_import(con, result.kind, run.client.url, run.samples, q.as_dict())
    result.quirks[run.client.url] = q.as_dict()
    return result


def _register(con: duckdb.DuckDBPyConnection, run: _Run) -> None:
    """Upsert the nodes and GPUs seen (source 'prometheus'); the newest UUID wins."""
    gpus = sorted(run.view.last_uuid.items())
    if not gpus:
        return
    batch = pa.table({"node": [k[0] for k, _ in gpus],
                      "gpu_index": pa.array([k[1] for k, _ in gpus], pa.int32()),
                      "uuid": [u for _, u in gpus],
                      "model": pa.array([run.view.last_model.get(k) for k, _ in gpus], pa.string())})
    with registered(con, "__prom_gpus", batch) as view:
        rows = f"SELECT node, gpu_index, uuid, model FROM {view}"  # noqa: S608
        con.execute(f"INSERT INTO gpus (node, gpu_index, uuid, model) {rows} ON CONFLICT (node, gpu_index)"
                    " DO UPDATE SET uuid = excluded.uuid, model = coalesce(excluded.model, gpus.model)")
        pick = f"SELECT node, count(*), any_value(model), 'prometheus', ?, ? FROM {view} GROUP BY node"  # noqa: S608
        con.execute(
            f"INSERT INTO nodes (node, gpus, gpu_model, source, first_seen, last_seen) {pick}"
            " ON CONFLICT (node) DO UPDATE SET last_seen = greatest(nodes.last_seen, excluded.last_seen)",
            [_naive(run.req.start), _naive(run.req.end)])

"""Turning the series of one node and one time chunk into gpulens sample rows.

Pure functions over :class:`~gpulens.ingest.importers.promapi.Series` (no I/O), so
the rules below are what the tests pin down:

* **Fresh steps.** A range query repeats a GPU's last sample at every step up to
  five minutes after it (Prometheus's lookback), also when the exporter died or
  the GPU left. The importer asks for ``timestamp(primary)`` too and keeps a step
  only if it uses a sample the previous step did not use, or one younger than
  the scrape interval (when the step is shorter than the interval). Dropped
  steps are counted as ``stale_points``; each series that went stale at least
  once (it stopped, for good or for a while) counts once in ``stale_series``.
* **Gaps.** Between two kept steps of a GPU more than one step apart: ``gaps``
  (and the missing steps in ``gap_steps``).
* **One GPU, several series.** A GPU's series split by job labels (dcgm-exporter
  adds pod/namespace/container or hpc_job), by replica labels (two Prometheus
  replicas), or by UUID (replaced hardware on the same index) are merged into
  one row per step: the freshest sample wins, and other metrics are taken from
  the series with that step's UUID. Replica copies count as
  ``replica_duplicate_series``, UUID changes as ``uuid_changes``.
* **Counters.** A decrease is a reset (``counter_resets``); rates count the new
  value from zero, like ``rate()``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from gpulens.ingest.importers.common import Quirks
from gpulens.ingest.importers.promapi import Series
from gpulens.ingest.importers.prommap import MIB, REPLICA_LABELS, Field, Source
from gpulens.store import arrow_schema

__all__ = ["ChunkRows", "GpuKey", "NodeView", "build_rows", "node_name"]

GpuKey = tuple[str, int]  # (node, gpu index)
_GPU_SCHEMA = arrow_schema("gpu")
_XID_SCHEMA = arrow_schema("xid")
_INT_COLS = {"mem_used_bytes", "mem_total_bytes", "pcie_replay_total", "ecc_corrected_total",
             "ecc_uncorrected_total", "row_remap_failures"}


def node_name(labels: dict[str, str], source: Source) -> str | None:
    for lab in source.node_labels:
        value = labels.get(lab)
        if value:
            return value.rsplit(":", 1)[0] if lab == "instance" and ":" in value else value
    return None


@dataclass
class NodeView:
    """What the importer knows about GPUs across chunks (carried from chunk to chunk)."""

    source: Source
    step_ms: int
    uuid_index: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # nvidia-smi info
    last_uuid: dict[GpuKey, str] = field(default_factory=dict)
    last_model: dict[GpuKey, str] = field(default_factory=dict)
    last_step: dict[GpuKey, int] = field(default_factory=dict)
    replicas: set[tuple[tuple[str, str], ...]] = field(default_factory=set)  # counted once per run
    stale: set[tuple[tuple[str, str], ...]] = field(default_factory=set)  # series that went stale

    def gpu_of(self, labels: dict[str, str]) -> tuple[GpuKey, str] | None:
        node = node_name(labels, self.source)
        uuid = labels.get(self.source.uuid_label, "")
        if node is None:
            return None
        if self.source.gpu_label is not None:
            raw = labels.get(self.source.gpu_label)
            if raw is None or not raw.isdigit():
                return None
            return (node, int(raw)), uuid
        info = self.uuid_index.get(uuid)
        return ((node, info[0]), uuid) if info else None

    def model_of(self, labels: dict[str, str]) -> str | None:
        if self.source.model_label:
            return labels.get(self.source.model_label) or None
        info = self.uuid_index.get(labels.get(self.source.uuid_label, ""))
        return info[1] if info else None


@dataclass
class _Step:
    value: float
    uuid: str
    sample_ms: int
    model: str | None
    variant: tuple[str, ...]  # UUID and job labels of the series that won this step


@dataclass
class ChunkRows:
    gpu: pa.Table
    xid: pa.Table
    observed: list[tuple[str, str, int, str, int, int, str]]  # job, node, gpu, uuid, first, last, via
    samples: int


def _ms(t: float) -> int:
    return int(round(t * 1000))


def _job_of(labels: dict[str, str], source: Source) -> tuple[str, str] | None:
    if source.name != "dcgm":
        return None
    ns = labels.get("namespace") or labels.get("pod_namespace") or ""
    pod = labels.get("pod") or labels.get("pod_name") or ""
    if pod:
        return (f"{ns}/{pod}" if ns else pod), "k8s-pod"
    job = labels.get("hpc_job") or ""
    return (job, "hpc_job") if job else None


def _variant(labels: dict[str, str], source: Source) -> tuple[str, ...]:
    """What tells a GPU's series apart over time: its UUID and job labels."""
    return (labels.get(source.uuid_label, ""), *(labels.get(k, "") for k in source.job_labels))


def _identity(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in REPLICA_LABELS))


def _interval_ms(stamps: list[int], step_ms: int) -> int:
    distinct = sorted(set(stamps))
    diffs = [b - a for a, b in zip(distinct, distinct[1:], strict=False) if b > a]
    return int(statistics.median(diffs)) if diffs else step_ms


def _fresh_steps(values: list[tuple[float, float]], stamps: dict[int, int], step_ms: int,
                 lo_ms: int, q: Quirks) -> tuple[dict[int, tuple[float, int]], bool]:
    """Steps of one primary series that use a new sample: ({step ms: (value, sample ms)}, went stale).

    The query starts two steps before ``lo_ms`` (the chunk's first step) so the
    first steps of a chunk are judged like the others; only steps >= lo_ms count.
    """
    interval = _interval_ms(list(stamps.values()), step_ms)
    kept: dict[int, tuple[float, int]] = {}
    prev_sample: int | None = None
    prev_t: int | None = None
    stale = False
    for t, v in values:
        tm = _ms(t)
        sample = stamps.get(tm, tm)
        reused = prev_t == tm - step_ms and prev_sample == sample
        if not reused or tm - sample < interval:
            kept[tm] = (v, sample)
        elif tm >= lo_ms:
            q["stale_points"] += 1
            stale = True
        prev_sample, prev_t = sample, tm
    return kept, stale


def _merge_primary(view: NodeView, series: list[Series], stamps: list[Series], lo_ms: int,
                   q: Quirks) -> tuple[dict[GpuKey, dict[int, _Step]], list[tuple[str, str, int, str, int, int, str]]]:
    """Fresh steps per GPU (freshest series wins) and the job placements seen on them."""
    ts_by_id = {_identity(s.labels): {_ms(t): _ms(v) for t, v in s.points} for s in stamps}
    scale = next(f.scale for f in view.source.fields if f.metric == view.source.primary)
    per_gpu: dict[GpuKey, dict[int, _Step]] = defaultdict(dict)
    seen_ids: dict[GpuKey, set[tuple[tuple[str, str], ...]]] = defaultdict(set)
    jobs: dict[tuple[str, str, int, str, str], list[int]] = {}
    for s in series:
        labels = {k: v for k, v in s.labels.items() if k != "__name__"}
        got = view.gpu_of(labels)
        if got is None:
            q["series_without_gpu_labels"] += 1
            continue
        key, uuid = got
        ident = _identity(labels)
        if ident in seen_ids[key] and tuple(sorted(labels.items())) not in view.replicas:
            view.replicas.add(tuple(sorted(labels.items())))
            q["replica_duplicate_series"] += 1
        seen_ids[key].add(ident)
        fresh, stale = _fresh_steps(s.points, ts_by_id.get(ident, {}), view.step_ms, lo_ms, q)
        if stale:
            view.stale.add(tuple(sorted(labels.items())))
        model = view.model_of(labels)
        variant = _variant(labels, view.source)
        steps = per_gpu[key]
        for tm, (v, sample) in fresh.items():
            if tm < lo_ms:
                continue
            cur = steps.get(tm)
            if cur is None or sample > cur.sample_ms:
                steps[tm] = _Step(v * scale, uuid, sample, model, variant)
        job = _job_of(labels, view.source)
        kept = [tm for tm in fresh if tm >= lo_ms]
        if job and kept:
            jobs.setdefault((job[0], key[0], key[1], uuid, job[1]), []).extend(kept)
    observed = [(j, n, g, u, min(ts), max(ts), via) for (j, n, g, u, via), ts in jobs.items()]
    return per_gpu, observed


def _count_gaps_and_uuids(view: NodeView, per_gpu: dict[GpuKey, dict[int, _Step]], q: Quirks) -> None:
    for key, steps in per_gpu.items():
        prev = view.last_step.get(key)
        for tm in sorted(steps):
            if prev is not None and tm - prev > view.step_ms:
                q["gaps"] += 1
                q["gap_steps"] += (tm - prev) // view.step_ms - 1
            prev = tm
            uuid = steps[tm].uuid
            old = view.last_uuid.get(key)
            if old is not None and uuid and old != uuid:
                q["uuid_changes"] += 1
            if uuid:
                view.last_uuid[key] = uuid
            if steps[tm].model:
                view.last_model[key] = str(steps[tm].model)
        if prev is not None:
            view.last_step[key] = prev


def _counter_steps(points: list[tuple[float, float]], f: Field, lo_ms: int,
                   q: Quirks) -> dict[int, float]:
    """{step ms: value} for a gauge, a raw counter or a rate (resets at steps >= lo_ms counted)."""
    out: dict[int, float] = {}
    prev: tuple[int, float] | None = None
    for t, v in points:
        tm = _ms(t)
        if f.kind != "gauge" and prev is not None and v < prev[1] and tm >= lo_ms:
            q["counter_resets"] += 1
        if f.kind == "rate":
            if prev is not None and tm > prev[0]:
                delta = v - prev[1] if v >= prev[1] else v
                out[tm] = delta * f.scale * 1000.0 / (tm - prev[0])
        else:
            out[tm] = v * f.scale
        prev = (tm, v)
    return out


_Cols = dict[GpuKey, dict[str, dict[int, float]]]


class _FieldFill:
    """Column values per GPU, slot and step, filled series by series (see :func:`_fill_fields`)."""

    def __init__(self, view: NodeView, per_gpu: dict[GpuKey, dict[int, _Step]], lo_ms: int, q: Quirks) -> None:
        self.view, self.per_gpu, self.lo_ms, self.q = view, per_gpu, lo_ms, q
        self.by_metric: dict[str, list[Field]] = defaultdict(list)
        for f in view.source.fields:
            self.by_metric[f.metric].append(f)
        self.cols: _Cols = defaultdict(lambda: defaultdict(dict))
        self.seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self.exact: set[tuple[GpuKey, str, int]] = set()  # values taken from the step's winning series

    def add(self, s: Series) -> None:
        """The fields of one series on its GPU's kept steps (a replica copy is skipped)."""
        name = s.labels.get("__name__", "")
        got = self.view.gpu_of(s.labels)
        if got is None or got[0] not in self.per_gpu:
            return
        key, uuid = got
        ident = (name, _identity(s.labels))
        if ident in self.seen:
            return  # a replica copy: counted on the primary metric
        self.seen.add(ident)
        steps = self.per_gpu[key]
        variant = _variant(s.labels, self.view.source)
        for f in self.by_metric.get(name, []) + _aux(self.view.source, name):
            if f.label and s.labels.get(f.label[0]) != f.label[1]:
                continue
            self._put(s, f, key, uuid, variant)
        for f in self.by_metric.get(name, []):
            if f.kind.startswith("xid"):
                _xid_events(s, f, steps, self.cols[key], uuid, self.lo_ms - 2 * self.view.step_ms)

    def _put(self, s: Series, f: Field, key: GpuKey, uuid: str, variant: tuple[str, ...]) -> None:
        """Field ``f`` of ``s`` at steps of the same UUID: the step's winning series' value wins,
        another series' value fills a step that has none yet."""
        values = _counter_steps(s.points, f, self.lo_ms, self.q) \
            if f.kind in ("gauge", "raw_counter", "rate") else {}
        steps = self.per_gpu[key]
        slot = _slot(f)
        col = self.cols[key][slot]
        for tm, v in values.items():
            st = steps.get(tm)
            if st is None or (uuid and st.uuid != uuid) or (key, slot, tm) in self.exact:
                continue
            if st.variant == variant:
                self.exact.add((key, slot, tm))
                col[tm] = v
            elif tm not in col:
                col[tm] = v


def _fill_fields(view: NodeView, series: list[Series], per_gpu: dict[GpuKey, dict[int, _Step]],
                 lo_ms: int, q: Quirks) -> _Cols:
    """Column values per GPU and step from every non-primary series (UUID-matched)."""
    fill = _FieldFill(view, per_gpu, lo_ms, q)
    for s in series:
        fill.add(s)
    return fill.cols


def _aux(source: Source, name: str) -> list[Field]:
    if name and name in (source.fb_free, source.fb_reserved):
        return [Field(name, f"_{name}", MIB)]
    return []


def _slot(f: Field) -> str:
    return f"{f.column}~fallback" if f.fallback else f.column


def _xid_events(s: Series, f: Field, steps: dict[int, _Step], col: dict[str, dict[int, float]],
                uuid: str, first_ms: int) -> None:
    """XID events at kept steps: ``xid~CODE`` slots hold the number of events per step.

    A ``xid_total`` series born after the first fetched step (``first_ms``) counts
    from zero: the exporter creates the series with the first event.
    """
    prev: float | None = None
    for t, v in s.points:
        tm = _ms(t)
        if f.kind == "xid_last":
            events = 1 if (prev is not None and v != prev and v != 0) else 0
            code = int(v)
        else:
            base = prev if prev is not None else (0.0 if tm > first_ms else v)
            events = int(v - base) if v > base else 0
            code = int(s.labels.get("xid", "0") or 0)
        prev = v
        st = steps.get(tm)
        if events and st is not None and (not uuid or st.uuid == uuid):
            slot = col.setdefault(f"xid~{code}", {})
            slot[tm] = max(slot.get(tm, 0), events)  # replicas and job splits repeat the events


def _column(name: str, ts: list[int], c: dict[str, dict[int, float]]) -> list[float | None]:
    main, fb = c.get(name), c.get(f"{name}~fallback")
    if main is None and fb is None:
        return [None] * len(ts)
    main, fb = main or {}, fb or {}
    return [v if (v := main.get(tm)) is not None else fb.get(tm) for tm in ts]


def _gpu_columns(key: GpuKey, steps: dict[int, _Step], c: dict[str, dict[int, float]]) -> dict[str, list[Any]]:
    """One GPU's rows of one chunk, column by column (the schema of the ``gpu`` kind)."""
    ts = sorted(steps)
    st = [steps[tm] for tm in ts]
    cols: dict[str, list[Any]] = {n: _column(n, ts, c) for n in _GPU_SCHEMA.names}
    cols.update(ts=[tm * 1000 for tm in ts], node=[key[0]] * len(ts), gpu_index=[key[1]] * len(ts),
                uuid=[x.uuid or None for x in st], model=[x.model for x in st],
                util_gpu=[x.value for x in st])
    if all(v is None for v in cols["mem_total_bytes"]) and "_DCGM_FI_DEV_FB_FREE" in c:
        free = _column("_DCGM_FI_DEV_FB_FREE", ts, c)
        reserved = _column("_DCGM_FI_DEV_FB_RESERVED", ts, c)
        cols["mem_total_bytes"] = [u + f + (r or 0.0) if u is not None and f is not None else None
                                   for u, f, r in zip(cols["mem_used_bytes"], free, reserved, strict=True)]
    for name in _INT_COLS:
        cols[name] = [None if v is None else int(round(v)) for v in cols[name]]
    cols["pcie_source"] = ["counter" if v is not None else None for v in cols["pcie_tx_bps"]]
    xid_slots = [v for k, v in c.items() if k.startswith("xid~")]
    cols["xid_count"] = [sum(int(v.get(tm, 0)) for v in xid_slots) for tm in ts]
    return cols


def build_rows(view: NodeView, primary: list[Series], stamps: list[Series], others: list[Series],
               lo_ms: int, q: Quirks) -> ChunkRows:
    """Rows of the ``gpu`` and ``xid`` kinds for one node and chunk (steps >= ``lo_ms``)."""
    per_gpu, observed = _merge_primary(view, primary, stamps, lo_ms, q)
    _count_gaps_and_uuids(view, per_gpu, q)
    cols = _fill_fields(view, others, per_gpu, lo_ms, q)
    parts: list[pa.Table] = []
    xids: list[dict[str, object]] = []
    for key in sorted(per_gpu):
        c = cols.get(key, {})
        parts.append(_table(_gpu_columns(key, per_gpu[key], c), _GPU_SCHEMA))
        for slot, vals in c.items():
            if slot.startswith("xid~"):
                xids.extend({"ts": tm * 1000, "node": key[0], "gpu_index": key[1],
                             "uuid": per_gpu[key][tm].uuid or None, "xid": int(slot[4:])}
                            for tm, n in vals.items() for _ in range(int(n)))
    gpu = pa.concat_tables(parts) if parts else _GPU_SCHEMA.empty_table()
    xid_cols = {n: [r[n] for r in xids] for n in _XID_SCHEMA.names}
    return ChunkRows(gpu, _table(xid_cols, _XID_SCHEMA), observed, gpu.num_rows)


def _table(cols: dict[str, list[Any]], schema: pa.Schema) -> pa.Table:
    arrays = []
    for fld in schema:
        data = cols[fld.name]
        if fld.name == "ts":
            arrays.append(pa.array(data, pa.int64()).cast(fld.type))
        else:
            arrays.append(pa.array(data, fld.type, from_pandas=True))
    return pa.Table.from_arrays(arrays, schema=schema)

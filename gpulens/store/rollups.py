"""Rollups: additive aggregates of the sample lake, written by compaction, read by the analyses.

Layout: ``rollups/kind=<R>/date=D/rollup-<mark>.parquet``, one file per rollup kind and day,
every node of the day in it (a file per node-day would be 7,500 small files a month on 2,000
GPUs; readers pay per file). ``<mark>`` is the schema mark (a hash of the rollup's columns):
a reader ignores a file of another release's columns and reads raw samples instead.

* ``gpu_hour`` (from ``kind=gpu``): per (node, GPU, clock hour ``hk``, epoch hours): ``n``
  and ``su``, the count and sum of the non-NULL, non-NaN ``util_gpu`` samples; ``mask``, the
  minutes of the hour with such a sample (bit ``m % 60``); ``nm`` and ``sm``, the same count
  and sum per minute of the hour (60-element lists, for placements that cover part of an
  hour; ``nm`` is NULL when no minute has two samples: the counts are then the mask's bits,
  and readers skip decoding 60 numbers a row); ``util_min``, ``util_max``, ``mem_used_max``, ``power_sum``, ``power_n``.
* ``net_minute`` (from ``kind=net``): per (node, minute ``mk``, epoch minutes, link kind):
  samples and the sums of ``rx_bps`` and ``tx_bps``.

Keyed by the files they summarise, never out of step with them: the file's metadata
(``gpulens.rollup.sources``) names, per node, the sample files whose rows its rows are (name,
size and mtime: a file rewritten under the same name is another file). A
reader (:func:`plan`) uses a node's rows only when all those files are live (lake.py) and
reads raw only the node's live files not among them (segments that arrived later); a node
whose sources were replaced (re-compacted) or quarantined is read raw. So a rollup written
before its compacted file was committed, or one that a crash left behind, is never used
for a listing it does not match; aggregates are additive, so rollup rows and raw rows of
the same minute add up exactly as raw rows alone would.

Written by :func:`refresh_day` (compaction, after it merged a day's partitions): the
rollup of a closed day covers every live file; of an open day, its compacted tiers only
(its newest segments are read raw). Rows of nodes whose sources did not change are
copied from the previous file. The new file is staged under ``tmp/``, fsynced and renamed
over the old one (readers that opened the old file keep reading it). A damaged rollup
is quarantined with a one-line warning and the day read raw.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpulens.store import quarantine as qr
from gpulens.store.lake import COMPACT_PREFIX, listed_stat, partitions
from gpulens.store.samples import SAMPLE_KINDS
from gpulens.store.segments import commit_parquet

__all__ = [
    "ROLLUP_KINDS",
    "RollupFile",
    "RollupPlan",
    "SOURCES_KEY",
    "aggregate",
    "describe",
    "plan",
    "read_sources",
    "refresh_day",
    "rollup_files",
    "rollup_path",
    "rollup_schema",
]

SOURCES_KEY = b"gpulens.rollup.sources.v2"  # node -> [[name, size, mtime_ns], ...]
#: rollup kind -> the sample kind it summarises
ROLLUP_KINDS = {"gpu_hour": "gpu", "net_minute": "net"}
_MINUTES = 60

_GPU_HOUR = pa.schema([
    ("node", pa.string()), ("gpu_index", pa.int16()), ("hk", pa.int64()), ("n", pa.int64()),
    ("su", pa.float64()), ("mask", pa.int64()), ("nm", pa.list_(pa.int32())),
    ("sm", pa.list_(pa.float64())), ("util_min", pa.float32()), ("util_max", pa.float32()),
    ("mem_used_max", pa.int64()), ("power_sum", pa.float64()), ("power_n", pa.int64()),
])
_NET_MINUTE = pa.schema([
    ("node", pa.string()), ("mk", pa.int64()), ("link_kind", pa.string()), ("n", pa.int64()),
    ("rx_bps_sum", pa.float64()), ("tx_bps_sum", pa.float64()),
])
_SCHEMAS = {"gpu_hour": _GPU_HOUR, "net_minute": _NET_MINUTE}
_COLUMNS = {"gpu_hour": ["ts", "gpu_index", "util_gpu", "mem_used_bytes", "power_w"],
            "net_minute": ["ts", "link_kind", "rx_bps", "tx_bps"]}


def rollup_schema(name: str) -> pa.Schema:
    return _SCHEMAS[name]


@functools.cache
def _mark(name: str) -> str:
    fields = [(f.name, str(f.type)) for f in _SCHEMAS[name]]
    return "s" + hashlib.sha256(json.dumps(fields).encode()).hexdigest()[:8]


def rollup_path(root: Path, name: str, day: date) -> Path:
    """Where the rollup ``name`` of ``day`` lives under the data directory ``root``."""
    return root / "rollups" / f"kind={name}" / f"date={day.isoformat()}" / f"rollup-{_mark(name)}.parquet"


def rollup_files(root: Path) -> list[Path]:
    """Every rollup file under the data directory ``root`` (all kinds and days)."""
    return sorted((root / "rollups").glob("kind=*/date=*/*.parquet"))


# ------------------------------------------------------------------ aggregation
_GPU_MINUTES = """
    SELECT node, CAST(gpu_index AS SMALLINT) AS gpu_index, epoch_us(ts) // 60000000 AS m,
           count(u) AS n, coalesce(sum(u), 0.0) AS su, min(u) AS umin, max(u) AS umax,
           max(mem_used_bytes) AS mem, coalesce(sum(power_w), 0.0) AS pw, count(power_w) AS pn
    FROM (SELECT node, ts, gpu_index, nullif(util_gpu, CAST('nan' AS FLOAT)) AS u, mem_used_bytes,
                 nullif(power_w, CAST('nan' AS FLOAT)) AS power_w FROM {src}
          WHERE ts IS NOT NULL AND gpu_index IS NOT NULL)
    GROUP BY ALL ORDER BY node, gpu_index, m
"""

_NET_MINUTES = """
    SELECT node, epoch_us(ts) // 60000000 AS mk, coalesce(link_kind, 'other') AS link_kind,
           count(*) AS n, coalesce(sum(rx_bps), 0.0) AS rx_bps_sum,
           coalesce(sum(tx_bps), 0.0) AS tx_bps_sum
    FROM {src} WHERE ts IS NOT NULL GROUP BY ALL ORDER BY node, mk, link_kind
"""


def _np(col: pa.ChunkedArray, dtype: type, fill: float = 0) -> np.ndarray:
    return np.asarray(col.fill_null(fill).to_numpy(), dtype=dtype)


def _hour_rows(mins: pa.Table) -> pa.Table:
    """Per-minute rows (sorted by node, GPU, minute) folded into per-hour rows with minute lists."""
    node = pc.dictionary_encode(mins["node"]).combine_chunks()
    g = _np(mins["gpu_index"], np.int64)
    hk, mi = np.divmod(_np(mins["m"], np.int64), _MINUTES)
    key = (np.asarray(node.indices, np.int64) << 40) + (g << 32) + hk
    new = np.r_[True, key[1:] != key[:-1]] if len(key) else np.zeros(0, bool)
    first = np.flatnonzero(new)
    idx = np.cumsum(new) - 1
    rows = len(first)
    n, su = _np(mins["n"], np.int64), _np(mins["su"], np.float64)
    nm = np.zeros((rows, _MINUTES), np.int32)
    sm = np.zeros((rows, _MINUTES), np.float64)
    nm[idx, mi], sm[idx, mi] = n, su
    bits = np.where(n > 0, np.left_shift(np.int64(1), mi), np.int64(0))

    def red(fn: np.ufunc, values: np.ndarray) -> np.ndarray:
        return fn.reduceat(values, first) if rows else values[:0]

    umin = red(np.fmin, _np(mins["umin"], np.float64, np.nan))
    umax = red(np.fmax, _np(mins["umax"], np.float64, np.nan))
    no_mem = red(np.logical_and, np.asarray(mins["mem"].is_null().to_numpy(), bool))
    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * _MINUTES)
    cols = {
        "node": node.take(pa.array(first)).cast(pa.string()),
        "gpu_index": pa.array(g[first], pa.int16()), "hk": pa.array(hk[first]),
        "n": pa.array(red(np.add, n)), "su": pa.array(sm.sum(axis=1)),
        "mask": pa.array(red(np.bitwise_or, bits)),
        "nm": pa.ListArray.from_arrays(offsets, pa.array(nm.ravel()),
                                       mask=pa.array(nm.max(axis=1, initial=0) <= 1)),
        "sm": pa.ListArray.from_arrays(offsets, pa.array(sm.ravel())),
        "util_min": pa.array(umin, pa.float32(), mask=np.isnan(umin)),
        "util_max": pa.array(umax, pa.float32(), mask=np.isnan(umax)),
        "mem_used_max": pa.array(red(np.maximum, _np(mins["mem"], np.int64, -1)), pa.int64(),
                                 mask=no_mem),
        "power_sum": pa.array(red(np.add, _np(mins["pw"], np.float64))),
        "power_n": pa.array(red(np.add, _np(mins["pn"], np.int64))),
    }
    return pa.table(cols).cast(_GPU_HOUR)


def aggregate(name: str, paths: Sequence[Path]) -> pa.Table:
    """The ``name`` rollup rows of the sample files ``paths`` (of one kind, any nodes)."""
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")
        con.register("t", _read(name, paths))
        if name == "gpu_hour":
            return _hour_rows(con.sql(_GPU_MINUTES.format(src="t")).to_arrow_table())
        return con.sql(_NET_MINUTES.format(src="t")).to_arrow_table().cast(_NET_MINUTE)
    finally:
        con.close()


def _read(name: str, paths: Sequence[Path]) -> pa.Table:
    """The rollup input columns of ``paths`` and the node (from the hive path); a column a
    file lacks reads as NULL. (Read by Arrow: DuckDB 2.0.1's ``union_by_name`` scan takes
    NaN floats for numbers in ``isnan`` and ``nullif``.)"""
    want = _COLUMNS[name]
    kind = ROLLUP_KINDS[name]
    types = dict(SAMPLE_KINDS[kind])
    tables = []
    for p in paths:
        have = set(pq.read_schema(p).names)
        t = pq.read_table(p, columns=[c for c in want if c in have], partitioning=None)
        cols = [t[c].cast(types[c]) if c in have else pa.nulls(t.num_rows, types[c]) for c in want]
        node = p.parent.name.removeprefix("node=")
        tables.append(pa.table([pa.array([node] * t.num_rows, pa.string()), *cols],
                               names=["node", *want]))
    return pa.concat_tables(tables)


# ------------------------------------------------------------------ reading sources
#: a summarised file: its name, size and mtime (a file rewritten under the same name, e.g. by a
#: second simulation into the same directory, is no longer the file the rollup summarised)
Source = tuple[str, int, int]
Sources = dict[str, tuple[Source, ...]]
_sources_cache: dict[str, tuple[tuple[int, int], Sources]] = {}


def read_sources(path: Path, root: Path, warn: Callable[[str], None]) -> Sources | None:
    """node -> the sample files a rollup summarises (None: no usable rollup; a damaged one is
    quarantined with a warning; one whose metadata is of another format is left for the next
    compaction to rewrite)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    hit = _sources_cache.get(str(path))
    if hit is not None and hit[0] == (st.st_size, st.st_mtime_ns):
        return hit[1]
    why = qr.check_segment(path)
    try:
        meta = pq.read_metadata(path).metadata or {} if why is None else {}
    except FileNotFoundError:
        return None
    except (OSError, pa.ArrowInvalid) as exc:
        why = f"unreadable rollup footer ({str(exc).splitlines()[0][:120]})"
    if why is not None:
        damaged(root, path, why, warn)
        return None
    sources = _parse_sources(meta.get(SOURCES_KEY))
    _sources_cache[str(path)] = ((st.st_size, st.st_mtime_ns), sources)
    return sources or None


def _parse_sources(text: bytes | None) -> Sources:
    """The sources of a rollup's metadata; {} when missing or of another format."""
    try:
        raw = json.loads(text or b"{}")
        return {str(k): tuple([(str(n), int(z), int(m)) for n, z, m in v]) for k, v in raw.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def damaged(root: Path, path: Path, why: str, warn: Callable[[str], None]) -> None:
    """Quarantine a damaged rollup (one warning line); its day is read from raw samples."""
    _sources_cache.pop(str(path), None)
    rec = qr.quarantine(root, path, why)
    if rec is not None:
        warn(rec.warning() + " Raw samples are read instead.")


# ------------------------------------------------------------------ writing
def _covered(folder: Path, live: Iterable[str], closed: bool) -> tuple[Source, ...]:
    out = []
    for name in sorted(n for n in live if closed or n.startswith(COMPACT_PREFIX)):
        st = (folder / name).stat()
        out.append((name, st.st_size, st.st_mtime_ns))
    return tuple(out)


def refresh_day(root: Path, tmp: Path, name: str, day: date, *, closed: bool,
                warn: Callable[[str], None], fsync_dir: Callable[[Path], None]) -> int | None:
    """Rewrite the ``name`` rollup of ``day`` if the live files changed; its size (None: as it was).

    Covers every live file of a closed day, the compacted files of an open one.
    """
    samples = root / "samples"
    kind = ROLLUP_KINDS[name]
    path = rollup_path(root, name, day)
    old = read_sources(path, root, warn) or {}
    want = {p.node: (p.path, _covered(p.path, p.live, closed))
            for p in partitions(samples, kind, day, day, warn=warn)}
    want = {node: v for node, v in want.items() if v[1]}
    if {k: v[1] for k, v in want.items()} == old:
        return None
    keep = [node for node, (_, src) in want.items() if old.get(node) == src]
    parts = [_old_rows(path, keep)] if keep else []
    fresh = [folder / n for node, (folder, src) in sorted(want.items()) if node not in keep
             for n, _, _ in src]
    if fresh:
        parts.append(aggregate(name, fresh))
    table = pa.concat_tables(parts).sort_by([("node", "ascending")]) if parts else \
        _SCHEMAS[name].empty_table()
    meta = {SOURCES_KEY: json.dumps({k: [list(x) for x in v[1]] for k, v in sorted(want.items())}
                                    ).encode()}
    return _write(tmp, path, table.replace_schema_metadata(meta), fsync_dir)


def _old_rows(path: Path, nodes: list[str]) -> pa.Table:
    t = pq.read_table(path, partitioning=None)
    return t.filter(pc.is_in(t["node"], pa.array(nodes, pa.string()))).replace_schema_metadata(None)


def _write(tmp: Path, path: Path, table: pa.Table, fsync_dir: Callable[[Path], None]) -> int:
    staging = tmp / f"rollup-{uuid.uuid4().hex[:12]}"
    staging.mkdir(parents=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    size = commit_parquet(table, staging / path.name, path,
                          compression="zstd", compression_level=3, row_group_size=262_144)
    fsync_dir(path.parent)
    shutil.rmtree(staging, ignore_errors=True)
    _sources_cache.pop(str(path), None)
    return size


# ------------------------------------------------------------------ planning reads
@dataclass(frozen=True)
class RollupPlan:
    """What to read for a listing: rollup files (each with the nodes to use, None: all of
    them) and the sample files no rollup covers."""

    rollups: tuple[tuple[str, tuple[str, ...] | None], ...]
    raw: tuple[tuple[str, date | None], ...]


def _same_files(names: dict[str, str], src: tuple[Source, ...]) -> bool:
    """Whether every source file is among ``names`` (name -> path) with its size and mtime (as the
    page run's listing stated it, :func:`gpulens.store.lake.listed_stat`)."""
    try:
        for n, z, m in src:
            path = names.get(n)
            if path is None:
                return False
            if listed_stat(path) != (z, m):
                return False
    except OSError:
        return False
    return True


def plan(root: Path, name: str, files: Iterable[tuple[str, date | None]],
         warn: Callable[[str], None]) -> RollupPlan:
    """Split the live sample ``files`` (path, date) into rollup rows and raw files."""
    by_day: dict[date, dict[str, dict[str, str]]] = {}
    raw: list[tuple[str, date | None]] = []
    sep = os.sep
    for path, day in files:
        if day is None:
            raw.append((path, day))
            continue
        folder, _, base = path.rpartition(sep)
        node = folder.rpartition(sep)[2].removeprefix("node=")
        by_day.setdefault(day, {}).setdefault(node, {})[base] = path
    rollups: list[tuple[str, tuple[str, ...] | None]] = []
    for day, nodes in sorted(by_day.items()):
        rpath = rollup_path(root, name, day)
        sources = read_sources(rpath, root, warn) or {}
        used = []
        for node, names in sorted(nodes.items()):
            src = sources.get(node, ())
            if src and _same_files(names, src):
                used.append(node)
                rolled = {n for n, _, _ in src}
                raw += [(p, day) for n, p in sorted(names.items()) if n not in rolled]
            else:
                raw += [(p, day) for _, p in sorted(names.items())]
        if used:
            rollups.append((str(rpath), None if set(used) == set(sources) else tuple(used)))
    return RollupPlan(tuple(rollups), tuple(raw))


# ------------------------------------------------------------------ describing (store info)
@dataclass(frozen=True)
class RollupFile:
    """One rollup file as ``gpulens store info`` shows it.

    ``state``: ``current`` (every live sample file of its day is summarised by it), ``partial``
    (usable; some live files of the day are read raw: late segments, the open day's newest
    segments), ``stale`` (some of its nodes' files were replaced or quarantined since: those
    nodes are read raw until the next ``store compact``), ``unusable`` (another release's
    columns, or no readable sources: never read; the next compaction rewrites it).
    """

    kind: str
    day: date | None
    path: str
    bytes: int
    state: str
    nodes: int
    stale_nodes: int
    raw_files: int


def _day_of(path: Path) -> date | None:
    try:
        return date.fromisoformat(path.parent.name.removeprefix("date="))
    except ValueError:
        return None


def _describe_file(root: Path, path: Path, live: dict[date, list[tuple[str, date | None]]],
                   warn: Callable[[str], None]) -> RollupFile:
    kind, day = path.parent.parent.name.removeprefix("kind="), _day_of(path)
    usable = kind in _SCHEMAS and day is not None and path == rollup_path(root, kind, day)
    sources = read_sources(path, root, warn) if usable else None
    size = path.stat().st_size  # FileNotFoundError: quarantined just now (damaged)
    if sources is None or day is None:
        return RollupFile(kind, day, str(path), size, "unusable", 0, 0, 0)
    rp = plan(root, kind, live.get(day, []), warn)
    used = len(sources) if rp.rollups and rp.rollups[0][1] is None else \
        len(rp.rollups[0][1] or ()) if rp.rollups else 0
    state = "stale" if used < len(sources) else "partial" if rp.raw else "current"
    return RollupFile(kind, day, str(path), size, state, len(sources), len(sources) - used,
                      len(rp.raw))


def describe(root: Path, live: Callable[[str], Iterable[tuple[str, date | None]]],
             warn: Callable[[str], None]) -> list[RollupFile]:
    """Every rollup file under ``root`` with its state against the live sample files
    (``live(kind)``: (path, day) of the sample kind's live files). A damaged file is
    quarantined on the way (one warning line) and left out."""
    by_kind: dict[str, dict[date, list[tuple[str, date | None]]]] = {}
    out = []
    for path in rollup_files(root):
        kind = path.parent.parent.name.removeprefix("kind=")
        if kind in ROLLUP_KINDS and kind not in by_kind:
            by_kind[kind] = {}
            for f, day in live(ROLLUP_KINDS[kind]):
                if day is not None:
                    by_kind[kind].setdefault(day, []).append((f, day))
        try:
            out.append(_describe_file(root, path, by_kind.get(kind, {}), warn))
        except FileNotFoundError:
            continue  # quarantined (damaged) or replaced while listed
    return out

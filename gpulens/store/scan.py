"""Read a few nodes' samples of a few days without binding the whole lake (issue 26).

A sample view (``gpu_samples``...) reads the connection's list of every live file: on a month of
2,000 GPUs (9,750 files a kind) binding it costs 0.1 s per query before any pruning, and the
node and date filters then prune at 0.2-0.6 s. A drill-down (one job's heatmap, its machines,
its ECC evidence) needs a handful of files: :func:`node_source` names them from the same listing
(:func:`gpulens.store.lake.live_files`: replaced and quarantined files left out), so it reads what
the view would, in a tenth of the time (benchmarks/RESULTS.md, ``## rollups (issue 26)``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import date
from pathlib import Path
from typing import Any

import duckdb

from gpulens.store.lake import ROOT_VARIABLE, live_files, schema_mark, seed_file
from gpulens.store.samples import VIEW_NAMES

__all__ = ["node_source"]

_HIVE = "hive_partitioning = true, hive_types = {'kind': VARCHAR, 'date': DATE, 'node': VARCHAR}"


def _node(path: str) -> str:
    return os.path.basename(os.path.dirname(path)).removeprefix("node=")


def node_source(
    con: duckdb.DuckDBPyConnection, kind: str, nodes: Iterable[str] | None,
    first: date | None, last: date | None, *, name: str = "files",
) -> tuple[str, dict[str, Any]]:
    """A FROM-clause source (and its parameters) of ``kind``'s samples on ``nodes``
    (None: every node) in the date partitions ``[first, last]`` (None: unbounded), with the
    view's columns (``date`` and ``node`` included).

    Reads the listed files as the view does: those in the current schema (their names carry its
    mark, :func:`gpulens.store.lake.schema_mark`) as they are, the others with their schemas merged
    (each list led by the kind's seed file, which has every current column and no rows: a file of
    an older release reads its missing columns as NULL). The parameters are ``$<name>`` and
    ``$<name>_mixed``. A connection that was not opened by :meth:`gpulens.store.Store.connect`
    has its own views: the view is read.
    """
    view = VIEW_NAMES[kind]
    listing = live_files(con, kind)
    row = con.execute(f"SELECT getvariable('{ROOT_VARIABLE}')").fetchone() if listing is not None else None
    if listing is None or not row or row[0] is None:
        return f"(SELECT * FROM {view})", {}  # noqa: S608 - a module constant
    wanted = None if nodes is None else set(nodes)
    files = [p for p, d in listing.files
             if (d is None or ((first is None or d >= first) and (last is None or d <= last)))
             and (wanted is None or _node(p) in wanted)]
    seed = str(seed_file(Path(str(row[0])), kind))
    mark = f"-{schema_mark(kind)}-"
    current = [seed, *(p for p in files if mark in os.path.basename(p))]
    mixed = [seed, *(p for p in files if mark not in os.path.basename(p))]
    # files in the current schema are read without merging schemas (union_by_name reads every
    # footer at bind: 2.4x the view's time over a month's 9,750 files); the others are merged
    sql = (f"(SELECT * EXCLUDE (kind) FROM (SELECT * FROM read_parquet(${name}, {_HIVE})"  # noqa: S608
           f" UNION ALL BY NAME SELECT * FROM read_parquet(${name}_mixed, {_HIVE}, union_by_name = true)))")
    return sql, {name: current, f"{name}_mixed": mixed}

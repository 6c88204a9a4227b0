"""Network traffic over time: per minute, hour or day (and node or link kind), from the
``net_minute`` rollups where a day is rolled and raw network samples for the rest (issue 26).

Definition: a network sample counts in the clock minute ``floor(ts)``; a period's ``samples``
are its network samples (one per interface and scrape), ``rx_bps_sum`` / ``tx_bps_sum`` the sums
of their receive / transmit rates (NULL rates add nothing), ``rx_bps_mean`` / ``tx_bps_mean``
those sums over ``samples`` (bytes/s per interface sample). The filter's window keeps the
minutes ``start <= minute < end``; its VC and user filters do not apply (traffic is a node's).

How: the counts and sums of the ``net_minute`` rollup rows (per node, minute and link kind;
:mod:`gpulens.store.rollups`) of the files they summarise plus those of the raw samples of the
live files they do not (segments that arrived later, the open day's newest ones, a day not
rolled yet, a node whose files changed since); both add up as the raw samples alone would (the
same numbers to floating-point addition order, ``tests/analysis/test_rollups_network.py``). A rollup that
fails while it is read is quarantined with one warning line and its day read raw.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import duckdb
import pandas as pd

from gpulens.analysis.filters import Filters
from gpulens.store import quarantine as qr
from gpulens.store import rollups
from gpulens.store.lake import ROOT_VARIABLE, live_files

__all__ = ["NETWORK_BY", "NETWORK_FREQS", "network_traffic"]

NETWORK_FREQS = ("minute", "hour", "day")
NETWORK_BY = ("node", "link_kind")
_HIVE = "hive_partitioning = true, hive_types = {'kind': VARCHAR, 'date': DATE, 'node': VARCHAR}"
_RAW = """
    SELECT node, epoch_us(ts) // 60000000 AS mk, coalesce(link_kind, 'other') AS link_kind,
           1 AS n, coalesce(rx_bps, 0.0) AS rx, coalesce(tx_bps, 0.0) AS tx
    FROM {src} WHERE ts IS NOT NULL
"""
#: epoch minutes per period (UTC days and hours are whole minutes since the epoch)
_UNIT = {"minute": 1, "hour": 60, "day": 1440}
_ROLLED = "SELECT node, mk, link_kind, n, rx_bps_sum AS rx, tx_bps_sum AS tx FROM read_parquet({files})"


def network_traffic(
    con: duckdb.DuckDBPyConnection,
    filters: Filters | None = None,
    *,
    freq: Literal["minute", "hour", "day"] | str = "hour",
    by: Literal["node", "link_kind"] | str | None = None,
) -> pd.DataFrame:
    """Per period (``ts``) and, with ``by``, node or link kind: samples, receive and transmit
    rate sums and means (the module's definition)."""
    if freq not in NETWORK_FREQS:
        raise ValueError(f"freq must be one of {', '.join(NETWORK_FREQS)}, not {freq!r}")
    if by is not None and by not in NETWORK_BY:
        raise ValueError(f"by must be one of {', '.join(NETWORK_BY)} or None, not {by!r}")
    lo, hi = (filters or Filters()).window()
    key = "" if by is None else f", {by}"
    window = {"lo_m": _minute(lo, math.floor), "hi_m": _minute(hi, math.ceil), "unit": _UNIT[freq]}
    root, files = _listing(con, lo, hi)
    while True:
        plan = None if root is None else rollups.plan(root, "net_minute", files, qr.warner(root))
        src, params = (_RAW.format(src="net_samples"), {}) if plan is None else _union(plan)
        sql = f"""
            SELECT make_timestamp(pk * $unit * 60000000) AS ts{key}, samples, rx_bps_sum, tx_bps_sum,
                   rx_bps_sum / samples AS rx_bps_mean, tx_bps_sum / samples AS tx_bps_mean
            FROM (SELECT mk // $unit AS pk{key}, CAST(sum(n) AS BIGINT) AS samples,
                         sum(rx) AS rx_bps_sum, sum(tx) AS tx_bps_sum
                  FROM ({src}) WHERE mk >= $lo_m AND mk < $hi_m GROUP BY ALL)
            ORDER BY ALL
        """  # noqa: S608 - by is checked against a fixed set; paths are parameters
        try:
            return con.execute(sql, {**params, **window}).df()
        except duckdb.Error as exc:
            bad = _damaged(plan, exc)
            if root is None or not bad:
                raise
            for path, why in bad:
                rollups.damaged(root, Path(path), why, qr.warner(root))


def _minute(t: datetime, rnd: Any) -> int:
    """Epoch minutes of a naive timestamp (the store's clock), rounded with ``rnd``."""
    return int(rnd((t - datetime(1970, 1, 1)) / timedelta(minutes=1)))


def _listing(con: duckdb.DuckDBPyConnection, lo: datetime,
             hi: datetime) -> tuple[Path | None, list[tuple[str, date | None]]]:
    """(data directory, live network files of the days in ``[lo, hi]``); (None, []) for a
    connection that is not a store's (its own ``net_samples`` is read)."""
    listing = live_files(con, "net")
    row = con.execute(f"SELECT getvariable('{ROOT_VARIABLE}')").fetchone() if listing is not None else None
    if listing is None or not row or row[0] is None:
        return None, []
    first, last = lo.date(), hi.date()
    return Path(str(row[0])).parent, [(p, d) for p, d in listing.files if d is None or first <= d <= last]


def _damaged(plan: rollups.RollupPlan | None, exc: duckdb.Error) -> list[tuple[str, str]]:
    """The rollup files of ``plan`` that a failed read names, else those that fail a full read."""
    if plan is None:
        return []
    named = [(p, str(exc).splitlines()[0][:200]) for p, _ in plan.rollups if p in str(exc)]
    if named:
        return named
    found = ((p, qr.read_fully(Path(p))) for p, _ in plan.rollups)
    return [(p, why) for p, why in found if why is not None]


def _union(plan: rollups.RollupPlan) -> tuple[str, dict[str, Any]]:
    parts: list[str] = []
    params: dict[str, Any] = {}
    raw = [p for p, _ in plan.raw]
    if raw:
        parts.append(_RAW.format(src=f"read_parquet($raw, {_HIVE}, union_by_name = true)"))
        params["raw"] = raw
    whole = [p for p, nodes in plan.rollups if nodes is None]
    if whole:
        parts.append(_ROLLED.format(files="$rfull"))
        params["rfull"] = whole
    for i, (path, nodes) in enumerate((p, n) for p, n in plan.rollups if n is not None):
        parts.append(_ROLLED.format(files=f"$rp{i}") + f" WHERE list_contains($rn{i}, node)")
        params[f"rp{i}"], params[f"rn{i}"] = path, list(nodes)
    if not parts:
        return ("SELECT NULL::VARCHAR AS node, NULL::BIGINT AS mk, NULL::VARCHAR AS link_kind,"
                " NULL::BIGINT AS n, NULL::DOUBLE AS rx, NULL::DOUBLE AS tx WHERE false"), {}
    return " UNION ALL ".join(parts), params

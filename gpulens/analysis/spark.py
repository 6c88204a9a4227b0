"""The utilization, locality and goodput analyses as Spark jobs, for stores past one machine.

Same definitions and results as the DuckDB analyses (gpulens/analysis/base.py,
utilization.py, locality.py, goodput.py; tests/analysis/test_spark.py checks them row by
row), written in Spark SQL:

* GPU samples: the live files of the lake, listed on the driver through the store
  (``Store.sample_files``: files replaced by a compaction are left out), read with hive
  partitions (``date``, ``node`` from the path, all as strings: a node named ``0001``
  stays a string) and ``mergeSchema`` (files written before a column existed read it as
  NULL; newer columns are ignored);
* state tables: the Parquet export of the newest snapshot (``gpulens store export``,
  written on demand under ``<data dir>/export/state-<generation>/``).

``lake_uri`` is where the executors find the data directory (``hdfs://...``, ``s3a://...``
or a shared filesystem); the driver lists files under its own path and rewrites the
prefix. Placements are cut into placement-hours and joined to the samples on (node,
GPU, hour) with the minute range as a residual condition, as in base.py; no Python runs
on the executors. See docs/spark.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from gpulens.analysis import accounting as acc
from gpulens.analysis.base import STATUS_CTES
from gpulens.analysis.early_stop import lower_is_better
from gpulens.analysis.filters import Filters
from gpulens.analysis.goodput import waterfall_long, waterfall_sql
from gpulens.analysis.locality import locality_loss_table, locality_table
from gpulens.errors import InputError
from gpulens.extras import require
from gpulens.store import Store, rollups
from gpulens.store.export import export_state

__all__ = ["SparkAnalyses", "spark_session"]

_STATE = ("jobs", "attempts", "placements", "failures", "job_metrics", "gpus", "nodes")
_TS = "yyyy-MM-dd HH:mm:ss.SSSSSS"


def spark_session(master: str | None = None, app: str = "gpulens", *,
                  conf: Mapping[str, str] | None = None) -> Any:
    """A SparkSession (the running one under spark-submit) set up for the lake: UTC, string
    partition values, timestamps without time zone read as the store wrote them. ``conf``: more
    settings for a session this call starts (a running one keeps its own)."""
    sql = require("pyspark.sql", "spark")
    builder = sql.SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    for key, value in {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.sql.parquet.inferTimestampNTZ.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        **(conf or {}),
    }.items():
        builder = builder.config(key, value)
    if master and master.startswith("local"):  # one machine: a few shuffle partitions
        builder = builder.config("spark.sql.shuffle.partitions", "4")
    spark = builder.getOrCreate()
    for key in ("spark.sql.session.timeZone", "spark.sql.sources.partitionColumnTypeInference"
                ".enabled", "spark.sql.parquet.inferTimestampNTZ.enabled"):
        spark.conf.set(key, {"spark.sql.session.timeZone": "UTC"}.get(key, "false"))
    return spark


def _lit_ts(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


@dataclass
class SparkAnalyses:
    """The analyses of one store on one SparkSession (views are registered per call)."""

    store: Store
    spark: Any
    lake_uri: str | None = None
    _key: tuple[Any, ...] | None = field(default=None, init=False, repr=False)
    _cached: list[Any] = field(default_factory=list, init=False, repr=False)

    # ------------------------------------------------------------- inputs
    def _uri(self, path: str | Path) -> str:
        local = str(path)
        if not self.lake_uri:
            return "file://" + str(Path(local).resolve())
        root = str(self.store.root)
        if not local.startswith(root):
            raise InputError(f"{local} is not under the data directory {root}.",
                             "Pass --data-dir as the driver sees the lake.")
        return self.lake_uri.rstrip("/") + local[len(root):]

    def _register_state(self) -> None:
        folder = export_state(self.store)
        for name in _STATE:
            df = self.spark.read.parquet(self._uri(folder / f"{name}.parquet"))
            df.createOrReplaceTempView(name)

    def _register_samples(self, first: date | None, last: date | None) -> date | None:
        """Register gl_samples (the raw samples no rollup covers) and gl_roll (the gpu_hour
        rollup rows of the rest; rollups.py); the newest date partition."""
        listing = self.store.sample_files("gpu", first, last)
        plan = rollups.plan(self.store.root, "gpu_hour", listing.files, self.store.warn)
        self._register_roll(plan)
        self._register_raw("gl_samples", [p for p, _ in plan.raw])
        self._register_raw("gl_listed", listing.paths)  # every live file, for _open_end
        return max((d for _, d in listing.files), default=None)

    def _register_raw(self, view: str, paths: list[str]) -> None:
        if not paths:
            empty = ("SELECT CAST(NULL AS TIMESTAMP) AS ts, CAST(NULL AS STRING) AS node,"
                     " CAST(NULL AS SMALLINT) AS gpu_index, CAST(NULL AS FLOAT) AS util_gpu,"
                     " CAST(NULL AS STRING) AS date WHERE false")
            self.spark.sql(empty).createOrReplaceTempView(view)
            return
        base = self._uri(self.store.samples / "kind=gpu")
        df = (self.spark.read.option("basePath", base).option("mergeSchema", "true")
              .parquet(*[self._uri(p) for p in paths]))
        df.selectExpr("CAST(ts AS TIMESTAMP) AS ts", "node",
                      "CAST(gpu_index AS SMALLINT) AS gpu_index",
                      "CAST(util_gpu AS FLOAT) AS util_gpu", "date"
                      ).createOrReplaceTempView(view)

    def _register_roll(self, plan: rollups.RollupPlan) -> None:
        """gl_roll: the rollup rows a plan uses (node, gpu_index, hk, n, su, mask, nm, sm)."""
        cols = ["node", "CAST(gpu_index AS SMALLINT) AS gpu_index", "hk", "n", "su", "mask",
                "nm", "sm"]
        frames = []
        for path, nodes in plan.rollups:
            df = self.spark.read.parquet(self._uri(path)).selectExpr(*cols)
            frames.append(df if nodes is None else df.where(df.node.isin(list(nodes))))
        if not frames:
            self.spark.sql(_NO_ROLL).createOrReplaceTempView("gl_roll")
            return
        out = frames[0]
        for df in frames[1:]:
            out = out.unionByName(df)
        out.createOrReplaceTempView("gl_roll")

    def _open_end(self, f: Filters, newest: date | None) -> datetime:
        running = self.spark.sql("SELECT count(*) AS n FROM attempts"
                                 " WHERE end_time IS NULL AND start_time IS NOT NULL").first()
        if running is None or running["n"] == 0 or newest is None:
            return f.clock()
        newest_ts = "SELECT date_format(max(ts), 'yyyy-MM-dd HH:mm:ss') AS t FROM gl_listed"
        row = self.spark.sql(newest_ts + " WHERE date = :d", args={"d": newest.isoformat()}).first()
        if row is None or row["t"] is None:
            row = self.spark.sql(newest_ts).first()
        if row is None or row["t"] is None:
            return f.clock()
        return datetime.fromisoformat(row["t"]) + timedelta(minutes=1)

    def _base(self, filters: Filters | None) -> dict[str, Any]:
        """Register gl_pl, gl_ph (cached), gl_att and gl_jobs for this window; the query args.

        Reused while the window, the state generation and the live sample files are the
        same (as the DuckDB analyses reuse their TEMP tables on one connection).
        """
        f = filters or Filters()
        lo, hi = f.window()
        key = (lo, hi, f.now, self.store.generation(),
               self.store.sample_files("gpu").signature)
        if key != self._key:
            self._build(f, lo, hi)
            self._key = key
        return self._filter_args(f)

    def _build(self, f: Filters, lo: datetime, hi: datetime) -> None:
        for df in self._cached:
            df.unpersist()
        self._cached = []
        self._register_state()
        span = self.spark.sql("SELECT CAST(min(coalesce(p.start_time, a.start_time)) AS DATE)"
                              " AS s FROM placements p JOIN attempts a USING (job_id, attempt)"
                              ).first()
        first = max(span["s"], lo.date()) if span and span["s"] is not None else None
        newest = self._register_samples(first, None if f.end is None else hi.date())
        args = {"lo": _lit_ts(lo), "hi": _lit_ts(hi),
                "open_end": _lit_ts(self._open_end(f, newest))}
        for name, sql in (("gl_pl", _PL), ("gl_hours", _HOURS), ("gl_ph", _PH),
                          ("gl_att", _ATT), ("gl_jobs", _JOBS)):
            df = self.spark.sql(sql, args=args if name == "gl_pl" else None)
            if name in ("gl_pl", "gl_ph"):  # row_number ids must not be recomputed
                df = df.cache()
                self._cached.append(df)
            df.createOrReplaceTempView(name)

    def _filter_args(self, f: Filters) -> dict[str, Any]:
        """Register the vc and user filters as views gl_vcs, gl_users; the window as args."""
        lo, hi = f.window()
        for name, values in (("gl_vcs", f.vcs), ("gl_users", f.users)):
            df = self.spark.createDataFrame([(v,) for v in values], "value string")
            df.createOrReplaceTempView(name)
        return {"windowed": f.start is not None or f.end is not None,
                "lo": _lit_ts(lo), "hi": _lit_ts(hi)}

    def _df(self, sql: str, args: dict[str, Any]) -> pd.DataFrame:
        used = {k: v for k, v in args.items() if f":{k}" in sql}
        return self.spark.sql(sql, args=used).toPandas()

    # ----------------------------------------------------------- analyses
    def utilization(self, filters: Filters | None = None,
                    by: Literal["cluster", "user", "vc", "day"] | str = "cluster") -> pd.DataFrame:
        """As :func:`gpulens.analysis.utilization.utilization`."""
        if by not in _BY:
            raise ValueError(f"by must be one of {sorted(_BY)}, not {by!r}")
        select, group = _BY[by]
        clause = f"GROUP BY {group} ORDER BY {group}" if group else ""
        df = self._df(_UTIL.format(select=select, clause=clause), self._base(filters))
        if by == "day":  # as DuckDB returns DATE columns
            df["day"] = pd.to_datetime(df["day"]).astype("datetime64[us]")
        return df

    def locality_units(self, filters: Filters | None = None) -> pd.DataFrame:
        return self._df(_UNITS, self._base(filters))

    def locality(self, filters: Filters | None = None, n_boot: int = 1000,
                 seed: int = 0) -> pd.DataFrame:
        """As :func:`gpulens.analysis.locality.locality`."""
        return locality_table(self.locality_units(filters), n_boot, seed)

    def locality_loss(self, filters: Filters | None = None) -> pd.DataFrame:
        """As :func:`gpulens.analysis.locality.locality_loss`."""
        units = self.locality_units(filters)
        row = self.spark.sql(_GPS).first()
        gps = max(1, int(row["g"])) if row and row["g"] else 1
        return locality_loss_table(units, gps)

    def goodput(self, filters: Filters | None = None, by: Literal["vc", "user"] | None = None,
                metric: str = "accuracy", tolerance: float = 0.001) -> pd.DataFrame:
        """As :func:`gpulens.analysis.goodput.goodput`."""
        if by not in _KEYS:
            raise ValueError("by must be None, 'vc' or 'user'")
        if tolerance < 0:
            raise ValueError("tolerance must be >= 0")
        expr, name = _KEYS[by]
        sql = _GOODPUT.format(key_sel=f"{expr} AS {name}, " if by else "",
                              key_grp="GROUP BY 1" if by else "")
        args = {**self._base(filters), "metric": metric, "tol": float(tolerance),
                "sign": -1.0 if lower_is_better(metric) else 1.0}
        return waterfall_long(self._df(sql, args), by)


def _filter(alias: str) -> str:
    return (f"(NOT EXISTS (SELECT 1 FROM gl_vcs) OR {alias}.vc IN (SELECT value FROM gl_vcs))"  # noqa: S608
            f" AND (NOT EXISTS (SELECT 1 FROM gl_users)"
            f" OR {alias}.`user` IN (SELECT value FROM gl_users))")


_NO_ROLL = ("SELECT CAST(NULL AS STRING) AS node, CAST(NULL AS SMALLINT) AS gpu_index,"
            " CAST(NULL AS BIGINT) AS hk, CAST(NULL AS BIGINT) AS n, CAST(NULL AS DOUBLE) AS su,"
            " CAST(NULL AS BIGINT) AS mask, CAST(NULL AS ARRAY<INT>) AS nm,"
            " CAST(NULL AS ARRAY<DOUBLE>) AS sm WHERE false")
_MIN = "CAST(floor(unix_micros({}) / 60000000) AS BIGINT)"

_PL = f"""
    WITH p AS (
        SELECT p.job_id, p.attempt, p.node, CAST(p.gpu_index AS SMALLINT) AS gpu_index,
               greatest(date_trunc('MINUTE', coalesce(p.start_time, a.start_time)),
                        to_timestamp(:lo)) AS s,
               least(coalesce(p.end_time, a.end_time, to_timestamp(:open_end)),
                     to_timestamp(:hi)) AS e
        FROM placements p JOIN attempts a ON a.job_id = p.job_id AND a.attempt = p.attempt
        WHERE coalesce(p.start_time, a.start_time) IS NOT NULL
    ), c AS (
        SELECT *, CASE WHEN e = date_trunc('MINUTE', e) THEN e
                       ELSE date_trunc('MINUTE', e) + INTERVAL 1 MINUTE END AS ce
        FROM p
    )
    SELECT row_number() OVER (ORDER BY job_id, attempt, node, gpu_index, s, e) AS pid,
           job_id, attempt, node, gpu_index, s, e, ce,
           {acc.alloc_minutes_sql("s", "ce", "spark")} AS alloc_min
    FROM c WHERE ce > s
"""  # noqa: S608 - no user values are formatted in

_HOURS = f"""
    SELECT pid, node, gpu_index, h,
           CAST(floor(unix_micros(h) / 3600000000) AS BIGINT) AS hk,
           {_MIN.format("greatest(s, h)")} AS lo_m,
           {_MIN.format("least(ce, h + INTERVAL 1 HOUR)")} AS hi_m
    FROM (SELECT pid, node, gpu_index, s, ce,
                 explode(sequence(date_trunc('HOUR', s), ce - INTERVAL 1 MINUTE,
                                  INTERVAL 1 HOUR)) AS h
          FROM gl_pl)
"""  # noqa: S608

_PH = f"""
    WITH smp AS (
        SELECT node, gpu_index, CAST(floor(unix_micros(ts) / 3600000000) AS BIGINT) AS hk,
               {_MIN.format("ts")} AS m,
               CASE WHEN isnan(util_gpu) THEN NULL ELSE util_gpu END AS util_gpu
        FROM gl_samples
    ),
    parts AS (
        SELECT x.pid, x.h, count(smp.util_gpu) AS n, sum(smp.util_gpu) AS su,
               bit_or(CASE WHEN smp.util_gpu IS NOT NULL
                           THEN shiftleft(CAST(1 AS BIGINT), CAST(smp.m % 60 AS INT))
                           ELSE CAST(0 AS BIGINT) END) AS mask
        FROM smp JOIN gl_hours x
          ON x.node = smp.node AND x.gpu_index = smp.gpu_index AND x.hk = smp.hk
         AND smp.m >= x.lo_m AND smp.m < x.hi_m
        GROUP BY x.pid, x.h
        UNION ALL
        SELECT x.pid, x.h, r.n, r.su, r.mask
        FROM gl_roll r JOIN gl_hours x
          ON x.node = r.node AND x.gpu_index = r.gpu_index AND x.hk = r.hk
         AND x.hi_m - x.lo_m = 60
        UNION ALL
        SELECT pid, h,
               CASE WHEN nm IS NULL THEN CAST(bit_count(mask & rm) AS BIGINT)
                    ELSE aggregate(slice(nm, a, len), CAST(0 AS BIGINT), (acc, v) -> acc + v) END,
               aggregate(slice(sm, a, len), 0.0D, (acc, v) -> acc + v),
               mask & rm
        FROM (SELECT x.pid, x.h, r.nm, r.sm, r.mask,
                     CAST(x.lo_m % 60 + 1 AS INT) AS a, CAST(x.hi_m - x.lo_m AS INT) AS len,
                     shiftleft(shiftleft(CAST(1 AS BIGINT), CAST(x.hi_m - x.lo_m AS INT)) - 1,
                               CAST(x.lo_m % 60 AS INT)) AS rm
              FROM gl_roll r JOIN gl_hours x
                ON x.node = r.node AND x.gpu_index = r.gpu_index AND x.hk = r.hk
               AND x.hi_m - x.lo_m < 60)
    ),
    used AS (
        SELECT pid, h, CAST(sum(n) AS BIGINT) AS n, sum(su) AS su, bit_count(bit_or(mask)) AS k
        FROM parts GROUP BY pid, h
    )
    SELECT x.pid, x.h, x.hi_m - x.lo_m AS alloc_min,
           coalesce(used.n, 0) AS n, coalesce(used.su, 0.0D) AS su,
           coalesce(used.k, 0) AS k,
           {acc.busy_minutes_sql("used.n", "used.su", "used.k")} AS busy_min
    FROM gl_hours x LEFT JOIN used ON used.pid = x.pid AND used.h = x.h
"""  # noqa: S608

_ATT = f"""
    WITH agg AS (
        SELECT pl.job_id, pl.attempt,
               count(DISTINCT pl.node, pl.gpu_index) AS gpus,
               count(DISTINCT pl.node) AS servers,
               min(pl.s) AS first_minute,
               sum(ph.alloc_min) AS alloc_min, sum(ph.busy_min) AS busy_min,
               sum(ph.k) AS k, sum(ph.n) AS n, sum(ph.su) AS su
        FROM gl_pl pl JOIN (
            SELECT pid, sum(alloc_min) AS alloc_min, sum(busy_min) AS busy_min,
                   sum(k) AS k, sum(n) AS n, sum(su) AS su
            FROM gl_ph GROUP BY pid
        ) ph ON ph.pid = pl.pid
        GROUP BY pl.job_id, pl.attempt
    ),
    {STATUS_CTES}
    SELECT s.*, {acc.lost_sql("st", "failure_key")} AS lost FROM s
"""  # noqa: S608 - as base.py's _ATTEMPTS; no user values are formatted in

_JOBS = f"""
    WITH main AS (
        SELECT * FROM (
            SELECT *, row_number() OVER (PARTITION BY job_id
                                         ORDER BY alloc_min DESC, attempt DESC) AS rk
            FROM gl_att) WHERE rk = 1
    ),
    tot AS (
        SELECT job_id, sum(alloc_min) AS alloc_min FROM gl_att GROUP BY job_id
    )
    SELECT j.job_id, j.`user`, j.vc, j.status, j.submitted,
           coalesce(main.gpus, j.requested_gpus) AS gpus, main.servers,
           coalesce(tot.alloc_min, 0) AS tot_alloc_min,
           {acc.hours_sql("main.alloc_min")} AS main_allocated_gpu_hours,
           {acc.util_pct_sql("main.busy_min", "main.k")} AS main_util
    FROM jobs j
    LEFT JOIN tot ON tot.job_id = j.job_id
    LEFT JOIN main ON main.job_id = j.job_id
"""  # noqa: S608 - as utilization.py's _JOBS (the columns locality needs)

_BY = {
    "cluster": ("", ""),
    "user": ("j.`user` AS `user`, ", "j.`user`"),
    "vc": ("j.vc AS vc, ", "j.vc"),
    "day": ("CAST(ph.h AS DATE) AS day, ", "CAST(ph.h AS DATE)"),
}

_UTIL = f"""
    SELECT {{select}}
           {acc.sum_hours_sql("ph.alloc_min")} AS allocated_gpu_hours,
           {acc.sum_hours_sql("ph.busy_min")} AS busy_gpu_hours,
           {acc.util_pct_sql("sum(ph.busy_min)", "sum(ph.k)")} AS mean_util,
           count(DISTINCT pl.job_id) AS jobs
    FROM gl_ph ph JOIN gl_pl pl ON pl.pid = ph.pid JOIN jobs j ON j.job_id = pl.job_id
    WHERE {_filter("j")}
    {{clause}}
"""  # noqa: S608

_UNITS = f"""
    SELECT job_id, `user`, vc, gpus, servers, main_allocated_gpu_hours AS allocated_gpu_hours,
           main_util AS util
    FROM gl_jobs j
    WHERE {_filter("j")}
      AND (NOT :windowed OR j.tot_alloc_min > 0
           OR (j.submitted >= to_timestamp(:lo) AND j.submitted < to_timestamp(:hi)))
      AND main_util IS NOT NULL AND gpus >= 1 AND servers >= 1
    ORDER BY job_id
"""  # noqa: S608

_GPS = """
    SELECT greatest(coalesce((SELECT max(gpus) FROM nodes), 0),
                    coalesce((SELECT max(gpu_index) + 1 FROM placements), 0),
                    coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM gpus GROUP BY node)),
                             0)) AS g
"""

_KEYS = {None: ("", ""), "vc": ("j.vc", "vc"), "user": ("j.`user`", "user")}

_CV = """
    SELECT job_id, min(rn) FILTER (WHERE v >= best - :tol * abs(best)) / first(epochs)
               AS fraction_epochs
    FROM (
        SELECT job_id, step, rn, v, count(*) OVER (PARTITION BY job_id) AS epochs,
               max(v) OVER (PARTITION BY job_id) AS best
        FROM (
            SELECT job_id, step, :sign * avg(value) AS v,
                   row_number() OVER (PARTITION BY job_id ORDER BY step) AS rn
            FROM job_metrics
            WHERE metric = :metric AND value IS NOT NULL AND NOT isnan(value)
              AND abs(value) <> double('infinity')
            GROUP BY job_id, step))
    GROUP BY job_id
"""

_GOODPUT = f"""
    WITH cv AS ({_CV}),
    a AS (
        SELECT att.*, j.vc, j.`user`, cv.fraction_epochs
        FROM gl_att att JOIN jobs j ON j.job_id = att.job_id
        LEFT JOIN cv ON cv.job_id = att.job_id
        WHERE {_filter("j")}
    ),
    {waterfall_sql("{key_sel}", "{key_grp}")}
"""  # noqa: S608 - as goodput.py's waterfall; fragments are module constants

"""The Spark engine gives the DuckDB analyses' results, row by row, on the same store.

One local Spark (local[2]) for the module, one small simulated store whose lake holds
what a real one does: a compacted day (with the replaced segments still on disk inside
their grace period), and files written before a column existed and after a newer one was
added. Spark is a required test dependency (the `dev` extra): no skip.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from gpulens import analysis
from gpulens.analysis import Filters
from gpulens.analysis.spark import SparkAnalyses, spark_session
from gpulens.cli.main import cli
from gpulens.errors import InputError
from gpulens.ingest.simulate import simulate
from gpulens.store import Store, rollups
from gpulens.store.compact import compact
from gpulens.store.lake import partitions
from tests.conftest import require_module, require_tool

#: the first test starts the JVM and builds the lake; on a loaded 2-core machine (other jobs
#: beside `make test`) it was measured at 305 s, past the suite's 300 s default
pytestmark = pytest.mark.timeout(600)

START = datetime(2026, 1, 1)


def _split(path: Path) -> None:
    """Rewrite a node-day file as two: an older release's (no sm/tensor ratios) and a
    newer one's (an extra column)."""
    table = pq.read_table(path, partitioning=None)
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half).drop_columns(["sm_active_ratio", "tensor_active_ratio"]),
                   path.with_name("old-release.parquet"))
    newer = table.slice(half)
    pq.write_table(newer.append_column("future_metric", pa.array(np.ones(newer.num_rows))),
                   path.with_name("new-release.parquet"))
    path.unlink()


def _segment(store: Store, path: Path, pieces: int) -> None:
    table = pq.read_table(path, partitioning=None)
    step = -(-table.num_rows // pieces)
    for i in range(pieces):
        pq.write_table(table.slice(i * step, step), path.with_name(f"seg-{i}.parquet"))
    path.unlink()


def _diagnose_a_passed_attempt(store: Store) -> None:
    """A failures row for an attempt whose status is 'passed': lost by diagnosis only
    (accounting.lost_sql), so both engines must read the failures table to agree."""
    with store.write() as con:
        row = con.execute(
            "SELECT a.job_id, a.attempt FROM attempts a JOIN placements p USING (job_id, attempt)"
            " WHERE a.status = 'passed' AND NOT EXISTS (SELECT 1 FROM failures f"
            " WHERE f.job_id = a.job_id AND f.attempt = a.attempt)"
            " GROUP BY 1, 2 ORDER BY count(*) DESC, 1 LIMIT 1").fetchone()
        assert row is not None
        con.execute("INSERT INTO failures (job_id, attempt, category, origin, method)"
                    " VALUES (?, ?, 'test_diagnosed', 'unknown', 'test')", list(row))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Store:
    store = Store.open(tmp_path_factory.mktemp("spark") / "d")
    simulate(store, gpus=24, days=2, seed=4, start=START)
    _diagnose_a_passed_attempt(store)
    day1 = [p for p in partitions(store.samples, "gpu") if p.day == START.date()]
    day2 = [p for p in partitions(store.samples, "gpu") if p.day > START.date()]
    for part in day1:
        _segment(store, part.path / part.live[0], 4)
    # day 1 is closed at 01:30 on day 3; the replaced segments stay (grace of a day)
    clock = (START + timedelta(days=2, hours=1, minutes=30)).replace(tzinfo=UTC).timestamp()
    compact(store, kinds=["gpu"], settle=3600, grace=86_400, clock=lambda: clock)
    assert all(p.compacted and p.replaced for p in partitions(store.samples, "gpu")
               if p.day == START.date())
    for part in day2[:2]:
        _split(part.path / part.live[0])
    return store


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    require_module("pyspark")
    require_tool("java")
    # A short-lived JVM: the client compiler only, the serial collector and no web UI (the
    # module took 182 CPU-s, 118 with these; results are the engine's either way).
    session = spark_session("local[2]", app="gpulens-test", conf={
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1",
        "spark.ui.enabled": "false"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def engine(lake: Store, spark: Any) -> SparkAnalyses:
    return SparkAnalyses(lake, spark)


def _same(duck: pd.DataFrame, other: pd.DataFrame, *, empty_ok: bool = False) -> None:
    assert list(duck.columns) == list(other.columns)
    assert len(duck) == len(other) and (empty_ok or len(duck) > 0)
    for col in duck.columns:
        a, b = duck[col].reset_index(drop=True), other[col].reset_index(drop=True)
        if pd.api.types.is_numeric_dtype(a) and not pd.api.types.is_bool_dtype(a):
            np.testing.assert_allclose(a.to_numpy(dtype="float64"), b.to_numpy(dtype="float64"),
                                       rtol=1e-9, atol=1e-9, err_msg=col)
        else:
            assert a.astype(str).tolist() == b.astype(str).tolist(), col


def _filters(con: Any, which: str) -> Filters | None:
    if which == "all":
        return None
    vcs = [r[0] for r in con.execute(
        "SELECT vc FROM jobs GROUP BY vc ORDER BY count(*) DESC, vc LIMIT 2").fetchall()]
    return Filters(vcs=tuple(vcs), start=START + timedelta(hours=30, seconds=20),
                   end=START + timedelta(hours=44), now=START + timedelta(days=2))


@pytest.mark.slow
@pytest.mark.parametrize("which", ["all", "vcs-and-window"])
def test_spark_results_equal_duckdb_row_by_row(lake: Store, engine: SparkAnalyses,
                                               which: str) -> None:
    con = lake.connect()
    f = _filters(con, which)
    rows = con.execute("SELECT count(*) FROM gpu_samples").fetchone()
    assert rows and rows[0] == 24 * 2 * 1440, "replaced files must not be counted"
    used = rollups.plan(lake.root, "gpu_hour", lake.sample_files("gpu").files, lake.warn)
    assert len(used.rollups) == 2 and used.raw, "both engines read rollups and raw samples"
    every = f is None  # the filtered run checks one grouping of each analysis
    for by in ("cluster", "vc", "day") if every else ("user",):
        _same(analysis.utilization(con, f, by=by), engine.utilization(f, by=by))
    _same(analysis.locality(con, f, n_boot=200, seed=1), engine.locality(f, n_boot=200, seed=1))
    _same(analysis.locality_loss(con, f), engine.locality_loss(f), empty_ok=not every)
    for key in (None, "vc") if every else ("user",):
        _same(analysis.goodput(con, f, by=key), engine.goodput(f, by=key))  # type: ignore[arg-type]


@pytest.mark.slow
def test_analyze_cli_engine_spark(lake: Store, spark: Any) -> None:
    """`gpulens analyze goodput --engine spark --json` (in this process: it joins the
    module's Spark session) prints what the DuckDB engine prints."""
    runner = CliRunner()
    out = {}
    for engine in ("duckdb", "spark"):
        r = runner.invoke(cli, ["-q", "--data-dir", str(lake.root), "analyze", "goodput",
                                "--by", "vc", "--engine", engine, "--master", "local[2]",
                                "--json"])
        assert r.exit_code == 0, r.output
        out[engine] = pd.DataFrame(json.loads(r.stdout))
    _same(out["duckdb"], out["spark"])
    export = sorted(p.name for p in (lake.root / "export").iterdir())
    assert len(export) == 1 and (lake.root / "export" / export[0] / "jobs.parquet").exists()


def test_store_export_writes_every_state_table(lake: Store, tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["-q", "--data-dir", str(lake.root), "store", "export",
                                 str(tmp_path / "x"), "--json"])
    assert r.exit_code == 0, r.output
    tables = json.loads(r.stdout)["tables"]
    assert {"jobs", "attempts", "placements", "job_metrics", "lake_compactions"} <= set(tables)
    jobs = pq.read_table(tmp_path / "x" / "jobs.parquet")
    assert jobs.num_rows == lake.connect().execute("SELECT count(*) FROM jobs").fetchone()[0]  # type: ignore[index]
    shutil.rmtree(tmp_path / "x")


@pytest.mark.slow
def test_lake_uri_maps_the_data_directory_for_executors(lake: Store) -> None:
    path = next(iter(lake.sample_files("gpu").paths))
    local = SparkAnalyses(lake, spark=None)
    assert local._uri(path) == "file://" + str(Path(path).resolve())
    remote = SparkAnalyses(lake, spark=None, lake_uri="hdfs://nn:8020/gpulens/")
    assert remote._uri(path) == "hdfs://nn:8020/gpulens" + path[len(str(lake.root)):]
    with pytest.raises(InputError, match="not under the data directory"):
        remote._uri("/elsewhere/x.parquet")

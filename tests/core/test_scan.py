"""``gpulens.store.scan.node_source`` reads what the sample view reads for some nodes and days
(issue 26: the Job page and ``diagnose --job`` read a job's files, not the whole lake's)."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from gpulens.store import Store, arrow_schema
from gpulens.store.compact import compact
from gpulens.store.lake import partitions
from gpulens.store.scan import node_source

T0 = datetime(2026, 5, 1, 22, 0)


def _rows(con: duckdb.DuckDBPyConnection, src: str, params: dict) -> list[tuple]:
    return con.execute(
        f"SELECT node, date, ts, gpu_index, util_gpu, ecc_uncorrected_total FROM {src}"  # noqa: S608
        " WHERE node IN ('a', 'b') AND date BETWEEN DATE '2026-05-02' AND DATE '2026-05-02'"
        " ORDER BY ALL", params).fetchall()


def test_node_source_reads_the_views_rows_of_those_nodes_and_days(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "d")
    rows = [{"ts": T0 + timedelta(minutes=30 * i), "node": n, "gpu_index": g, "util_gpu": float(i),
             "ecc_uncorrected_total": i} for i in range(8) for n in "abc" for g in (0, 1)]
    store.write_samples("gpu", pa.Table.from_pylist(rows, schema=arrow_schema("gpu")))
    store.write_samples("gpu", pa.Table.from_pylist(rows[-12:], schema=arrow_schema("gpu")))
    compact(store, settle=0, grace=3600)  # replaced files stay on disk: neither reader may see them
    assert all(len(p.replaced) == 2 for p in partitions(store.samples, "gpu", date(2026, 5, 2)))
    old = store.samples / "kind=gpu" / "date=2026-05-02" / "node=a" / "part-old.parquet"
    pq.write_table(pa.table({"ts": [T0 + timedelta(hours=5)], "gpu_index": pa.array([3], pa.int32()),
                             "util_gpu": pa.array([7.0], pa.float32())}), old)  # an older release: no ECC column
    con = store.connect()
    try:
        src, params = node_source(con, "gpu", ["a", "b"], date(2026, 5, 2), date(2026, 5, 2))
        read = [*params["files"][1:], *params["files_mixed"][1:]]  # each list led by the seed file
        assert len(read) == 3, "a's two files and b's one"
        assert params["files_mixed"][1:] == [str(old)], "only the older release's file is merged"
        got = _rows(con, src, params)
        assert got == _rows(con, "gpu_samples", {})
        assert (("a", date(2026, 5, 2), T0 + timedelta(hours=5), 3, 7.0, None)) in got
        every, params = node_source(con, "gpu", None, None, None)
        assert con.execute(f"SELECT count(*) FROM {every}", params).fetchone() == \
            con.execute("SELECT count(*) FROM gpu_samples").fetchone()  # noqa: S608
    finally:
        con.close()
    plain = duckdb.connect()
    plain.execute("CREATE VIEW gpu_samples AS SELECT 'a' AS node, DATE '2026-05-02' AS date,"
                  " TIMESTAMP '2026-05-02 01:00' AS ts, 0 AS gpu_index, 1.0 AS util_gpu,"
                  " 0 AS ecc_uncorrected_total")
    src, params = node_source(plain, "gpu", ["a"], None, None)
    assert params == {} and len(_rows(plain, src, params)) == 1

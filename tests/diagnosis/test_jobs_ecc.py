"""One job's ECC evidence is read from its own nodes and hours, with the same answer as the
whole history gives (issue 26: ``diagnose --job`` and the dashboard's Job page on a big store).

The reference is the query diagnose_job ran before (every hour of every sample of the failed
attempts' nodes, then the lag over the GPU's previous hour with samples), kept here as
:func:`whole_history_ecc` and run on the same stores.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from gpulens.config import DiagnoseConfig
from gpulens.diagnosis.jobs import _inputs_of, _View, diagnose_job
from gpulens.store import Store, arrow_schema
from tests.diagnosis.test_jobs import T0, FakeClassifier, add_job

Key = tuple[str, int]


def whole_history_ecc(store: Store, cfg: DiagnoseConfig) -> tuple[dict[Key, int], set[Key]]:
    """(ECC increase, telemetry) per failed attempt from every sample of its nodes (the old query)."""
    before, after = float(cfg.failure_xid_window_s), float(cfg.xid_margin_s)
    con = store.connect()
    try:
        rows = con.execute(
            """
            WITH fa AS (
                SELECT DISTINCT a.job_id, a.attempt, p.node, a.start_time, a.end_time,
                       greatest(a.start_time - to_microseconds(CAST($after * 1e6 AS BIGINT)),
                                coalesce(a.end_time, a.start_time)
                                - to_microseconds(CAST($before * 1e6 AS BIGINT))) AS t0,
                       coalesce(a.end_time, a.start_time) + to_microseconds(CAST($after * 1e6 AS BIGINT)) AS t1
                FROM attempts a JOIN placements p USING (job_id, attempt)
                WHERE (a.status = 'failed' OR (a.status = 'killed' AND a.reason IS NOT NULL))
                  AND a.start_time IS NOT NULL),
            g AS (
                SELECT node, gpu_index, date_trunc('hour', ts) AS h,
                       max(ecc_uncorrected_total) AS mx, min(ecc_uncorrected_total) AS mn
                FROM gpu_samples WHERE node IN (SELECT node FROM fa) GROUP BY ALL),
            d AS (
                SELECT node, h, greatest(coalesce(mx - coalesce(
                    lag(mx) OVER (PARTITION BY node, gpu_index ORDER BY h), mn), 0), 0) AS inc
                FROM g),
            nh AS (SELECT node, h, sum(inc) AS inc FROM d GROUP BY node, h)
            SELECT fa.job_id, fa.attempt, count(*) AS node_hours, sum(nh.inc) AS ecc
            FROM fa JOIN nh ON nh.node = fa.node
                AND nh.h BETWEEN date_trunc('hour', fa.t0) AND fa.t1
            GROUP BY fa.job_id, fa.attempt
            """,
            {"before": before, "after": after},
        ).fetchall()
    finally:
        con.close()
    ecc = {(j, int(a)): int(e or 0) for j, a, _n, e in rows}
    return ecc, {(j, int(a)) for j, a, n, _e in rows if n}


def one_job_ecc(store: Store, job_id: str, cfg: DiagnoseConfig) -> tuple[dict[Key, int], set[Key]]:
    con = store.connect()
    try:
        view = _View(con, [job_id], cfg)
    finally:
        con.close()
    return view.ecc, view.telemetry


def _gpu_rows(store: Store, rows: list[tuple[str, int, float, int | None]]) -> None:
    """GPU samples: (node, GPU, minutes after T0, uncorrectable ECC counter or None)."""
    table = pa.Table.from_pylist(
        [{"ts": T0 + timedelta(minutes=m), "node": n, "gpu_index": g, "util_gpu": 50.0,
          "ecc_uncorrected_total": e} for n, g, m, e in rows], schema=arrow_schema("gpu"))
    store.write_samples("gpu", table)


DAY = 24 * 60  # minutes


@pytest.mark.slow
def test_one_jobs_ecc_is_read_from_its_window_with_the_whole_historys_answer(store: Store) -> None:
    # j-gap fails on e1 at T0 + 25 h; its window's hours are 24 h and 25 h after T0
    add_job(store, "j-gap", [{"status": "failed", "nodes": ["e1"], "start": DAY, "minutes": 60,
                              "category": "crash"}])
    add_job(store, "j-quiet", [{"status": "failed", "nodes": ["e2"], "start": DAY, "minutes": 60,
                                "category": "crash"}], user="bob")
    add_job(store, "j-dark", [{"status": "failed", "nodes": ["e3"], "start": DAY, "minutes": 60,
                               "category": "crash"}], user="carol")
    add_job(store, "j-two", [  # two failures a day apart, on e2 then e1
        {"status": "failed", "nodes": ["e2"], "start": 0, "minutes": 30, "category": "crash"},
        {"status": "failed", "nodes": ["e1"], "start": DAY + 20, "minutes": 30, "category": "crash"},
    ], user="dave")
    _gpu_rows(store, [
        # GPU 0: an increase a day before the window (not counted); nothing for 23 hours, so the
        # window's first hour compares with that day-old hour (2 -> 5), then 5 -> 6
        ("e1", 0, 0, 1), ("e1", 0, 30, 2), ("e1", 0, DAY + 40, 5), ("e1", 0, DAY + 70, 6),
        # GPU 1: first samples ever in the window: the hour's own rise (7 -> 9)
        ("e1", 1, DAY + 10, 7), ("e1", 1, DAY + 50, 9),
        # GPU 2: the hour before has a sample without a counter: the hour's own rise (4 -> 5)
        ("e1", 2, DAY - 30, None), ("e1", 2, DAY + 20, 4), ("e1", 2, DAY + 40, 5),
        # e2: a flat counter, sampled all along
        *[("e2", 0, m, 3) for m in range(0, DAY + 120, 20)],
    ])
    cfg = DiagnoseConfig()
    want_ecc, want_tel = whole_history_ecc(store, cfg)
    assert want_ecc[("j-gap", 0)] == 3 + 1 + 2 + 1  # the reference itself reads the data right
    assert want_ecc[("j-quiet", 0)] == 0 and ("j-quiet", 0) in want_tel
    assert ("j-dark", 0) not in want_tel
    for job in ("j-gap", "j-quiet", "j-dark", "j-two"):
        ecc, tel = one_job_ecc(store, job, cfg)
        assert ecc == {k: v for k, v in want_ecc.items() if k[0] == job}, job
        assert tel == {k for k in want_tel if k[0] == job}, job
    assert one_job_ecc(store, "j-two", cfg)[0] == {("j-two", 0): 0, ("j-two", 1): 3 + 2 + 1}

    a = diagnose_job(store, "j-gap", classify=FakeClassifier(), write=False).attempts[0]
    assert a.context["node_health"] == "xid_or_ecc"
    assert "7 uncorrectable ECC error(s) on the attempt's nodes while it ran" in a.notes
    q = diagnose_job(store, "j-quiet", classify=FakeClassifier(), write=False).attempts[0]
    assert q.context["node_health"] == "clean"
    d = diagnose_job(store, "j-dark", classify=FakeClassifier(), write=False).attempts[0]
    assert d.context["node_health"] is None


@pytest.mark.slow
def test_every_simulated_jobs_ecc_matches_the_whole_history(tmp_path: Path) -> None:
    from gpulens.ingest.simulate import simulate

    store = Store.open(tmp_path / "sim")
    simulate(store, gpus=64, days=2, seed=1, start=datetime(2026, 1, 1))
    cfg = DiagnoseConfig()
    want_ecc, want_tel = whole_history_ecc(store, cfg)
    assert sum(want_ecc.values()) > 0, "the simulated bad nodes must show ECC errors"
    jobs = sorted({j for j, _ in want_ecc})
    got_ecc: dict[Key, int] = {}
    got_tel: set[Key] = set()
    for job in jobs:
        ecc, tel = one_job_ecc(store, job, cfg)
        got_ecc.update(ecc)
        got_tel |= tel
    assert got_ecc == want_ecc
    assert got_tel == want_tel

    # the input readers (counted per distinct declared name now): as counted per (job, input) pair
    con = store.connect()
    try:
        readers = _View(con, jobs[:1], cfg).readers
        want: Counter[str] = Counter()
        for _job, name in con.execute("SELECT DISTINCT job_id, unnest(inputs) FROM jobs").fetchall():
            want.update(_inputs_of([name]))
    finally:
        con.close()
    assert readers == want and sum(want.values()) > len(want), "inputs shared by several jobs"

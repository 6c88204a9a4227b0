"""Store contents of small simulations are consistent and carry the planted effects."""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from gpulens.diagnosis.types import CATEGORIES, ORIGINS
from gpulens.errors import InputError
from gpulens.ingest.simulate import SimParams, SimSummary, planted_util, simulate
from gpulens.ingest.simulate.logs import TEMPLATES, LogCorpus
from gpulens.store import Store

START = datetime(2026, 11, 1)


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, SimSummary]:
    store = Store.open(tmp_path_factory.mktemp("small") / "data")
    return store, simulate(store, gpus=64, days=2, seed=3, start=START)


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, SimSummary]:
    store = Store.open(tmp_path_factory.mktemp("large") / "data")
    return store, simulate(store, gpus=256, days=5, seed=11, start=START)


def one(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> object:
    row = con.execute(sql, params or []).fetchone()
    assert row is not None
    return row[0]


# ------------------------------------------------------------------ consistency
@pytest.mark.slow
def test_cluster_shape(small: tuple[Store, SimSummary]) -> None:
    store, s = small
    con = store.connect()
    sizes = dict(con.execute("SELECT gpus, count(*) FROM nodes WHERE source = 'simulate' GROUP BY gpus").fetchall())
    assert set(sizes) == {8, 2}
    assert 8 * sizes[8] + 2 * sizes[2] == s.gpus == 64
    assert one(con, "SELECT count(*) FROM gpus") == 64
    assert one(con, "SELECT count(DISTINCT uuid) FROM gpus") == 64
    assert s.jobs == one(con, "SELECT count(*) FROM jobs WHERE source = 'simulate'")
    assert one(con, "SELECT count(*) FROM jobs WHERE status NOT IN ('passed','killed','failed','running','queued')") == 0


def test_samples_cover_every_gpu_every_minute(small: tuple[Store, SimSummary]) -> None:
    store, s = small
    con = store.connect()
    minutes = 2 * 1440
    n, distinct, lo, hi = con.execute(
        "SELECT count(*), count(DISTINCT (node, gpu_index, ts)), min(ts), max(ts) FROM gpu_samples"
    ).fetchone() or (0, 0, None, None)
    assert n == distinct == 64 * minutes == s.gpu_samples
    assert lo == START and hi == datetime(2026, 11, 2, 23, 59)
    # uuid and node in the samples agree with the gpus table
    assert one(con, """
        SELECT count(*) FROM (SELECT DISTINCT node, gpu_index, uuid FROM gpu_samples) x
        LEFT JOIN gpus g USING (node, gpu_index) WHERE g.uuid IS DISTINCT FROM x.uuid""") == 0


def test_idle_gpus_are_idle_and_busy_gpus_busy(small: tuple[Store, SimSummary]) -> None:
    store, _ = small
    con = store.connect()
    rows = con.execute("""
        WITH s AS (
            SELECT s.util_gpu, s.mem_used_bytes, s.power_w, p.job_id IS NOT NULL AS busy
            FROM gpu_samples s LEFT JOIN placements p
              ON p.node = s.node AND p.gpu_index = s.gpu_index
             AND s.ts >= p.start_time AND (p.end_time IS NULL OR s.ts < p.end_time))
        SELECT busy, count(*), max(util_gpu), avg(util_gpu), max(mem_used_bytes), avg(power_w)
        FROM s GROUP BY busy ORDER BY busy""").fetchall()
    (idle, n_idle, max_idle, _, mem_idle, pw_idle), (busy, n_busy, _, avg_busy, mem_busy, pw_busy) = rows
    assert not idle and busy
    assert n_idle > 0 and n_busy > 0
    assert max_idle == 0 and mem_idle == 0
    assert 20 < avg_busy < 80
    assert mem_busy > 0 and pw_busy > pw_idle


def test_placements_inside_attempts_and_no_double_booking(small: tuple[Store, SimSummary]) -> None:
    store, _ = small
    con = store.connect()
    assert one(con, """
        SELECT count(*) FROM placements p JOIN attempts a USING (job_id, attempt)
        WHERE p.start_time <> a.start_time OR p.end_time IS DISTINCT FROM a.end_time""") == 0
    assert one(con, "SELECT count(*) FROM placements p ANTI JOIN attempts a USING (job_id, attempt)") == 0
    assert one(con, "SELECT count(*) FROM placements p ANTI JOIN gpus g USING (node, gpu_index)") == 0
    # every attempt holds exactly the requested GPUs
    assert one(con, """
        SELECT count(*) FROM (SELECT job_id, attempt, count(*) n FROM placements GROUP BY ALL) x
        JOIN jobs j USING (job_id) WHERE x.n <> j.requested_gpus""") == 0
    # a GPU never runs two attempts at once
    assert one(con, """
        SELECT count(*) FROM placements a JOIN placements b
          ON a.node = b.node AND a.gpu_index = b.gpu_index
         AND (a.job_id, a.attempt) < (b.job_id, b.attempt)
         AND a.start_time < coalesce(b.end_time, TIMESTAMP '9999-01-01')
         AND b.start_time < coalesce(a.end_time, TIMESTAMP '9999-01-01')""") == 0
    assert one(con, "SELECT count(*) FROM attempts a JOIN jobs j USING (job_id) WHERE a.start_time < j.submitted") == 0


def test_job_status_matches_last_attempt(small: tuple[Store, SimSummary]) -> None:
    store, s = small
    con = store.connect()
    bad = con.execute("""
        SELECT j.job_id, j.status, a.status FROM jobs j
        JOIN (SELECT job_id, arg_max(status, attempt) AS status, max(attempt) AS m FROM attempts GROUP BY 1) a
          USING (job_id)
        WHERE j.status <> a.status AND NOT (j.status = 'queued' AND a.status = 'failed')""").fetchall()
    assert bad == []
    assert one(con, "SELECT max(attempt) FROM attempts") < s.params.max_attempts
    assert one(con, "SELECT count(*) FROM jobs j ANTI JOIN attempts a USING (job_id) WHERE j.status <> 'queued'") == 0


def test_failed_attempts_have_logs_and_truth(small: tuple[Store, SimSummary]) -> None:
    store, s = small
    con = store.connect()
    rows = con.execute("SELECT job_id, attempt, status, log_path FROM attempts").fetchall()
    failed = [r for r in rows if r[2] == "failed"]
    assert failed and s.failed_attempts == len(failed)
    for job_id, attempt, _, log_path in failed:
        assert log_path == f"logs/sim/{job_id}/attempt-{attempt}.log"
        text = (store.root / log_path).read_text()
        assert job_id in text.splitlines()[0]
    assert all(r[3] is None for r in rows if r[2] != "failed")
    truth = con.execute("SELECT job_id, attempt, category, origin, node_fault FROM sim_truth").fetchall()
    assert {(t[0], t[1]) for t in truth} == {(f[0], f[1]) for f in failed}
    assert all(t[2] in CATEGORIES and t[3] in ORIGINS for t in truth)
    assert all(t[4] == (t[2] == "gpu_hardware") for t in truth)


def test_logs_do_not_reveal_the_category_in_the_header(small: tuple[Store, SimSummary]) -> None:
    store, _ = small
    con = store.connect()
    for log_path, category in con.execute(
        "SELECT a.log_path, t.category FROM attempts a JOIN sim_truth t USING (job_id, attempt)"
    ).fetchall():
        header = "\n".join((store.root / log_path).read_text().splitlines()[:3])
        assert category not in header


def test_xids_only_on_bad_nodes(small: tuple[Store, SimSummary]) -> None:
    store, s = small
    con = store.connect()
    assert s.bad_nodes
    assert sorted(r[0] for r in con.execute("SELECT key FROM sim_planted WHERE kind = 'bad_node'").fetchall()) == s.bad_nodes
    xid_nodes = {r[0] for r in con.execute("SELECT DISTINCT node FROM xid_events").fetchall()}
    assert xid_nodes and xid_nodes <= set(s.bad_nodes)
    assert one(con, "SELECT count(*) FROM xid_events") == s.xid_events
    assert one(con, "SELECT sum(xid_count) FROM gpu_samples") == s.xid_events


def test_net_samples_are_counters(small: tuple[Store, SimSummary]) -> None:
    store, s = small
    con = store.connect()
    assert one(con, "SELECT count(DISTINCT node) FROM net_samples WHERE device = 'eth0'") == s.nodes
    # every 5 minutes, per node and device
    assert one(con, "SELECT count(DISTINCT ts) FROM net_samples") == 2 * 1440 // 5
    assert one(con, """
        SELECT count(*) FROM (
          SELECT rx_bytes_total - lag(rx_bytes_total) OVER w AS d,
                 rx_errors_total - lag(rx_errors_total) OVER w AS e
          FROM net_samples WINDOW w AS (PARTITION BY node, device ORDER BY ts))
        WHERE d < 0 OR e < 0""") == 0
    assert one(con, "SELECT min(rx_bps) FROM net_samples") >= 0


def test_metric_curves_are_complete(small: tuple[Store, SimSummary]) -> None:
    store, s = small
    con = store.connect()
    assert {r[0] for r in con.execute("SELECT DISTINCT metric FROM job_metrics").fetchall()} == {"loss", "accuracy"}
    assert one(con, """
        SELECT count(*) FROM (SELECT job_id, metric, count(*) n, min(step) lo, max(step) hi
                              FROM job_metrics GROUP BY ALL) WHERE lo <> 1 OR hi <> n""") == 0
    assert one(con, """
        SELECT count(*) FROM job_metrics m JOIN jobs j USING (job_id) WHERE j.status IN ('failed', 'queued')""") == 0
    assert s.job_metrics == one(con, "SELECT count(*) FROM job_metrics")


@pytest.mark.slow
def test_second_simulation_is_refused_then_replaced_with_force(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "data")
    first = simulate(store, gpus=16, days=0.25, seed=1, start=START)
    with pytest.raises(InputError, match="already holds a simulation"):
        simulate(store, gpus=16, days=0.25, seed=1, start=START)
    second = simulate(store, gpus=16, days=0.25, seed=2, start=START, force=True)
    con = store.connect()
    assert one(con, "SELECT count(*) FROM jobs") == second.jobs
    assert one(con, "SELECT count(*) FROM gpu_samples") == second.gpu_samples == first.gpu_samples
    assert one(con, "SELECT count(*) FROM sim_runs") == 1
    assert one(con, "SELECT status FROM sim_runs") == "complete"
    logs = {p.relative_to(store.root).as_posix() for p in (store.root / "logs" / "sim").rglob("*.log")}
    assert logs == {r[0] for r in con.execute("SELECT log_path FROM attempts WHERE log_path IS NOT NULL").fetchall()}


@pytest.mark.parametrize("kwargs", [{"gpus": 4}, {"gpus": 0}, {"days": 0}, {"days": -1.0},
                                    {"days": float("nan")}, {"days": 1000}, {"seed": -1}])
def test_bad_arguments(tmp_path: Path, kwargs: dict[str, object]) -> None:
    store = Store.open(tmp_path / "data")
    args: dict[str, object] = {"gpus": 16, "days": 0.1, "seed": 0, **kwargs}
    with pytest.raises(InputError):
        simulate(store, **args)  # type: ignore[arg-type]
    assert store.connect().execute("SELECT count(*) FROM jobs").fetchone() == (0,)


@pytest.mark.slow
def test_deterministic_for_a_seed(tmp_path: Path) -> None:
    def digest(seed: int, name: str) -> list[object]:
        store = Store.open(tmp_path / name)
        simulate(store, gpus=16, days=0.3, seed=seed, start=START)
        con = store.connect()
        return [con.execute(sql).fetchall() for sql in (
            "SELECT * FROM jobs ORDER BY job_id",
            "SELECT * FROM attempts ORDER BY job_id, attempt",
            "SELECT * FROM placements ORDER BY ALL",
            "SELECT sum(value), count(*) FROM job_metrics",
            "SELECT sum(util_gpu), sum(power_w), sum(pcie_rx_bps) FROM gpu_samples",
            "SELECT * FROM xid_events ORDER BY ALL",
        )]
    a, b, c = digest(5, "a"), digest(5, "b"), digest(6, "c")
    assert a == b
    assert a != c


@pytest.mark.slow
def test_log_corpus_prefers_sample_logs_and_falls_back(tmp_path: Path) -> None:
    root = tmp_path / "sample_logs"
    (root / "oom").mkdir(parents=True)
    (root / "oom" / "a.log").write_text("torch.cuda.OutOfMemoryError: CUDA out of memory.\n")
    (root / "index.csv").write_text("file,category,origin,provenance\noom/a.log,gpu_oom,user,test\n")
    corpus = LogCorpus(root, ["gpu_oom", "syntax_error"])
    body, source = corpus.body("gpu_oom", 7)
    assert source == "sample_logs/oom/a.log" and "OutOfMemoryError" in body
    body, source = corpus.body("syntax_error", 0)
    assert source == "builtin:syntax_error" and body == TEMPLATES["syntax_error"]
    # without an index, sample_logs/<category>/*.log are used
    (root / "index.csv").unlink()
    (root / "syntax_error").mkdir()
    (root / "syntax_error" / "x.log").write_text("SyntaxError: invalid syntax\n")
    assert LogCorpus(root, ["syntax_error"]).body("syntax_error", 3)[1] == "sample_logs/syntax_error/x.log"
    # the simulator uses the corpus it is given
    (root / "index.csv").write_text(
        "file,category,origin,provenance\noom/a.log,gpu_oom,user,test\nsyntax_error/x.log,syntax_error,user,test\n"
    )
    store = Store.open(tmp_path / "data")
    simulate(store, gpus=64, days=1, seed=4, start=START, sample_logs=root)
    con = store.connect()
    sources = con.execute("SELECT category, log_source FROM sim_truth").fetchall()
    assert sources
    for category, source in sources:
        if category in ("gpu_oom", "syntax_error"):
            assert source.startswith("sample_logs/")
        elif category in ("crash", "cuda_error"):  # by where the failing frame is
            assert source in (f"builtin:{category}:user_code", f"builtin:{category}:framework")
        else:
            assert source == f"builtin:{category}"


def test_params_are_documented_and_planted_util_calibrated() -> None:
    p = SimParams()
    assert math.isclose(planted_util(p, 16, 2, 2), 43.66)
    assert math.isclose(planted_util(p, 16, 8, 2), 28.56)
    assert planted_util(p, 16, 2, 2) > planted_util(p, 16, 4, 2) > planted_util(p, 16, 8, 2)
    assert math.isclose(p.p_passed + p.p_killed + p.p_failed, 1.0)
    doc = (Path(__file__).parents[2] / "docs" / "simulate.md").read_text()
    for f in dataclasses.fields(SimParams):
        assert f"`{f.name}`" in doc, f"SimParams.{f.name} is not documented in docs/simulate.md"


# --------------------------------------------------------------- planted effects
@pytest.mark.slow
def test_statuses_near_philly(large: tuple[Store, SimSummary]) -> None:
    store, s = large
    con = store.connect()
    rows = dict(con.execute(
        "SELECT status, count(*) FROM jobs WHERE status IN ('passed','killed','failed') GROUP BY 1").fetchall())
    total = sum(rows.values())
    assert total > 800
    assert abs(rows["passed"] / total - s.params.p_passed) < 0.06
    assert abs(rows["killed"] / total - s.params.p_killed) < 0.05
    assert abs(rows["failed"] / total - s.params.p_failed) < 0.05


@pytest.mark.slow
def test_utilization_falls_with_spread(large: tuple[Store, SimSummary]) -> None:
    store, s = large
    con = store.connect()
    # Mean utilization of each multi-GPU attempt from the samples, by spread.
    rows = con.execute("""
        WITH a AS (
            SELECT p.job_id, p.attempt, count(DISTINCT p.node) AS servers, j.requested_gpus AS gpus,
                   avg(g.util_gpu) AS util, count(*) AS n
            FROM placements p JOIN jobs j USING (job_id)
            JOIN gpu_samples g ON g.node = p.node AND g.gpu_index = p.gpu_index
             AND g.ts >= p.start_time AND (p.end_time IS NULL OR g.ts < p.end_time)
            WHERE j.requested_gpus >= 2
            GROUP BY ALL HAVING count(*) >= 30 * j.requested_gpus)
        SELECT log2(servers / greatest(1, gpus // 8)) AS spread, gpus, util FROM a""").fetchall()
    assert len(rows) > 100
    # least squares of (util - base(gpus)) on spread: the planted slope is -7.55 points per doubling
    xs = [r[0] for r in rows]
    ys = [r[2] - s.params.util_base_for(r[1]) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    assert -s.params.util_spread_slope - 3 < slope < -s.params.util_spread_slope + 3
    consolidated = [r[2] for r in rows if r[0] == 0]
    spread3 = [r[2] for r in rows if r[0] >= 2]
    assert len(spread3) >= 10
    assert sum(consolidated) / len(consolidated) - sum(spread3) / len(spread3) > 8


@pytest.mark.slow
def test_most_jobs_converge_early(large: tuple[Store, SimSummary]) -> None:
    store, s = large
    con = store.connect()
    for metric, best, near in (
        ("accuracy", "max(value)", "value >= b.best - 0.001"),
        ("loss", "min(value)", "value <= b.best * 1.001"),
    ):
        frac = con.execute(f"""
            WITH b AS (SELECT job_id, {best} AS best, max(step) AS epochs FROM job_metrics
                       WHERE metric = ? GROUP BY 1),
                 c AS (SELECT m.job_id, min(m.step) AS conv, any_value(b.epochs) AS epochs
                       FROM job_metrics m JOIN b USING (job_id) WHERE m.metric = ? AND {near} GROUP BY 1)
            SELECT avg(CASE WHEN conv <= 0.4 * epochs THEN 1 ELSE 0 END), count(*) FROM c""",  # noqa: S608
            [metric, metric]).fetchone()
        assert frac is not None and frac[1] > 300
        assert abs(frac[0] - s.params.early_converge_share) < 0.06, (metric, frac)
    # the planted convergence epoch is what the curves show
    assert one(con, """
        SELECT count(*) FROM sim_job_truth t JOIN (
            SELECT m.job_id, min(m.step) AS conv FROM job_metrics m
            JOIN (SELECT job_id, max(value) AS best FROM job_metrics WHERE metric = 'accuracy' GROUP BY 1) b
              USING (job_id)
            WHERE m.metric = 'accuracy' AND m.value >= b.best - 0.001 GROUP BY 1) c USING (job_id)
        WHERE t.converged_epoch <> c.conv""") == 0


@pytest.mark.slow
def test_bad_nodes_fail_jobs_that_then_succeed_elsewhere(large: tuple[Store, SimSummary]) -> None:
    store, s = large
    con = store.connect()
    rates = dict(con.execute("""
        WITH an AS (SELECT DISTINCT a.job_id, a.attempt, a.status, p.node IN (
                        SELECT key FROM sim_planted WHERE kind = 'bad_node') AS bad
                    FROM attempts a JOIN placements p USING (job_id, attempt)
                    WHERE a.status IN ('passed', 'failed', 'killed'))
        SELECT bad, avg(CASE WHEN status = 'failed' THEN 1 ELSE 0 END) FROM an GROUP BY bad""").fetchall())
    assert rates[True] > rates[False] + 0.15
    assert one(con, "SELECT count(*) FROM sim_truth WHERE category = 'gpu_hardware' AND node NOT IN "
                    "(SELECT key FROM sim_planted WHERE kind = 'bad_node')") == 0
    # the retry after a node fault never lands on the node that failed it
    assert one(con, """
        SELECT count(*) FROM sim_truth t JOIN placements p
          ON p.job_id = t.job_id AND p.attempt > t.attempt AND p.node = t.node
        WHERE t.node_fault""") == 0
    # most jobs hit by a node fault end up passing, killed or still running
    outcome = dict(con.execute("""
        SELECT j.status = 'failed', count(DISTINCT j.job_id) FROM sim_truth t JOIN jobs j USING (job_id)
        WHERE t.node_fault AND j.status <> 'queued' GROUP BY 1""").fetchall())
    assert outcome.get(False, 0) > outcome.get(True, 0)
    # XIDs on bad nodes show up where the failures are
    assert one(con, "SELECT count(DISTINCT node) FROM xid_events") == len(s.bad_nodes)


@pytest.mark.slow
def test_corrupted_inputs_fail_several_jobs_of_several_users(large: tuple[Store, SimSummary]) -> None:
    store, s = large
    con = store.connect()
    assert len(s.corrupted_inputs) == s.params.corrupted_inputs
    for ds in s.corrupted_inputs:
        jobs, users, ok = con.execute("""
            SELECT count(*), count(DISTINCT "user"),
                   bool_and(j.status IN ('failed', 'queued', 'running'))
            FROM jobs j WHERE list_contains(j.inputs, ?)""", [ds]).fetchone() or (0, 0, False)
        assert jobs >= s.params.corrupted_min_jobs and users >= 2 and ok
        cats = con.execute("""
            SELECT DISTINCT t.category FROM sim_truth t JOIN jobs j USING (job_id)
            WHERE list_contains(j.inputs, ?) AND NOT t.node_fault AND t.planted <> 'transient'""",
                           [ds]).fetchall()
        assert cats == [("incorrect_input",)]
    # only jobs that declare a corrupted input are planted as corrupt_input
    assert one(con, """
        SELECT count(*) FROM sim_truth t JOIN jobs j USING (job_id)
        WHERE t.planted = 'corrupt_input' AND NOT list_contains(j.inputs, t.input)""") == 0


@pytest.mark.slow
def test_user_errors_repeat_identically(large: tuple[Store, SimSummary]) -> None:
    store, _ = large
    con = store.connect()
    rows = con.execute("""
        SELECT t.job_id, list(t.category ORDER BY t.attempt), list(a.log_path ORDER BY t.attempt)
        FROM sim_truth t JOIN attempts a USING (job_id, attempt)
        WHERE t.planted = 'user_repeat' GROUP BY 1 HAVING count(*) >= 2""").fetchall()
    assert len(rows) >= 10
    for _, cats, paths in rows:
        assert len(set(cats)) == 1
        bodies = {"\n".join((store.root / p).read_text().splitlines()[3:-1]) for p in paths}
        assert len(bodies) == 1


@pytest.mark.slow
def test_crashes_follow_the_origin_convention(large: tuple[Store, SimSummary]) -> None:
    """A planted crash / cuda_error fails in the user's frame (origin user) or the framework's
    (origin framework), the same way on every attempt, and its log shows that frame."""
    from gpulens.diagnosis.frames import fault_frame

    store, _ = large
    con = store.connect()
    rows = con.execute("""
        SELECT t.job_id, list(t.origin ORDER BY t.attempt), list(t.log_source ORDER BY t.attempt),
               list(a.log_path ORDER BY t.attempt)
        FROM sim_truth t JOIN attempts a USING (job_id, attempt)
        WHERE t.category IN ('crash', 'cuda_error') AND t.planted IN ('repeat', 'user_repeat')
        GROUP BY 1""").fetchall()
    assert {o for _, origins, _, _ in rows for o in origins} == {"user", "framework"}
    for _, origins, sources, paths in rows:
        assert len(set(origins)) == 1 and len(set(sources)) == 1
        frame = "user_code" if origins[0] == "user" else "framework"
        assert sources[0].endswith(":" + frame)
        assert fault_frame((store.root / paths[0]).read_text()) == frame

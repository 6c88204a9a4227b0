"""One GPU-hour accounting (issue 19): figures that must agree do agree.

On a small simulated (and diagnosed) cluster:

* the goodput waterfall's stages sum to the allocated GPU-hours, which equal
  utilization's and the per-job sums;
* early-stop savings on the busy basis equal the waterfall's post_convergence
  stage (the stated rule: failed or killed attempts are failure cost, not
  savings), failure cost on the busy basis equals its failed_or_killed stage,
  with and without filters;
* the CLI (text and --json), the dashboard (its data layer and the pages' KPI
  tiles) and the cluster exporter show the same figures to the rounding shown;
* no analysis, page, exporter or the demo computes GPU-hours outside
  gpulens/analysis/accounting.py (a static check over the source).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from gpulens import analysis
from gpulens.analysis import Filters
from gpulens.analysis import accounting as acc
from gpulens.cli.main import cli
from gpulens.store import Store
from tests.analysis.builders import insert_rows, write_gpu_samples
from tests.conftest import require_module

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "gpulens"
APP = str(PKG / "dashboard" / "app.py")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """16 GPUs for a day, diagnosed (so failures rows take part in what counts as lost)."""
    from gpulens.diagnosis import jobs
    from gpulens.ingest.simulate import simulate

    store = Store.open(tmp_path_factory.mktemp("acct") / "data")
    simulate(store, gpus=16, days=1, seed=5)
    jobs.diagnose_all(store)
    return store


def _stages(con: Any, f: Filters | None = None, **kw: Any) -> dict[str, float]:
    g = analysis.goodput(con, f, **kw)
    return {str(s): float(h) for s, h in zip(g["stage"], g["gpu_hours"], strict=True)}


def _is_stage(con: Any, f: Filters | None, stage: str, figures: pd.Series) -> None:
    """The figures sum to the waterfall's ``stage`` under the same filters."""
    assert float(figures.sum()) == pytest.approx(_stages(con, f)[stage], rel=1e-9, abs=1e-9), (
        f, stage)


def _windows(store: Store) -> list[Filters | None]:
    con = store.connect()
    try:
        lo, hi = con.execute("SELECT min(start_time), max(end_time) FROM attempts").fetchone()
        vc = con.execute("SELECT vc FROM jobs GROUP BY vc ORDER BY count(*) DESC LIMIT 1").fetchone()
    finally:
        con.close()
    mid = lo + (hi - lo) / 2
    return [None, Filters(start=mid + timedelta(seconds=30)), Filters(end=mid),
            Filters(vcs=(str(vc[0]),))]


# ------------------------------------------------------------------ analyses
def test_waterfall_partitions_the_allocated_gpu_hours(sim: Store) -> None:
    con = sim.connect()
    for f in _windows(sim):
        g = _stages(con, f)
        parts = g["idle"] + g["failed_or_killed"] + g["post_convergence"] + g["effective"]
        assert g["allocated"] == pytest.approx(parts, rel=1e-9), f
        assert min(g.values()) >= 0, (f, g)
        util = analysis.utilization(con, f).iloc[0]
        assert g["allocated"] == pytest.approx(float(util["allocated_gpu_hours"]), rel=1e-9)
        assert g["idle"] == pytest.approx(
            float(util["allocated_gpu_hours"] - util["busy_gpu_hours"]), rel=1e-9)
        jobs = analysis.job_utilization(con, f)
        assert float(jobs["allocated_gpu_hours"].sum()) == pytest.approx(g["allocated"], rel=1e-9)
        assert float(jobs["busy_gpu_hours"].sum()) == pytest.approx(
            float(util["busy_gpu_hours"]), rel=1e-9)
    assert _stages(con)["failed_or_killed"] > 0 and _stages(con)["post_convergence"] > 0


def test_early_stop_busy_savings_are_the_post_convergence_stage(sim: Store) -> None:
    con = sim.connect()
    for f in _windows(sim):
        _is_stage(con, f, "post_convergence", analysis.early_stop(con, f)["saveable_busy_gpu_hours"])
        summary = analysis.early_stop_summary(con, f)
        _is_stage(con, f, "post_convergence", pd.Series([summary.saveable_busy_gpu_hours]))
        # allocated savings are at least the busy ones, and both name their basis
        assert summary.saveable_allocated_gpu_hours >= summary.saveable_busy_gpu_hours
        online = analysis.online_stop(con, f)
        assert (online["saved_busy_gpu_hours"] <= online["saved_allocated_gpu_hours"] + 1e-12).all()
    # the stated rule matters: counting the lost attempts too would give more than the stage
    es = analysis.early_stop(con)
    all_attempts = float((es["busy_gpu_hours"] * (1 - es["fraction_epochs"])).sum())
    assert all_attempts > _stages(con)["post_convergence"] + 0.01
    # and a job whose every attempt was lost saves nothing
    lost = {j for (j,) in con.execute(
        "SELECT job_id FROM attempts GROUP BY job_id HAVING bool_and(status IN ('failed', 'killed'))"
    ).fetchall()}
    only_lost = es[es["job_id"].isin(lost)]
    assert not only_lost.empty, "no job with a curve lost all its attempts"
    assert (only_lost["saveable_allocated_gpu_hours"] == 0).all()


def test_failure_cost_busy_is_the_failed_or_killed_stage(sim: Store) -> None:
    con = sim.connect()
    for f in _windows(sim):
        cost = analysis.failure_cost(con, f)
        _is_stage(con, f, "failed_or_killed", cost["busy_gpu_hours"])
        assert (cost["busy_gpu_hours"] <= cost["allocated_gpu_hours"] + 1e-12).all()
    cost = analysis.failure_cost(con)
    diagnosed = con.execute("SELECT count(*) FROM failures").fetchone()
    assert diagnosed and diagnosed[0] > 0
    assert int(cost["failures"].sum()) >= diagnosed[0]  # every diagnosed attempt, plus the killed


def test_by_vc_waterfalls_add_up_to_the_cluster(sim: Store) -> None:
    con = sim.connect()
    whole = _stages(con)
    by_vc = analysis.goodput(con, by="vc").groupby("stage")["gpu_hours"].sum()
    for stage, hours in whole.items():
        assert float(by_vc[stage]) == pytest.approx(hours, rel=1e-9, abs=1e-9)


# ------------------------------------------------------------------------ CLI
def _cli(store: Store, *args: str) -> str:
    res = CliRunner(env={"COLUMNS": "250"}).invoke(
        cli, ["--data-dir", str(store.root), "--quiet", "analyze", *args])
    assert res.exit_code == 0, res.output
    return res.output


def test_cli_shows_the_same_figures(sim: Store) -> None:
    con = sim.connect()
    g = _stages(con)
    cost = analysis.failure_cost(con)
    summary = analysis.early_stop_summary(con)

    rows = json.loads(_cli(sim, "goodput", "--json"))
    assert {r["stage"]: r["gpu_hours"] for r in rows} == pytest.approx(g)
    assert {r["stage"]: r["basis"] for r in rows} == acc.STAGE_BASIS
    text = _cli(sim, "goodput")
    for hours in g.values():
        assert f"{hours:,.2f}" in text

    rows = json.loads(_cli(sim, "failure-cost", "--json"))
    assert {"allocated_gpu_hours", "busy_gpu_hours"} <= set(rows[0])
    assert "gpu_hours" not in rows[0]
    assert sum(r["busy_gpu_hours"] for r in rows) == pytest.approx(g["failed_or_killed"])
    text = _cli(sim, "failure-cost")
    assert f"{cost['allocated_gpu_hours'].sum():,.2f}" in text
    assert f"{g['failed_or_killed']:,.2f} of them busy" in text

    got = json.loads(_cli(sim, "early-stop", "--json"))
    assert got["summary"]["saveable_busy_gpu_hours"] == pytest.approx(g["post_convergence"])
    assert got["summary"]["saveable_allocated_gpu_hours"] == pytest.approx(
        summary.saveable_allocated_gpu_hours)
    assert "saveable_gpu_hours" not in got["summary"]
    text = _cli(sim, "early-stop")
    assert f"{summary.saveable_allocated_gpu_hours:,.1f} allocated GPU-hours" in " ".join(text.split())
    assert f"{g['post_convergence']:,.1f} busy GPU-hours" in " ".join(text.split())

    got = json.loads(_cli(sim, "locality", "--json", "--boot", "10"))
    assert "lost_busy_gpu_hours" in got and "lost_gpu_hours" not in got


# ------------------------------------------------------------------ dashboard
@pytest.fixture
def dashboard_env(sim: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    require_module("streamlit")
    monkeypatch.delenv("GPULENS_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GPULENS_DATA_DIR", str(sim.root))
    yield


def test_dashboard_shows_the_same_figures(sim: Store, dashboard_env: None) -> None:
    from streamlit.testing.v1 import AppTest

    from gpulens.dashboard import data, ui

    con = sim.connect()
    g = _stages(con)
    cost = analysis.failure_cost(con)
    # the data layer hands the pages exactly the analyses' figures
    waterfall = data.call(analysis.goodput, filters=data.FilterState())
    assert dict(zip(waterfall["stage"], waterfall["gpu_hours"], strict=True)) == pytest.approx(g)
    dash_cost = data.call(analysis.failure_cost, filters=data.FilterState())
    pd.testing.assert_frame_equal(dash_cost, cost)
    dash_summary = data.call(analysis.early_stop_summary, filters=data.FilterState(),
                             tolerance=0.001)
    assert dash_summary.saveable_busy_gpu_hours == pytest.approx(g["post_convergence"])

    # and the pages' tiles show them, on both bases, rounded as ui.fmt_hours rounds
    def tiles(page: str) -> dict[str, str]:
        at = AppTest.from_file(APP, default_timeout=180)
        at.switch_page(f"views/{page}.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return {m.label: m.value for m in at.metric}

    es = tiles("early_stop")
    assert es["Saveable in hindsight, busy GPU-h"] == ui.fmt_hours(g["post_convergence"])
    assert es["Saveable in hindsight, allocated GPU-h"] == ui.fmt_hours(
        dash_summary.saveable_allocated_gpu_hours)
    fail = tiles("failures")
    assert fail["Busy GPU-h lost"] == ui.fmt_hours(g["failed_or_killed"])
    assert fail["Allocated GPU-h lost"] == ui.fmt_hours(cost["allocated_gpu_hours"].sum())
    over = tiles("overview")
    assert over["Allocated GPU-hours"] == ui.fmt_hours(g["allocated"])
    assert over["Busy GPU-hours"] == ui.fmt_hours(g["allocated"] - g["idle"])


# ------------------------------------------------------------------- exporter
def test_exporter_shows_the_same_figures(sim: Store) -> None:
    from gpulens.config import ExporterConfig
    from gpulens.exporters.cluster import ClusterCollector

    con = sim.connect()
    newest = con.execute(
        "SELECT max(greatest(coalesce(end_time, start_time), start_time)) FROM attempts"
    ).fetchone()[0]
    for days in (0.0, 0.5):
        registry = CollectorRegistry(auto_describe=False)
        ClusterCollector(lambda: sim, ExporterConfig(window_days=days, top_n=50),
                         registry=registry, now=lambda: newest)
        f = Filters(start=newest - timedelta(days=days), now=newest) if days else None
        g = _stages(con, f)
        cost = analysis.failure_cost(con, f)
        v = registry.get_sample_value
        for stage, hours in g.items():
            labels = {"stage": stage, "basis": acc.STAGE_BASIS[stage]}
            assert v("gpulens_cluster_goodput_gpu_hours", labels) == pytest.approx(
                hours, rel=1e-9, abs=1e-9), (days, stage)
        for basis, stage in (("busy", "failed_or_killed"), ("allocated", None)):
            exported = sum(s.value for m in registry.collect() for s in m.samples
                           if s.name == f"gpulens_cluster_failure_{basis}_gpu_hours")
            expected = g[stage] if stage else float(cost["allocated_gpu_hours"].sum())
            assert exported == pytest.approx(expected, rel=1e-9, abs=1e-9), (days, basis)


# ----------------------------------------------------------- static check
#: where GPU-hour figures are computed or shown
SCOPE = sorted({*PKG.glob("analysis/*.py"), *PKG.glob("dashboard/**/*.py"),
                PKG / "exporters" / "cluster.py", PKG / "cli" / "demo.py",
                PKG / "validator" / "record.py"}
               - {PKG / "analysis" / "accounting.py"})
#: minutes <-> hours <-> days conversions (Python or SQL text)
_CONVERSION = re.compile(r"(?<![\w.])(?:[*/]\s*(?:60|3600|1440)(?:\.0*)?(?![\w.])|"
                         r"(?:60|3600|1440)(?:\.0*)?\s*[*/](?!/))")
#: arithmetic on the base's GPU-minute columns (SQL text)
_MINUTES = re.compile(r"\b(?:alloc|busy)_min\b\)?\s*[-+*/]|[-+*/]\s*[\w.]*\b(?:alloc|busy)_min\b")


def gpu_hour_arithmetic(path: Path) -> list[str]:
    """Lines of ``path`` that compute GPU-hours themselves instead of calling accounting."""
    src = path.read_text()
    found = [f"{path.name}:{i}: {line.strip()}" for i, line in enumerate(src.splitlines(), 1)
             if _CONVERSION.search(line) or _MINUTES.search(line)]
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub | ast.Mult | ast.Div):
            for side in (node.left, node.right):
                text = ast.get_source_segment(src, side) or ""
                if not isinstance(side, ast.Call) and re.search(r"gpu_hours|_min\b", text):
                    found.append(f"{path.name}:{node.lineno}: {ast.get_source_segment(src, node)}")
                    break
    return found


def test_no_gpu_hour_arithmetic_outside_accounting() -> None:
    assert len(SCOPE) > 20
    offenders = [hit for path in SCOPE for hit in gpu_hour_arithmetic(path)]
    assert not offenders, "\n".join(offenders)


def test_the_static_check_catches_gpu_hour_arithmetic(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        'SQL = "SELECT sum(alloc_min) / 60.0 AS allocated_gpu_hours FROM x"\n'
        'def f(df):\n'
        '    return df["allocated_gpu_hours"] * 0.5\n'
        'OTHER = "SELECT busy_min * (1 - fraction) FROM y"\n'
    )
    assert len(gpu_hour_arithmetic(bad)) == 3
    good = tmp_path / "good.py"
    good.write_text('from gpulens.analysis import accounting as acc\n'
                    'SQL = f"SELECT {acc.sum_hours_sql(\'alloc_min\')} FROM x"\n'
                    'SHARE = 100 * acc.share(1.0, 2.0)\n')
    assert gpu_hour_arithmetic(good) == []


def test_every_gpu_hour_field_names_its_basis(sim: Store) -> None:
    """Column names of every analysis: a GPU-hour field starts with (or names) a basis."""
    con = sim.connect()
    frames = {
        "job_utilization": analysis.job_utilization(con),
        "utilization": analysis.utilization(con),
        "early_stop": analysis.early_stop(con),
        "online_stop": analysis.online_stop(con),
        "failure_cost": analysis.failure_cost(con),
        "locality_loss": analysis.locality_loss(con),
    }
    for name, df in frames.items():
        for col in df.columns:
            if str(col).endswith("gpu_hours"):
                assert any(b in str(col).split("_") for b in acc.BASES), (name, col)
    # the waterfall's one figure column comes with a basis per stage
    assert set(analysis.goodput(con)["basis"]) == set(acc.STAGE_BASIS.values())
    summary = analysis.early_stop_summary(con)
    assert "allocated GPU-hours" in summary.sentence and "busy GPU-hours" in summary.sentence


def _t(h: int, m: int, s: int = 0) -> datetime:
    return datetime(2024, 1, 1, h, m, s)


def _worked_example(store: Store) -> Store:
    """The cluster of docs/accounting.md's worked example."""
    insert_rows(store, "jobs", ["job_id", "user", "vc", "status", "requested_gpus", "source"], [
        ("A", "alice", "vc1", "passed", 2, "test"), ("B", "bob", "vc2", "passed", 2, "test"),
        ("C", "carol", "vc1", "killed", 1, "test")])
    insert_rows(store, "attempts", ["job_id", "attempt", "start_time", "end_time", "status"], [
        ("A", 0, _t(10, 0, 30), _t(10, 3), "passed"), ("B", 0, _t(10, 0), _t(10, 1, 30), "failed"),
        ("B", 1, _t(10, 2, 10), _t(10, 4), "passed"), ("C", 0, _t(10, 0), _t(10, 2), "killed")])
    insert_rows(store, "placements", ["job_id", "attempt", "node", "gpu_index"], [
        ("A", 0, "n1", 0), ("A", 0, "n1", 1), ("B", 0, "n2", 0), ("B", 1, "n2", 0),
        ("B", 1, "n3", 0), ("C", 0, "n4", 0)])
    write_gpu_samples(store, [
        (_t(10, 0), "n1", 0, 50.0), (_t(10, 1), "n1", 0, 60.0),
        (_t(10, 0), "n1", 1, 20.0), (_t(10, 1), "n1", 1, 20.0), (_t(10, 2), "n1", 1, 20.0),
        (_t(10, 0), "n2", 0, 100.0), (_t(10, 1), "n2", 0, 100.0),
        (_t(10, 2), "n2", 0, 40.0), (_t(10, 3), "n2", 0, 40.0),
        (_t(10, 2), "n3", 0, 80.0), (_t(10, 3), "n3", 0, float("nan"))])
    insert_rows(store, "job_metrics", ["job_id", "step", "metric", "value"],
                [("A", i + 1, "accuracy", v) for i, v in enumerate([0.5, 0.8, 0.9, 0.8995, 0.9])])
    insert_rows(store, "failures", ["job_id", "attempt", "category", "origin"],
                [("B", 0, "gpu_oom", "user")])
    return store


def test_accounting_worked_example_in_the_docs(store: Store) -> None:
    """docs/accounting.md's worked example table is what the analyses compute."""
    doc = (ROOT / "docs" / "accounting.md").read_text()
    table = doc.split("<!-- worked-example", 1)[1].split("\n\n", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")]
            for line in table.splitlines()[3:] if line.startswith("|")]
    assert [r[0] for r in rows] == list(analysis.STAGES)
    con = _worked_example(store).connect()
    g = analysis.goodput(con).set_index("stage")
    for stage, basis, minutes, hours in rows:
        assert g.loc[stage, "basis"] == basis
        assert g.loc[stage, "gpu_hours"] == pytest.approx(acc.hours(float(minutes)))
        assert f"{g.loc[stage, 'gpu_hours']:.4f}" == hours
    cost = analysis.failure_cost(con)
    assert f"{cost['allocated_gpu_hours'].sum():.4f} allocated" in doc
    assert cost["busy_gpu_hours"].sum() == pytest.approx(g.loc["failed_or_killed", "gpu_hours"])
    es = analysis.early_stop(con).set_index("job_id")
    assert f"{es.loc['A', 'saveable_allocated_gpu_hours']:.2f} allocated" in doc
    assert es.loc["A", "saveable_busy_gpu_hours"] == pytest.approx(
        g.loc["post_convergence", "gpu_hours"])
    assert f"{es.loc['A', 'saveable_busy_gpu_hours']:.4f} busy" in doc

"""AppTest per page: no exception, the expected elements, filters change the numbers."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from gpulens.store import Store
from tests.conftest import require_module
from tests.dashboard.conftest import APP, PAGES
from tests.dashboard.smallstore import build_small_store

require_module("streamlit")

from streamlit.testing.v1 import AppTest  # noqa: E402

pytestmark = pytest.mark.slow

UseStore = Callable[[Store], None]


def run_page(page: str, query: dict[str, str] | None = None, at: AppTest | None = None) -> AppTest:
    if at is None:
        at = AppTest.from_file(APP, default_timeout=180)
    at.switch_page(f"views/{page}.py")
    for key, value in (query or {}).items():
        at.query_params[key] = value
    at.run()
    assert_clean(at)
    return at


def assert_clean(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    missing = [i.value for i in at.info if "not available yet" in i.value]
    assert not missing, missing


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def downloads(at: AppTest) -> list[str]:
    return [b.label for b in at.get("download_button")]


def charts(at: AppTest) -> int:
    return len(at.get("vega_lite_chart"))


def chart_specs(at: AppTest) -> list[dict[str, Any]]:
    return [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]


def find_chart(at: AppTest, y_field: str, x_field: str) -> dict[str, Any]:
    """The chart (or layered chart) whose first view plots ``x_field`` against ``y_field``."""
    for spec in chart_specs(at):
        view = spec["layer"][0] if "layer" in spec else spec
        enc = view.get("encoding", {})
        if enc.get("y", {}).get("field") == y_field and enc.get("x", {}).get("field") == x_field:
            return spec
    raise AssertionError(f"no chart of {x_field} by {y_field}")


def assert_sized_per_category(spec: dict[str, Any]) -> list[str]:
    """One ROW_PX row per category, every label drawn; returns the categories in order."""
    from gpulens.dashboard.charts import ROW_PX

    view = spec["layer"][0] if "layer" in spec else spec
    y = view["encoding"]["y"]
    order = list(y["sort"])
    assert spec["height"] == ROW_PX * max(len(order), 2), (spec["height"], order)
    assert spec["autosize"]["type"] == "fit-x"  # the height is the plot's, not squeezed
    assert y["axis"]["labelOverlap"] is False
    return order


def table_by_column(at: AppTest, column: str) -> Any:
    for df in at.dataframe:
        if column in df.value.columns:
            return df
    raise AssertionError(f"no table with a {column} column")


def column_configs(element: Any) -> dict[str, Any]:
    return dict(json.loads(element.proto.columns or "{}"))


def csv_file_id(df: Any, file_name: str) -> str:
    """The id Streamlit gives a CSV download of ``df`` (a hash of its bytes and name)."""
    from streamlit.runtime.memory_media_file_storage import _calculate_file_id

    return str(_calculate_file_id(df.to_csv(index=False).encode("utf-8"), "text/csv", file_name))


def set_filter(at: AppTest, key: str, value: Any) -> AppTest:
    """Set a sidebar filter widget and rerun."""
    widget: Any
    if key == "gl_range":
        widget = at.sidebar.selectbox(key=key)
    else:
        widget = at.sidebar.multiselect(key=key)
        assert set(value) <= set(widget.options), (value, widget.options)
    widget.set_value(value)
    at.run()
    assert_clean(at)
    return at


def some_vc(store: Store) -> str:
    from gpulens import analysis

    con = store.connect()
    try:
        jobs = analysis.job_utilization(con)
    finally:
        con.close()
    counts = jobs["vc"].value_counts()
    return str(counts.index[0])


def pick_vc(at: AppTest, store: Store) -> AppTest:
    return set_filter(at, "gl_vcs", [some_vc(store)])


# ---------------------------------------------------------------- empty state
@pytest.mark.parametrize("page", [*PAGES, "job"])
def test_empty_store_shows_empty_state(page: str, store: Store, use_store: UseStore) -> None:
    use_store(store)
    at = run_page(page, {"job": "job-1"} if page == "job" else None)
    texts = " ".join(i.value for i in at.info)
    assert "No data yet" in texts and "gpulens demo" in texts
    assert not at.metric
    assert charts(at) == 0


def test_missing_data_dir_is_empty_not_an_error(tmp_path: Path, use_store: UseStore) -> None:
    use_store(Store(tmp_path / "nothing-here"))
    at = run_page("overview")
    assert any("No data yet" in i.value for i in at.info)


# ------------------------------------------------------------------- overview
def test_overview(dash_store: Store, use_store: UseStore) -> None:
    use_store(dash_store)
    at = run_page("overview")
    m = metrics(at)
    for label in ("Allocated GPU-hours", "Busy GPU-hours", "Mean GPU utilization", "Jobs",
                  "Jobs failed"):
        assert label in m and m[label] != "—", (label, m)
    assert charts(at) >= 2  # utilization over time + goodput waterfall
    assert "Download goodput (CSV)" in downloads(at)
    assert "Download utilization over time (CSV)" in downloads(at)
    # a vc filter changes the numbers
    before = m["Allocated GPU-hours"], m["Jobs"]
    pick_vc(at, dash_store)
    after = metrics(at)
    assert (after["Allocated GPU-hours"], after["Jobs"]) != before
    # a time range changes them too, and brings a comparison with the previous period
    at.sidebar.multiselect(key="gl_vcs").set_value([])
    set_filter(at, "gl_range", "Last hour")
    hour = metrics(at)
    assert hour["Allocated GPU-hours"] != before[0]
    assert any("previous period" in c.value for c in at.caption)


def test_overview_tables_read_for_people_csv_stays_raw(dash_store: Store,
                                                       use_store: UseStore) -> None:
    use_store(dash_store)
    at = run_page("overview")
    by_vc = table_by_column(at, "vc")
    raw = by_vc.value
    # the DataFrame keeps the analysis' names and full precision ...
    assert {"allocated_gpu_hours", "busy_gpu_hours", "mean_util"} <= set(raw.columns)
    assert (raw["allocated_gpu_hours"] != raw["allocated_gpu_hours"].round(1)).any()
    # ... the display shows people's headers and formats ...
    cfg = column_configs(by_vc)
    assert cfg["allocated_gpu_hours"]["label"] == "Allocated GPU-hours"
    assert cfg["allocated_gpu_hours"]["type_config"]["format"] == "%,.1f"
    assert cfg["busy_gpu_hours"]["label"] == "Busy GPU-hours"
    assert cfg["mean_util"]["label"] == "Mean utilization"
    assert cfg["vc"]["label"] == "VC" and cfg["jobs"]["label"] == "Jobs"
    # ... and the CSV download is exactly the raw table (same bytes, same hash)
    button = [b for b in at.get("download_button")
              if b.proto.label == "Download utilization by vc (CSV)"][0]
    assert button.proto.url.rsplit("/", 1)[-1].split(".")[0] == csv_file_id(
        raw, "gpulens-utilization-by-vc.csv")


def test_overview_waterfall_shows_all_five_stages(dash_store: Store, use_store: UseStore) -> None:
    from gpulens.dashboard.charts import STAGE_LABELS

    use_store(dash_store)
    at = run_page("overview")
    spec = [s for s in chart_specs(at) if "layer" in s
            and s["layer"][0]["encoding"].get("x", {}).get("field") == "stage"][0]
    x = spec["layer"][0]["encoding"]["x"]
    assert x["sort"] == list(STAGE_LABELS.values())
    assert x["axis"]["labelOverlap"] is False


class _FakePrometheus(BaseHTTPRequestHandler):
    body: bytes = b""

    def do_GET(self) -> None:
        if self.path != "/api/v1/alerts":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def fake_prometheus() -> Iterator[str]:
    alerts = {
        "status": "success",
        "data": {"alerts": [
            {"labels": {"alertname": "GpulensGpuXidErrors", "severity": "critical",
                        "node": "node-d"},
             "annotations": {"summary": "XID 79 on node-d"}, "state": "firing",
             "activeAt": "2026-11-20T03:20:00Z"},
            {"labels": {"alertname": "GpulensPending"}, "annotations": {}, "state": "pending"},
        ]},
    }
    handler = type("H", (_FakePrometheus,), {"body": json.dumps(alerts).encode()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_overview_shows_firing_alerts(hand_store: Store, use_store: UseStore,
                                      fake_prometheus: str,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    use_store(hand_store)
    monkeypatch.setenv("GPULENS_DASHBOARD_PROMETHEUS_URL", fake_prometheus)
    at = AppTest.from_file(APP, default_timeout=180)
    at.switch_page("views/overview.py")
    at.run()
    assert not at.exception
    assert [e.value for e in at.error] == ["1 alert(s) firing."]
    tables = [df.value for df in at.dataframe]
    assert any("GpulensGpuXidErrors" in set(t.get("alert", [])) for t in tables)


def test_overview_prometheus_unreachable(hand_store: Store, use_store: UseStore,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    use_store(hand_store)
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("GPULENS_DASHBOARD_PROMETHEUS_URL", f"http://127.0.0.1:{port}")
    at = run_page("overview")
    assert any("unreachable" in w.value for w in at.warning)
    assert "Allocated GPU-hours" in metrics(at)  # the rest of the page still renders


# ----------------------------------------------------------------------- jobs
def test_jobs_table_search_and_filters(dash_store: Store, use_store: UseStore) -> None:
    use_store(dash_store)
    at = run_page("jobs")
    table = at.dataframe[0].value
    assert len(table) > 0
    for col in ("job_id", "user", "vc", "status", "gpus", "servers", "mean_util",
                "failure_category"):
        assert col in table.columns
    assert "Download jobs (CSV)" in downloads(at)
    assert int(metrics(at)["Jobs"].replace(",", "")) == len(table)
    n_all = len(table)
    pick_vc(at, dash_store)
    n_vc = int(metrics(at)["Jobs"].replace(",", ""))
    assert 0 < n_vc < n_all
    at.text_input(key="jobs_search").input("no-such-job-anywhere")
    at.run()
    assert_clean(at)
    assert metrics(at)["Jobs"] == "0"
    assert any("No job matches" in i.value for i in at.info)


def test_jobs_status_filter(hand_store: Store, use_store: UseStore) -> None:
    use_store(hand_store)
    at = run_page("jobs")
    at.multiselect(key="jobs_status").set_value(["failed"])
    at.run()
    assert_clean(at)
    shown = at.dataframe[0].value
    assert set(shown["status"]) == {"failed"} and len(shown) == 3


def test_job_page(dash_store: Store, use_store: UseStore) -> None:
    use_store(dash_store)
    jobs = run_page("jobs").dataframe[0].value
    multi = jobs[jobs["gpus"] > 1]
    job_id = str((multi if len(multi) else jobs).iloc[0]["job_id"])
    at = run_page("job", {"job": job_id})
    m = metrics(at)
    assert m["User"] == str(jobs.set_index("job_id").loc[job_id, "user"])
    assert charts(at) >= 1  # the per-GPU heatmap
    assert "Download placement (CSV)" in downloads(at)
    # placement: one row per attempt and node, its GPUs as ranges
    placement = table_by_column(at, "gpu_indices").value
    assert placement["gpus"].sum() >= int(m["GPUs"])
    assert len(placement) == len(placement[["attempt", "node"]].drop_duplicates())


def test_job_page_diagnosis_and_curve(hand_store: Store, use_store: UseStore) -> None:
    use_store(hand_store)
    at = run_page("job", {"job": "job-006"})
    assert metrics(at)["Attempts"] == "2"
    assert any("incorrect_input" in md.value for md in at.markdown)
    assert any("image file is truncated" in c.value for c in at.code)
    # the whole-log story and the indicator line in its context, numbered as in the log
    assert any("OSError: image file is truncated" in md.value and "(line 5)" in md.value for md in at.markdown)
    assert any("> 5 | OSError: image file is truncated" in c.value and "  2 | Traceback" in c.value for c in at.code)
    at = run_page("job", {"job": "job-001"})
    assert charts(at) >= 2  # heatmap + training curve with its convergence rule
    assert any("Converged" in c.value for c in at.caption)


def test_job_page_unknown_job(hand_store: Store, use_store: UseStore) -> None:
    use_store(hand_store)
    at = run_page("job", {"job": "no-such-job"})
    assert any("No job 'no-such-job'" in w.value for w in at.warning)


# ------------------------------------------------------------------- locality
def test_locality(dash_store: Store, use_store: UseStore) -> None:
    use_store(dash_store)
    at = run_page("locality")
    assert charts(at) >= 1
    assert "Download locality (CSV)" in downloads(at)
    m = metrics(at)
    assert "Busy GPU-hours lost to spreading" in m
    before = m["Spread jobs"]
    pick_vc(at, dash_store)
    after = metrics(at).get("Spread jobs")
    assert after != before


# ------------------------------------------------------------------ early stop
def test_early_stop(dash_store: Store, use_store: UseStore) -> None:
    use_store(dash_store)
    at = run_page("early_stop")
    m = metrics(at)
    for label in ("Jobs with a curve", "Epochs after convergence",
                  "Saveable in hindsight, allocated GPU-h", "Saveable in hindsight, busy GPU-h",
                  "Online rule saves, allocated GPU-h", "Online rule saves, busy GPU-h"):
        assert label in m, m
    assert charts(at) >= 2  # histogram + online vs hindsight
    assert "Download early stop per job (CSV)" in downloads(at)
    before = m["Jobs with a curve"]
    pick_vc(at, dash_store)
    assert metrics(at)["Jobs with a curve"] != before


# -------------------------------------------------------------------- failures
def test_failures_page_and_log_drilldown(hand_store: Store, use_store: UseStore) -> None:
    use_store(hand_store)
    at = run_page("failures")
    m = metrics(at)
    assert m["Failed or killed attempts"] == "5"  # 4 failed attempts and the killed job-005
    assert charts(at) >= 3
    assert "Download failure cost (CSV)" in downloads(at)
    # the costliest failed job is shown by default, its fatal region highlighted
    logs = [h.value for h in at.get("html") if "gl-fatal" in h.value]
    assert len(logs) == 1
    highlighted = re.findall(r'<div class="gl-fatal"[^>]*>(.*?)</div>', logs[0])
    assert any("image file is truncated" in seg or "CUDA out of memory" in seg
               for seg in highlighted)
    assert not any("progress line" in seg for seg in highlighted)
    # filters change the numbers
    set_filter(at, "gl_users", ["alice"])
    assert metrics(at)["Failed or killed attempts"] == "1"


def test_failures_on_simulated_store(dash_store: Store, use_store: UseStore) -> None:
    use_store(dash_store)
    at = run_page("failures")
    assert "Failed or killed attempts" in metrics(at)

    # GPU-hours lost: one 28-px row per category, every label, largest first
    cost = table_by_column(at, "origin").value
    order = assert_sized_per_category(find_chart(at, "category", "allocated_gpu_hours"))
    totals = cost.groupby("category")["allocated_gpu_hours"].sum().reset_index().sort_values(
        ["allocated_gpu_hours", "category"], ascending=[False, True])
    assert order == list(totals["category"])
    assert len(order) >= 4  # enough categories for the sizing to matter
    cfg = column_configs(table_by_column(at, "origin"))
    assert cfg["allocated_gpu_hours"]["label"] == "Allocated GPU-hours"
    assert cfg["busy_gpu_hours"]["label"] == "Busy GPU-hours"
    assert cfg["failures"]["label"] == "Failed or killed attempts"

    # runtime to failure: same sizing, categories by median runtime, job counts that add up
    runtime = find_chart(at, "label", "hours")
    labels = assert_sized_per_category(runtime)
    counts = [int(re.findall(r"\((\d+)\)$", label)[0]) for label in labels]
    failed = table_by_column(at, "failure_category").value
    assert sum(counts) == len(failed.dropna(subset=["end_time"]))


def test_failure_charts_grow_with_their_categories(hand_store: Store, dash_store: Store,
                                                   use_store: UseStore) -> None:
    heights = {}
    for name, store in (("hand", hand_store), ("sim", dash_store)):
        use_store(store)
        at = run_page("failures")
        spec = find_chart(at, "category", "allocated_gpu_hours")
        heights[name] = (len(assert_sized_per_category(spec)), spec["height"])
    (n_hand, h_hand), (n_sim, h_sim) = heights["hand"], heights["sim"]
    assert n_hand != n_sim
    assert (h_sim - h_hand) * (n_sim - n_hand) > 0  # more categories, taller chart


# ------------------------------------------------------------- inputs & nodes
def test_inputs_nodes_read_only(hand_store: Store, use_store: UseStore) -> None:
    use_store(hand_store)
    at = run_page("inputs_nodes")
    tables = {tuple(df.value.columns)[:2]: df.value for df in at.dataframe}
    assert any("/data/shared/imagenet-bad" in set(t.get("input", [])) for t in tables.values())
    assert any("node-d" in set(t.get("node", [])) for t in tables.values())
    assert any("operator_token" in c.value for c in at.caption)
    assert not [t for t in at.text_input if t.key == "op_token"]
    assert charts(at) >= 2  # anomaly heatmap + timeline of the top node
    assert "Download blacklist (CSV)" in downloads(at)
    # flagged nodes are listed with their reason; the evidence JSON stays in the CSV only
    assert any("**node-d** (confidence 0.999)" in md.value for md in at.markdown)
    # and explained: rates vs the cluster's, the blamed jobs, the hardware signals with their times
    assert any(e.label == "Why node-d" for e in at.expander)
    signals = table_by_column(at, "detail")
    assert list(signals.value["detail"]) == ["XID 79 (fell off the bus) on GPU 3"]
    assert list(table_by_column(at, "why").value["job_id"]) == ["job-x"]
    assert set(table_by_column(at, "measure").value.columns) >= {"node", "cluster"}
    flagged = table_by_column(at, "flagged_at")
    assert "evidence" in flagged.value.columns
    assert column_configs(flagged)["evidence"] == {"hidden": True}
    heat = find_chart(at, "node", "hour")
    nodes = list(heat["encoding"]["y"]["sort"])
    assert heat["height"] == 20 * max(len(nodes), 2)


def test_inputs_nodes_operator_changes(tmp_path: Path, use_store: UseStore,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(tmp_path / "op")
    build_small_store(store)
    use_store(store)
    monkeypatch.setenv("GPULENS_DASHBOARD_OPERATOR_TOKEN", "s3cret")
    at = run_page("inputs_nodes")
    at.text_input(key="op_token").input("wrong")
    at.run()
    assert any("Wrong operator token" in w.value for w in at.warning)
    assert not [b for b in at.button if b.label == "Apply"]
    at.text_input(key="op_token").input("s3cret")
    at.run()
    at.text_input(key="op_input").input("/data/other-bad-set")
    at.text_input(key="op_actor").input("dana")
    at.text_input(key="op_reason").input("corrupt shards")
    [b for b in at.button if b.label == "Apply"][0].click()
    at.run()
    assert_clean(at)
    assert any("Blacklisted /data/other-bad-set" in s.value for s in at.success)
    at.run()
    audit = [df.value for df in at.dataframe if "actor" in df.value.columns]
    assert audit and "dashboard:dana" in set(audit[0]["actor"])


# ------------------------------------------------------------------ validation
def test_validation(hand_store: Store, use_store: UseStore) -> None:
    use_store(hand_store)
    at = run_page("validation")
    m = metrics(at)
    assert m["Validations"] == "5"
    assert m["Failures caught before submission"] == "2"
    assert charts(at) >= 1
    assert "Download validation summary (CSV)" in downloads(at)
    order = assert_sized_per_category(find_chart(at, "category", "count"))
    summary = table_by_column(at, "verdict").value
    no_finding = summary["verdict"].map({"pass": "passed", "inconclusive": "inconclusive"})
    assert set(order) == set(summary["category"].fillna(no_finding).fillna("no finding"))
    assert column_configs(table_by_column(at, "verdict"))["count"]["label"] == "Validations"
    set_filter(at, "gl_users", ["bob"])
    assert metrics(at)["Validations"] == "2"


def test_validation_on_simulated_store(dash_store: Store, use_store: UseStore) -> None:
    use_store(dash_store)
    run_page("validation")


def test_job_page_diagnose_now(hand_store: Store, use_store: UseStore) -> None:
    use_store(hand_store)
    at = run_page("job", {"job": "job-003"})
    [b for b in at.button if b.key == "job_diagnose"][0].click()
    at.run()
    assert_clean(at)
    assert any("gpu_oom" in md.value and "origin" in md.value for md in at.markdown)
    assert any("out of memory" in c.value for c in at.code)

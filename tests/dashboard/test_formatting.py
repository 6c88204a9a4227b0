"""Readable tables and charts sized for their categories: the pure helpers (no app run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import require_module

require_module("streamlit")
require_module("altair")

import altair as alt  # noqa: E402

from gpulens.dashboard import charts, ui  # noqa: E402


def test_column_labels_are_for_people() -> None:
    assert ui.column_label("allocated_gpu_hours") == "Allocated GPU-hours"
    assert ui.column_label("job_id") == "Job"
    assert ui.column_label("mean_util") == "Mean utilization"
    # names nobody listed are humanized, keeping acronyms
    assert ui.column_label("requested_gpus") == "Requested GPUs"
    assert ui.column_label("peak_gpu_hours") == "Peak GPU-hours"
    assert ui.column_label("vc_xid_count") == "VC XID count"


def test_column_config_formats_numbers_by_meaning() -> None:
    df = pd.DataFrame({
        "job_id": ["a", "b"],
        "allocated_gpu_hours": [342.6667, 12345.25],
        "mean_util": [48.6819, 3.0],
        "fraction_epochs": [0.2381, 1.0],
        "jobs": [1200, 3],
        "attempt": [0, 1],
        "score": [0.1234, 55.75],
        "start_time": pd.to_datetime(["2026-11-19 00:00", "2026-11-20 12:30"]),
        "active": [True, False],
        "evidence": ["{}", "{}"],
    })
    cfg = ui.column_config_for(df, hide=["evidence"])
    assert set(cfg) == set(df.columns)

    def fmt(col: str) -> str:
        return str(cfg[col]["type_config"]["format"])

    assert cfg["allocated_gpu_hours"]["label"] == "Allocated GPU-hours"
    assert fmt("allocated_gpu_hours") == "%,.1f"  # 342.7, 12,345.3
    assert fmt("mean_util") == "%.1f%%"  # 0-100 -> 48.7%
    assert fmt("fraction_epochs") == "percent"  # 0-1 -> 23.81%
    assert fmt("jobs") == "%,d"
    assert fmt("attempt") == "%d"  # a code, not a quantity
    assert fmt("score") == "%,.2f"
    assert cfg["start_time"]["type_config"]["format"] == "YYYY-MM-DD HH:mm"
    assert cfg["active"]["type_config"]["type"] == "checkbox"
    assert cfg["evidence"] is None  # hidden from the display
    # a page's own config and header win
    over = ui.column_config_for(df, overrides={"jobs": {"label": "N"}}, labels={"score": "Anomaly"})
    assert over["jobs"] == {"label": "N"} and over["score"]["label"] == "Anomaly"


def test_placement_summary_groups_gpus_per_node() -> None:
    t0, t1 = pd.Timestamp("2026-11-19 20:39"), pd.Timestamp("2026-11-19 20:57")
    rows = [{"job_id": "j", "attempt": a, "node": n, "gpu_index": g, "start_time": t0,
             "end_time": t1} for a, n, gpus in [(0, "n1", [0, 1, 2, 3, 6]), (0, "n2", [1]),
                                                (1, "n1", [4, 5])] for g in gpus]
    summary = ui.placement_summary(pd.DataFrame(rows))
    assert list(summary["gpu_indices"]) == ["0-3, 6", "1", "4-5"]
    assert list(summary["gpus"]) == [5, 1, 2]
    assert list(summary["node"]) == ["n1", "n2", "n1"]
    assert ui.index_ranges(pd.Series([], dtype="int64")) == ""


@pytest.mark.parametrize("n", [2, 8, 14])
def test_rows_height_grows_with_categories(n: int) -> None:
    assert charts.rows_height(n) == charts.ROW_PX * n
    assert charts.rows_height(n + 5) - charts.rows_height(n) == 5 * charts.ROW_PX


def test_fit_width_keeps_the_plot_height() -> None:
    chart = charts.fit_width(alt.Chart(pd.DataFrame({"a": [1]})).mark_bar().properties(height=84))
    spec = chart.to_dict()
    assert spec["autosize"] == {"type": "fit-x", "contains": "padding"}
    assert spec["height"] == 84


def test_waterfall_labels_every_stage() -> None:
    goodput = pd.DataFrame({"stage": list(charts.STAGE_LABELS),
                            "gpu_hours": [5149.0, 2642.0, 415.0, 1489.0, 602.0]})
    chart = charts.goodput_waterfall(goodput)
    assert chart is not None
    spec = chart.spec
    x = spec["layer"][0]["encoding"]["x"]
    assert x["sort"] == list(charts.STAGE_LABELS.values())
    axis = x["axis"]
    assert axis["labelOverlap"] is False and axis["labelAngle"] == 0
    # the long labels break into two lines instead of being dropped
    for label in ("Failed or killed (busy)", "After converging (busy)"):
        assert repr(label) in axis["labelExpr"]
    text = spec["layer"][1]
    assert text["mark"]["lineBreak"] == "\n"
    # the bars go from lo to hi: allocated, minus each loss in turn; effective as given
    rows = chart.data.set_index("stage")
    assert rows.loc["Allocated", "hi"] == 5149.0
    assert rows.loc["Idle (allocated, not busy)", "lo"] == 5149.0 - 2642.0
    assert rows.loc["Effective (busy)", "hi"] == 602.0
    assert list(chart.data["label"])[0] == "5,149 h\n100%"


def test_overview_specs_are_valid_vega_lite() -> None:
    """The Overview's plain specs pass Altair's Vega-Lite schema validation, with their data."""
    ts = pd.DataFrame({"ts": pd.date_range("2026-01-01", periods=3, freq="h"),
                       "total_gpus": [8, 8, 8], "allocated_gpus": [4.0, 6.0, 8.0],
                       "busy_gpus": [1.0, 2.5, 3.0]})
    over_time = charts.utilization_over_time(ts)
    assert len(over_time.data) == 9 and set(over_time.data["series"]) == {
        "GPUs in cluster", "Allocated", "Busy"}
    goodput = charts.goodput_waterfall(pd.DataFrame({"stage": ["allocated", "idle"],
                                                     "gpu_hours": [10.0, 4.0]}))
    assert goodput is not None
    for chart, cls in ((over_time, alt.Chart), (goodput, alt.LayerChart)):
        values = chart.data.astype({"ts": str} if "ts" in chart.data else {}).to_dict("records")
        built = cls.from_dict({**chart.spec, "data": {"values": values}}, validate=True)
        assert built.to_dict()["height"] == chart.spec["height"]


def test_overview_modules_do_not_import_altair() -> None:
    """The Overview page's modules leave Altair unimported (its import is most of a fresh
    process's import time; the other pages import it themselves)."""
    code = ("import sys; import gpulens.dashboard.charts, gpulens.dashboard.ui, "
            "gpulens.dashboard.data; print('altair' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.strip() == "False"
    overview = (Path(__file__).resolve().parents[2] / "gpulens" / "dashboard" / "views"
                / "overview.py").read_text()
    assert "altair" not in overview


def test_wrap_label_expr_splits_long_labels_near_the_middle() -> None:
    expr = charts.wrap_label_expr(["Idle", "After converging", "Oneverylongword"])
    assert "['After', 'converging']" in expr
    assert "Idle" not in expr and "Oneverylongword" not in expr


def test_streamlit_keeps_the_flag_that_skips_its_repl_check() -> None:
    """app.py marks Streamlit's "run it with streamlit run" hint as shown, which skips its REPL
    check (inspect.stack with source context, 0.1-0.16 s of a fresh server's first page); a
    Streamlit without the flag would bring that cost back."""
    from streamlit import delta_generator

    assert isinstance(getattr(delta_generator, "_use_warning_has_been_displayed", None), bool)

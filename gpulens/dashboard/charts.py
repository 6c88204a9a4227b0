"""Chart helpers shared by the pages (readable at a glance: few series, labelled axes).

The Overview's two charts are plain Vega-Lite specs (:class:`Spec`, drawn with
``st.vega_lite_chart``): the first page an operator opens does not import Altair (0.2-0.3 s in a
fresh process, and its schema validation at every draw). The other pages build Altair charts
and size them with :func:`rows_height` and :func:`fit_width`. This module does not import Altair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar, cast

import pandas as pd

from gpulens.analysis import accounting as acc

__all__ = [
    "ROW_PX",
    "STAGE_LABELS",
    "Spec",
    "fit_width",
    "goodput_waterfall",
    "rows_height",
    "utilization_over_time",
    "wrap_label_expr",
]

#: Pixels per category on charts with one row (bar, box, heatmap row) per category.
ROW_PX = 28


def rows_height(n: int, step: int = ROW_PX, minimum: int = 2) -> int:
    """Plot height for ``n`` categories on the y axis, ``step`` pixels each."""
    return step * max(int(n), minimum)


C = TypeVar("C")


def fit_width(chart: C) -> C:
    """Fit the chart's width to the container but keep its height for the plot alone.

    Streamlit's default ("fit") squeezes axes, titles and legends into the given
    height, so a chart sized per category loses rows and labels; with "fit-x" the
    height is the plot's and the decorations come on top.
    """
    sized = cast(Any, chart).properties(autosize={"type": "fit-x", "contains": "padding"})
    return cast(C, sized)


def wrap_label_expr(labels: list[str], width: int = 10) -> str:
    """A Vega ``labelExpr`` that breaks the long ones of ``labels`` into two lines."""
    expr = "datum.label"
    for label in labels:
        if len(label) <= width or " " not in label:
            continue
        cut = min((i for i, c in enumerate(label) if c == " "), key=lambda i: abs(i - len(label) / 2))
        first, second = label[:cut], label[cut + 1:]
        expr = (f"datum.label == {label!r} ? [{first!r}, {second!r}] : ({expr})")
    return expr

STAGE_LABELS = {
    "allocated": "Allocated",
    "idle": "Idle (allocated, not busy)",
    "failed_or_killed": "Failed or killed (busy)",
    "post_convergence": "After converging (busy)",
    "effective": "Effective (busy)",
}

_SERIES = {"total_gpus": "GPUs in cluster", "allocated_gpus": "Allocated", "busy_gpus": "Busy"}


@dataclass(frozen=True)
class Spec:
    """A Vega-Lite chart: its data (one table, the spec's top-level data) and the spec itself
    (``st.vega_lite_chart(chart.data, chart.spec)``)."""

    data: pd.DataFrame
    spec: dict[str, Any]


def _field(name: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {"field": name, "type": kind, **extra}


def utilization_over_time(ts: pd.DataFrame) -> Spec:
    """Total vs allocated vs busy GPUs over time (one line each)."""
    cols = [c for c in _SERIES if c in ts.columns]
    long = ts.melt(id_vars=["ts"], value_vars=cols, var_name="series", value_name="gpus")
    long["series"] = long["series"].map(_SERIES)
    order = [_SERIES[c] for c in cols]
    return Spec(long, {
        "mark": {"type": "line", "interpolate": "step-after"},
        "encoding": {
            "x": _field("ts", "temporal", title=None),
            "y": _field("gpus", "quantitative", title="GPUs"),
            "color": _field(
                "series", "nominal", sort=order,
                scale={"domain": order, "range": ["#9e9e9e", "#4c78a8", "#54a24b"][: len(order)]},
                legend={"title": None, "orient": "top"},
            ),
            "tooltip": [_field("ts", "temporal", title="time"), _field("series", "nominal"),
                        _field("gpus", "quantitative", format=".1f")],
        },
        "height": 280,
    })


def _waterfall_rows(hours: dict[str, float]) -> pd.DataFrame:
    """One bar per stage: allocated, each loss hanging from what is left, the effective part;
    with its GPU-hours, share of the allocated and label."""
    rows: list[dict[str, Any]] = []
    top = hours["allocated"]
    rows.append({"stage": STAGE_LABELS["allocated"], "lo": 0.0, "hi": top, "kind": "total",
                 "gpu_hours": top})
    for stage in ("idle", "failed_or_killed", "post_convergence"):
        lost = max(hours.get(stage, 0.0), 0.0)
        rows.append({"stage": STAGE_LABELS[stage], "lo": top - lost, "hi": top, "kind": "lost",
                     "gpu_hours": lost})
        top -= lost
    effective = hours.get("effective", max(top, 0.0))
    rows.append({"stage": STAGE_LABELS["effective"], "lo": 0.0, "hi": effective, "kind": "effective",
                 "gpu_hours": effective})
    df = pd.DataFrame(rows)
    total = hours["allocated"] or 1.0
    df["share"] = acc.share(df["gpu_hours"], total)
    df["label"] = df.apply(lambda r: f"{r.gpu_hours:,.0f} h\n{r.share:.0%}", axis=1)
    return df


def goodput_waterfall(goodput: pd.DataFrame) -> Spec | None:
    """"Where did the GPU-hours go?": allocated, minus each loss, leaves the effective part."""
    hours = {str(s): float(h) for s, h in zip(goodput["stage"], goodput["gpu_hours"], strict=False)}
    if "allocated" not in hours:
        return None
    df = _waterfall_rows(hours)
    order = list(df["stage"])
    x = _field("stage", "nominal", sort=order, title=None, axis={
        "labelAngle": 0, "labelLimit": 200, "labelOverlap": False,
        "labelExpr": wrap_label_expr(order), "labelFontSize": 12})
    bars = {
        "mark": {"type": "bar", "width": {"band": 0.7}},
        "encoding": {
            "x": x,
            "y": _field("lo", "quantitative", title="Allocated GPU-hours, by what they did",
                        axis={"format": ",d"}),
            "y2": {"field": "hi"},
            "color": _field("kind", "nominal", legend=None, scale={
                "domain": ["total", "lost", "effective"],
                "range": ["#4c78a8", "#e45756", "#54a24b"]}),
            "tooltip": [_field("stage", "nominal"),
                        _field("gpu_hours", "quantitative", format=",.1f"),
                        _field("share", "quantitative", format=".1%")],
        },
    }
    text = {
        "mark": {"type": "text", "dy": -18, "baseline": "bottom", "lineBreak": "\n",
                 "fontSize": 11},
        "encoding": {"x": x, "y": _field("hi", "quantitative"),
                     "text": _field("label", "nominal")},
    }
    return Spec(df, {"layer": [bars, text], "height": 320})

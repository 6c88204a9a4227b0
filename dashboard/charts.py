"""Altair chart builders shared by the pages (readable at a glance: few series, labelled axes)."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

__all__ = ["STAGE_LABELS", "goodput_waterfall", "utilization_over_time"]

STAGE_LABELS = {
    "allocated": "Allocated",
    "idle": "Idle",
    "failed_or_killed": "Failed/killed",
    "post_convergence": "After converged",
    "effective": "Effective",
}

_SERIES = {"total_gpus": "GPUs in cluster", "allocated_gpus": "Allocated", "busy_gpus": "Busy"}


def utilization_over_time(ts: pd.DataFrame) -> alt.Chart:
    """Total vs allocated vs busy GPUs over time (one line each)."""
    cols = [c for c in _SERIES if c in ts.columns]
    long = ts.melt(id_vars=["ts"], value_vars=cols, var_name="series", value_name="gpus")
    long["series"] = long["series"].map(_SERIES)
    order = [_SERIES[c] for c in cols]
    return (
        alt.Chart(long)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("ts:T", title=None),
            y=alt.Y("gpus:Q", title="GPUs"),
            color=alt.Color(
                "series:N",
                sort=order,
                scale=alt.Scale(domain=order, range=["#9e9e9e", "#4c78a8", "#54a24b"][: len(order)]),
                legend=alt.Legend(title=None, orient="top"),
            ),
            tooltip=[alt.Tooltip("ts:T", title="time"), "series:N", alt.Tooltip("gpus:Q", format=".1f")],
        )
        .properties(height=280)
    )


def goodput_waterfall(goodput: pd.DataFrame) -> alt.LayerChart | None:
    """"Where did the GPU-hours go?": allocated, minus each loss, leaves the effective part."""
    hours = {str(s): float(h) for s, h in zip(goodput["stage"], goodput["gpu_hours"], strict=False)}
    if "allocated" not in hours:
        return None
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
    df["share"] = df["gpu_hours"] / total
    df["label"] = df.apply(lambda r: f"{r.gpu_hours:,.0f} h ({r.share:.0%})", axis=1)
    order = list(df["stage"])
    base = alt.Chart(df).encode(x=alt.X("stage:N", sort=order, title=None,
                                        axis=alt.Axis(labelAngle=0, labelLimit=160)))
    bars = base.mark_bar(size=48).encode(
        y=alt.Y("lo:Q", title="GPU-hours"),
        y2="hi:Q",
        color=alt.Color(
            "kind:N",
            scale=alt.Scale(domain=["total", "lost", "effective"],
                            range=["#4c78a8", "#e45756", "#54a24b"]),
            legend=None,
        ),
        tooltip=["stage:N", alt.Tooltip("gpu_hours:Q", format=",.1f"),
                 alt.Tooltip("share:Q", format=".1%")],
    )
    text = base.mark_text(dy=-8).encode(y="hi:Q", text="label:N")
    return (bars + text).properties(height=300)

"""Validation: pre-submission validator outcomes, failures caught, GPU-hours saved."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from gpulens import validator
from gpulens.dashboard import charts, ui

__all__ = ["render", "verdict_chart"]

_VERDICT_COLORS = {"pass": "#54a24b", "fail": "#e45756", "inconclusive": "#9e9e9e"}


def verdict_chart(summary: pd.DataFrame) -> alt.Chart:
    """Validations per category (most first), stacked by verdict."""
    df = summary.copy()
    # a validation without a finding: "passed" or "inconclusive" says more than a blank
    no_finding = df["verdict"].map({"pass": "passed", "inconclusive": "inconclusive"})
    df["category"] = df["category"].fillna(no_finding).fillna("no finding")
    order = list(df.groupby("category")["count"].sum().sort_values(ascending=False).index)
    domain = [v for v in _VERDICT_COLORS if v in set(df["verdict"])] + sorted(
        set(df["verdict"]) - set(_VERDICT_COLORS))
    chart = (
        alt.Chart(df)
        .mark_bar()
        .encode(
            y=alt.Y("category:N", sort=order, title=None,
                    axis=alt.Axis(labelLimit=240, labelOverlap=False)),
            x=alt.X("count:Q", title="validations", axis=alt.Axis(format="d", tickMinStep=1)),
            color=alt.Color("verdict:N", scale=alt.Scale(
                domain=domain, range=[_VERDICT_COLORS.get(v, "#bab0ac") for v in domain]),
                legend=alt.Legend(title="verdict", orient="top")),
            tooltip=["verdict:N", "category:N", "count:Q",
                     alt.Tooltip("allocated_gpu_hours_saved:Q", format=",.1f",
                                 title="allocated GPU-hours saved (estimate)")],
        )
        .properties(height=charts.rows_height(len(order)))
    )
    return charts.fit_width(chart)


def render() -> None:
    filters = ui.page_header("Validation", "Failures caught before they reached the cluster")
    ui.require_data()
    summary = ui.fetch(validator.validation_summary, "Validation summary",
                       filters=filters)
    if not isinstance(summary, pd.DataFrame):
        return
    if summary.empty:
        st.info("No validation has run in this period. Users validate a job before "
                "submitting it with `gpulens validate -- python train.py ...`.",
                icon=":material/fact_check:")
        return
    total = int(summary["count"].sum())
    failed = int(summary.loc[summary["verdict"] == "fail", "count"].sum())
    saved = float(summary["allocated_gpu_hours_saved"].fillna(0).sum())
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Validations", f"{total:,}", border=True)
    c2.metric("Failures caught before submission", f"{failed:,}", border=True)
    c3.metric("Caught rate", ui.fmt_pct(100 * failed / total if total else None), border=True)
    c4.metric("Allocated GPU-h saved", ui.fmt_hours(saved), border=True,
              help="Estimate: requested GPUs × the median hours a failed attempt of the same "
                   "category ran on this cluster.")
    left, right = st.columns([3, 2])
    with left:
        st.subheader("Outcomes by category")
        st.altair_chart(verdict_chart(summary), width="stretch")
    with right:
        st.subheader("Table")
        ui.table(summary.sort_values("count", ascending=False), "validation summary",
                 labels={"count": "Validations"})


render()

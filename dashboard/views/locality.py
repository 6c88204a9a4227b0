"""Locality: GPU utilization by job size x servers spanned; GPU-hours lost to spreading."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from dashboard import ui

__all__ = ["locality_chart", "render"]


def locality_chart(loc: pd.DataFrame) -> alt.LayerChart | alt.FacetChart:
    """Mean utilization with its bootstrap CI: one group per GPU count, one bar per span."""
    df = loc.copy()
    df["size"] = df["gpus"].astype(int).astype(str) + " GPUs"
    df["spread"] = df["servers"].astype(int).astype(str) + " server(s)"
    sizes = [f"{g} GPUs" for g in sorted(df["gpus"].astype(int).unique())]
    spreads = [f"{s} server(s)" for s in sorted(df["servers"].astype(int).unique())]
    title = "mean GPU utilization %"
    base = alt.Chart(df).encode(
        x=alt.X("size:N", sort=sizes, title="job size", axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("spread:N", sort=spreads),
        color=alt.Color("spread:N", sort=spreads,
                        legend=alt.Legend(title="spread over", orient="top")),
        tooltip=[
            "size:N", "spread:N", alt.Tooltip("jobs:Q", title="jobs"),
            alt.Tooltip("mean_util:Q", title="mean util %", format=".1f"),
            alt.Tooltip("ci_low:Q", title="95% CI low", format=".1f"),
            alt.Tooltip("ci_high:Q", title="95% CI high", format=".1f"),
        ],
    )
    bars = base.mark_bar().encode(
        y=alt.Y("mean_util:Q", title=title, scale=alt.Scale(domain=[0, 100]))
    )
    err = base.mark_errorbar(ticks=True).encode(
        y=alt.Y("ci_low:Q", title=title), y2="ci_high:Q", color=alt.value("#333")
    )
    text = base.mark_text(dy=-6, baseline="bottom", color="#333").encode(
        y=alt.Y("ci_high:Q", title=title), text=alt.Text("jobs:Q", format="d")
    )
    return alt.layer(bars, err, text).properties(height=300)


def render() -> None:
    filters = ui.page_header("Locality", "Does spreading a job over more servers cost utilization?")
    ui.require_data()

    loc = ui.fetch("analysis.locality", "Locality", filters=filters, n_boot=1000, seed=0)
    if isinstance(loc, pd.DataFrame):
        st.subheader("Utilization by GPU count × servers spanned")
        if loc.empty:
            ui.no_match("No multi-GPU job")
        else:
            st.altair_chart(locality_chart(loc), width="stretch")
            st.caption("Bars: mean GPU utilization of the jobs in each group; whiskers: 95 % "
                       "bootstrap confidence interval; numbers: how many jobs.")
            with st.expander("Table"):
                ui.table(loc, "locality")

    loss = ui.fetch("analysis.locality_loss", "GPU-hours lost to spreading", filters=filters)
    if isinstance(loss, pd.DataFrame):
        st.subheader("GPU-hours lost to spreading")
        if loss.empty:
            ui.no_match("No spread job")
            return
        total_lost = float(loss["lost_gpu_hours"].sum())
        spread_hours = float(loss["gpu_hours"].sum())
        c1, c2, c3 = st.columns(3)
        c1.metric("GPU-hours lost to spreading", ui.fmt_hours(total_lost), border=True)
        c2.metric("Spread jobs", f"{len(loss):,}", border=True)
        c3.metric("Share of their GPU-hours", ui.fmt_pct(100 * total_lost / spread_hours
                                                         if spread_hours else None), border=True)
        st.caption("Lost = GPU-hours × (utilization had the job been packed on the fewest "
                   "servers − its actual utilization).")
        st.markdown("**Worst offenders**")
        ui.table(loss.head(200), "locality worst offenders", column_config={
            "lost_gpu_hours": st.column_config.NumberColumn("lost GPU-h", format="%.1f"),
            "actual_util": st.column_config.NumberColumn("actual util %", format="%.1f"),
            "consolidated_util": st.column_config.NumberColumn("packed util %", format="%.1f"),
        })


render()

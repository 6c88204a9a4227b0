"""Locality: GPU utilization by job size x servers spanned; GPU-hours lost to spreading."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from gpulens import analysis
from gpulens.analysis import accounting as acc
from gpulens.dashboard import charts, ui

__all__ = ["locality_chart", "render", "spread_colors"]

#: Colours from "packed" (blue) to "spread thin" (dark red).
_SPREAD_PALETTE = ["#1f78b4", "#6baed6", "#fdae61", "#f46d43", "#d73027", "#a50026", "#67001f"]


def spread_colors(n: int) -> list[str]:
    """``n`` colours from the palette, evenly spaced, blue (1 server) to red (most servers)."""
    if n <= 1:
        return _SPREAD_PALETTE[:1]
    last = len(_SPREAD_PALETTE) - 1
    picks = [round(i * last / (n - 1)) for i in range(n)] if n <= len(_SPREAD_PALETTE) else []
    if not picks:  # more spans than colours: repeat the darkest
        return _SPREAD_PALETTE + [_SPREAD_PALETTE[-1]] * (n - len(_SPREAD_PALETTE))
    return [_SPREAD_PALETTE[i] for i in picks]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def locality_chart(loc: pd.DataFrame) -> alt.LayerChart:
    """Mean utilization with its bootstrap CI: one group per GPU count, one bar per span."""
    df = loc.copy()
    df["size"] = [_plural(int(g), "GPU") for g in df["gpus"]]
    df["spread"] = [_plural(int(s), "server") for s in df["servers"]]
    sizes = [_plural(int(g), "GPU") for g in sorted(df["gpus"].astype(int).unique())]
    spreads = [_plural(int(s), "server") for s in sorted(df["servers"].astype(int).unique())]
    title = "mean GPU utilization %"
    base = alt.Chart(df).encode(
        x=alt.X("size:N", sort=sizes, title="job size", axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("spread:N", sort=spreads),
        color=alt.Color("spread:N", sort=spreads,
                        scale=alt.Scale(domain=spreads, range=spread_colors(len(spreads))),
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
    text = base.mark_text(dy=-4, baseline="bottom", fontSize=11).encode(
        y=alt.Y("ci_high:Q", title=title), text=alt.Text("jobs:Q", format="d"),
        color=alt.value("#333"),
    )
    return charts.fit_width(alt.LayerChart(layer=[bars, err, text], height=260))


def render() -> None:
    filters = ui.page_header("Locality", "Does spreading a job over more servers cost utilization?")
    ui.require_data()

    loc = ui.fetch(analysis.locality, "Locality", filters=filters, n_boot=1000, seed=0)
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

    loss = ui.fetch(analysis.locality_loss, "Busy GPU-hours lost to spreading", filters=filters)
    if isinstance(loss, pd.DataFrame):
        st.subheader("Busy GPU-hours lost to spreading")
        if loss.empty:
            ui.no_match("No spread job")
            return
        total_lost = float(loss["lost_busy_gpu_hours"].sum())
        spread_hours = float(loss["allocated_gpu_hours"].sum())
        c1, c2, c3 = st.columns(3)
        c1.metric("Busy GPU-hours lost to spreading", ui.fmt_hours(total_lost), border=True)
        c2.metric("Spread jobs", f"{len(loss):,}", border=True)
        c3.metric("Share of their allocated GPU-hours",
                  ui.fmt_pct(100 * acc.share(total_lost, spread_hours)), border=True)
        st.caption("Lost busy GPU-hours = allocated GPU-hours × (utilization had the job been "
                   "packed on the fewest servers − its actual utilization).")
        st.markdown("**Worst offenders**")
        ui.table(loss.head(200), "locality worst offenders")


render()

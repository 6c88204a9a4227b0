"""Early stop: how many epochs jobs needed, GPU-hours saveable, the online rule vs hindsight."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from gpulens import analysis
from gpulens.analysis import accounting as acc
from gpulens.dashboard import charts, data, ui

__all__ = ["comparison", "comparison_chart", "fraction_histogram", "render"]


def _points(accuracy: float) -> str:
    """An accuracy difference (0-1) in percentage points."""
    return f"{100 * accuracy:.2f} pp"


def fraction_histogram(es: pd.DataFrame) -> alt.Chart:
    df = es[["fraction_epochs"]].dropna().copy()
    df["pct"] = 100 * df["fraction_epochs"].astype(float)
    return (
        alt.Chart(df)
        .mark_bar(color="#4c78a8")
        .encode(
            x=alt.X("pct:Q", bin=alt.Bin(extent=[0, 100], step=5),
                    title="% of its epochs a job needed to converge"),
            y=alt.Y("count():Q", title="jobs"),
            tooltip=[alt.Tooltip("pct:Q", bin=alt.Bin(extent=[0, 100], step=5), title="% epochs"),
                     alt.Tooltip("count():Q", title="jobs")],
        )
        .properties(height=260)
    )


def comparison(es: pd.DataFrame, online: pd.DataFrame, patience: int) -> pd.DataFrame:
    """GPU-hours saved by hindsight and by the online rule, on both bases (long form)."""
    rows = []
    for rule, df, prefix in (("Hindsight (best case)", es, "saveable"),
                             (f"Online (patience {patience})", online, "saved")):
        for basis in ("allocated", "busy"):
            col = f"{prefix}_{basis}_gpu_hours"
            total = float(df[col].sum()) if not df.empty and col in df else 0.0
            rows.append({"rule": rule, "basis": basis, "gpu_hours": total})
    return pd.DataFrame(rows)


def comparison_chart(comp: pd.DataFrame) -> alt.Chart:
    """One bar per rule and basis (allocated, busy), the basis in the label and the colour."""
    df = comp.assign(row=comp["rule"] + " · " + comp["basis"])
    chart = (
        alt.Chart(df).mark_bar().encode(
            x=alt.X("gpu_hours:Q", title="GPU-hours saved (allocated and busy)"),
            y=alt.Y("row:N", title=None, sort=list(df["row"]), axis=alt.Axis(labelLimit=260)),
            color=alt.Color("basis:N", title="basis", sort=["allocated", "busy"],
                            scale=alt.Scale(range=["#9e9e9e", "#54a24b"]),
                            legend=alt.Legend(orient="top")),
            tooltip=["rule:N", "basis:N", alt.Tooltip("gpu_hours:Q", format=",.1f")],
        ).properties(height=charts.rows_height(len(df)))
    )
    return charts.fit_width(chart)


def _total(comp: pd.DataFrame, rule: str, basis: str) -> float:
    """The GPU-hours of the rule whose name starts with ``rule``, on ``basis``."""
    hit = comp[comp["rule"].str.startswith(rule) & (comp["basis"] == basis)]
    return float(hit["gpu_hours"].sum())


def _online_tiles(comp: pd.DataFrame, online: pd.DataFrame) -> None:
    """What the online rule saves on both bases (and the share of hindsight), what it gives up."""
    c1, c2, c3 = st.columns(3)
    for col, basis in ((c1, "allocated"), (c2, "busy")):
        saved, hindsight = _total(comp, "Online", basis), _total(comp, "Hindsight", basis)
        col.metric(f"Online rule saves, {basis} GPU-h", ui.fmt_hours(saved),
                   ui.fmt_pct(100 * acc.share(saved, hindsight), 0) + " of hindsight",
                   delta_color="off", delta_arrow="off", border=True)
    given_up = online["accuracy_given_up"].dropna() if not online.empty else pd.Series()
    c3.metric("Accuracy given up (median)",
              "—" if given_up.empty else _points(float(given_up.median())),
              None if given_up.empty else f"max {_points(float(given_up.max()))}",
              delta_color="off", delta_arrow="off", border=True,
              help="Best accuracy minus the accuracy at the epoch the online rule "
                   "stops, in percentage points.")


def _settings() -> tuple[float, int, float]:
    """The tolerance, patience and minimum improvement the settings row holds."""
    default_tol = float(data.config().diagnose.early_stop_tolerance)
    with st.container(border=True):
        c1, c2, c3 = st.columns(3)
        tolerance = c1.number_input("Convergence tolerance (accuracy)", min_value=0.0,
                                    max_value=0.1, value=default_tol, step=0.001, format="%.3f",
                                    key="es_tolerance")
        patience = c2.slider("Online rule: patience (epochs)", 1, 20, 5, key="es_patience")
        min_delta = c3.number_input("Online rule: minimum improvement", min_value=0.0,
                                    max_value=0.1, value=0.001, step=0.001, format="%.3f",
                                    key="es_min_delta")
    return tolerance, patience, min_delta


def _summary(filters: data.FilterState, tolerance: float) -> None:
    """The summary sentence and its tiles."""
    summary = ui.fetch(analysis.early_stop_summary, "Early-stop summary", filters=filters,
                       tolerance=float(tolerance))
    if summary is None:
        return
    if getattr(summary, "sentence", ""):
        st.markdown(f"> {summary.sentence}")
    c1, c2, c3 = st.columns(3)
    c1.metric("Jobs with a curve", f"{int(getattr(summary, 'jobs', 0) or 0):,}", border=True)
    c2.metric("Jobs that converged early", ui.fmt_pct(getattr(summary, "pct_jobs", None)),
              border=True)
    c3.metric("Epochs after convergence", ui.fmt_pct(getattr(summary, "pct_epochs", None)),
              border=True)
    c1, c2 = st.columns(2)
    c1.metric("Saveable in hindsight, allocated GPU-h",
              ui.fmt_hours(getattr(summary, "saveable_allocated_gpu_hours", None)),
              border=True, help="Allocated GPU-hours after each job converged; runs that "
                                "failed or were killed are left out (their GPU-hours are "
                                "failure cost).")
    c2.metric("Saveable in hindsight, busy GPU-h",
              ui.fmt_hours(getattr(summary, "saveable_busy_gpu_hours", None)),
              border=True, help="Busy GPU-hours after each job converged: the Overview "
                                "waterfall's \"After converging\" stage.")


def _charts(es: Any, online: Any, patience: int) -> None:
    """The histogram of epochs needed, the online rule against hindsight, and its tiles."""
    comp: pd.DataFrame | None = None
    left, right = st.columns(2)
    with left:
        st.subheader("Fraction of epochs needed")
        if isinstance(es, pd.DataFrame):
            if es.empty:
                ui.no_match("No job with a metric curve")
            else:
                st.altair_chart(fraction_histogram(es), width="stretch")
    with right:
        st.subheader("Online rule vs hindsight")
        if isinstance(online, pd.DataFrame) and isinstance(es, pd.DataFrame):
            comp = comparison(es, online, patience)
            st.altair_chart(comparison_chart(comp), width="stretch")
    if comp is not None and isinstance(online, pd.DataFrame):
        _online_tiles(comp, online)


def _per_job(es: Any, online: Any) -> None:
    """Every job's early-stop numbers, hindsight and online, the most saveable first."""
    if not isinstance(es, pd.DataFrame) or es.empty:
        return
    st.subheader("Per job")
    table = es
    if isinstance(online, pd.DataFrame) and not online.empty:
        table = es.merge(online, on="job_id", how="left", suffixes=("", "_online"))
    table = table.sort_values("saveable_allocated_gpu_hours", ascending=False)
    ui.table(table, "early stop per job", hide=["converged_epoch_online"], column_config={
        "fraction_epochs": st.column_config.ProgressColumn("Epochs needed", min_value=0,
                                                           max_value=1, format="percent"),
    })


def render() -> None:
    filters = ui.page_header("Early stop", "Epochs run after a job had already converged")
    ui.require_data()
    tolerance, patience, min_delta = _settings()
    _summary(filters, tolerance)
    es = ui.fetch(analysis.early_stop, "Early stop per job", filters=filters,
                  tolerance=float(tolerance))
    online = ui.fetch(analysis.online_stop, "Online stopping rule", filters=filters,
                      patience=int(patience), min_delta=float(min_delta))
    _charts(es, online, patience)
    _per_job(es, online)

render()

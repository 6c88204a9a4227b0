"""Overview: headline numbers, allocated vs busy GPUs over time, where the GPU-hours go, alerts."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from gpulens import analysis
from gpulens.dashboard import charts, data, ui

__all__ = ["render"]


def _first(df: Any, column: str) -> float | None:
    if not isinstance(df, pd.DataFrame) or df.empty or column not in df.columns:
        return None
    value = df[column].iloc[0]
    return None if pd.isna(value) else float(value)


def _delta(now: float | None, before: float | None, *, pct_points: bool = False) -> str | None:
    if now is None or before is None:
        return None
    if pct_points:
        return f"{now - before:+.1f} pp"
    if before == 0:
        return None
    return f"{(now - before) / before:+.0%}"


def _alerts() -> None:
    cfg = data.config().dashboard
    if not cfg.prometheus_url:
        return
    table, problem = data.alerts(cfg.prometheus_url, float(cfg.prometheus_timeout))
    st.subheader("Firing alerts")
    if problem is not None:
        st.warning(f"{problem}. Alerts are not shown; the rest of the page is unaffected.",
                   icon=":material/cloud_off:")
    elif table is None or table.empty:
        st.success(f"No alert is firing ({cfg.prometheus_url}).", icon=":material/check_circle:")
    else:
        st.error(f"{len(table)} alert(s) firing.", icon=":material/notifications_active:")
        ui.table(table, "firing alerts")


def _jobs_counts(jobs: Any) -> tuple[float | None, float | None]:
    if not isinstance(jobs, pd.DataFrame):
        return None, None
    failed = float((jobs["status"] == "failed").sum()) if "status" in jobs else None
    return float(len(jobs)), failed


def render() -> None:
    filters = ui.page_header("Overview", "Where the GPU-hours go")
    ui.require_data()
    _alerts()

    util = ui.fetch(analysis.utilization, "Cluster utilization", filters=filters, by="cluster")
    jobs = ui.fetch(analysis.job_utilization, "Jobs", filters=filters)
    prev = filters.previous()
    util_prev = jobs_prev = None
    if prev is not None:
        util_prev = ui.fetch(analysis.utilization, "Previous period", filters=prev, by="cluster")
        jobs_prev = ui.fetch(analysis.job_utilization, "Previous period jobs", filters=prev)

    alloc, alloc_p = _first(util, "allocated_gpu_hours"), _first(util_prev, "allocated_gpu_hours")
    busy, busy_p = _first(util, "busy_gpu_hours"), _first(util_prev, "busy_gpu_hours")
    mean, mean_p = _first(util, "mean_util"), _first(util_prev, "mean_util")
    n_jobs, n_failed = _jobs_counts(jobs)
    n_jobs_p, n_failed_p = _jobs_counts(jobs_prev)
    fail_rate = 100 * n_failed / n_jobs if n_jobs and n_failed is not None else None
    fail_rate_p = 100 * n_failed_p / n_jobs_p if n_jobs_p and n_failed_p is not None else None

    cols = st.columns(5)
    cols[0].metric("Allocated GPU-hours", ui.fmt_hours(alloc), _delta(alloc, alloc_p), border=True)
    cols[1].metric("Busy GPU-hours", ui.fmt_hours(busy), _delta(busy, busy_p), border=True)
    cols[2].metric("Mean GPU utilization", ui.fmt_pct(mean), _delta(mean, mean_p, pct_points=True),
                   border=True)
    cols[3].metric("Jobs", "—" if n_jobs is None else f"{n_jobs:,.0f}", _delta(n_jobs, n_jobs_p),
                   border=True)
    cols[4].metric("Jobs failed", ui.fmt_pct(fail_rate),
                   _delta(fail_rate, fail_rate_p, pct_points=True), delta_color="inverse",
                   border=True)
    if prev is None:
        st.caption("Pick a time range in the sidebar to compare with the previous period.")
    else:
        st.caption(f"Changes compare with the previous period of the same length "
                   f"({prev.start:%Y-%m-%d %H:%M} → {prev.end:%Y-%m-%d %H:%M}).")

    left, right = st.columns(2)
    with left:
        st.subheader("GPUs over time: allocated vs busy")
        span_days = None
        if filters.start is not None and filters.end is not None:
            span_days = (filters.end - filters.start).total_seconds() / 86400
        else:
            b = data.bounds()
            if b.first is not None and b.last is not None:
                span_days = (b.last - b.first).total_seconds() / 86400
        freq = "hour" if span_days is None or span_days <= 14 else "day"
        ts = ui.fetch(analysis.utilization_timeseries, "Utilization over time",
                      filters=filters, freq=freq)
        if isinstance(ts, pd.DataFrame):
            if ts.empty:
                ui.no_match("No GPU sample")
            else:
                over_time = charts.utilization_over_time(ts)
                st.vega_lite_chart(over_time.data, over_time.spec, width="stretch")
                with st.expander("Table"):
                    ui.table(ts, "utilization over time")
    with right:
        st.subheader("Where did the GPU-hours go?")
        goodput = ui.fetch(analysis.goodput, "Goodput", filters=filters)
        if isinstance(goodput, pd.DataFrame):
            chart = charts.goodput_waterfall(goodput) if not goodput.empty else None
            if chart is None:
                ui.no_match("No allocated GPU-hour")
            else:
                st.vega_lite_chart(chart.data, chart.spec, width="stretch")
                st.caption("Every bar is a part of the allocated GPU-hours. Idle: allocated but "
                           "the GPU was not busy. Failed or killed: busy GPU-hours of runs that "
                           "failed or were killed (the Failures page's busy figure). After "
                           "converging: busy GPU-hours after the job had already converged (the "
                           "Early stop page's busy figure). Effective: the rest.")
                with st.expander("Table"):
                    ui.table(goodput, "goodput")

    st.subheader("By virtual cluster")
    by_vc = ui.fetch(analysis.utilization, "Utilization by vc", filters=filters, by="vc")
    if isinstance(by_vc, pd.DataFrame):
        if by_vc.empty:
            ui.no_match()
        else:
            ui.table(by_vc, "utilization by vc", column_config={
                "mean_util": st.column_config.ProgressColumn("Mean utilization", min_value=0,
                                                             max_value=100, format="%.1f%%"),
            })


render()

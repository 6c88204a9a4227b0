"""Overview: headline numbers, allocated vs busy GPUs over time, where the GPU-hours go, alerts."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class _Headline:
    """The headline numbers of one period (None where unknown)."""

    alloc: float | None = None
    busy: float | None = None
    mean: float | None = None
    n_jobs: float | None = None
    fail_rate: float | None = None


def _headline(filters: data.FilterState, util_what: str, jobs_what: str) -> _Headline:
    """The headline numbers of the period ``filters`` selects."""
    util = ui.fetch(analysis.utilization, util_what, filters=filters, by="cluster")
    jobs = ui.fetch(analysis.job_utilization, jobs_what, filters=filters)
    n_jobs, n_failed = _jobs_counts(jobs)
    fail_rate = 100 * n_failed / n_jobs if n_jobs and n_failed is not None else None
    return _Headline(alloc=_first(util, "allocated_gpu_hours"), busy=_first(util, "busy_gpu_hours"),
                     mean=_first(util, "mean_util"), n_jobs=n_jobs, fail_rate=fail_rate)


def _headline_tiles(now: _Headline, before: _Headline) -> None:
    """Five tiles: this period's numbers and their change from the period before."""
    cols = st.columns(5)
    cols[0].metric("Allocated GPU-hours", ui.fmt_hours(now.alloc), _delta(now.alloc, before.alloc),
                   border=True)
    cols[1].metric("Busy GPU-hours", ui.fmt_hours(now.busy), _delta(now.busy, before.busy),
                   border=True)
    cols[2].metric("Mean GPU utilization", ui.fmt_pct(now.mean),
                   _delta(now.mean, before.mean, pct_points=True), border=True)
    cols[3].metric("Jobs", "—" if now.n_jobs is None else f"{now.n_jobs:,.0f}",
                   _delta(now.n_jobs, before.n_jobs), border=True)
    cols[4].metric("Jobs failed", ui.fmt_pct(now.fail_rate),
                   _delta(now.fail_rate, before.fail_rate, pct_points=True),
                   delta_color="inverse", border=True)


def _headlines(filters: data.FilterState) -> None:
    """The headline tiles, compared with the previous period of the same length."""
    now = _headline(filters, "Cluster utilization", "Jobs")
    prev = filters.previous()
    before = (_Headline() if prev is None
              else _headline(prev, "Previous period", "Previous period jobs"))
    _headline_tiles(now, before)
    if prev is None:
        st.caption("Pick a time range in the sidebar to compare with the previous period.")
    else:
        st.caption(f"Changes compare with the previous period of the same length "
                   f"({prev.start:%Y-%m-%d %H:%M} → {prev.end:%Y-%m-%d %H:%M}).")


def _span_days(filters: data.FilterState) -> float | None:
    """Days the filters span, or the data spans when the filters are open (None: no data)."""
    if filters.start is not None and filters.end is not None:
        return (filters.end - filters.start).total_seconds() / 86400
    b = data.bounds()
    if b.first is not None and b.last is not None:
        return (b.last - b.first).total_seconds() / 86400
    return None


def _utilization_over_time(filters: data.FilterState) -> None:
    st.subheader("GPUs over time: allocated vs busy")
    span_days = _span_days(filters)
    freq = "hour" if span_days is None or span_days <= 14 else "day"
    ts = ui.fetch(analysis.utilization_timeseries, "Utilization over time",
                  filters=filters, freq=freq)
    if not isinstance(ts, pd.DataFrame):
        return
    if ts.empty:
        ui.no_match("No GPU sample")
        return
    over_time = charts.utilization_over_time(ts)
    st.vega_lite_chart(over_time.data, over_time.spec, width="stretch")
    with st.expander("Table"):
        ui.table(ts, "utilization over time")


def _goodput(filters: data.FilterState) -> None:
    st.subheader("Where did the GPU-hours go?")
    goodput = ui.fetch(analysis.goodput, "Goodput", filters=filters)
    if not isinstance(goodput, pd.DataFrame):
        return
    chart = charts.goodput_waterfall(goodput) if not goodput.empty else None
    if chart is None:
        ui.no_match("No allocated GPU-hour")
        return
    st.vega_lite_chart(chart.data, chart.spec, width="stretch")
    st.caption("Every bar is a part of the allocated GPU-hours. Idle: allocated but "
               "the GPU was not busy. Failed or killed: busy GPU-hours of runs that "
               "failed or were killed (the Failures page's busy figure). After "
               "converging: busy GPU-hours after the job had already converged (the "
               "Early stop page's busy figure). Effective: the rest.")
    with st.expander("Table"):
        ui.table(goodput, "goodput")


def _by_vc(filters: data.FilterState) -> None:
    st.subheader("By virtual cluster")
    by_vc = ui.fetch(analysis.utilization, "Utilization by vc", filters=filters, by="vc")
    if not isinstance(by_vc, pd.DataFrame):
        return
    if by_vc.empty:
        ui.no_match()
        return
    ui.table(by_vc, "utilization by vc", column_config={
        "mean_util": st.column_config.ProgressColumn("Mean utilization", min_value=0,
                                                     max_value=100, format="%.1f%%"),
    })


def render() -> None:
    filters = ui.page_header("Overview", "Where the GPU-hours go")
    ui.require_data()
    _alerts()
    _headlines(filters)
    left, right = st.columns(2)
    with left:
        _utilization_over_time(filters)
    with right:
        _goodput(filters)
    _by_vc(filters)

render()

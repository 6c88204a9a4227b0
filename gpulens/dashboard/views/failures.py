"""Failures: by category and origin over time, runtime to failure, cost, drill-down to the log."""

from __future__ import annotations

import html
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from gpulens import analysis
from gpulens.analysis import accounting as acc
from gpulens.dashboard import charts, data, ui
from gpulens.diagnosis import logs as diag_logs

__all__ = [
    "CONTEXT_AFTER",
    "CONTEXT_BEFORE",
    "cost_chart",
    "highlighted_log_html",
    "over_time_chart",
    "render",
    "runtime_chart",
]

#: Lines of context shown around the fatal region.
CONTEXT_BEFORE = 25
CONTEXT_AFTER = 10

_ORIGIN_COLORS = {
    "user": "#4c78a8",
    "data": "#f58518",
    "framework": "#b279a2",
    "infrastructure": "#e45756",
    "unknown": "#9e9e9e",
}


def highlighted_log_html(lines: list[str], start: int, end: int, first: int, last: int) -> str:
    """Lines ``first..last`` as a <pre>, numbered, with ``start..end`` highlighted."""
    out = []
    for i in range(first, last):
        text = html.escape(lines[i]) or " "
        num = f'<span style="color:#888;user-select:none">{i + 1:>6}  </span>'
        if start <= i < end:
            out.append(f'<div class="gl-fatal" style="background:#ffe1e1">{num}{text}</div>')
        else:
            out.append(f"<div>{num}{text}</div>")
    return ('<pre class="gl-log" style="font-size:12px;line-height:1.35;max-height:560px;overflow:auto;'
            'padding:8px;border:1px solid #ddd;border-radius:6px;white-space:pre-wrap">'
            + "".join(out) + "</pre>")


def _bucket(span: pd.Timedelta) -> str:
    """A time bucket that gives a few dozen bars over ``span``."""
    for limit, bucket in ((pd.Timedelta(hours=12), "30min"), (pd.Timedelta(days=1), "1h"),
                          (pd.Timedelta(days=3), "3h"), (pd.Timedelta(days=7), "6h"),
                          (pd.Timedelta(days=21), "12h")):
        if span <= limit:
            return bucket
    return "1D" if span <= pd.Timedelta(days=90) else "7D"


def over_time_chart(failed: pd.DataFrame) -> alt.Chart | None:
    """Failed jobs per time bucket, stacked by failure category (most frequent at the bottom)."""
    df = failed.dropna(subset=["end_time"]).copy()
    if df.empty:
        return None
    df["end_time"] = pd.to_datetime(df["end_time"])
    bucket = _bucket(df["end_time"].max() - df["end_time"].min())
    df["when"] = df["end_time"].dt.floor(bucket)
    df["category"] = df["failure_category"].fillna("undiagnosed")
    order = list(df["category"].value_counts().index)
    counts = df.groupby(["when", "category"], as_index=False).size()
    counts["rank"] = counts["category"].map({c: i for i, c in enumerate(order)})
    label = {"30min": "30 minutes", "1h": "hour", "3h": "3 hours", "6h": "6 hours",
             "12h": "12 hours", "1D": "day", "7D": "week"}[bucket]
    return (
        alt.Chart(counts)
        .mark_bar()
        .encode(
            x=alt.X("when:T", title=None),
            y=alt.Y("size:Q", title=f"failed jobs per {label}",
                    axis=alt.Axis(format="d", tickMinStep=1)),
            color=alt.Color("category:N", sort=order, scale=alt.Scale(scheme="tableau20"),
                            legend=alt.Legend(title="category", orient="right",
                                              symbolLimit=0, labelLimit=200)),
            order=alt.Order("rank:Q"),
            tooltip=[alt.Tooltip("when:T", title="from"), "category:N",
                     alt.Tooltip("size:Q", title="failed jobs")],
        )
        .properties(height=max(260, 18 * len(order)))
    )


def _origin_domain(origins: set[str]) -> tuple[list[str], list[str]]:
    domain = [o for o in _ORIGIN_COLORS if o in origins] + sorted(origins - set(_ORIGIN_COLORS))
    return domain, [_ORIGIN_COLORS.get(o, "#bab0ac") for o in domain]


def cost_chart(cost: pd.DataFrame) -> alt.LayerChart:
    """Allocated GPU-hours of failed or killed runs per category (largest first), stacked by
    origin, the allocated (and busy) total at the end."""
    df = cost.copy()
    totals = (df.groupby("category", as_index=False)
              .agg(allocated_gpu_hours=("allocated_gpu_hours", "sum"),
                   busy_gpu_hours=("busy_gpu_hours", "sum"), failures=("failures", "sum"))
              .sort_values(["allocated_gpu_hours", "category"], ascending=[False, True]))
    order = list(totals["category"])
    totals["label"] = [f"{a:,.1f} ({b:,.1f} busy)" for a, b
                       in zip(totals["allocated_gpu_hours"], totals["busy_gpu_hours"], strict=True)]
    domain, colors = _origin_domain(set(df["origin"]))
    y = alt.Y("category:N", sort=order, title=None,
              axis=alt.Axis(labelLimit=240, labelOverlap=False))
    bars = alt.Chart(df).mark_bar().encode(
        y=y,
        x=alt.X("allocated_gpu_hours:Q", title="Allocated GPU-hours of failed or killed runs",
                stack="zero", axis=alt.Axis(format=",d")),
        color=alt.Color("origin:N", scale=alt.Scale(domain=domain, range=colors),
                        legend=alt.Legend(title="origin", orient="top")),
        tooltip=["category:N", "origin:N", alt.Tooltip("failures:Q", title="failed attempts"),
                 alt.Tooltip("allocated_gpu_hours:Q", format=",.1f", title="allocated GPU-hours"),
                 alt.Tooltip("busy_gpu_hours:Q", format=",.1f", title="busy GPU-hours"),
                 alt.Tooltip("median_runtime_to_failure_hours:Q", format=".2f",
                             title="median hours to failure")],
    )
    text = alt.Chart(totals).mark_text(align="left", dx=4, fontSize=11, color="#444").encode(
        y=y, x=alt.X("allocated_gpu_hours:Q"), text="label:N")
    chart = alt.LayerChart(layer=[bars, text], height=charts.rows_height(len(order)))
    return charts.fit_width(chart)


#: Ticks of the runtime axis (hours) and their labels.
_RUNTIME_TICKS = [(acc.runtime_hours(60), "1 min"), (acc.runtime_hours(300), "5 min"),
                  (0.25, "15 min"), (1.0, "1 h"),
                  (4.0, "4 h"), (24.0, "1 day"), (96.0, "4 days"), (24.0 * 14, "2 weeks")]


def _runtime_frame(failed: pd.DataFrame, origins: dict[str, str] | None
                   ) -> tuple[pd.DataFrame, list[str]]:
    """Failed jobs with their hours to failure (at least a minute), category label ("name
    (count)") and origin; and the labels by median hours, longest first."""
    df = failed.dropna(subset=["start_time", "end_time"]).copy()
    if df.empty:
        return df, []
    hours = acc.runtime_hours(
        (pd.to_datetime(df["end_time"]) - pd.to_datetime(df["start_time"])).dt.total_seconds())
    # a log scale; under a minute counts as a minute
    df["hours"] = hours.clip(lower=acc.runtime_hours(60))
    df["category"] = df["failure_category"].fillna("undiagnosed")
    stats = df.groupby("category")["hours"].agg(["median", "size"]).sort_values(
        "median", ascending=False)
    names = {c: f"{c} ({int(n)})" for c, n in stats["size"].items()}
    df["label"] = df["category"].map(names)
    df["origin"] = df["category"].map(origins or {}).fillna("unknown")
    return df, [names[c] for c in stats.index]


def _runtime_ticks(lo: float, hi: float) -> list[float]:
    """The ticks of :data:`_RUNTIME_TICKS` that span ``lo..hi`` hours."""
    values = [v for v, _ in _RUNTIME_TICKS]
    first = max([i for i, v in enumerate(values) if v <= lo] or [0])
    last = min([i for i, v in enumerate(values) if v >= hi] or [len(values) - 1])
    return values[first:last + 1]


def runtime_chart(failed: pd.DataFrame, origins: dict[str, str] | None = None
                  ) -> alt.LayerChart | None:
    """Hours from start to failure per category (box: quartiles, whiskers: min-max), log scale.

    Categories are sorted by their median, longest first, labelled with their job
    count and coloured by ``origins`` (category -> origin) when given.
    """
    df, order = _runtime_frame(failed, origins)
    if df.empty:
        return None
    ticks = _runtime_ticks(float(df["hours"].min()), float(df["hours"].max()))
    tick_expr = " : ".join(f"datum.value < {v * 1.01!r} ? {t!r}" for v, t in _RUNTIME_TICKS)
    domain, colors = _origin_domain(set(df["origin"]))
    y = alt.Y("label:N", sort=order, title=None, axis=alt.Axis(labelLimit=240, labelOverlap=False))
    x = alt.X("hours:Q", title="time from start to failure (log scale)",
              scale=alt.Scale(type="log", domain=[ticks[0], ticks[-1]]),
              axis=alt.Axis(values=ticks, labelExpr=tick_expr + " : ''"))
    color = alt.Color("origin:N", scale=alt.Scale(domain=domain, range=colors),
                      legend=alt.Legend(title="origin", orient="top"))
    boxes = alt.Chart(df).mark_boxplot(extent="min-max", size=16, opacity=0.8).encode(
        y=y, x=x, color=color)
    dots = alt.Chart(df).mark_circle(size=22, opacity=0.7).encode(
        y=y, x=x, color=color,
        tooltip=["job_id:N", "category:N", alt.Tooltip("hours:Q", format=".2f", title="hours")])
    return charts.fit_width(alt.LayerChart(layer=[boxes, dots],
                                           height=charts.rows_height(len(order))))

def _pick_failed_job(failed: pd.DataFrame) -> str:
    """The failed jobs, costliest first; the selected one's id (or the costliest's)."""
    view = failed.sort_values("allocated_gpu_hours", ascending=False).reset_index(drop=True)
    cols = [c for c in ("job_id", "user", "vc", "gpus", "failure_category", "allocated_gpu_hours",
                        "end_time") if c in view.columns]
    view = view[cols]
    state = ui.table(view, "failed jobs", select=True, height=260)
    rows = list(getattr(getattr(state, "selection", None), "rows", []) or [])
    job_id = str(view.iloc[rows[0]]["job_id"]) if rows else str(view.iloc[0]["job_id"])
    if not rows:
        st.caption(f"Select a row; showing the costliest failed job, {job_id}.")
    return job_id


def _pick_attempt(attempts: pd.DataFrame) -> tuple[int, pd.Series]:
    """The attempt chosen among the failed ones (all when none failed), the last by default;
    returns its number and its row."""
    bad = attempts[attempts["status"] == "failed"] if "status" in attempts else attempts
    if bad.empty:
        bad = attempts
    labels = [int(a) for a in bad["attempt"]]
    attempt = st.selectbox("Attempt", labels, index=len(labels) - 1, key="fail_attempt")
    return attempt, bad[bad["attempt"] == attempt].iloc[0]


def _diagnosis_of(failures: Any, attempt: int) -> dict[str, Any]:
    """The stored diagnosis of ``attempt`` as a dict (empty when there is none)."""
    if not isinstance(failures, pd.DataFrame) or failures.empty:
        return {}
    match = failures[failures["attempt"] == attempt]
    if match.empty:
        return {}
    return {str(k): v for k, v in match.iloc[0].to_dict().items()}


def _show_log(job_id: str, attempt: int, log_path: Any) -> None:
    """The attempt's log around its fatal region (highlighted), or all of it, and a download."""
    text, problem, truncated = data.read_log(log_path)
    if text is None:
        st.info(f"No log to show: {problem}.", icon=":material/description:")
        return
    lines = text.splitlines()
    region = diag_logs.fatal_region(text)
    start, end = int(region.start_line), int(region.end_line)
    show_all = st.toggle("Show the whole log", key="fail_show_all")
    first = 0 if show_all else max(0, start - CONTEXT_BEFORE)
    last = len(lines) if show_all else min(len(lines), end + CONTEXT_AFTER)
    st.caption(f"Fatal region: lines {start + 1}–{end} of {len(lines):,} (highlighted)"
               + ("; the log is long, gpulens read its start, its end and the part around the "
                  "last traceback" if truncated else ""))
    st.html(highlighted_log_html(lines, start, end, first, last))
    st.download_button("Download this log", text.encode("utf-8"),
                       file_name=f"{job_id}-attempt{attempt}.log", mime="text/plain",
                       key="dl-fail-log", on_click="ignore")


def _drilldown(failed: pd.DataFrame) -> None:
    st.subheader("Drill down: a failed job's log")
    if failed.empty:
        ui.no_match("No failed job")
        return
    job_id = _pick_failed_job(failed)
    detail = ui.fetch(analysis.job_detail, "Job detail", job_id, use_filters=False)
    if detail is None:
        return
    attempts = getattr(detail, "attempts", pd.DataFrame())
    if not isinstance(attempts, pd.DataFrame) or attempts.empty:
        st.caption("This job has no attempts recorded.")
        return
    attempt, row = _pick_attempt(attempts)
    diag = _diagnosis_of(getattr(detail, "failures", pd.DataFrame()), attempt)
    if diag:
        st.markdown(f"Diagnosis: **`{diag.get('category')}`**, origin **{diag.get('origin')}**")
    st.page_link("views/job.py", label=f"Job page of {job_id}", icon=":material/open_in_new:",
                 query_params={"job": job_id})
    _show_log(job_id, attempt, row.get("log_path"))

def _tiles(cost: pd.DataFrame) -> None:
    """Failed attempts, the GPU-hours they held (allocated, busy), the infrastructure share."""
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Failed or killed attempts",
              f"{int(cost['failures'].sum()):,}" if not cost.empty else "0", border=True)
    c2.metric("Allocated GPU-h lost",
              ui.fmt_hours(cost["allocated_gpu_hours"].sum() if not cost.empty else 0.0),
              border=True, help="Allocated GPU-hours of the runs that failed or were killed.")
    c3.metric("Busy GPU-h lost",
              ui.fmt_hours(cost["busy_gpu_hours"].sum() if not cost.empty else 0.0),
              border=True, help="Busy GPU-hours of the runs that failed or were killed: the "
                                "Overview waterfall's \"Failed or killed\" stage.")
    if not cost.empty:
        by_origin = cost.groupby("origin")["allocated_gpu_hours"].sum()
        infra = float(by_origin.get("infrastructure", 0.0))
        c4.metric("Infrastructure share",
                  ui.fmt_pct(100 * acc.share(infra, float(by_origin.sum()))), border=True,
                  help="Share of the allocated GPU-hours lost whose failures have an "
                       "infrastructure origin.")


def _over_time_and_cost(failed: pd.DataFrame, cost: Any) -> None:
    left, right = st.columns(2)
    with left:
        st.subheader("Failures over time, by category")
        chart = over_time_chart(failed) if not failed.empty else None
        if chart is None:
            ui.no_match("No failed job")
        else:
            st.altair_chart(chart, width="stretch")
    with right:
        st.subheader("Allocated GPU-hours lost, by category and origin")
        if isinstance(cost, pd.DataFrame):
            if cost.empty:
                ui.no_match("No failure")
            else:
                st.altair_chart(cost_chart(cost), width="stretch")


def _main_origins(cost: Any) -> dict[str, str] | None:
    """Each category's origin with the most allocated GPU-hours lost (None without a cost)."""
    if not isinstance(cost, pd.DataFrame) or cost.empty:
        return None
    main = cost.sort_values("allocated_gpu_hours").groupby("category")["origin"].last()
    return {str(k): str(v) for k, v in main.items()}


def _runtime_and_table(failed: pd.DataFrame, cost: Any) -> None:
    left, right = st.columns(2)
    with left:
        st.subheader("Runtime to failure")
        runtime = runtime_chart(failed, _main_origins(cost)) if not failed.empty else None
        if runtime is None:
            ui.no_match("No failed job")
        else:
            st.altair_chart(runtime, width="stretch")
            st.caption("Failed jobs per category (how many in brackets), from start to end: "
                       "box = middle half, line = median, whiskers = fastest and slowest, "
                       "dots = single jobs.")
    with right:
        st.subheader("Cost table")
        if isinstance(cost, pd.DataFrame):
            ui.table(cost, "failure cost")


def render() -> None:
    filters = ui.page_header("Failures", "Why jobs fail, and what it costs")
    ui.require_data()
    cost = ui.fetch(analysis.failure_cost, "Failure cost", filters=filters)
    jobs = ui.fetch(analysis.job_utilization, "Jobs", filters=filters)
    failed = (jobs[jobs["status"] == "failed"] if isinstance(jobs, pd.DataFrame)
              else pd.DataFrame())
    if isinstance(cost, pd.DataFrame):
        _tiles(cost)
    _over_time_and_cost(failed, cost)
    _runtime_and_table(failed, cost)
    _drilldown(failed)

render()

"""Jobs: a searchable, filterable table of every job; select a row to open its job page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import streamlit as st

from gpulens import analysis
from gpulens.dashboard import ui

__all__ = ["COLUMN_ORDER", "MAX_ROWS", "render"]

#: Rows shown in the browser; the CSV download always has every matching row.
MAX_ROWS = 5000

JOB_PAGE = "views/job.py"

#: Column order of the jobs table (others follow).
COLUMN_ORDER = ["job_id", "user", "vc", "status", "failure_category", "failure_origin", "gpus", "servers",
                "mean_util", "allocated_gpu_hours", "busy_gpu_hours", "start_time", "end_time"]


def _search(jobs: pd.DataFrame, text: str) -> pd.DataFrame:
    text = text.strip().lower()
    if not text:
        return jobs
    mask = pd.Series(False, index=jobs.index)
    for col in ("job_id", "user", "vc", "name"):
        if col in jobs.columns:
            mask |= jobs[col].astype("string").str.lower().str.contains(text, regex=False).fillna(
                False
            )
    return jobs[mask]


@dataclass(frozen=True)
class _Picks:
    """What the filter row above the table asks for."""

    text: str
    statuses: list[str]
    categories: list[str]
    min_gpus: float


def _filter_widgets(jobs: pd.DataFrame) -> _Picks:
    """The search box and filters above the table; returns what they hold."""
    with st.container(border=True):
        c1, c2, c3, c4 = st.columns([3, 2, 2, 2])
        text = c1.text_input("Search job id, user, vc", key="jobs_search",
                             placeholder="e.g. job-000123 or alice")
        statuses = sorted(str(s) for s in jobs["status"].dropna().unique()) if len(jobs) else []
        picked_status = c2.multiselect("Status", statuses, key="jobs_status", placeholder="any")
        categories = (sorted(str(s) for s in jobs["failure_category"].dropna().unique())
                      if len(jobs) else [])
        picked_cat = c3.multiselect("Failure category", categories, key="jobs_category",
                                    placeholder="any")
        max_gpus = int(jobs["gpus"].max()) if len(jobs) and pd.notna(jobs["gpus"].max()) else 1
        min_gpus = c4.number_input("At least this many GPUs", min_value=0,
                                   max_value=max(max_gpus, 1), value=0, step=1, key="jobs_min_gpus")
    return _Picks(text, picked_status, picked_cat, min_gpus)


def _apply(jobs: pd.DataFrame, picks: _Picks) -> pd.DataFrame:
    """The jobs that match ``picks``, newest first."""
    shown = _search(jobs, picks.text)
    if picks.statuses:
        shown = shown[shown["status"].isin(picks.statuses)]
    if picks.categories:
        shown = shown[shown["failure_category"].isin(picks.categories)]
    if picks.min_gpus:
        shown = shown[shown["gpus"] >= picks.min_gpus]
    if "start_time" in shown.columns:
        shown = shown.sort_values("start_time", ascending=False, na_position="last")
    return shown


def _tiles(shown: pd.DataFrame) -> None:
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Jobs", f"{len(shown):,}", border=True)
    c2.metric("Allocated GPU-hours", ui.fmt_hours(shown["allocated_gpu_hours"].sum()), border=True)
    c3.metric("Busy GPU-hours", ui.fmt_hours(shown["busy_gpu_hours"].sum()), border=True)
    failed = int((shown["status"] == "failed").sum())
    c4.metric("Failed", f"{failed:,}", border=True)


def _jobs_table(shown: pd.DataFrame) -> None:
    """The newest MAX_ROWS jobs (all in the CSV), and a link to the selected one's page."""
    if len(shown) > MAX_ROWS:
        st.caption(f"Showing the newest {MAX_ROWS:,} of {len(shown):,} jobs; the CSV has all.")
    view = shown.head(MAX_ROWS).reset_index(drop=True)
    # what a person scans first on the left; the times, wide and least read, on the right
    first = [c for c in COLUMN_ORDER if c in view.columns]
    view = view[first + [c for c in view.columns if c not in first]]
    state = ui.table(
        view,
        "jobs",
        select=True,
        height=520,
        column_config={
            "mean_util": st.column_config.ProgressColumn("Mean utilization", min_value=0,
                                                         max_value=100, format="%.0f%%"),
        },
    )
    if len(shown) > MAX_ROWS:
        st.download_button("Download all matching jobs (CSV)",
                           shown.to_csv(index=False).encode("utf-8"),
                           file_name="gpulens-jobs-all.csv", mime="text/csv", key="dl-jobs-all",
                           on_click="ignore")
    _job_link(view, state)


def _job_link(view: pd.DataFrame, state: Any) -> None:
    """A link to the job page of the selected row (or how to get one)."""
    rows = list(getattr(getattr(state, "selection", None), "rows", []) or [])
    if rows:
        job_id = str(view.iloc[rows[0]]["job_id"])
        st.page_link(JOB_PAGE, label=f"Open job {job_id}", icon=":material/open_in_new:",
                     query_params={"job": job_id})
    else:
        st.caption("Select a row to open its job page.")


def render() -> None:
    filters = ui.page_header("Jobs", "Every job in the selected period")
    ui.require_data()
    jobs = ui.fetch(analysis.job_utilization, "The jobs table", filters=filters)
    if not isinstance(jobs, pd.DataFrame):
        return
    shown = _apply(jobs, _filter_widgets(jobs))
    _tiles(shown)
    if shown.empty:
        ui.no_match("No job")
        return
    _jobs_table(shown)

render()

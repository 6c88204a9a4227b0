"""One job: per-GPU utilization, placement, metric curve with its early-stop point, diagnosis."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st

from gpulens import analysis
from gpulens.dashboard import charts, data, ui
from gpulens.dashboard.views.job_machines import machines_section
from gpulens.diagnosis import jobs as diag_jobs
from gpulens.diagnosis.logread.context import attempt_log_context

__all__ = ["MAX_HEATMAP_CELLS", "render"]

#: Above this many (GPU, minute) cells the heatmap is averaged into coarser time bins.
MAX_HEATMAP_CELLS = 20_000


def _frame(obj: Any, name: str) -> pd.DataFrame:
    value = getattr(obj, name, None)
    return value if isinstance(value, pd.DataFrame) else pd.DataFrame()


def _binned_timeline(timeline: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The timeline per GPU ("node:index") and time bin, at most MAX_HEATMAP_CELLS cells;
    returns it and the GPU count."""
    tl = timeline.copy()
    tl["ts"] = pd.to_datetime(tl["ts"])
    tl["gpu"] = tl["node"].astype(str) + ":" + tl["gpu_index"].astype(str)
    n_gpus = max(tl["gpu"].nunique(), 1)
    minutes = max(len(tl) // n_gpus, 1)
    bin_minutes = max(1, -(-minutes * n_gpus // MAX_HEATMAP_CELLS))
    if bin_minutes > 1:
        tl["ts"] = tl["ts"].dt.floor(f"{bin_minutes}min")
        tl = tl.groupby(["gpu", "ts"], as_index=False).agg(util_gpu=("util_gpu", "mean"))
    else:
        tl["ts"] = tl["ts"].dt.floor("1min")
    tl["ts_end"] = tl["ts"] + pd.Timedelta(minutes=bin_minutes)
    return tl, n_gpus


def _attempt_starts(attempts: pd.DataFrame | None) -> pd.DataFrame:
    """When each attempt started, labelled (empty unless there is more than one)."""
    starts = pd.DataFrame()
    if attempts is not None and len(attempts) > 1 and "start_time" in attempts:
        starts = attempts.dropna(subset=["start_time"])[["attempt", "start_time"]].copy()
        starts["start_time"] = pd.to_datetime(starts["start_time"])
        starts["label"] = "attempt " + starts["attempt"].astype(int).astype(str)
    return starts


def gpu_heatmap(timeline: pd.DataFrame, attempts: pd.DataFrame | None = None
                ) -> alt.Chart | alt.LayerChart:
    """Utilization of every GPU of the job over time (one row per GPU).

    With ``attempts`` (more than one), a dashed rule marks where each attempt started.
    """
    tl, n_gpus = _binned_timeline(timeline)
    # one row per GPU: 22 px while that fits in 700 px, then thinner (labels thinned out)
    step = 22 if n_gpus <= 32 else max(700 // n_gpus, 4)
    heat = (
        alt.Chart(tl)
        .mark_rect()
        .encode(
            x=alt.X("ts:T", title=None),
            x2="ts_end:T",
            y=alt.Y("gpu:N", title="node:GPU", sort="ascending",
                    axis=alt.Axis(labelOverlap=step < 12)),
            color=alt.Color("util_gpu:Q", title="util %",
                            scale=alt.Scale(domain=[0, 100], scheme="viridis")),
            tooltip=[alt.Tooltip("ts:T", title="time"), "gpu:N",
                     alt.Tooltip("util_gpu:Q", title="util %", format=".0f")],
        )
    )
    height = charts.rows_height(n_gpus, step=step, minimum=1)
    starts = _attempt_starts(attempts)
    if starts.empty:
        return charts.fit_width(heat.properties(height=height))
    rule = alt.Chart(starts).mark_rule(color="#e45756", strokeDash=[4, 3], size=1.5).encode(
        x=alt.X("start_time:T", title=None),
        tooltip=["label:N", alt.Tooltip("start_time:T", title="started")])
    text = alt.Chart(starts).mark_text(align="left", baseline="bottom", dx=3, dy=-2,
                                       color="#e45756", fontSize=11).encode(
        x=alt.X("start_time:T", title=None), y=alt.value(0), text="label:N")
    return charts.fit_width(alt.LayerChart(layer=[heat, rule, text], height=height))

def metric_curve(metrics: pd.DataFrame, converged: float | None) -> alt.FacetChart | alt.LayerChart:
    base = alt.Chart(metrics).mark_line(point=True).encode(
        x=alt.X("step:Q", title="epoch"),
        y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=False)),
        tooltip=["metric:N", "step:Q", alt.Tooltip("value:Q", format=".4f")],
    )
    layers: list[Any] = [base]
    if converged is not None:
        rule = alt.Chart(pd.DataFrame({"step": [converged], "label": ["converged"]})).mark_rule(
            color="#e45756", strokeDash=[6, 4], size=2
        ).encode(x="step:Q", tooltip=["label:N", "step:Q"])
        layers.append(rule)
    return alt.layer(*layers, data=metrics).properties(height=220, width=420).facet(
        column=alt.Column("metric:N", title=None)
    ).resolve_scale(y="independent")


def _diagnosis(job_id: str, failures: pd.DataFrame) -> None:
    st.subheader("Diagnosis")
    if failures.empty:
        st.caption("No failure diagnosis is stored for this job.")
    for row in failures.to_dict("records"):
        conf = row.get("confidence")
        conf_text = f", confidence {float(conf):.0%}" if conf is not None and pd.notna(conf) else ""
        st.markdown(
            f"**Attempt {row.get('attempt', '?')}: `{row.get('category', '?')}`**, "
            f"origin **{row.get('origin', '?')}**{conf_text} "
            f"<small>({row.get('method') or 'stored'})</small>",
            unsafe_allow_html=True,
        )
        _story(job_id, row)
        evidence = row.get("evidence")
        if evidence is not None and len(evidence):
            st.code("\n".join(str(x) for x in evidence), language=None, wrap_lines=True)
        moved = _influence_texts(row.get("origin_influence"))
        if moved:
            st.caption("What moved the origin most: " + "; ".join(moved))
    if st.button("Diagnose now (classifier + origin model)", key="job_diagnose",
                 icon=":material/troubleshoot:"):
        try:
            result = data.call_store(diag_jobs.diagnose_job, job_id)
        except Exception as exc:  # show, do not crash the page
            st.error(f"Diagnosis failed: {type(exc).__name__}: {exc}")
            return
        _render_job_diagnosis(result)


def _story(job_id: str, row: Mapping[Any, Any]) -> None:
    """The whole-log story and the failure-indicating lines in their context (from the log)."""
    story = row.get("story")
    if isinstance(story, str) and story:
        st.markdown(f"_{story}_")
    numbers = row.get("indicator_lines")
    if numbers is None or not len(numbers) or row.get("attempt") is None or pd.isna(row.get("attempt")):
        return
    shown = data.call_store(attempt_log_context, job_id, int(row["attempt"]), tuple(int(n) for n in numbers))
    if shown:
        width = len(f"{max(n for n, _, _ in shown):,}")
        text = "\n".join("" if not n else f"{'>' if hit else ' '} {n:>{width},} | {line}" for n, line, hit in shown)
        st.caption("Failure-indicating lines (>) in their context, numbered as in the log:")
        st.code(text.replace("\n\n", "\n ...\n"), language=None, wrap_lines=True)


def _influence_texts(raw: Any, n: int = 3) -> list[str]:
    """The ``text`` of the first ``n`` origin influences (stored JSON or a list of dicts)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return []
    if not isinstance(raw, list):
        return []
    return [str(i.get("text")) for i in raw[:n] if isinstance(i, dict) and i.get("text")]


def _posterior_chart(posterior: dict[str, float]) -> alt.Chart:
    post = pd.DataFrame({"origin": list(posterior), "probability": list(posterior.values())})
    chart = alt.Chart(post).mark_bar().encode(
        x=alt.X("probability:Q", scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")),
        y=alt.Y("origin:N", sort="-x", title=None, axis=alt.Axis(labelOverlap=False)),
        tooltip=["origin:N", alt.Tooltip("probability:Q", format=".1%")],
    ).properties(height=charts.rows_height(len(post), step=24))
    return charts.fit_width(chart)


def _render_job_diagnosis(result: Any) -> None:
    attempts = getattr(result, "attempts", None)
    if not attempts:
        st.info("No failed attempt to diagnose.")
        return
    for item in attempts:
        if hasattr(item, "to_dict"):
            info: dict[str, Any] = item.to_dict()
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            info = dataclasses.asdict(item)
        else:
            info = dict(vars(item))
        st.markdown(f"**Attempt {info.get('attempt', '?')}**: `{info.get('category', '?')}`, "
                    f"origin **{info.get('origin', '?')}**")
        posterior = info.get("origin_posterior")
        if isinstance(posterior, dict) and posterior:
            st.altair_chart(_posterior_chart(posterior), width="stretch")
        lines = info.get("evidence") or []
        if lines:
            st.code("\n".join(str(x) for x in lines), language=None, wrap_lines=True)
        moved = _influence_texts(info.get("influence"))
        if moved:
            st.caption("What moved the origin most: " + "; ".join(moved))


def _job_id() -> str:
    """The job id of the URL, or the one typed in the box (which then goes into the URL)."""
    job_id = str(st.query_params.get("job", "") or "")
    typed = st.text_input("Job id", value=job_id, key="job_id_input")
    if typed and typed != job_id:
        st.query_params["job"] = typed
        job_id = typed
    return job_id


def _tiles(job: Mapping[str, Any], placements: pd.DataFrame, attempts: pd.DataFrame) -> None:
    cols = st.columns(6)
    cols[0].metric("Status", str(job.get("status", "—")), border=True)
    cols[1].metric("User", str(job.get("user", "—")), border=True)
    cols[2].metric("VC", str(job.get("vc", "—")), border=True)
    gpus = job.get("requested_gpus") or (len(placements[["node", "gpu_index"]].drop_duplicates())
                                         if not placements.empty else None)
    cols[3].metric("GPUs", "—" if gpus is None else str(gpus), border=True)
    servers = placements["node"].nunique() if not placements.empty else None
    cols[4].metric("Servers", "—" if servers is None else str(servers), border=True)
    cols[5].metric("Attempts", str(len(attempts)), border=True)


def _utilization(timeline: pd.DataFrame, attempts: pd.DataFrame) -> None:
    st.subheader("Per-GPU utilization")
    if timeline.empty:
        st.caption("No GPU samples for this job.")
        return
    st.altair_chart(gpu_heatmap(timeline, attempts), width="stretch")
    if len(attempts) > 1:
        st.caption("Dashed lines: where each attempt started; gaps: the job was not running.")


def _training_curve(detail: Any) -> None:
    st.subheader("Training curve")
    metrics = _frame(detail, "metrics")
    converged = getattr(detail, "converged_epoch", None)
    converged = None if converged is None or pd.isna(converged) else float(converged)
    if metrics.empty:
        st.caption("This job reported no metric curve.")
        return
    st.altair_chart(metric_curve(metrics, converged))
    if converged is not None:
        epochs = metrics["step"].max()
        st.caption(f"Converged (within tolerance of its best accuracy) at epoch "
                   f"{converged:.0f} of {epochs:.0f}: the dashed line.")


def _attempts_and_placement(attempts: pd.DataFrame, placements: pd.DataFrame) -> None:
    left, right = st.columns(2)
    with left:
        st.subheader("Attempts")
        ui.table(attempts, "attempts", key="job-attempts", hide=["job_id"])
    with right:
        st.subheader("Placement")
        ui.table(ui.placement_summary(placements), "placement", key="job-placement",
                 csv=placements)


def _job_sections(job_id: str, detail: Any, job: Mapping[str, Any]) -> None:
    """Everything the page shows about a job found in the store."""
    placements = _frame(detail, "placements")
    attempts = _frame(detail, "attempts")
    _tiles(job, placements, attempts)
    _utilization(_frame(detail, "gpu_timeline"), attempts)
    machines_section(job_id)
    _training_curve(detail)
    _diagnosis(job_id, _frame(detail, "failures"))
    _attempts_and_placement(attempts, placements)


def render() -> None:
    st.page_link("views/jobs.py", label="Back to jobs", icon=":material/arrow_back:")
    job_id = _job_id()
    st.title(f"Job {job_id}" if job_id else "Job")
    ui.require_data()
    if not job_id:
        st.info("Enter a job id above, or pick a job on the Jobs page.")
        return
    ok, detail = ui.try_fetch(analysis.job_detail, "Job detail", job_id, use_filters=False)
    if not ok:
        return
    job = getattr(detail, "job", None) or {}
    if not job:
        st.warning(f"No job {job_id!r} in the store.", icon=":material/search_off:")
        return
    _job_sections(job_id, detail, job)

render()

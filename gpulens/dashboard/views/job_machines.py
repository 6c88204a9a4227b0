"""The job page's "Machines side by side" section: each machine's signals with the straggler marked.

Called from views/job.py in one place (``machines_section(job_id)``). Data: the job's GPU samples per
machine (``gpulens.diagnosis.live.job_machine_signals``) and the live watcher's stored detections
(``detection_history``, docs/straggler.md).
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from gpulens.dashboard import ui
from gpulens.diagnosis import live as lv

__all__ = ["machines_chart", "machines_section"]


def machines_chart(signals: pd.DataFrame, suspects: set[str]) -> alt.FacetChart:
    """One small chart per signal, one line per machine; suspected machines drawn thick and red."""
    df = signals.copy()
    df["ts"] = pd.to_datetime(df["ts"])
    df["machine"] = df["node"].astype(str) + df["node"].map(lambda n: "  (suspect)" if n in suspects else "")
    df["suspect"] = df["node"].isin(suspects)
    base = alt.Chart(df).mark_line().encode(
        x=alt.X("ts:T", title=None),
        y=alt.Y("value:Q", title=None),
        detail="machine:N",
        color=alt.condition("datum.suspect", alt.value("#e45756"), alt.value("#9aa5b1")),
        strokeWidth=alt.condition("datum.suspect", alt.value(2.5), alt.value(1)),
        tooltip=[alt.Tooltip("ts:T", title="time"), "machine:N", alt.Tooltip("value:Q", format=".3g")],
    ).properties(height=110, width=320)
    return base.facet(facet=alt.Facet("signal:N", title=None), columns=2).resolve_scale(y="independent")


def machines_section(job_id: str) -> None:
    st.subheader("Machines side by side")
    hist = ui.fetch(lv.detection_history, "Straggler detections", job_id=job_id, use_filters=False)
    hist = hist if isinstance(hist, pd.DataFrame) else pd.DataFrame()
    open_now = set(hist.loc[hist["until_ts"].isna(), "node"]) if not hist.empty else set()
    ever = set(hist["node"]) if not hist.empty else set()
    if not hist.empty:
        for r in hist.to_dict("records"):
            state = "suspected now" if pd.isna(r["until_ts"]) else f"until {r['until_ts']}"
            st.warning(f"**{r['node']}** deviated from the job's other machines on "
                       f"{', '.join(r['signals'])} since {r['since']} ({state}; score {float(r['score']):.1f}).",
                       icon=":material/speed:")
    signals = ui.fetch(lv.job_machine_signals, "Machine signals", job_id, use_filters=False)
    if not isinstance(signals, pd.DataFrame) or signals.empty or signals["node"].nunique() < 2:
        st.caption("Machines are compared when the job ran on two or more nodes with GPU samples.")
        return
    st.altair_chart(machines_chart(signals, open_now or ever))
    st.caption("One line per machine; red: a machine the straggler watcher suspected "
               "(`gpulens nodes live`). Stable offsets between machines (pipeline stages, rank 0) are normal.")

"""Inputs and nodes: the input blacklist and its audit log, flagged nodes, anomaly scores,
node timelines. Blacklist changes need the operator token (read-only otherwise)."""

from __future__ import annotations

import hmac

import altair as alt
import pandas as pd
import streamlit as st

from gpulens import analysis
from gpulens.dashboard import charts, data, ui
from gpulens.diagnosis import blacklist, nodes
from gpulens.errors import GpulensError

__all__ = ["MAX_FLAGGED_LINES", "MAX_HEATMAP_NODES", "anomaly_heatmap", "node_charts", "render"]

#: The anomaly heatmap shows at most this many nodes (the highest scoring ones).
MAX_HEATMAP_NODES = 40
#: Flagged nodes listed with their reason above the table.
MAX_FLAGGED_LINES = 10


def anomaly_heatmap(scores: pd.DataFrame) -> alt.Chart:
    """Node x hour anomaly scores; one 20-pixel row per node, highest-scoring node on top."""
    df = scores.copy()
    df["hour"] = pd.to_datetime(df["hour"])
    top = (df.groupby("node")["score"].max().sort_values(ascending=False)
           .head(MAX_HEATMAP_NODES).index)
    df = df[df["node"].isin(top)]
    df["hour_end"] = df["hour"] + pd.Timedelta(hours=1)
    chart = (
        alt.Chart(df)
        .mark_rect()
        .encode(
            x=alt.X("hour:T", title=None),
            x2="hour_end:T",
            y=alt.Y("node:N", sort=list(top), title=None,
                    axis=alt.Axis(labelOverlap=False, labelLimit=200)),
            color=alt.Color("score:Q", title="anomaly", scale=alt.Scale(scheme="orangered")),
            tooltip=["node:N", alt.Tooltip("hour:T"), alt.Tooltip("score:Q", format=".2f")],
        )
        .properties(height=charts.rows_height(len(top), step=20))
    )
    return charts.fit_width(chart)


def node_charts(tl: pd.DataFrame) -> alt.VConcatChart:
    """GPU utilization, PCIe traffic and error counts of one node, on one shared time axis."""
    df = tl.copy()
    df["ts"] = pd.to_datetime(df["ts"])
    x = alt.X("ts:T", title=None, axis=alt.Axis(tickCount=12, labelOverlap=True))

    def panel(cols: dict[str, str], title: str, mark: str = "line") -> alt.Chart:
        present = {c: label for c, label in cols.items() if c in df.columns}
        long = df.melt(id_vars=["ts"], value_vars=list(present), var_name="series",
                       value_name="value")
        long["series"] = long["series"].map(present)
        counts = mark == "bar"
        if counts:  # events per minute: draw only the minutes that had some
            chart = alt.Chart(long[long["value"] > 0]).mark_bar(width=2)
        else:
            chart = alt.Chart(long).mark_line()
        axis = alt.Axis(format="d", tickMinStep=1) if counts else alt.Axis()
        return chart.encode(
            x=x, y=alt.Y("value:Q", title=title, axis=axis),
            color=alt.Color("series:N", legend=alt.Legend(title=None, orient="top")),
            tooltip=[alt.Tooltip("ts:T"), "series:N", alt.Tooltip("value:Q", format=",.2f")],
        ).properties(height=150)

    if "pcie_tx_bps" in df.columns:
        df["pcie_tx_mbps"] = df["pcie_tx_bps"] / 1e6
        df["pcie_rx_mbps"] = df["pcie_rx_bps"] / 1e6
    return alt.vconcat(
        panel({"util_gpu": "GPU utilization %"}, "util %"),
        panel({"pcie_tx_mbps": "PCIe TX", "pcie_rx_mbps": "PCIe RX"}, "MB/s"),
        panel({"net_errors": "network errors", "xid_count": "XID events"}, "count", mark="bar"),
    ).resolve_scale(color="independent", x="shared")


def _operator_controls() -> None:
    token = data.config().dashboard.operator_token
    if not token:
        st.caption("Read-only: set `dashboard.operator_token` in gpulens.toml (or "
                   "`GPULENS_DASHBOARD_OPERATOR_TOKEN`) to allow blacklist changes here.")
        return
    with st.expander("Change the blacklist (operators)", icon=":material/lock:"):
        entered = st.text_input("Operator token", type="password", key="op_token")
        if not entered:
            st.caption("Enter the operator token to add or clear entries.")
            return
        if not hmac.compare_digest(entered.encode(), token.encode()):
            st.warning("Wrong operator token.", icon=":material/lock:")
            return
        with st.form("op_form", clear_on_submit=True):
            action = st.radio("Action", ["Blacklist an input", "Clear an input"], key="op_action",
                              horizontal=True)
            target = st.text_input("Input (path or dataset id)", key="op_input")
            actor = st.text_input("Your name", key="op_actor")
            reason = st.text_input("Reason", key="op_reason")
            submitted = st.form_submit_button("Apply")
        if submitted:
            if not target.strip() or not actor.strip():
                st.warning("Give the input and your name.")
                return
            s = data.store()
            if s is None:
                st.warning("No store to write to.")
                return
            adding = action.startswith("Blacklist")
            change = blacklist.add if adding else blacklist.remove
            try:
                change(s, target.strip(), f"dashboard:{actor.strip()}", reason.strip())
            except GpulensError as exc:
                st.warning(str(exc))
                return
            data.clear_caches()
            st.success(f"{'Blacklisted' if adding else 'Cleared'} {target.strip()}.")


def _blacklist() -> None:
    st.subheader("Input blacklist")
    entries = ui.fetch(blacklist.list_entries, "The blacklist", use_filters=False)
    if isinstance(entries, pd.DataFrame):
        if entries.empty:
            st.caption("No input is suspected or blacklisted.")
        else:
            counts = entries["state"].value_counts() if "state" in entries else pd.Series()
            c1, c2, c3 = st.columns(3)
            c1.metric("Blacklisted", int(counts.get("blacklisted", 0)), border=True)
            c2.metric("Suspected", int(counts.get("suspected", 0)), border=True)
            c3.metric("Cleared", int(counts.get("cleared", 0)), border=True)
            if "state" in entries:  # blacklisted first, then suspected, then cleared
                rank = entries["state"].map({"blacklisted": 0, "suspected": 1, "cleared": 2})
                entries = entries.assign(_rank=rank.fillna(3)).sort_values(
                    ["_rank", "input"] if "input" in entries else ["_rank"], kind="stable"
                ).drop(columns="_rank").reset_index(drop=True)
            ui.table(entries, "blacklist")
    _operator_controls()
    audit = ui.fetch(blacklist.audit_log, "The blacklist audit log", use_filters=False)
    if isinstance(audit, pd.DataFrame):
        with st.expander(f"Audit log ({len(audit)} changes)"):
            ui.table(audit, "blacklist audit log")


def _flag_evidence(node: str, evidence: object) -> None:
    """Why a node is flagged: its rates vs the cluster's, the blamed jobs, the hardware signals."""
    details = nodes.flag_details(evidence if isinstance(evidence, str | dict) else None)
    if all(df.empty for df in details.values()):
        return
    with st.expander(f"Why {node}"):
        if not details["rates"].empty:
            ui.table(details["rates"], f"rates {node}", key=f"tbl-rates-{node}")
        if not details["jobs"].empty:
            st.caption("Infrastructure failures blamed on the node (share of each failure and why).")
            ui.table(details["jobs"], f"blamed jobs {node}", key=f"tbl-jobs-{node}")
        if not details["signals"].empty:
            st.caption("Hardware signals on the node, with their times.")
            ui.table(details["signals"], f"signals {node}", key=f"tbl-signals-{node}")


def _nodes(filters: data.FilterState) -> list[str]:
    st.subheader("Flagged nodes")
    known: list[str] = []
    flagged = ui.fetch(nodes.flagged_nodes, "Flagged nodes", use_filters=False)
    if isinstance(flagged, pd.DataFrame):
        if flagged.empty:
            st.caption("No node is flagged.")
        else:
            shown = flagged.sort_values("score", ascending=False) if "score" in flagged else flagged
            lines = []
            for row in shown.head(MAX_FLAGGED_LINES).to_dict("records"):
                conf = row.get("confidence")
                conf_text = f" (confidence {float(conf):.3f})" if conf is not None and pd.notna(conf) else ""
                lines.append(f"- **{row.get('node')}**{conf_text}: {row.get('reason') or ''}")
            st.markdown("\n".join(lines))
            for row in shown.head(MAX_FLAGGED_LINES).to_dict("records"):
                _flag_evidence(str(row.get("node")), row.get("evidence"))
            if len(shown) > MAX_FLAGGED_LINES:
                st.caption(f"The {MAX_FLAGGED_LINES} highest-scoring of {len(shown)} flagged "
                           "nodes; the table has all.")
            with st.expander(f"Table ({len(shown)} flagged)"):
                ui.table(shown, "flagged nodes", hide=["evidence"])
            known += [str(n) for n in shown["node"].unique()]
    st.subheader("Node anomaly scores")
    scores = ui.fetch(nodes.anomaly_scores, "Anomaly scores", filters=filters)
    if isinstance(scores, pd.DataFrame):
        if scores.empty:
            st.caption("No anomaly scores in this period (run `gpulens nodes anomalies`).")
        else:
            st.altair_chart(anomaly_heatmap(scores), width="stretch")
            st.caption(f"The {MAX_HEATMAP_NODES} highest-scoring nodes at most; darker = more "
                       "unusual for that node's hour.")
            ranked = scores.groupby("node")["score"].max().sort_values(ascending=False)
            known += [str(n) for n in ranked.index if str(n) not in known]
            with st.expander("Table"):
                ui.table(scores, "anomaly scores")
    return known


def _timeline(filters: data.FilterState, known: list[str]) -> None:
    st.subheader("Node timeline")
    c1, c2 = st.columns([2, 3])
    picked = c1.selectbox("Node", known, index=0 if known else None, key="node_pick",
                          placeholder="type a node name", accept_new_options=True)
    if not picked:
        st.caption("Pick or type a node.")
        return
    tl = ui.fetch(analysis.node_timeline, "Node timeline", str(picked), filters=filters)
    if isinstance(tl, pd.DataFrame):
        if tl.empty:
            ui.no_match(f"No sample of {picked}")
            return
        c2.caption("GPU utilization (mean over the node's GPUs), PCIe traffic, network errors "
                   "and XID events.")
        st.altair_chart(node_charts(tl), width="stretch")
        with st.expander("Table"):
            ui.table(tl, f"node timeline {picked}", key="tbl-node-timeline")


def render() -> None:
    filters = ui.page_header("Inputs and nodes", "Bad inputs and bad nodes")
    ui.require_data()
    _blacklist()
    st.divider()
    known = _nodes(filters)
    _timeline(filters, known)


render()

"""Small rendering helpers every page shares: empty states, notes, tables with CSV.

Tables show people's headers and numbers ("Allocated GPU-hours", ``1,234.5``,
``48.7%``) through Streamlit column configs built from the column names; the
DataFrame itself, and so its CSV download, keeps the raw names and full precision.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from gpulens.dashboard import data
from gpulens.errors import GpulensError

__all__ = [
    "COLUMN_LABELS",
    "EMPTY_MESSAGE",
    "column_config_for",
    "column_label",
    "fetch",
    "fmt_hours",
    "fmt_pct",
    "index_ranges",
    "no_match",
    "page_header",
    "placement_summary",
    "require_data",
    "table",
    "try_fetch",
]

log = logging.getLogger("gpulens.dashboard")

EMPTY_MESSAGE = "No data yet — run `gpulens collect` or `gpulens demo`."


def page_header(title: str, caption: str | None = None) -> data.FilterState:
    """Title, the active filters as a caption; returns the filters."""
    st.title(title)
    filters = data.current_filters()
    st.caption(("" if caption is None else caption + " · ") + "Filters: " + filters.describe())
    return filters


def require_data() -> None:
    """Show the empty state and stop the page when the store holds nothing yet."""
    if not data.has_data():
        st.info(EMPTY_MESSAGE, icon=":material/hourglass_empty:")
        st.caption(f"Data directory: `{data.data_dir()}`")
        st.stop()


def no_match(what: str = "Nothing") -> None:
    st.info(f"{what} matches the current filters.", icon=":material/filter_alt_off:")


def try_fetch(
    fn: Callable[..., Any], what: str, *args: Any, **kwargs: Any
) -> tuple[bool, Any]:
    """``data.call`` that renders a note instead of raising: (succeeded, result)."""
    try:
        return True, data.call(fn, *args, **kwargs)
    except GpulensError as exc:
        st.warning(f"{what}: {exc}", icon=":material/warning:")
    except Exception as exc:  # a bug in an analysis: say so, keep the rest of the page
        log.exception("%s failed", fn.__qualname__)
        st.error(f"{what} failed: {type(exc).__name__}: {exc}", icon=":material/error:")
    return False, None


def fetch(fn: Callable[..., Any], what: str, *args: Any, **kwargs: Any) -> Any:
    """:func:`try_fetch` that returns just the result (None on failure)."""
    return try_fetch(fn, what, *args, **kwargs)[1]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "table"


#: Headers of the columns the analyses return; any other column gets its name humanized.
COLUMN_LABELS: dict[str, str] = {
    "job_id": "Job",
    "vc": "VC",
    "gpus": "GPUs",
    "start_time": "Start",
    "end_time": "End",
    "allocated_gpu_hours": "Allocated GPU-hours",
    "busy_gpu_hours": "Busy GPU-hours",
    "gpu_hours": "GPU-hours",
    "basis": "Basis",
    "mean_util": "Mean utilization",
    "median_util": "Median utilization",
    "ts": "Time",
    "total_gpus": "GPUs in cluster",
    "allocated_gpus": "Allocated GPUs",
    "busy_gpus": "Busy GPUs",
    "failures": "Failed or killed attempts",
    "mean_runtime_to_failure_hours": "Mean hours to failure",
    "median_runtime_to_failure_hours": "Median hours to failure",
    "ci_low": "95% CI low",
    "ci_high": "95% CI high",
    "min_servers": "Fewest servers",
    "actual_util": "Utilization",
    "consolidated_util": "Utilization if packed",
    "lost_busy_gpu_hours": "Busy GPU-hours lost",
    "main_allocated_gpu_hours": "Allocated GPU-hours (main attempt)",
    "best_epoch": "Best epoch",
    "converged_epoch": "Converged at epoch",
    "converged_epoch_online": "Converged at epoch (online)",
    "fraction_epochs": "Epochs needed",
    "saveable_allocated_gpu_hours": "Allocated GPU-hours saveable",
    "saveable_busy_gpu_hours": "Busy GPU-hours saveable",
    "stop_epoch": "Online rule stops at epoch",
    "saved_allocated_gpu_hours": "Allocated GPU-hours saved (online rule)",
    "saved_busy_gpu_hours": "Busy GPU-hours saved (online rule)",
    "accuracy_given_up": "Accuracy given up",
    "evidence_jobs": "Evidence jobs",
    "updated_at": "Updated",
    "id": "#",
    "old_state": "From",
    "new_state": "To",
    "actor": "By",
    "flagged_at": "Flagged",
    "allocated_gpu_hours_saved": "Allocated GPU-hours saved (estimate)",
    "exit_code": "Exit code",
    "log_path": "Log",
    "gpu_index": "GPU",
    "gpu_indices": "GPU indices",
    "util_gpu": "GPU utilization",
    "pcie_tx_bps": "PCIe TX",
    "pcie_rx_bps": "PCIe RX",
    "net_errors": "Network errors",
    "xid_count": "XID events",
    "active_since": "Active since",
    "origin_confidence": "Origin confidence",
}

_WORDS = {"gpu": "GPU", "gpus": "GPUs", "vc": "VC", "id": "ID", "util": "utilization",
          "pcie": "PCIe", "xid": "XID", "ci": "CI", "cpu": "CPU", "pct": "%", "bps": "B/s"}

#: Values in 0..100 shown as percentages.
_PERCENT = {"mean_util", "median_util", "actual_util", "consolidated_util", "util_gpu", "ci_low",
            "ci_high"}
#: Values in 0..1 shown as percentages.
_FRACTION = {"fraction_epochs", "share", "confidence", "origin_confidence", "accuracy_given_up",
             "probability"}
#: Integer columns that are identifiers or codes, not quantities (no thousands separator).
_CODES = {"id", "attempt", "gpu_index", "exit_code", "signal"}


def column_label(name: str) -> str:
    """The header people read for a column: ``allocated_gpu_hours`` -> ``Allocated GPU-hours``."""
    if name in COLUMN_LABELS:
        return COLUMN_LABELS[name]
    words = [_WORDS.get(w, w) for w in str(name).split("_") if w]
    text = " ".join(words).replace("GPU hours", "GPU-hours")
    return text[:1].upper() + text[1:] if text else str(name)


def _is_hours(name: str) -> bool:
    return name.endswith("_hours") or name == "gpu_hours" or name.endswith("gpu_hours_saved")


def _number_format(name: str, dtype: Any) -> tuple[str, str]:
    """The NumberColumn format of a numeric column, and what its header gets appended."""
    if name in _PERCENT:
        return "%.1f%%", ""
    if name in _FRACTION:
        return "percent", ""
    if _is_hours(name):
        return "%,.1f", ""
    if name.endswith("_bps"):
        return "bytes", " (per s)"
    if pd.api.types.is_integer_dtype(dtype):
        return ("%d" if name in _CODES else "%,d"), ""
    return "%,.2f", ""


def _column_spec(name: str, label: str, dtype: Any) -> Any:
    """The Streamlit column config of one column from its name and dtype."""
    cc = st.column_config
    if pd.api.types.is_bool_dtype(dtype):
        return cc.CheckboxColumn(label)
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return cc.DatetimeColumn(label, format="YYYY-MM-DD HH:mm", width=135)
    if pd.api.types.is_numeric_dtype(dtype):
        fmt, suffix = _number_format(name, dtype)
        return cc.NumberColumn(label + suffix, format=fmt)
    return cc.Column(label)


def column_config_for(
    df: pd.DataFrame,
    overrides: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    hide: tuple[str, ...] | list[str] = (),
) -> dict[str, Any]:
    """A Streamlit column config for every column of ``df``: readable header and number format.

    GPU-hours get one decimal and thousands separators, utilizations (0-100) and
    ratios (0-1) a percent sign, counts thousands separators, times minutes.
    ``overrides`` replaces the config of a column, ``labels`` just its header,
    and ``hide`` leaves columns out of the display (they stay in the CSV).
    """
    labels = labels or {}
    config: dict[str, Any] = {}
    for col in df.columns:
        name = str(col)
        config[name] = _column_spec(name, labels.get(name) or column_label(name), df[col].dtype)
    for name in hide:
        if name in config:
            config[name] = None
    config.update(overrides or {})
    return config


def table(
    df: pd.DataFrame,
    name: str,
    *,
    key: str | None = None,
    height: int | None = None,
    column_config: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    hide: tuple[str, ...] | list[str] = (),
    select: bool = False,
    csv: pd.DataFrame | None = None,
) -> Any:
    """A dataframe with readable headers and numbers, and a CSV download button under it.

    The display is formatted with :func:`column_config_for` (``column_config``
    entries override it); the CSV holds ``df`` as it is: raw column names, full
    precision, hidden columns included (or ``csv``, when the display summarizes
    it). With ``select=True`` one row can be selected; returns the selection state.
    """
    slug = _slug(name)
    key = key or f"tbl-{slug}"
    kwargs: dict[str, Any] = {
        "hide_index": True,
        "column_config": column_config_for(df, column_config, labels, hide),
        "key": key,
        "width": "stretch",
    }
    if height is not None:
        kwargs["height"] = height
    if select:
        kwargs["on_select"] = "rerun"
        kwargs["selection_mode"] = "single-row"
    state = st.dataframe(df, **kwargs)
    _csv_button(df if csv is None else csv, name, slug, key)
    return state


def _csv_button(df: pd.DataFrame, name: str, slug: str, key: str) -> None:
    """The "Download NAME (CSV)" button under a table: ``df`` as it is."""
    st.download_button(
        f"Download {name} (CSV)",
        df.to_csv(index=False).encode("utf-8"),
        file_name=f"gpulens-{slug}.csv",
        mime="text/csv",
        key=f"dl-{key}",
        icon=":material/download:",
        on_click="ignore",
    )

def fmt_hours(value: float | None) -> str:
    if value is None or pd.isna(value):
        return "—"
    value = float(value)
    if abs(value) >= 10_000:
        return f"{value / 1000:,.1f} k"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def fmt_pct(value: float | None, digits: int = 1) -> str:
    if value is None or pd.isna(value):
        return "—"
    return f"{float(value):.{digits}f} %"


def placement_summary(placements: pd.DataFrame) -> pd.DataFrame:
    """One row per attempt and node with the node's GPU indices ("0-3, 6"), from one per GPU."""
    need = {"attempt", "node", "gpu_index"}
    if placements.empty or not need <= set(placements.columns):
        return placements
    rows = []
    for (attempt, node), grp in placements.groupby(["attempt", "node"], sort=True):
        row: dict[str, Any] = {"attempt": attempt, "node": node,
                               "gpus": len(grp), "gpu_indices": index_ranges(grp["gpu_index"])}
        for col in ("start_time", "end_time"):
            if col in grp:
                row[col] = grp[col].min() if col == "start_time" else grp[col].max()
        rows.append(row)
    return pd.DataFrame(rows)


def index_ranges(values: pd.Series) -> str:
    """``[0, 1, 2, 3, 6]`` -> ``"0-3, 6"``."""
    nums = sorted({int(v) for v in values.dropna()})
    out: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        out.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ", ".join(out)

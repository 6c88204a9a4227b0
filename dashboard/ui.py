"""Small rendering helpers every page shares: empty states, notes, tables with CSV."""

from __future__ import annotations

import logging
import re
from typing import Any

import pandas as pd
import streamlit as st

from dashboard import data
from gpulens.errors import GpulensError

__all__ = [
    "EMPTY_MESSAGE",
    "fetch",
    "fmt_hours",
    "fmt_pct",
    "no_match",
    "page_header",
    "require_data",
    "table",
    "try_fetch",
    "unavailable",
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


def unavailable(qualname: str, what: str) -> None:
    st.info(
        f"{what} is not available yet: `{qualname}` is missing from this build.",
        icon=":material/construction:",
    )


def no_match(what: str = "Nothing") -> None:
    st.info(f"{what} matches the current filters.", icon=":material/filter_alt_off:")


def try_fetch(qualname: str, what: str, *args: Any, **kwargs: Any) -> tuple[bool, Any]:
    """``data.call`` that renders a note instead of raising: (succeeded, result)."""
    try:
        return True, data.call(qualname, *args, **kwargs)
    except data.Unavailable as exc:
        unavailable(exc.qualname, what)
    except GpulensError as exc:
        st.warning(f"{what}: {exc}", icon=":material/warning:")
    except Exception as exc:  # a bug in an analysis: say so, keep the rest of the page
        log.exception("%s failed", qualname)
        st.error(f"{what} failed: {type(exc).__name__}: {exc}", icon=":material/error:")
    return False, None


def fetch(qualname: str, what: str, *args: Any, **kwargs: Any) -> Any:
    """:func:`try_fetch` that returns just the result (None on failure)."""
    return try_fetch(qualname, what, *args, **kwargs)[1]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "table"


def table(
    df: pd.DataFrame,
    name: str,
    *,
    key: str | None = None,
    height: int | None = None,
    column_config: dict[str, Any] | None = None,
    select: bool = False,
) -> Any:
    """A dataframe with a CSV download button under it.

    With ``select=True`` one row can be selected; returns the selection state.
    """
    slug = _slug(name)
    key = key or f"tbl-{slug}"
    kwargs: dict[str, Any] = {
        "hide_index": True,
        "column_config": column_config,
        "key": key,
        "width": "stretch",
    }
    if height is not None:
        kwargs["height"] = height
    if select:
        kwargs["on_select"] = "rerun"
        kwargs["selection_mode"] = "single-row"
    state = st.dataframe(df, **kwargs)
    st.download_button(
        f"Download {name} (CSV)",
        df.to_csv(index=False).encode("utf-8"),
        file_name=f"gpulens-{slug}.csv",
        mime="text/csv",
        key=f"dl-{key}",
        icon=":material/download:",
        on_click="ignore",
    )
    return state


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

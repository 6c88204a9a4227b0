"""gpulens operator dashboard: the Streamlit entry script.

Run it with ``gpulens dashboard`` (or ``streamlit run gpulens/dashboard/app.py`` with
``GPULENS_DATA_DIR`` set). It draws the global sidebar filters, stores them in
``st.session_state["gl_filters"]`` and runs the selected page from
``dashboard/views/``.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from pathlib import Path

import streamlit as st
from streamlit import delta_generator

from gpulens.dashboard import data
from gpulens.store.lake import listings_pinned

__all__ = ["PAGES_DIR", "main"]

PAGES_DIR = Path(__file__).resolve().parent / "views"


def _sidebar() -> data.FilterState:
    sb = st.sidebar
    sb.markdown("### Filters")
    b = data.bounds()
    presets = [*data.PRESETS, "Custom"]
    choice = sb.selectbox("Time range", presets, key="gl_range")
    start: datetime | None = None
    end: datetime | None = None
    if b.last is not None and b.first is not None:
        if choice == "Custom":
            lo, hi = b.first.date(), b.last.date()
            picked = sb.date_input(
                "Dates", value=(lo, hi), min_value=lo, max_value=hi, key="gl_dates"
            )
            if isinstance(picked, tuple) and len(picked) == 2:
                d0, d1 = picked
                if isinstance(d0, date) and isinstance(d1, date):
                    start = datetime.combine(d0, time.min)
                    end = datetime.combine(d1, time.min) + timedelta(days=1)
        else:
            span = data.PRESETS.get(str(choice))
            if span is not None:
                end = b.last
                start = b.last - span
        sb.caption(
            f"Data spans {b.first:%Y-%m-%d %H:%M} → {b.last:%Y-%m-%d %H:%M} (UTC); "
            "presets count back from the newest data."
        )
    vcs = sb.multiselect("Virtual cluster", list(b.vcs), key="gl_vcs", placeholder="all")
    users = sb.multiselect("User", list(b.users), key="gl_users", placeholder="all")
    if sb.button("Refresh data", icon=":material/refresh:", key="gl_refresh"):
        data.clear_caches()
    sb.caption(f"Data directory: `{data.data_dir()}`")
    return data.FilterState(start=start, end=end, vcs=tuple(vcs), users=tuple(users))


def _skip_repl_check() -> None:
    """Streamlit asks once per process, at the first element a script draws, whether it runs in
    a Python REPL (to print a hint on how to start an app): ``inspect.stack()`` with source
    context over the script thread's frames, 0.1-0.16 s of a fresh server's first page. This
    script runs under ``streamlit run`` (or AppTest), never in a REPL: mark the hint as shown.
    A Streamlit without that flag is left as it is."""
    if hasattr(delta_generator, "_use_warning_has_been_displayed"):
        delta_generator._use_warning_has_been_displayed = True


def main() -> None:
    _skip_repl_check()
    st.set_page_config(page_title="gpulens", page_icon=":material/memory:", layout="wide")
    overview = st.Page(PAGES_DIR / "overview.py", title="Overview", icon=":material/dashboard:",
                       url_path="overview")

    def home() -> None:
        # Streamlit serves the default page at / only (its url_path is ignored), so the
        # default is this hidden page and /overview is the Overview page's own URL.
        st.switch_page(overview)

    pages = {
        "Cluster": [
            st.Page(home, title="Overview", url_path="home", default=True, visibility="hidden"),
            overview,
            st.Page(PAGES_DIR / "jobs.py", title="Jobs", icon=":material/list:", url_path="jobs"),
            st.Page(PAGES_DIR / "job.py", title="Job", icon=":material/work:", url_path="job",
                    visibility="hidden"),
            st.Page(PAGES_DIR / "locality.py", title="Locality", icon=":material/hub:",
                    url_path="locality"),
            st.Page(PAGES_DIR / "early_stop.py", title="Early stop", icon=":material/timer_off:",
                    url_path="early_stop"),
        ],
        "Reliability": [
            st.Page(PAGES_DIR / "failures.py", title="Failures", icon=":material/error:",
                    url_path="failures"),
            st.Page(PAGES_DIR / "inputs_nodes.py", title="Inputs and nodes",
                    icon=":material/dns:", url_path="inputs_nodes"),
            st.Page(PAGES_DIR / "validation.py", title="Validation",
                    icon=":material/fact_check:", url_path="validation"),
        ],
    }
    page = st.navigation(pages)
    # one listing of the sample files for the whole run: every call of the page sees the same
    # files, and the folders are checked once, not at every call (gpulens.store.lake)
    with listings_pinned():
        st.session_state["gl_filters"] = _sidebar()
        page.run()


main()

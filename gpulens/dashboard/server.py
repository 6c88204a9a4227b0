"""The dashboard's server process: ``streamlit run`` with what every page needs imported first.

``python -m gpulens.dashboard.server run APP [streamlit options]`` is ``python -m streamlit`` after
the imports every page makes: pandas, Altair, DuckDB and the analyses (about 0.7 CPU-s). Streamlit
imports a page's modules when the first session runs it, so without this the first operator to
open a page after a restart waits for those imports too; here the server pays them while it
starts, before it listens. The dashboard's own modules are not imported here: their
``st.cache_data`` functions are made in the script run, where the runtime exists.
"""

from __future__ import annotations

import sys

import altair  # noqa: F401  (imported for the pages, see above)
import pandas  # noqa: F401
from streamlit.web import cli as streamlit_cli

from gpulens import analysis  # noqa: F401

__all__ = ["main"]


def main() -> None:
    sys.exit(streamlit_cli.main(prog_name="streamlit"))


if __name__ == "__main__":
    main()

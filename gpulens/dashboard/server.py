"""The dashboard's server process: ``streamlit run`` with what every page needs imported first.

``python -m gpulens.dashboard.server run APP [streamlit options]`` is ``python -m streamlit`` after
the imports every page makes: pandas, Altair, DuckDB and the analyses (about 0.7 CPU-s). Streamlit
imports a page's modules when the first session runs it, so without this the first operator to
open a page after a restart waits for those imports too; here the server pays them while it
starts, before it listens. The dashboard's own modules are not imported here: their
``st.cache_data`` functions are made in the script run, where the runtime exists.

Then the objects those imports made (~130,000: modules, functions, classes, which live as long
as the process) are moved out of the garbage collector's generations (:func:`settle`,
``gc.freeze``): a page run allocates enough to trigger ~300 collections, and the full ones
traversed all of them each time, 0.2-0.3 s of a fresh process's first Overview on a month of
2,000 GPUs (0.05 s once frozen).
"""

from __future__ import annotations

import gc
import sys

import altair  # noqa: F401  (imported for the pages, see above)
import pandas  # noqa: F401
from streamlit.web import cli as streamlit_cli

from gpulens import analysis  # noqa: F401

__all__ = ["main", "settle"]


def settle() -> None:
    """Collect what the start-up left as garbage, then freeze the rest (see the module's doc)."""
    gc.collect()
    gc.freeze()


def main() -> None:
    settle()
    sys.exit(streamlit_cli.main(prog_name="streamlit"))


if __name__ == "__main__":
    main()

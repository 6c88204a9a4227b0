"""The DuckDB + Parquet store shared by every part of gpulens."""

from gpulens.store.samples import SAMPLE_KINDS, VIEW_NAMES, arrow_schema
from gpulens.store.schema import latest_version
from gpulens.store.segments import SegmentWriter
from gpulens.store.store import Store, quote_ident, quote_literal
from gpulens.store.tables import delete_matching, insert_batch, registered, replace_batch

__all__ = [
    "SAMPLE_KINDS",
    "VIEW_NAMES",
    "SegmentWriter",
    "Store",
    "arrow_schema",
    "delete_matching",
    "insert_batch",
    "latest_version",
    "quote_ident",
    "quote_literal",
    "registered",
    "replace_batch",
]

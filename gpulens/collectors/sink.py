"""The agent's storage seam: where sample tables go.

``StoreSink`` writes through the store's :class:`~gpulens.store.SegmentWriter`
(a private spool, rolled into Parquet segments). ``MemorySink`` keeps tables in
memory (``--no-store`` and tests). ``FlakySink`` wraps another sink and fails
like a full disk while ``full`` is set, so the agent's full-disk behaviour can
be tested without filling a real disk.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Protocol, runtime_checkable

import pyarrow as pa

from gpulens.errors import StoreError
from gpulens.store import SegmentWriter, Store

__all__ = ["FlakySink", "MemorySink", "SampleSink", "StoreSink"]


@runtime_checkable
class SampleSink(Protocol):
    """Buffered sample storage. ``flush`` and ``roll`` raise StoreError when the disk is full."""

    def append(self, kind: str, table: pa.Table) -> None: ...

    def flush(self) -> int: ...

    def roll(self) -> list[Path]: ...

    def close(self) -> None: ...


class StoreSink:
    """Samples into the store through a SegmentWriter (one spool per agent)."""

    def __init__(self, store: Store, agent: str) -> None:
        self.store = store
        self.writer = SegmentWriter(store, agent, segment_seconds=float("inf"))

    def append(self, kind: str, table: pa.Table) -> None:
        self.writer.append(kind, table)

    def flush(self) -> int:
        return self.writer.flush()

    def roll(self) -> list[Path]:
        return self.writer.roll()

    def close(self) -> None:
        self.writer.close()


class MemorySink:
    """Keeps every flushed table in memory (for --no-store and tests)."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, pa.Table]] = []
        self.tables: dict[str, list[pa.Table]] = {}
        self.flushes = 0
        self.rolls = 0
        self.closed = False

    def append(self, kind: str, table: pa.Table) -> None:
        self.pending.append((kind, table))

    def flush(self) -> int:
        n = 0
        for kind, table in self.pending:
            self.tables.setdefault(kind, []).append(table)
            n += table.num_rows
        self.pending.clear()
        self.flushes += 1
        return n

    def roll(self) -> list[Path]:
        self.rolls += 1
        return []

    def close(self) -> None:
        self.flush()
        self.closed = True

    def table(self, kind: str) -> pa.Table | None:
        tables = self.tables.get(kind)
        return pa.concat_tables(tables) if tables else None


class FlakySink:
    """Wraps a sink; while ``full`` is True every flush/roll fails like ENOSPC."""

    def __init__(self, inner: SampleSink) -> None:
        self.inner = inner
        self.full = False
        self.failures = 0

    def _check(self) -> None:
        if self.full:
            self.failures += 1
            raise StoreError(
                f"Cannot write samples ({errno.errorcode[errno.ENOSPC]}: No space left on device; scripted).",
                "Free disk space on the data directory.",
            )

    def append(self, kind: str, table: pa.Table) -> None:
        self.inner.append(kind, table)

    def flush(self) -> int:
        self._check()
        return self.inner.flush()

    def roll(self) -> list[Path]:
        self._check()
        return self.inner.roll()

    def close(self) -> None:
        self._check()
        self.inner.close()

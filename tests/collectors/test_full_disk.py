"""A real full disk: the store on a small tmpfs (needs root to mount; CI runs as root)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulens.collectors.agent import Agent
from gpulens.collectors.gpu.fake import FakeBackend
from gpulens.collectors.sink import StoreSink
from gpulens.store import Store
from tests.conftest import tmpfs

FIX = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "mnt") as mnt:
        yield mnt


def _fill(path: Path) -> None:
    chunk = b"\0" * (1 << 20)
    with open(path, "wb") as fh:
        try:
            while True:
                fh.write(chunk)
                fh.flush()
        except OSError:
            pass
        try:
            os.fsync(fh.fileno())
        except OSError:
            pass


@pytest.mark.slow
def test_real_enospc_then_recovery(small_disk: Path) -> None:
    store = Store.open(small_disk / "data")
    clock = [0.0]
    from gpulens.collectors.net import NetReader

    agent = Agent(node="n1", backend=FakeBackend({"devices": [{"index": i} for i in range(8)]}),
                  net=NetReader(FIX / "proc", FIX / "sys"), resolver=None, sink=StoreSink(store, "n1"),
                  clock=lambda: clock[0], wall=lambda: 1.8e9 + clock[0], flush_seconds=1.0)
    agent.tick()
    assert agent.flush() and agent.roll() != []
    filler = small_disk / "filler"
    _fill(filler)
    ticks_while_full = 0
    for i in range(1, 40):
        clock[0] = float(i)
        agent.tick()
        agent.maybe_write()
        if i % 10 == 0:
            agent.roll()
        if not agent.store_writable:
            ticks_while_full += 1
    assert not agent.store_writable, "writes should fail on a full tmpfs"
    assert agent.snapshot.last_sample == 1.8e9 + 39.0  # sampling went on
    filler.unlink()
    clock[0] = 40.0
    agent.tick()
    assert agent.flush(), "writes should resume once space is back"
    agent.roll()
    agent.close()
    con = store.connect()
    n = con.execute("SELECT count(DISTINCT ts) FROM gpu_samples").fetchone()
    assert n == (41 - agent.snapshot.dropped_total // 14,)
    assert con.execute("SELECT count(*) FROM gpu_samples").fetchone() == (8 * n[0],)
    stored = sum(con.execute(f"SELECT count(*) FROM {v}").fetchone()[0]  # type: ignore[index]  # noqa: S608
                 for v in ("gpu_samples", "net_samples", "gpu_process_samples", "xid_events"))
    assert agent.rows_written == stored  # retried rows counted once, dropped rows not at all

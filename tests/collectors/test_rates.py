from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpulens.collectors.rates import CounterTracker, counter_delta


def test_plain_increase() -> None:
    assert counter_delta(100, 250) == (150, "ok")


def test_32bit_wrap_in_64bit_field() -> None:
    # a NIC driver exposing a 32-bit hardware counter: 2**32 - 100 -> 50 means 150 more
    assert counter_delta(2**32 - 100, 50) == (150, "wrap")


def test_declared_32bit_wrap() -> None:
    assert counter_delta(2**32 - 1, 9, width=32) == (10, "wrap")


def test_64bit_wrap() -> None:
    assert counter_delta(2**64 - 10, 5) == (15, "wrap")


def test_reset_counts_from_zero() -> None:
    # driver reload: counter restarted, 500 accumulated since
    assert counter_delta(10**12, 500) == (500, "reset")


def test_wrap_rejected_when_implausible_becomes_reset() -> None:
    # prev in the upper half of 32 bits but a wrap would imply > max_rate: it was a reset
    delta, what = counter_delta(3_000_000_000, 10, dt=1.0, max_rate=100.0)
    assert (delta, what) == (10, "reset")


def test_implausible_jump_is_not_a_spike() -> None:
    assert counter_delta(0, 10**15, dt=1.0, max_rate=1e9) == (0.0, "implausible")


def test_tracker_totals_rates_and_events() -> None:
    t = CounterTracker()
    first = t.update("k", 2**32 - 1000, 0.0)
    assert first.delta is None and first.rate is None and first.total == 2**32 - 1000
    r = t.update("k", 1000, 2.0)  # wrapped
    assert r.event == "wrap" and r.delta == 2000 and r.rate == 1000.0
    assert r.total == 2**32 + 1000
    r = t.update("k", 400, 3.0)  # reset (not in the upper half any more)
    assert r.event == "reset" and r.delta == 400 and r.total == 2**32 + 1400
    assert t.events == {"wrap": 1, "reset": 1, "implausible": 0}


def test_accumulate_integrates_snapshot_rates() -> None:
    t = CounterTracker()
    assert t.accumulate("s", 100.0, 0.0) == 0.0
    assert t.accumulate("s", 100.0, 2.0) == 200.0
    assert t.accumulate("s", 50.0, 3.0) == 250.0


@given(
    st.lists(st.integers(min_value=0, max_value=2**64 - 1), min_size=2, max_size=30),
    st.floats(min_value=0.1, max_value=10.0),
)
@pytest.mark.slow
def test_never_negative_never_above_bound(values: list[int], dt: float) -> None:
    t = CounterTracker()
    bound = 1e12
    total = None
    for i, v in enumerate(values):
        r = t.update("x", v, i * dt, max_rate=bound)
        if r.delta is not None:
            assert r.delta >= 0
            assert r.delta <= bound * dt * 1.1 + 1
            # compared as the float64 /metrics exposes (the first Reading.total is the raw int counter)
            assert total is not None and float(r.total) >= float(total)
        total = r.total


def test_integer_counters_keep_exact_integer_totals() -> None:
    """Above 2**53 a float total would drop increments; byte counters get there."""
    t = CounterTracker()
    t.update("k", 2**60, 0.0)
    t.update("k", 2**63, 1.0, max_rate=1e9)  # an implausible jump: delta 0, still exact
    r = t.update("k", 2**63 + 1, 2.0, max_rate=1e9)
    assert r.event == "ok" and r.total == 2**60 + 1 and isinstance(r.total, int)

"""Counter deltas and rates that stay correct across counter resets and wraps.

A hardware counter can go backwards for two reasons: it wrapped (a 32-bit NIC
counter passing 2**32, a 64-bit one passing 2**64) or it was reset (driver
reload, interface re-created). :func:`counter_delta` tells them apart and never
returns a negative delta; a plausibility bound (``max_rate``) turns impossible
jumps into 0 instead of a spike. :class:`CounterTracker` keeps the previous
value per key and a monotonic running total (what /metrics exposes as ``*_total``):
it equals the device counter until the first wrap or reset, and keeps
increasing after one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

__all__ = ["CounterTracker", "Reading", "counter_delta"]

_W32 = 1 << 32


def counter_delta(
    prev: float,
    cur: float,
    *,
    width: int = 64,
    dt: float | None = None,
    max_rate: float | None = None,
) -> tuple[float, str]:
    """Increase of a counter from ``prev`` to ``cur``: (delta >= 0, what happened).

    ``what`` is ``"ok"``, ``"wrap"``, ``"reset"`` or ``"implausible"`` (delta 0).
    ``width`` is the counter's bit width; a 64-bit counter that was just below
    2**32 and comes back small is treated as a 32-bit wrap (some NIC drivers
    expose 32-bit hardware counters in 64-bit fields). With ``max_rate`` (units
    per second) and ``dt``, any delta above ``max_rate * dt`` is rejected.
    """
    limit = None if max_rate is None or dt is None else max_rate * max(dt, 1e-9) * 1.1
    if cur >= prev:
        delta = cur - prev
        if limit is not None and delta > limit:
            return 0, "implausible"  # an int: integer counters keep exact integer totals
        return delta, "ok"
    candidates: list[float] = []
    if prev >= (1 << (width - 1)):  # in the upper half of its range: a wrap is plausible
        candidates.append((1 << width) - prev + cur)
    if width > 32 and (_W32 >> 1) <= prev < _W32 and cur < _W32:
        candidates.append(_W32 - prev + cur)
    for delta in candidates:
        if limit is None or delta <= limit:
            return delta, "wrap"
    # A reset: the counter restarted from zero, so ``cur`` accumulated since then.
    if limit is not None and cur > limit:
        return 0, "implausible"
    return cur, "reset"


@dataclasses.dataclass(frozen=True)
class Reading:
    """Result of one :meth:`CounterTracker.update`."""

    total: float  # monotonic running total
    delta: float | None  # None on the first observation
    rate: float | None  # per second; None on the first observation or dt <= 0
    event: str  # first | ok | wrap | reset | implausible


@dataclasses.dataclass
class _State:
    value: float
    ts: float
    total: float


class CounterTracker:
    """Previous value, monotonic total and rate for many counters (keyed by anything hashable)."""

    def __init__(self) -> None:
        self._state: dict[Hashable, _State] = {}
        self.events: dict[str, int] = {"wrap": 0, "reset": 0, "implausible": 0}

    def update(
        self,
        key: Hashable,
        value: float,
        ts: float,
        *,
        width: int = 64,
        max_rate: float | None = None,
    ) -> Reading:
        st = self._state.get(key)
        if st is None:
            self._state[key] = _State(value, ts, value)
            return Reading(value, None, None, "first")
        dt = ts - st.ts
        delta, event = counter_delta(st.value, value, width=width, dt=dt, max_rate=max_rate)
        if event != "ok":
            self.events[event] += 1
        st.value, st.ts = value, ts
        st.total += delta
        rate = delta / dt if dt > 0 else None
        return Reading(st.total, delta, rate, event)

    def accumulate(self, key: Hashable, rate: float, ts: float) -> float:
        """Integrate a rate snapshot over time into a monotonic total (for snapshot-only sources)."""
        st = self._state.get(key)
        if st is None:
            self._state[key] = _State(rate, ts, 0.0)
            return 0.0
        dt = max(ts - st.ts, 0.0)
        st.total += max(rate, 0.0) * dt
        st.value, st.ts = rate, ts
        return st.total

    def total(self, key: Hashable) -> float | None:
        st = self._state.get(key)
        return None if st is None else st.total

    def forget(self, keep: set[Hashable]) -> None:
        """Drop state of keys not in ``keep`` (vanished interfaces or GPUs)."""
        for k in [k for k in self._state if k not in keep]:
            del self._state[k]

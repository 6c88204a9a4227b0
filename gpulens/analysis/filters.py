"""The filter every analysis accepts, and how it becomes bound SQL parameters."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

__all__ = ["FAR_FUTURE", "FAR_PAST", "Filters", "job_filter_sql", "job_filter_params"]

FAR_PAST = datetime(1900, 1, 1)
FAR_FUTURE = datetime(2200, 1, 1)


@dataclass(frozen=True)
class Filters:
    """Restrict an analysis to a time window and to some virtual clusters or users.

    ``start``/``end`` clip GPU-minutes to ``start <= minute < end`` (naive
    timestamps, the store's clock). Empty ``vcs``/``users`` mean "all".
    ``now`` is the clock used for running jobs when the store has no samples
    (default: the current time); tests inject it.
    """

    start: datetime | None = None
    end: datetime | None = None
    vcs: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    now: datetime | None = None

    def window(self) -> tuple[datetime, datetime]:
        lo = self.start or FAR_PAST
        hi = self.end or FAR_FUTURE
        # minutes m are whole minutes: the first one inside [start, end) is ceil(start)
        if lo.second or lo.microsecond:
            lo = lo.replace(second=0, microsecond=0) + timedelta(minutes=1)
        return lo, hi

    def clock(self) -> datetime:
        return self.now or datetime.now()


def job_filter_sql(alias: str = "j") -> str:
    """A WHERE fragment on a jobs alias using the parameters $vcs and $users."""
    return (
        f"(len($vcs) = 0 OR list_contains($vcs, {alias}.vc))"
        f" AND (len($users) = 0 OR list_contains($users, {alias}.\"user\"))"
    )


def job_filter_params(filters: Filters | None) -> dict[str, Any]:
    f = filters or Filters()
    return {"vcs": list(f.vcs), "users": list(f.users)}

"""Data access for the dashboard pages.

Pages never write SQL: they call the analysis and diagnosis functions through
this module, which

* opens the store once per process (``st.cache_resource``),
* opens a fresh reader connection for every call (so each call sees the newest
  snapshot and never blocks, or is blocked by, a collector or an import),
* caches every result with ``st.cache_data(ttl=dashboard.cache_ttl)``, keyed by
  the data directory, the store generation (so a new write shows up at once) and
  the filters,
* takes the functions themselves (imported directly, so mypy and the import
  contract see every dependency); the cache key is the function's qualified name.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Hashable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from gpulens import analysis
from gpulens.analysis import Filters
from gpulens.config import Config, load_config
from gpulens.errors import GpulensError, StoreError
from gpulens.store import Store

__all__ = [
    "LOG_READ_LIMIT",
    "PRESETS",
    "Bounds",
    "FilterState",
    "alerts",
    "bounds",
    "call",
    "call_store",
    "clear_caches",
    "config",
    "current_filters",
    "data_dir",
    "filter_options",
    "has_data",
    "log_file",
    "read_log",
    "store",
]

#: The largest tail of a log file the Failures page reads (bytes).
LOG_READ_LIMIT = 4 * 1024 * 1024

#: Time-range presets of the sidebar, relative to the newest data point.
PRESETS: dict[str, timedelta | None] = {
    "All data": None,
    "Last hour": timedelta(hours=1),
    "Last 6 hours": timedelta(hours=6),
    "Last 24 hours": timedelta(hours=24),
    "Last 7 days": timedelta(days=7),
    "Last 30 days": timedelta(days=30),
}


def _ttl() -> float:
    try:
        return float(load_config().dashboard.cache_ttl)
    except GpulensError:
        return 60.0


_TTL = _ttl()


#: The hashable form of the sidebar filters: (start, end, vcs, users).
FilterKey = tuple[datetime | None, datetime | None, tuple[str, ...], tuple[str, ...]]


@dataclasses.dataclass(frozen=True)
class FilterState:
    """The sidebar filters; hashable so it can be part of a cache key."""

    start: datetime | None = None
    end: datetime | None = None
    vcs: tuple[str, ...] = ()
    users: tuple[str, ...] = ()

    def key(self) -> FilterKey:
        return (self.start, self.end, self.vcs, self.users)

    def previous(self) -> FilterState | None:
        """The period of the same length just before this one (None without bounds)."""
        if self.start is None or self.end is None:
            return None
        span = self.end - self.start
        return dataclasses.replace(self, start=self.start - span, end=self.start)

    def describe(self) -> str:
        parts = []
        if self.start is not None or self.end is not None:
            a = self.start.strftime("%Y-%m-%d %H:%M") if self.start else "start"
            b = self.end.strftime("%Y-%m-%d %H:%M") if self.end else "now"
            parts.append(f"{a} → {b}")
        else:
            parts.append("all time")
        if self.vcs:
            parts.append("vc " + ", ".join(self.vcs))
        if self.users:
            parts.append("user " + ", ".join(self.users))
        return " · ".join(parts)


@dataclasses.dataclass(frozen=True)
class Bounds:
    """What the sidebar offers: the data's time span, the vcs and the users."""

    first: datetime | None
    last: datetime | None
    vcs: tuple[str, ...]
    users: tuple[str, ...]


# --------------------------------------------------------------------- setup
def config() -> Config:
    """The effective configuration (gpulens.toml + GPULENS_* env, read every run)."""
    return load_config()


def data_dir() -> str:
    return str(Path(config().data_dir).expanduser())


@st.cache_resource(show_spinner=False)
def _open_store(root: str) -> Store | None:
    path = Path(root)
    try:
        return Store.open(path)
    except StoreError:
        # A store we may not write to (no migrations possible): read it as it is.
        plain = Store(path)
        return plain if plain.generation() > 0 else None


def store() -> Store | None:
    """The store of the configured data directory, or None when there is none."""
    return _open_store(data_dir())


def _generation(s: Store | None) -> int:
    return s.generation() if s is not None else 0


def clear_caches() -> None:
    """Forget every cached result (after the dashboard itself wrote to the store)."""
    _cached_call.clear()
    _reader.clear()
    _cached_store_call.clear()
    _has_data.clear()
    _bounds.clear()
    alerts.clear()


def _key(fn: Callable[..., Any]) -> str:
    """The cache key of a function: its module and qualified name."""
    return f"{fn.__module__}.{fn.__qualname__}"


def _to_filters(fkey: FilterKey | None) -> Filters | None:
    if fkey is None:
        return None
    start, end, vcs, users = fkey
    return Filters(start=start, end=end, vcs=vcs, users=users)


# ------------------------------------------------------------------ calling
class _Reader:
    """One reader connection per store generation, shared by the sessions of this process.

    The analyses keep per-window TEMP tables on their connection, so sharing it
    lets the pages of one filter setting scan the samples once. DuckDB
    connections are not safe for concurrent use: calls take the lock in turn.
    """

    def __init__(self, con: Any) -> None:
        self.con = con
        self.lock = threading.Lock()


@st.cache_resource(show_spinner=False, max_entries=2)
def _reader(root: str, gen: int) -> _Reader:
    s = _open_store(root)
    if s is None:
        raise StoreError(f"No gpulens store in {root}.")
    return _Reader(s.connect())


@st.cache_data(ttl=_TTL, show_spinner=False, max_entries=512)
def _cached_call(
    root: str,
    gen: int,
    key: str,
    _fn: Callable[..., Any],
    fkey: FilterKey | None,
    use_filters: bool,
    args: tuple[Hashable, ...],
    kwargs: tuple[tuple[str, Hashable], ...],
) -> Any:
    kw = dict(kwargs)
    if use_filters:
        kw["filters"] = _to_filters(fkey)
    reader = _reader(root, gen)
    with reader.lock:
        return _fn(reader.con, *args, **kw)


def call(
    fn: Callable[..., Any],
    *args: Hashable,
    filters: FilterState | None = None,
    use_filters: bool = True,
    **kwargs: Hashable,
) -> Any:
    """Call ``fn(con, *args, filters=..., **kwargs)`` on the shared reader, cached.

    ``use_filters=False`` for functions without a ``filters`` parameter
    (``job_detail``, ``blacklist.list_entries``...).
    """
    s = store()
    # no filter at all is the unfiltered call's cache entry (the sidebar's bounds made it)
    fkey = filters.key() if filters is not None and filters != FilterState() else None
    return _cached_call(
        data_dir(), _generation(s), _key(fn), fn, fkey, use_filters, args,
        tuple(sorted(kwargs.items())),
    )


@st.cache_data(ttl=_TTL, show_spinner=False, max_entries=128)
def _cached_store_call(
    root: str, gen: int, key: str, _fn: Callable[..., Any], args: tuple[Hashable, ...]
) -> Any:
    s = _open_store(root)
    if s is None:
        raise StoreError(f"No gpulens store in {root}.")
    return _fn(s, *args)


def call_store(fn: Callable[..., Any], *args: Hashable) -> Any:
    """Call a function that takes the Store itself (``gpulens.diagnosis.jobs.diagnose_job``), cached."""
    s = store()
    return _cached_store_call(data_dir(), _generation(s), _key(fn), fn, args)


# ------------------------------------------------------------ empty / bounds
def _unfiltered(
    root: str, gen: int, fn: Callable[..., Any], **kwargs: Hashable
) -> pd.DataFrame | None:
    result = _cached_call(root, gen, _key(fn), fn, None, True, (), tuple(sorted(kwargs.items())))
    return result if isinstance(result, pd.DataFrame) else None


@st.cache_data(ttl=_TTL, show_spinner=False)
def _has_data(root: str, gen: int) -> bool:
    if gen == 0 or _open_store(root) is None:
        return False
    jobs = _unfiltered(root, gen, analysis.job_utilization)
    if jobs is not None and len(jobs) > 0:
        return True
    ts = _unfiltered(root, gen, analysis.utilization_timeseries, freq="hour")
    return ts is not None and len(ts) > 0


def has_data() -> bool:
    """Whether the store holds any job or GPU sample (decides the empty state)."""
    s = store()
    return _has_data(data_dir(), _generation(s))


@st.cache_data(ttl=_TTL, show_spinner=False)
def _bounds(root: str, gen: int) -> Bounds:
    if gen == 0 or _open_store(root) is None:
        return Bounds(None, None, (), ())
    first: list[pd.Timestamp] = []
    last: list[pd.Timestamp] = []
    vcs: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    jobs = _unfiltered(root, gen, analysis.job_utilization)
    if jobs is not None and len(jobs):
        vcs = tuple(sorted(str(v) for v in jobs["vc"].dropna().unique()))
        users = tuple(sorted(str(u) for u in jobs["user"].dropna().unique()))
        for col in ("start_time", "end_time"):
            series = pd.to_datetime(jobs[col]).dropna()
            if len(series):
                first.append(series.min())
                last.append(series.max())
    ts = _unfiltered(root, gen, analysis.utilization_timeseries, freq="hour")
    if ts is not None and len(ts):
        series = pd.to_datetime(ts["ts"]).dropna()
        if len(series):
            first.append(series.min())
            last.append(series.max() + pd.Timedelta(hours=1))
    return Bounds(
        first=min(first).to_pydatetime() if first else None,
        last=max(last).to_pydatetime() if last else None,
        vcs=vcs,
        users=users,
    )


def bounds() -> Bounds:
    s = store()
    return _bounds(data_dir(), _generation(s))


def filter_options() -> Bounds:
    """Alias of :func:`bounds` for the sidebar."""
    return bounds()


def current_filters() -> FilterState:
    """The filters the sidebar (app.py) stored for this run."""
    value = st.session_state.get("gl_filters")
    return value if isinstance(value, FilterState) else FilterState()


# -------------------------------------------------------------------- alerts
@st.cache_data(ttl=30, show_spinner=False)
def alerts(url: str, timeout: float) -> tuple[pd.DataFrame | None, str | None]:
    """Firing alerts from Prometheus ``/api/v1/alerts``: (table, None) or (None, problem)."""
    endpoint = url.rstrip("/") + "/api/v1/alerts"
    if not endpoint.startswith(("http://", "https://")):
        return None, f"prometheus_url {url!r} is not an http(s) URL"
    try:
        with urllib.request.urlopen(endpoint, timeout=timeout) as resp:
            body = json.loads(resp.read(8 * 1024 * 1024).decode("utf-8"))
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        return None, f"Prometheus at {url} is unreachable ({reason})"
    except (ValueError, UnicodeDecodeError):
        return None, f"Prometheus at {url} answered something that is not JSON"
    if not isinstance(body, dict) or body.get("status") != "success":
        return None, f"Prometheus at {url} answered an error: {str(body)[:200]}"
    rows = []
    for alert in (body.get("data") or {}).get("alerts") or []:
        if not isinstance(alert, dict) or alert.get("state") != "firing":
            continue
        labels = alert.get("labels") or {}
        annotations = alert.get("annotations") or {}
        rows.append(
            {
                "alert": labels.get("alertname", ""),
                "severity": labels.get("severity", ""),
                "summary": annotations.get("summary") or annotations.get("description", ""),
                "labels": ", ".join(
                    f"{k}={v}" for k, v in sorted(labels.items()) if k not in {"alertname", "severity"}
                ),
                "active_since": alert.get("activeAt", ""),
            }
        )
    return pd.DataFrame(rows, columns=["alert", "severity", "summary", "labels", "active_since"]), None


# ---------------------------------------------------------------------- logs
def log_file(log_path: str | None) -> Path | None:
    """A job log path from the store (relative to the data directory, or absolute)."""
    if not log_path:
        return None
    path = Path(log_path)
    return path if path.is_absolute() else Path(data_dir()) / path


def read_log(log_path: str | None) -> tuple[str | None, str | None, bool]:
    """Read a job log in bounded memory: (text, problem, truncated).

    Uses ``gpulens.diagnosis.logs.read_log`` (head + tail + a window around the last
    traceback).
    """
    # imported here: only the Failures page reads logs (its regexes are 0.03 s of a fresh
    # process's first page, the Overview)
    from gpulens.diagnosis import logs as diag_logs

    path = log_file(log_path)
    if path is None:
        return None, "this attempt has no log path", False
    try:
        got = diag_logs.read_log(path)
    except OSError as exc:
        return None, f"cannot read {path} ({exc.strerror or exc})", False
    if got.reason and not got.text:
        return None, f"{path}: {got.reason}", False
    return str(got.text), None, bool(got.truncated)

"""A small client for the Prometheus HTTP API (standard library only).

Only what the importer needs: ``/api/v1/series``, ``/api/v1/query_range`` and
``/api/v1/label/__name__/values``. Every failure becomes an :class:`InputError`
that names the URL and says what to do; nothing here binds a socket.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from gpulens.errors import InputError

__all__ = ["MAX_POINTS", "PromClient", "Series", "promql_str"]

#: Prometheus refuses a query_range that would return more points per series.
MAX_POINTS = 11_000


@dataclass(frozen=True)
class Series:
    """One series of a range query: labels and (unix seconds, value) points."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


class PromClient:
    """``GET`` requests against one Prometheus (or a compatible API: Thanos, Mimir, VictoriaMetrics)."""

    def __init__(self, url: str, *, timeout: float = 120.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InputError(f"--url {url!r} is not an http(s) URL.",
                             "Pass the Prometheus base URL, e.g. http://prometheus:9090.")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.requests = 0
        self.seconds = 0.0  # summed over requests (they may overlap: the importer prefetches)

    def _get(self, path: str, params: list[tuple[str, str]]) -> Any:
        query = urllib.parse.urlencode(params)
        full = f"{self.url}{path}?{query}"
        self.requests += 1
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(full, timeout=self.timeout) as resp:  # scheme checked in __init__
                body = json.loads(resp.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            detail = _error_text(exc)
            raise InputError(f"Prometheus at {self.url} answered {exc.code} to {path}: {detail}.",
                             "Check --match and the time range; see docs/import-prometheus.md.") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise InputError(f"Cannot reach Prometheus at {self.url} ({reason}).",
                             "Check --url (scheme, host and port) and that Prometheus is up.") from None
        except ValueError:
            raise InputError(f"{self.url}{path} did not answer JSON.",
                             "Point --url at the Prometheus server itself, not a dashboard.") from None
        finally:
            self.seconds += time.perf_counter() - t0
        if not isinstance(body, dict) or body.get("status") != "success":
            raise InputError(f"Prometheus at {self.url} refused {path}: {body!r:.200}.",
                             "Check --match and the time range.")
        return body["data"]

    def names(self, start: float, end: float) -> set[str]:
        data = self._get("/api/v1/label/__name__/values",
                         [("start", _num(start)), ("end", _num(end))])
        return {str(n) for n in data or []}

    def series(self, match: str, start: float, end: float) -> list[dict[str, str]]:
        data = self._get("/api/v1/series", [("match[]", match), ("start", _num(start)),
                                            ("end", _num(end))])
        return [{str(k): str(v) for k, v in s.items()} for s in data or []]

    def query_range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        if (end - start) / step + 1 > MAX_POINTS:
            raise ValueError("query_range chunk exceeds Prometheus's points limit")
        data = self._get("/api/v1/query_range", [("query", query), ("start", _num(start)),
                                                 ("end", _num(end)), ("step", _num(step))])
        out: list[Series] = []
        for item in data.get("result", []):
            pts = [(float(t), float(v)) for t, v in item.get("values", [])]
            out.append(Series({str(k): str(v) for k, v in item.get("metric", {}).items()}, pts))
        return out


def promql_str(text: str) -> str:
    """Escape a value for a double-quoted PromQL string."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _num(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(exc.read().decode("utf-8"))
        return str(body.get("error", body))[:300]
    except (ValueError, OSError):
        return exc.reason if isinstance(exc.reason, str) else "error"

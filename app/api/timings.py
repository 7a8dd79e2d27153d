"""Per-endpoint server timings, kept in memory by each server process for the dashboard.

A pure ASGI middleware times every HTTP request from its arrival to the end of its response
body and files the duration under the matched route's template (``GET /api/w/sessions/
{session_id}/next``), keeping the latest ``WINDOW`` durations per route. The admin page
shows count, median and 95th percentile. Figures are per process and reset on restart:
they describe this process's recent traffic, not a benchmark (see ``bench/`` for those).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

WINDOW = 1000  # latest durations kept per route
_lock = threading.Lock()
_durations: dict[tuple[str, str], deque[float]] = {}
_counts: dict[tuple[str, str], int] = {}


def record(method: str, path: str, ms: float) -> None:
    key = (method, path)
    with _lock:
        found = _durations.get(key)
        if found is None:
            found = _durations[key] = deque(maxlen=WINDOW)
        found.append(ms)
        _counts[key] = _counts.get(key, 0) + 1


def summary() -> list[dict[str, Any]]:
    """Per route: requests since start, and median / 95th percentile / max of the latest."""
    with _lock:
        items = [(key, sorted(values), _counts[key]) for key, values in _durations.items()]
    rows = []
    for (method, path), values, count in items:
        n = len(values)
        rows.append(
            {
                "method": method,
                "path": path,
                "count": count,
                "window": n,
                "p50": values[n // 2],
                "p95": values[min(n - 1, int(n * 0.95))],
                "max": values[-1],
            }
        )
    rows.sort(key=lambda r: -r["count"])
    return rows


class RouteTimings:
    """Times each request under its route's template (unmatched paths are not recorded)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None)
            if path is not None:
                record(scope["method"], path, (time.perf_counter() - started) * 1000)

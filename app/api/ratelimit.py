"""Rate limits of the worker API: per session and per client address, in this process.

A token bucket per key (Turner's leaky bucket as a meter): a key holds up to ``burst``
tokens, refilled at ``rate`` per second, and each request takes one; a request that finds
less than one token is refused with 429 and ``Retry-After`` (the seconds until a token is
back). The buckets live in one bounded LRU table per limit, so memory is O(``max_keys``)
per process whatever a client sends, and checking is O(1) with no SQL statement: the
worker round trip's database budget is untouched.

Limits are per process: with ``TRIPLETLAB_WEB_WORKERS`` > 1 a client may get up to that
many times the configured rate. Behind a reverse proxy every client has the proxy's
address unless the server trusts the proxy's forwarded headers
(``TRIPLETLAB_FORWARDED_ALLOW_IPS``, which ``tripletlab serve`` hands to uvicorn).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from fastapi import Request

from app.errors import TooManyRequests


class TokenBuckets:
    """One token bucket per key, at most ``max_keys`` of them (least recently used go).

    Parameters
    ----------
    rate : float
        Tokens added per second; 0 turns the limit off.
    burst : float
        Most tokens a key holds: the requests it may send at once after a pause.
    max_keys : int, default=100_000
        Keys remembered; a forgotten key starts again with a full bucket.
    clock : callable, default=time.monotonic
    """

    def __init__(
        self,
        rate: float,
        burst: float,
        max_keys: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate < 0 or burst < 1 or max_keys < 1:
            raise ValueError("rate must be >= 0, burst >= 1 and max_keys >= 1")
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, key: str) -> float:
        """Take a token for ``key``: 0 if granted, else the seconds until one is back."""
        if self.rate == 0:
            return 0.0
        now = self.clock()
        held = self._buckets.pop(key, None)
        tokens = (
            self.burst if held is None else min(self.burst, held[0] + (now - held[1]) * self.rate)
        )
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.rate
        self._buckets[key] = (tokens, now)
        if len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)
        return wait

    def __len__(self) -> int:
        return len(self._buckets)


class WorkerLimits:
    """The worker API's two limits: per session and per client address."""

    def __init__(
        self,
        session_rate: float,
        session_burst: float,
        address_rate: float,
        address_burst: float,
        max_keys: int = 100_000,
    ) -> None:
        self.sessions = TokenBuckets(session_rate, session_burst, max_keys)
        self.addresses = TokenBuckets(address_rate, address_burst, max_keys)

    def check(self, address: str, session_id: str | None) -> None:
        """Raise :class:`TooManyRequests` if this address or session is over its rate."""
        wait = self.addresses.take(address)
        if wait:
            raise TooManyRequests(
                f"too many requests from your address: retry in {math.ceil(wait)} s",
                retry_after=math.ceil(wait),
            )
        if session_id is not None:
            wait = self.sessions.take(session_id)
            if wait:
                raise TooManyRequests(
                    f"too many requests for this session: retry in {math.ceil(wait)} s",
                    retry_after=math.ceil(wait),
                )


def check_worker_limits(request: Request) -> None:
    """Raise :class:`TooManyRequests` if the request's address or session is over its rate."""
    limits: WorkerLimits | None = getattr(request.app.state, "worker_limits", None)
    if limits is None:
        return
    address = request.client.host if request.client else "unknown"
    limits.check(address, request.path_params.get("session_id"))


async def limit_worker(request: Request) -> None:
    """Dependency of the worker routes (async: it runs on the event loop, no thread hop).

    The two routes a worker calls for every question call :func:`check_worker_limits`
    themselves instead (see ``app.api.worker``).
    """
    check_worker_limits(request)

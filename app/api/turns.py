"""Turns in this process's database work: the worker routes' and an import's transactions.

The two routes a worker calls for every question do all their database work in one function
run in one worker thread, and they take turns in this process, waiting on the event loop
rather than in threads: on SQLite one at a time (one writer at a time anyway; SQLite's own
busy handler would sleep up to 100 ms between retries), on PostgreSQL two at a time (one can
wait on the network while the other computes). Sixteen threads queueing on a lock, or on the
project's row lock while others hold the GIL, cost CPU in wake-ups and keep the lock holder
waiting (profiled; on PostgreSQL measured 47 round trips/s with no limit or 4 threads, 60
with 2).

An upload's import (:mod:`app.services.imports`) writes a chunk per transaction; on SQLite
each of those takes its turn in the same line, so a worker's request waits for one chunk at
most, never for the whole import.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from anyio import CapacityLimiter, to_thread

from app.config import get_settings
from app.services import imports

T = TypeVar("T")
_turns: WeakKeyDictionary[asyncio.AbstractEventLoop, CapacityLimiter] = WeakKeyDictionary()


def _sqlite() -> bool:
    return get_settings().database_url.startswith("sqlite")


def _limiter() -> CapacityLimiter:
    loop = asyncio.get_running_loop()
    if loop not in _turns:
        _turns[loop] = CapacityLimiter(1 if _sqlite() else 2)
    return _turns[loop]


async def in_turn(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a worker thread, in its turn."""
    return await to_thread.run_sync(function, *args, limiter=_limiter())


async def _workers_first() -> None:
    """Wait (up to :data:`WORKERS_FIRST_S`) until no worker's request has or awaits a turn."""
    limiter = _limiter()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WORKERS_FIRST_S
    while limiter.statistics().borrowed_tokens or limiter.statistics().tasks_waiting:
        if loop.time() >= deadline:
            return
        await asyncio.sleep(0.002)


WORKERS_FIRST_S = 0.25  # the longest an import step waits for the workers to go first


async def run_import(steps: imports.Steps[T]) -> T:
    """Run an import's steps in worker threads, each after the workers' requests in line
    (it would slow them down, on SQLite by the database's one write lock, everywhere by the
    interpreter lock); on SQLite its writing steps in their turn. An import left unfinished
    (an error, the client gone) is discarded."""
    writes = False
    try:
        while True:
            await _workers_first()
            if writes and _sqlite():
                done, value = await in_turn(imports.step, steps)
            else:
                done, value = await to_thread.run_sync(imports.step, steps)
            if done:
                return value
            writes = value
    finally:
        await to_thread.run_sync(steps.close)

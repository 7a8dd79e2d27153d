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
most, never for the whole import. The server's other processes wait for SQLite's writers of
this one, and this one for theirs, on :class:`app.db.session.WriterLock`: a worker there
also waits for one chunk at most.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from anyio import to_thread

from app.config import get_settings
from app.services import imports

T = TypeVar("T")


def sqlite_database() -> bool:
    """Whether this process serves SQLite (one writer at a time)."""
    return get_settings().database_url.startswith("sqlite")


class Turns:
    """``size`` threads of their own that run the turns, in the order they were asked for.

    A plain executor, not ``anyio.to_thread``: anyio's checkpoint, capacity limiter and
    cancel scope per call were 4 % of the event loop's instructions per worker round trip
    (callgrind). The executor's queue is the line; ``in_line`` counts the turns asked for
    and not finished, for :func:`_workers_first`.
    """

    def __init__(self, size: int) -> None:
        self.executor = ThreadPoolExecutor(size, thread_name_prefix="turn")
        self.in_line = 0

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        context = contextvars.copy_context()  # as anyio and asyncio.to_thread do
        submitted = self.executor.submit(context.run, function, *args)
        done = asyncio.wrap_future(submitted)
        self.in_line += 1
        done.add_done_callback(self._left)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            # As anyio's shielded call did: a turn not started yet is dropped, a running
            # one is waited for (it may be using the caller's database session).
            if not submitted.cancel():
                await asyncio.wait({done})
            raise

    def _left(self, _done: asyncio.Future[Any]) -> None:
        self.in_line -= 1


_turns: WeakKeyDictionary[asyncio.AbstractEventLoop, Turns] = WeakKeyDictionary()


def _line() -> Turns:
    loop = asyncio.get_running_loop()
    if loop not in _turns:
        _turns[loop] = Turns(1 if sqlite_database() else 2)
    return _turns[loop]


async def in_turn(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` in a worker thread, in its turn."""
    return await _line().run(function, *args)


async def _workers_first() -> None:
    """Wait (up to :data:`WORKERS_FIRST_S`) until no worker's request has or awaits a turn."""
    line = _line()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WORKERS_FIRST_S
    while line.in_line:
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
            if writes and sqlite_database():
                done, value = await in_turn(imports.step, steps)
            else:
                done, value = await to_thread.run_sync(imports.step, steps)
            if done:
                return value
            writes = value
    finally:
        await to_thread.run_sync(steps.close)

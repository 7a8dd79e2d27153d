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
from starlette.requests import Request

from app.api.edge import client_gone
from app.config import get_settings
from app.errors import ClientGone, ServiceUnavailable
from app.services import imports

T = TypeVar("T")


def sqlite_database() -> bool:
    """Whether this process serves SQLite (one writer at a time)."""
    return get_settings().database_url.startswith("sqlite")


class Turns:
    """``size`` threads of their own that run the turns, admitted in the order they were
    asked for.

    A request waits for its turn on the event loop (a semaphore of ``size`` places), not in
    the executor's queue: while it waits it holds no thread and no database connection, it
    can give up after ``wait_s`` (503 with ``Retry-After``: the server is overloaded, nothing
    was done), and a request whose client has gone is skipped when its turn comes, so a
    burst of abandoned requests (a study's launch, clients timing out) leaves no work done
    for nobody (no session opened for a client that gave up). Once admitted, a turn's thread
    is free at once.

    A plain executor, not ``anyio.to_thread``: anyio's checkpoint, capacity limiter and
    cancel scope per call were 4 % of the event loop's instructions per worker round trip
    (callgrind). ``in_line`` counts the turns asked for and not finished, for
    :func:`_workers_first`.
    """

    def __init__(self, size: int) -> None:
        self.executor = ThreadPoolExecutor(size, thread_name_prefix="turn")
        self.places = asyncio.Semaphore(size)
        self.in_line = 0

    async def run(
        self,
        function: Callable[..., T],
        *args: Any,
        wait_s: float | None = None,
        request: Request | None = None,
    ) -> T:
        self.in_line += 1
        try:
            await self._admit(wait_s)
            try:
                if request is not None and await client_gone(request.scope):
                    raise ClientGone("the client closed the connection before its turn")
                return await self._in_thread(function, *args)
            finally:
                self.places.release()
        finally:
            self.in_line -= 1

    async def _admit(self, wait_s: float | None) -> None:
        if wait_s is None:
            await self.places.acquire()
            return
        try:
            await asyncio.wait_for(self.places.acquire(), wait_s)
        except TimeoutError:
            raise ServiceUnavailable(
                f"the server is busy (no turn within {wait_s:g} s); nothing was changed, "
                "retry shortly",
                retry_after=RETRY_AFTER_S,
            ) from None

    async def _in_thread(self, function: Callable[..., T], *args: Any) -> T:
        context = contextvars.copy_context()  # as anyio and asyncio.to_thread do
        submitted = self.executor.submit(context.run, function, *args)
        done = asyncio.wrap_future(submitted)
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            # As anyio's shielded call did: a running turn is waited for (it may be using
            # the caller's database session); its place is given back only then.
            if not submitted.cancel():
                await asyncio.wait({done})
            raise


RETRY_AFTER_S = 2  # what a request refused for want of a turn is told to wait


_turns: WeakKeyDictionary[asyncio.AbstractEventLoop, Turns] = WeakKeyDictionary()


def _line() -> Turns:
    loop = asyncio.get_running_loop()
    if loop not in _turns:
        _turns[loop] = Turns(1 if sqlite_database() else 2)
    return _turns[loop]


async def in_turn(function: Callable[..., T], *args: Any, request: Request | None = None) -> T:
    """``function(*args)`` in a worker thread, in its turn. With the ``request`` it serves:
    503 if the turn does not come within ``TRIPLETLAB_QUEUE_SECONDS``, and nothing done if
    its client has gone by then (:class:`Turns`)."""
    if request is None:
        return await _line().run(function, *args)
    wait_s = get_settings().queue_seconds
    return await _line().run(function, *args, wait_s=wait_s, request=request)


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

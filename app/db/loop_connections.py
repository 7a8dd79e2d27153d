"""A few PostgreSQL connections of psycopg's asyncio driver per event loop, in autocommit.

The worker's round trip in one statement (``app.services.known_sessions``) runs on the event
loop with them: no hop to a worker thread and back, no SQLAlchemy session or pool between
the route and the driver. Each event loop (a server process's) keeps up to :data:`SIZE`
connections per database, opened when first needed; a request that finds them all busy
waits on the loop for the next one returned. A connection that failed, or was left inside
a statement, is closed rather than lent again: the caller then runs the round trip the
usual way, whose pool checks its connections itself (``app.db.session``). (The statement
of a cancelled request psycopg cancels on the server and waits for: the connection is idle
again.) :func:`close_all` closes the loop's connections (the app's shutdown).
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from sqlalchemy import Engine

SIZE = 2  # connections per event loop and database
# Two, not more: PostgreSQL's CPU per round trip grows with the connections open (4 per
# process: 0.96 ms, 2: 0.85, 1: 0.78 at 50 workers) and one queues a process's statements
# behind one another; 2 gave the most round trips/s and the lowest p99 in turns
# (bench/results/loop_connections_size.txt).
# The statements psycopg prepares run their generic plan, made once per connection (again
# after an ANALYZE). Left to choose (plan_cache_mode=auto), PostgreSQL compared the generic
# plan's estimate with its first custom plans' and, in some runs, planned the answer's
# statement of ~20 steps anew on every run: PostgreSQL's CPU per round trip 1.2-1.5 ms
# instead of 0.6-0.8 (perf: 25 % of its samples in the planner; bench/results/
# postgres_generic_plans.txt).
# JIT off: the answers' statement with the shapes' subqueries is estimated above
# jit_above_cost (~104,000), and PostgreSQL then compiled it at every run, 300-470 ms of a
# batch of one (auto_explain). Random plan, 40-question sessions, bench/worker_throughput.py
# --rows postgres postgres2 --session-length 40: 1 process at 10 workers 58-101 -> 442
# round trips/s, 2 processes at 50 workers 47 -> 698. A statement of a few rows never
# repays a compilation.
GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan -c jit=off"


class LoopConnections:
    """Up to ``size`` connections to one database, used on one event loop."""

    def __init__(self, connect_args: dict[str, Any], size: int = SIZE) -> None:
        self._connect_args = connect_args
        self._size = size
        self._opened = 0
        self._idle: list[psycopg.AsyncConnection[Any]] = []  # the last returned lent first
        self._waiting: deque[asyncio.Future[psycopg.AsyncConnection[Any] | None]] = deque()
        self._closed = False

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection in autocommit for the block, lent again after it if it is idle and
        healthy, closed otherwise."""
        connection = await self._acquire()
        try:
            yield connection
        finally:
            self._release(connection)

    async def _acquire(self) -> psycopg.AsyncConnection[Any]:
        while True:
            if self._idle:
                return self._idle.pop()
            if self._opened < self._size:
                self._opened += 1
                try:
                    return await psycopg.AsyncConnection.connect(
                        **self._connect_args, autocommit=True
                    )
                except BaseException:
                    self._opened -= 1
                    self._hand_over(None)  # a waiter may open one in its place
                    raise
            waiter = asyncio.get_running_loop().create_future()
            self._waiting.append(waiter)
            try:
                connection = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.result() is not None:
                    self._release(waiter.result())  # handed over as it was cancelled
                raise
            if connection is not None:
                return connection

    def _release(self, connection: psycopg.AsyncConnection[Any]) -> None:
        idle = connection.info.transaction_status == TransactionStatus.IDLE
        if connection.closed or not idle or self._closed:
            self._opened -= 1
            if not connection.closed:
                # Left inside a statement (psycopg's cancel of it failed), the socket is
                # dropped: the server ends the statement, as with any client gone.
                connection.pgconn.finish()
            self._hand_over(None)
            return
        self._hand_over(connection)

    def _hand_over(self, connection: psycopg.AsyncConnection[Any] | None) -> None:
        """To the first request still waiting: ``connection``, or (None) a turn to open one."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(connection)
                return
        if connection is not None:
            self._idle.append(connection)

    def close(self) -> None:
        """Close the idle connections (libpq's ``PQfinish``, as psycopg's ``close`` does,
        also off their loop once it stopped); one lent now is closed when it is returned."""
        self._closed = True
        idle, self._idle = self._idle, []
        self._opened -= len(idle)
        for connection in idle:
            connection.pgconn.finish()


# Held strongly: a loop closed without close_all is found by the next one, which closes its
# connections (a weak key would drop them to the collector, open).
_loops: dict[asyncio.AbstractEventLoop, dict[Engine, LoopConnections]] = {}


def loop_connections(engine: Engine) -> LoopConnections:
    """The running event loop's connections to ``engine``'s database (PostgreSQL), with the
    arguments the engine connects with."""
    loop = asyncio.get_running_loop()
    pools = _loops.get(loop)
    if pools is None:
        _finish_stopped_loops()
        pools = _loops[loop] = {}
    pool = pools.get(engine)
    if pool is None:
        _args, kwargs = engine.dialect.create_connect_args(engine.url)
        kwargs.setdefault("application_name", application_name())
        kwargs["options"] = f"{kwargs.get('options', '')} {GENERIC_PLANS}".strip()
        pool = pools[engine] = LoopConnections(kwargs)
    return pool


def _finish_stopped_loops() -> None:
    """Close the connections of the event loops closed without :func:`close_all` (served
    with no lifespan, as a test client serves a request outside its ``with`` block, on a
    loop of its own), rather than wait for the collector to find them."""
    for loop, pools in list(_loops.items()):
        if loop.is_closed():
            _loops.pop(loop, None)
            for pool in pools.values():
                pool.close()


def application_name() -> str:
    """How ``pg_stat_activity`` shows this process's loop connections (unless the database
    URL names an application): ``tripletlab-loop`` and the process id."""
    return f"tripletlab-loop {os.getpid()}"


def close_all() -> None:
    """Close the running event loop's connections (one lent now when it is returned)."""
    for pool in _loops.pop(asyncio.get_running_loop(), {}).values():
        pool.close()

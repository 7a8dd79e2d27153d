"""The event loop's own PostgreSQL connections (``app.db.loop_connections``), on the real
server: at most ``size`` at once, the rest waiting on the loop; a connection that failed,
or was left inside a statement, never lent again."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg
import pytest
from sqlalchemy import Engine, text

from app.db.loop_connections import LoopConnections, close_all, loop_connections
from app.db.session import make_engine
from tests.conftest import POSTGRES_URL

T = TypeVar("T")


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = make_engine(POSTGRES_URL)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as error:  # as tests.conftest.reset_postgres: fail in CI
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL at {POSTGRES_URL} is unreachable: {error}")
        pytest.skip(f"PostgreSQL at {POSTGRES_URL} is unreachable: {error}")
    yield engine
    engine.dispose()


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` in a thread of its own: the browser tests' Playwright keeps an event
    loop running in the main thread for the whole session."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


def _pool(engine: Engine, size: int) -> LoopConnections:
    _args, kwargs = engine.dialect.create_connect_args(engine.url)
    return LoopConnections(kwargs, size)


async def _backend(pool: LoopConnections, seconds: float = 0.0) -> int:
    """The backend's process id of the connection lent, after a statement of ``seconds``."""
    async with pool.connection() as connection:
        cursor = await connection.execute("SELECT pg_backend_pid(), pg_sleep(%s)", [seconds])
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


def _alive(engine: Engine, pids: set[int]) -> set[int]:
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT pid FROM pg_stat_activity")).scalars()
        return pids & set(rows)


def _gone(engine: Engine, pids: set[int]) -> bool:
    """Whether the backends ``pids`` have ended, within 5 s (a backend ends once it reads
    that its client closed the connection)."""
    for _ in range(50):
        if not _alive(engine, pids):
            return True
        time.sleep(0.1)
    return False


def test_at_most_size_connections_the_rest_wait(engine: Engine) -> None:
    async def main() -> tuple[list[int], set[int]]:
        pool = _pool(engine, 2)
        pids = await asyncio.gather(*(_backend(pool, 0.05) for _ in range(6)))
        idle = {c.info.backend_pid for c in pool._idle}
        pool.close()
        return pids, idle

    pids, idle = _run(main())
    assert len(pids) == 6
    assert len(set(pids)) == 2, pids  # six statements on two connections, in turn
    assert idle == set(pids)  # both returned, idle, then closed
    assert _gone(engine, set(pids))


def test_autocommit_generic_plans_and_named(engine: Engine) -> None:
    async def main() -> tuple[bool, Any, Any]:
        pool = loop_connections(engine)
        async with pool.connection() as connection:
            autocommit = connection.autocommit
            cursor = await connection.execute(
                "SELECT current_setting('plan_cache_mode'), current_setting('application_name')"
            )
            settings = await cursor.fetchone()
        close_all()
        return autocommit, *settings  # type: ignore[misc]

    autocommit, plans, name = _run(main())
    assert autocommit
    assert plans == "force_generic_plan"
    assert name == f"tripletlab-loop {os.getpid()}"


def test_a_lost_connection_is_replaced(engine: Engine) -> None:
    async def main() -> tuple[int, int, int]:
        pool = _pool(engine, 1)
        first = await _backend(pool)
        with engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
        with pytest.raises(psycopg.OperationalError):
            await _backend(pool)
        second = await _backend(pool)
        opened = pool._opened
        pool.close()
        return first, second, opened

    first, second, opened = _run(main())
    assert second != first
    assert opened == 1


def test_a_cancelled_statement_is_cancelled_on_the_server(engine: Engine) -> None:
    # psycopg cancels the statement of a cancelled task on the server and waits for it to
    # end: the connection is idle again, and lent again.
    async def main() -> tuple[set[int], int, float]:
        pool = _pool(engine, 1)
        seen: set[int] = set()

        async def long_statement() -> None:
            async with pool.connection() as connection:
                seen.add(connection.info.backend_pid)
                await connection.execute("SELECT pg_sleep(30)")

        task = asyncio.create_task(long_statement())
        await asyncio.sleep(0.3)
        start = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = await _backend(pool)
        waited = time.monotonic() - start
        pool.close()
        return seen, after, waited

    seen, after, waited = _run(main())
    assert seen == {after}
    assert waited < 5  # not the statement's 30 s


def test_a_connection_left_in_a_transaction_is_closed(engine: Engine) -> None:
    async def main() -> tuple[int, int, int]:
        pool = _pool(engine, 1)
        async with pool.connection() as connection:
            first = connection.info.backend_pid
            await connection.execute("BEGIN")
        opened = pool._opened
        second = await _backend(pool)
        pool.close()
        return first, opened, second

    first, opened, second = _run(main())
    assert opened == 0
    assert second != first
    assert _gone(engine, {first})


def test_a_waiter_cancelled_takes_no_connection(engine: Engine) -> None:
    async def main() -> int:
        pool = _pool(engine, 1)
        holder = asyncio.create_task(_backend(pool, 0.2))
        await asyncio.sleep(0.05)
        waiter = asyncio.create_task(_backend(pool))
        await asyncio.sleep(0.05)
        waiter.cancel()
        first = await holder
        assert (await _backend(pool)) == first  # the one connection, lent again
        opened = pool._opened
        pool.close()
        return opened

    assert _run(main()) == 1


def test_a_failed_connect_leaves_room(engine: Engine) -> None:
    async def main() -> list[Any]:
        _args, kwargs = engine.dialect.create_connect_args(engine.url)
        pool = LoopConnections({**kwargs, "port": 1}, 1)  # nothing listens there
        results = await asyncio.gather(_backend(pool), _backend(pool), return_exceptions=True)
        results.append(pool._opened)
        return results

    *errors, opened = _run(main())
    assert all(isinstance(e, psycopg.OperationalError) for e in errors), errors
    assert opened == 0


def test_close_all_closes_the_loops_connections(engine: Engine) -> None:
    async def main() -> tuple[int, bool]:
        pool = loop_connections(engine)
        assert loop_connections(engine) is pool  # one per loop and engine
        pid = await _backend(pool)
        close_all()
        return pid, loop_connections(engine) is pool

    pid, same = _run(main())
    assert not same
    assert _gone(engine, {pid})


def test_the_connections_of_a_stopped_loop_are_closed(engine: Engine) -> None:
    """A loop stopped without close_all (no lifespan: a test client's request outside its
    ``with`` block): its connections are closed when the next loop asks for its own."""

    async def backend() -> int:
        return await _backend(loop_connections(engine))

    stopped = _run(backend())
    assert _alive(engine, {stopped})

    async def next_loop() -> int:
        pid = await backend()
        close_all()
        return pid

    other = _run(next_loop())
    assert other != stopped
    assert _gone(engine, {stopped})

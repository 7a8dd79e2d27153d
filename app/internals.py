"""Every use of a library's private API, fenced here, each with its stock fallback.

Each shortcut buys a measured gain, written beside it, and can be switched off by a setting
(``TRIPLETLAB_PRIVATE_CURSOR``, ``TRIPLETLAB_ONE_WRITE``): then only public APIs run.
``tests/test_internals.py`` runs a worker's round trips with every fallback on. The
libraries whose internals are used here carry an upper bound in ``pyproject.toml``
(SQLAlchemy < 2.2, uvicorn < 0.55): a new release is adopted once these still hold.
Drop a shortcut when it stops paying.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import Connection
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config import get_settings

# -- SQLAlchemy: a statement on the driver's cursor ------------------------------------------


def cursor_execute(connection: Connection, cursor: Any, sql: str, values: Any) -> None:
    """Run ``sql`` with ``values`` on the DBAPI ``cursor`` of ``connection`` as SQLAlchemy
    runs a statement: its event listeners (tests count statements with them), its logging,
    its exceptions (``IntegrityError``, ``OperationalError``).

    ``Connection._cursor_execute`` is private. It skips what ``Connection.execute`` does per
    statement (compiled-cache lookup, bind processing, result and row objects), which cost
    several times what SQLite takes to run a round trip's small statement (profiled; the
    round trip runs ~8 per answer under SQLite's write lock). The fallback is
    :func:`app.db.driver`'s ``Connection.execute(text(...))``: see ``private_cursor``.
    """
    connection._cursor_execute(cursor, sql, values)


def private_cursor() -> bool:
    """Whether :func:`cursor_execute` is used (``TRIPLETLAB_PRIVATE_CURSOR``)."""
    return get_settings().private_cursor


# -- uvicorn: a response in one write ----------------------------------------------------------


def http_protocol() -> Any:
    """The ``http`` of ``uvicorn.Config``: uvicorn's httptools protocol whose writes of one
    event-loop turn reach the socket as one write (``TRIPLETLAB_ONE_WRITE``), else the stock
    ``"httptools"``.

    uvicorn writes a response's status line and headers when the app sends
    ``http.response.start`` and its body on ``http.response.body``: two ``write`` calls, two
    TCP segments, a client woken for each (``strace -c`` on a bare FastAPI app: 10,000
    writes for 5,000 responses). Joined, at the end of the loop's turn (before it waits for
    the sockets again): measured in turns on a bare FastAPI app at 50 connections
    (``bench/one_write.py``), with routes answered on the event loop, the server's CPU per
    request 0.17-0.18 ms -> 0.14 ms. The subclass reaches into uvicorn's
    ``HttpToolsProtocol`` (its ``transport`` and ``loop`` attributes).
    """
    return OneWriteHttpToolsProtocol if get_settings().one_write else "httptools"


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a :class:`_OneWrite` transport (module level: the
    supervisor hands it to the server processes it spawns, by name)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _OneWrite(transport, self.loop)  # type: ignore[assignment]


class _OneWrite:
    """A transport whose writes of one event-loop turn reach the socket as one write. Nothing
    is reordered or held longer than the turn: a close flushes first, an abort drops what
    waits, and flow control still sees every byte, one turn later."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def writelines(self, chunks: Any) -> None:
        for data in chunks:
            self.write(data)

    def _flush(self) -> None:
        pending = self._pending
        if not pending:
            return
        self._pending = []
        if self._transport.is_closing():
            return  # the connection is gone: its transport would drop it too
        self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, pause_reading, …
        return getattr(self._transport, name)


# -- uvicorn: the exit status of a worker that failed to start -----------------------------------

# uvicorn.config.STARTUP_FAILURE (3), the status its server exits with when the app failed to
# start: the supervisor then stops instead of starting it again and again. Our own constant:
# no private import to buy anything.
STARTUP_FAILURE = 3

"""Every use of a library's private API, fenced here, each with its stock fallback.

Each shortcut buys a measured gain, written beside it, and can be switched off by a setting
(``TRIPLETLAB_PRIVATE_CURSOR``, ``TRIPLETLAB_STOCK_HTTP_PROTOCOL``): then only public
APIs run.
``tests/test_internals.py`` runs a worker's round trips with every fallback on. The
libraries whose internals are used here carry an upper bound in ``pyproject.toml``
(SQLAlchemy < 2.2, uvicorn < 0.55, httptools < 0.10): a new release is adopted once these
still hold.
Drop a shortcut when it stops paying.
"""

from __future__ import annotations

import asyncio
import json
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


# -- uvicorn: a response in one write, and time limits on slow clients ---------------------------


def http_protocol() -> Any:
    """The ``http`` of ``uvicorn.Config``: :class:`GuardedHttpToolsProtocol`, or uvicorn's
    stock ``"httptools"`` with ``TRIPLETLAB_STOCK_HTTP_PROTOCOL``.

    Both subclasses reach into uvicorn's ``HttpToolsProtocol`` (its transport, loop, parser
    callbacks, ``cycle`` and ``flow``). What they buy:

    * one write per response (:class:`OneWriteHttpToolsProtocol`): uvicorn writes a
      response's status line and headers when the app sends ``http.response.start`` and its
      body on ``http.response.body``: two ``write`` calls, two TCP segments, a client woken
      for each (``strace -c`` on a bare FastAPI app: 10,000 writes for 5,000 responses).
      Joined at the end of the loop's turn: on a bare FastAPI app at 50 connections
      (``bench/one_write.py``), with routes answered on the event loop, the server's CPU per
      request 0.17-0.18 ms -> 0.14 ms;
    * time limits on slow clients (:class:`GuardedHttpToolsProtocol`), which uvicorn lacks:
      500 connections sending their headers a byte a second were all held open for as long
      as they went on; with the limits all were closed 9.8-9.9 s after opening
      (``bench/hostile_clients.py``, ``bench/results/hostile_clients.txt``).
    """
    return "httptools" if get_settings().stock_http_protocol else GuardedHttpToolsProtocol


class _OneWrite:
    """A transport whose writes of one event-loop turn reach the socket as one write."""

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


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a :class:`_OneWrite` transport (``uvicorn.Config``'s
    ``http``)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _OneWrite(transport, self.loop)  # type: ignore[assignment]


class GuardedHttpToolsProtocol(OneWriteHttpToolsProtocol):
    """:class:`OneWriteHttpToolsProtocol` that closes connections of clients too slow to
    send a request (``TRIPLETLAB_HEADER_TIMEOUT_SECONDS``, ``TRIPLETLAB_BODY_TIMEOUT_SECONDS``).

    * **Head**: a request's line and headers must all arrive within the header timeout of
      its first byte, and a new connection's first request within that of its opening.
      Past it the connection closes, with a 408 if part of a request came.
    * **Body**: the body may pause for at most the body timeout between two pieces (the
      pause, not the whole upload, so a large upload over a slow link passes). Past it, 408
      and close; the route waiting for the body sees the client gone. While the server
      itself stops reading (its app has not taken what came: uvicorn's flow control, or a
      ``100-continue`` not yet answered) the wait is not the client's and is not counted.

    One timer per connection, armed when a deadline is set and none runs, re-armed for the
    next deadline when it fires: a request on a kept-alive connection only writes two
    floats, with no timer made or cancelled (the round trip's CPU is the benchmark's
    subject, ``bench/worker_throughput.py``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings()
        self.header_timeout = settings.header_timeout_seconds
        self.body_timeout = settings.body_timeout_seconds
        self._head_by: float | None = None  # when the request's head must be complete
        self._head_begun = False  # whether a byte of that request came
        self._body_by: float | None = None  # when the next piece of body must come
        self._watch: asyncio.TimerHandle | None = None

    # Deadlines, set and cleared by uvicorn's parser callbacks.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_head(begun=False)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._head_by is None and self._body_by is None:
            cycle = self.cycle
            if cycle is None or cycle.response_complete:
                # Bytes between requests start the next one's clock, whatever they are:
                # line breaks before a request call no parser callback, and uvicorn's
                # keep-alive timer stops at any byte.
                self._expect_head(begun=False)
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._head_by is None:  # a request after another: its own time
            self._expect_head(begun=True)
        else:  # a new connection's first request: counted from the connection's opening
            self._head_begun = True

    def handle_websocket_upgrade(self) -> None:
        self._head_by = self._body_by = None  # the connection is no longer HTTP's
        super().handle_websocket_upgrade()

    def on_headers_complete(self) -> None:
        self._head_by = None
        self._body_by = self.loop.time() + self.body_timeout  # cleared if no body follows
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        self._body_by = self.loop.time() + self.body_timeout
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._body_by = None
        super().on_message_complete()

    def _expect_head(self, *, begun: bool) -> None:
        self._head_by = self.loop.time() + self.header_timeout
        self._head_begun = begun
        if self._watch is None:
            self._watch = self.loop.call_later(self.header_timeout, self._check)

    # The timer.
    def _check(self) -> None:
        self._watch = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        if self._head_by is not None and now >= self._head_by:
            self._head_too_slow()
            return
        if self._body_by is not None and now >= self._body_by:
            if self._server_holds_body():
                self._body_by = now + self.body_timeout
            else:
                self._body_too_slow()
                return
        deadlines = [d for d in (self._head_by, self._body_by) if d is not None]
        if deadlines:
            self._watch = self.loop.call_at(min(deadlines), self._check)

    def _server_holds_body(self) -> bool:
        """Whether the body waits on the server: reading paused until the app takes what
        came, or a client's ``Expect: 100-continue`` not answered yet."""
        cycle = self.cycle
        return self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue)

    def _head_too_slow(self) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # A pipelined request's head is late while the one before it is answered: end
            # the connection after that answer.
            self._head_by = None
            cycle.keep_alive = False
            return
        if self._head_begun:
            self._refuse(f"the request's headers took longer than {self.header_timeout:g} s")
        else:
            self.transport.close()  # nothing was asked: nothing to answer

    def _body_too_slow(self) -> None:
        cycle = self.cycle
        self._body_by = None
        if cycle.response_started:
            cycle.keep_alive = False
            if cycle.response_complete:
                self.transport.close()
            return
        # The route waiting for the body learns the client is gone, and anything it sends
        # is dropped: the 408 is the only answer on the wire.
        cycle.disconnected = True
        cycle.message_event.set()
        self._refuse(
            f"the request body stopped arriving for {self.body_timeout:g} s; send it again"
        )

    def _refuse(self, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        self.transport.write(
            b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
        )
        self.transport.close()


# -- uvicorn: the exit status of a worker that failed to start -----------------------------------

# uvicorn.config.STARTUP_FAILURE (3), the status its server exits with when the app failed to
# start: the supervisor then stops instead of starting it again and again. Our own constant:
# no private import to buy anything.
STARTUP_FAILURE = 3

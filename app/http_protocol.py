"""uvicorn's HTTP protocol with a response sent in one write, not two.

uvicorn writes a response's status line and headers when the app sends
``http.response.start``, and its body when it sends ``http.response.body``: two ``write``
system calls on the socket, two TCP segments, and a client woken for each (counted with
``strace -c`` on a bare FastAPI app: 10,000 writes for 5,000 responses). Here the writes of
one turn of the event loop are joined and written once, at the end of that turn
(``loop.call_soon``), which is before the loop waits for the sockets again: a response whose
start and body are sent without waiting in between (every JSON and HTML response) reaches
the socket as one write. Measured in turns on a bare FastAPI app at 50 connections
(``bench/one_write.py``): with its routes answered on the event loop, the server's CPU per
request 0.17-0.18 ms -> 0.14 ms; with them run in the thread pool, no difference beyond the
machine's spread.

Nothing is reordered or held longer than the turn: a close flushes first, an abort drops
what waits (as the transport's own buffer would be dropped), and flow control still sees
every byte, one turn later.

:class:`GuardedHttpToolsProtocol` adds what uvicorn lacks against slow clients: a time limit
on a request's line and headers, and on each pause of its body (issue 31: 200 connections
sending their headers a byte a second were held open for as long as they went on, with no
end, and more of them would have used up the process's file descriptors; uvicorn only
times out a connection idle *between* requests). ``tripletlab serve`` runs it unless
``TRIPLETLAB_STOCK_HTTP_PROTOCOL`` asks for uvicorn's own protocol (a fallback, should a
uvicorn release change the internals used here; ``pyproject.toml`` pins uvicorn and
httptools below their next minor versions for the same reason).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config import get_settings


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

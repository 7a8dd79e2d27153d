"""The edge of the service: what every request and response passes through.

* Text with NUL characters is refused (422 naming where it is): PostgreSQL cannot store
  them (it raised a 500) and SQLite stores them silently, so both databases now refuse
  them alike. The request path, every query parameter and every string (key or value) of
  a JSON body are checked; uploads (CSV, ZIP) are not JSON: their parsers must check them.
* Every response says ``X-Content-Type-Options: nosniff``: API answers, media files and
  static assets alike, so a browser never guesses an uploaded file to be HTML or script.
* Every response served over HTTPS says ``Strict-Transport-Security`` (HSTS), so a browser
  that once reached the host over HTTPS never again sends it a worker's token in clear.
  "Over HTTPS" is the request's scheme: HTTPS served by ``tripletlab serve`` itself, or a
  trusted proxy's ``X-Forwarded-Proto: https`` (uvicorn reads it from the addresses in
  ``TRIPLETLAB_FORWARDED_ALLOW_IPS`` only).

Two plain ASGI middlewares (no thread hop, no SQL). ``RejectNul`` reads a JSON body once
(``BodySizeLimit``, outside it, bounds it), searches it for the escape ``\\u0000`` as bytes,
parses it only when the escape is there, and hands it on unchanged. ``NoSniff`` is the
outermost, so even the body size limit's 413 carries its headers.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

NOSNIFF = (b"x-content-type-options", b"nosniff")


def find_nul(value: Any, where: str) -> str | None:
    """The location (``body.items.0.name``) of the first string holding a NUL, if any."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\x00" in key:
                return f"{where} (a key)"
            found = find_nul(item, f"{where}.{key}")
            if found:
                return found
    elif isinstance(value, list):
        for position, item in enumerate(value):
            found = find_nul(item, f"{where}.{position}")
            if found:
                return found
    return None


class NoSniff:
    """Add ``X-Content-Type-Options: nosniff`` to every response, and
    ``Strict-Transport-Security: max-age=<hsts_seconds>`` to those served over HTTPS (none
    if ``hsts_seconds`` is 0); the outermost middleware."""

    def __init__(self, app: ASGIApp, hsts_seconds: int = 0) -> None:
        self.app = app
        self.hsts = (b"strict-transport-security", b"max-age=%d" % hsts_seconds)
        self.hsts_seconds = hsts_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        added = [NOSNIFF]
        if self.hsts_seconds and scope.get("scheme") == "https":
            added.append(self.hsts)

        async def send_nosniff(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                present = {name.lower() for name, _ in headers}
                headers += [header for header in added if header[0] not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_nosniff)


class RejectNul:
    """Refuse NUL characters in paths, query strings and JSON bodies (422 naming where).

    It sits inside ``BodySizeLimit``, so the bodies it reads are already bounded.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        where = self._nul_in_url(scope)
        if where is None and self._is_json(scope):
            body, more = await _read_body(receive)
            if b"\\u0000" in body:
                where = self._nul_in_json(body)
            receive = _replay(body, more, receive)
        if where is not None:
            await _refuse(send, f"{where}: NUL characters (\\u0000) are not allowed")
            return
        await self.app(scope, receive, send)

    @staticmethod
    def _nul_in_url(scope: Scope) -> str | None:
        if "\x00" in scope.get("path", ""):
            return "path"
        query = scope.get("query_string", b"")
        if b"%00" in query or b"\x00" in query:
            for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True):
                if "\x00" in name:
                    return "query (a parameter name)"
                if "\x00" in value:
                    return f"query.{name}"
        return None

    @staticmethod
    def _is_json(scope: Scope) -> bool:
        if scope.get("method") not in ("POST", "PUT", "PATCH", "DELETE"):
            return False
        for name, value in scope.get("headers") or []:
            if name == b"content-type":
                return b"json" in value.lower()
        return False

    @staticmethod
    def _nul_in_json(body: bytes) -> str | None:
        try:
            parsed = json.loads(body)
        except ValueError:
            return None  # malformed: the route's own parsing says so
        return find_nul(parsed, "body")


class ClientPresence:
    """Let a request ask whether its client is still there (:func:`client_gone`) without
    losing a message of its body.

    Starlette's ``Request.is_disconnected`` takes the next message from the server and
    drops it unless it is a disconnect, so asked before a route reads its body it loses a
    chunk of it. Here a message taken to look is kept and handed to the app's next
    ``receive``.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        kept: list[Message] = []
        gone = False

        async def receive_kept() -> Message:
            nonlocal gone
            message = kept.pop(0) if kept else await receive()
            gone = gone or message["type"] == "http.disconnect"
            return message

        async def look() -> bool:
            nonlocal gone
            if not gone:
                message: Message = {}
                with anyio.CancelScope() as immediately:  # only a message already there
                    immediately.cancel()
                    message = await receive()
                if message:
                    kept.append(message)
                    gone = message["type"] == "http.disconnect"
            return gone

        scope[GONE] = look
        await self.app(scope, receive_kept, send)


GONE = "tripletlab.client_gone"


async def client_gone(scope: Scope) -> bool:
    """Whether the client of the request of ``scope`` has closed its connection (a message
    already received says so); False outside :class:`ClientPresence`."""
    look = scope.get(GONE)
    return bool(look is not None and await look())


async def _read_body(receive: Receive) -> tuple[bytes, list[Message]]:
    """The request body, and any non-body message met while reading it (a disconnect)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), [message]
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), []


def _replay(body: bytes, more: list[Message], receive: Receive) -> Receive:
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}, *more]

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _refuse(send: Send, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

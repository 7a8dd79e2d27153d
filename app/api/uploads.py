"""Request bodies that may be JSON or a multipart file upload, and the body size limit."""

from __future__ import annotations

import json
from dataclasses import dataclass
from tempfile import SpooledTemporaryFile
from typing import Any, BinaryIO

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import InvalidInput, PayloadTooLarge


def upload_body(json_schema: dict[str, Any], description: str) -> dict[str, Any]:
    """OpenAPI ``openapi_extra`` for a body read by :func:`read_upload`: JSON, a CSV body,
    or a multipart upload in the field ``file``."""
    file_field = {"type": "object", "properties": {"file": {"type": "string", "format": "binary"}}}
    return {
        "requestBody": {
            "content": {
                "application/json": {"schema": json_schema},
                "text/csv": {"schema": {"type": "string"}},
                "multipart/form-data": {"schema": file_field},
            },
            "description": description,
        }
    }


_SPOOL_BYTES = 2**20  # an upload past 1 MiB waits on disk, not in memory


@dataclass
class Upload:
    """A request body: ``json_body`` (raw, not yet parsed) when it was JSON, else ``file``
    (binary, seekable, at its start; spooled to disk past 1 MiB) with its name and type."""

    json_body: bytes | None = None
    file: BinaryIO | None = None
    filename: str = ""
    content_type: str = ""

    @property
    def head(self) -> bytes:
        """The file's first bytes (to tell a ZIP from a CSV), the file left at its start."""
        if self.file is None:
            return b""
        start = self.file.read(4)
        self.file.seek(0)
        return start


async def read_upload(request: Request) -> Upload:
    """The body: raw JSON, or the multipart field 'file' or a CSV body as a file.

    Nothing here parses a large body on the event loop: the body arrives in chunks (a
    multipart file and a CSV body are spooled to a temporary file) and is parsed later, in a
    worker thread or a process of its own (:mod:`app.services.upload_parsing`).
    """
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await request.form()
        file = form.get("file")
        if not isinstance(file, UploadFile):
            raise InvalidInput("a multipart upload needs its file in the field 'file'")
        await file.seek(0)
        return Upload(
            file=file.file,
            filename=file.filename or "",
            content_type=file.content_type or "",
        )
    if content_type.startswith(("text/csv", "application/csv")):
        # Closed (and its disk file removed) when the request's last reference goes.
        spool = SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115
        async for chunk in request.stream():
            spool.write(chunk)  # a chunk of at most 64 KiB, into the page cache
        spool.seek(0)
        return Upload(file=spool, filename="upload.csv", content_type="text/csv")
    if content_type and not content_type.startswith("application/json"):
        raise InvalidInput(
            f"unsupported content type {content_type!r}: send application/json, text/csv "
            "or multipart/form-data"
        )
    return Upload(json_body=await request.body())


class PiecesResponse(Response):
    """A reply whose body is ``pieces`` sent one after the other (with their total as its
    Content-Length), never joined: one 40 MiB write held the event loop 0.16 s (profiled),
    while a piece at a time lets it serve other requests while the client reads."""

    def __init__(self, pieces: list[bytes], status_code: int, media_type: str) -> None:
        super().__init__(b"", status_code=status_code, media_type=media_type)
        self.pieces = pieces
        self.headers["content-length"] = str(sum(len(p) for p in pieces))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        for piece in self.pieces:
            if piece:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})


WORKER_PATHS = "/api/w/"  # the worker API: small JSON bodies, sent by anyone with a link


class BodySizeLimit:
    """Refuse request bodies over ``max_bytes`` with 413, whether announced or streamed;
    on the worker API (:data:`WORKER_PATHS`) over ``worker_max_bytes``.

    A body announced larger (``Content-Length``) is refused before a byte of it is read; a
    streamed one (chunked) as soon as what arrived passes the limit. The worker API's limit
    is small: its routes are open to anyone holding a study's link, and with only the
    upload limit each request could pin ~50 MiB in the server (ten 47 MB posts to a session
    that did not exist grew a process from 331 to 790 MB, issue 31) where an answer is
    under 1 KiB. Whatever of a refused body still arrives, uvicorn reads and drops, so
    the client reads its 413 once it has sent the body (a connection closed while it sends
    would reset, and the client would never see the 413).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, worker_max_bytes: int | None = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.worker_max_bytes = max_bytes if worker_max_bytes is None else worker_max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        worker = scope["path"].startswith(WORKER_PATHS)
        limit = self.worker_max_bytes if worker else self.max_bytes
        for name, value in scope.get("headers") or ():
            if name == b"content-length":
                if value.isdigit() and int(value) > limit:
                    await _refuse(send, _too_large(limit, worker))
                    return
                break
        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise PayloadTooLarge(_too_large(limit, worker))
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except PayloadTooLarge:
            if not response_started:
                await _refuse(send, _too_large(limit, worker))


def _too_large(limit: int, worker: bool) -> str:
    if worker:
        return f"request body larger than the worker API's limit of {limit / 2**10:g} KiB"
    return f"request body larger than the limit of {limit / 2**20:g} MiB"


async def _refuse(send: Send, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

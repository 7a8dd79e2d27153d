"""Request bodies that may be JSON or a multipart file upload, and the body size limit."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError
from starlette.datastructures import UploadFile
from starlette.requests import Request
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


@dataclass
class Upload:
    json: Any = None
    content: bytes = b""
    filename: str = ""
    content_type: str = ""


async def read_upload(request: Request, json_type: Any) -> Upload:
    """The body as ``json_type`` (validated) when it is JSON, else the multipart field 'file'."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await request.form()
        file = form.get("file")
        if not isinstance(file, UploadFile):
            raise InvalidInput("a multipart upload needs its file in the field 'file'")
        return Upload(
            content=await file.read(),
            filename=file.filename or "",
            content_type=file.content_type or "",
        )
    if content_type.startswith(("text/csv", "application/csv")):
        return Upload(content=await request.body(), filename="upload.csv", content_type="text/csv")
    if content_type and not content_type.startswith("application/json"):
        raise InvalidInput(
            f"unsupported content type {content_type!r}: send application/json, text/csv "
            "or multipart/form-data"
        )
    body = await request.body()
    try:
        return Upload(json=TypeAdapter(json_type).validate_json(body))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        if first["type"] == "json_invalid":
            raise InvalidInput(f"malformed JSON: {first['msg']}") from error
        suffix = f" (and {error.error_count() - 1} more errors)" if error.error_count() > 1 else ""
        raise InvalidInput(
            f"invalid body at {where or 'top level'}: {first['msg']}{suffix}"
        ) from error


class BodySizeLimit:
    """Refuse request bodies over ``max_bytes`` with 413, whether announced or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        received = 0
        response_started = False

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise PayloadTooLarge(self._message())
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except PayloadTooLarge:
            if not response_started:
                await self._refuse(send)

    def _message(self) -> str:
        return f"request body larger than the limit of {self.max_bytes / 2**20:g} MiB"

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"detail": self._message()}).encode()
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

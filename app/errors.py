"""The service's errors: exceptions that carry their HTTP status, turned into one JSON shape."""

from __future__ import annotations

from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.db import faults

DISK_FULL_RETRY_S = 30  # space is freed by a person, not in a second


class AppError(Exception):
    """A request the service refuses; the message says what is wrong. ``loc``: the path of
    the body's field to blame, when there is one (``("strategies", 0, "weight")``): the
    reply then lists it under ``errors`` as a validation error does, so that a form can show
    the message beside that field."""

    status_code = 400

    def __init__(self, detail: str, loc: Sequence[str | int] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.loc = tuple(loc) if loc else None


class Unauthorized(AppError):
    status_code = 401


class Forbidden(AppError):
    status_code = 403


class NotFound(AppError):
    status_code = 404


class Conflict(AppError):
    status_code = 409


class PayloadTooLarge(AppError):
    status_code = 413


class InvalidInput(AppError):
    status_code = 422


class TooManyRequests(AppError):
    """Over a rate limit; ``Retry-After`` says how many seconds to wait."""

    status_code = 429

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = max(1, retry_after)


class ServiceUnavailable(AppError):
    """The server is too busy to take this request now (nothing was changed);
    ``Retry-After`` says how many seconds to wait."""

    status_code = 503

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = max(1, retry_after)


class ClientGone(AppError):
    """The client closed its connection before its request's work began: the work is
    skipped (no one would get its result). 499, as nginx logs it; nobody receives it."""

    status_code = 499


def _describe_validation_error(error: dict) -> str:
    location = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
    message = error.get("msg", "invalid value")
    return f"{location}: {message}" if location else message


def install_error_handlers(app: FastAPI) -> None:
    """Make every refusal answer ``{"detail": "..."}`` with its status."""

    @app.exception_handler(AppError)
    async def handle_app_error(request: Request, exc: AppError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
        if isinstance(exc, TooManyRequests | ServiceUnavailable):
            headers = {"Retry-After": str(exc.retry_after)}
        body: dict = {"detail": exc.detail}
        if exc.loc:
            body["errors"] = [{"loc": ["body", *exc.loc], "msg": exc.detail, "type": "value_error"}]
        return JSONResponse(body, status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def handle_validation_error(
        request: Request, exc: RequestValidationError
    ) -> JSONResponse:
        errors = exc.errors()
        shown = "; ".join(_describe_validation_error(e) for e in errors[:5])
        if len(errors) > 5:
            shown += f"; and {len(errors) - 5} more"
        return JSONResponse(
            {"detail": f"invalid request: {shown}", "errors": _jsonable(errors[:20])},
            status_code=422,
        )

    @app.exception_handler(OperationalError)
    async def handle_database_unavailable(request: Request, exc: OperationalError) -> JSONResponse:
        # The database is down, (SQLite) busy past its timeout, or out of disk space:
        # nothing was written. Busy or down, the same request may succeed in a moment; a
        # full disk waits for an operator (app.db.faults logs each fault once).
        if faults.classify(exc) is faults.Fault.DISK_FULL:
            return _disk_full()
        return JSONResponse(
            {"detail": faults.UNAVAILABLE_DETAIL}, status_code=503, headers={"Retry-After": "1"}
        )

    @app.exception_handler(PoolTimeoutError)
    async def handle_pool_exhausted(request: Request, exc: PoolTimeoutError) -> JSONResponse:
        # Every connection of the process's pool stayed in use for the pool's timeout: the
        # server is overloaded, nothing was written; the request may succeed in a moment.
        return JSONResponse(
            {"detail": "the server is busy; nothing was changed, retry shortly"},
            status_code=503,
            headers={"Retry-After": "2"},
        )

    @app.exception_handler(OSError)
    async def handle_os_error(request: Request, exc: OSError) -> JSONResponse:
        # A full disk outside the database (a spooled upload, a media file); any other
        # OSError is a bug: on to the 500 of Starlette's ServerErrorMiddleware.
        if faults.classify(exc) is not faults.Fault.DISK_FULL:
            raise exc
        faults.report_disk_full(faults.disk_full_path(exc), exc)
        return _disk_full()

    @app.exception_handler(StarletteHTTPException)
    async def handle_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(
            {"detail": str(exc.detail)}, status_code=exc.status_code, headers=exc.headers
        )


def _disk_full() -> JSONResponse:
    return JSONResponse(
        {"detail": faults.DISK_FULL_DETAIL},
        status_code=503,
        headers={"Retry-After": str(DISK_FULL_RETRY_S)},
    )


def _jsonable(errors: list[dict]) -> list[dict]:
    """Validation errors without the raw input or exception objects they may carry."""
    return [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": e.get("type", "")}
        for e in errors
    ]

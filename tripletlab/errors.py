"""The client's errors: one :class:`TripletLabError` carrying the API's status and ``detail``.

The server answers every refusal with ``{"detail": "what is wrong"}`` and a 4xx status
(``app/errors.py``); the client raises the subclass for that status, so a notebook can catch
``NotFound`` or ``Conflict`` alone, or every refusal as ``TripletLabError``.
"""

from __future__ import annotations

from typing import Any

import httpx


class TripletLabError(Exception):
    """A request the server refused, or a training job that did not succeed.

    Attributes
    ----------
    status_code : int or None
        The HTTP status (None for a job that failed after it was accepted).
    detail : str
        What is wrong, as the API says it.
    """

    status_code: int | None = None

    def __init__(self, detail: str, status_code: int | None = None) -> None:
        if status_code is not None:
            self.status_code = status_code
        self.detail = detail
        prefix = f"{self.status_code} " if self.status_code is not None else ""
        super().__init__(f"{prefix}{detail}")


class BadRequest(TripletLabError):
    """400: a body that cannot be parsed at all."""

    status_code = 400


class Unauthorized(TripletLabError):
    """401: no API key, or a key that is wrong or revoked."""

    status_code = 401


class Forbidden(TripletLabError):
    """403: the key's role may not do this."""

    status_code = 403


class NotFound(TripletLabError):
    """404: no such project, object, job or model (or someone else's)."""

    status_code = 404


class Conflict(TripletLabError):
    """409: a taken slug, a project that holds answers, an upload already running."""

    status_code = 409


class PayloadTooLarge(TripletLabError):
    """413: a body or a ZIP entry over the server's limits."""

    status_code = 413


class InvalidInput(TripletLabError):
    """422: a field that is wrong; ``detail`` names it."""

    status_code = 422


class TooManyRequests(TripletLabError):
    """429: over a rate limit; ``retry_after`` says how many seconds to wait."""

    status_code = 429

    def __init__(self, detail: str, status_code: int | None = None, retry_after: float = 1) -> None:
        super().__init__(detail, status_code)
        self.retry_after = retry_after


class ServiceUnavailable(TripletLabError):
    """503: the database is busy or down; ``retry_after`` says when to try again."""

    status_code = 503

    def __init__(self, detail: str, status_code: int | None = None, retry_after: float = 1) -> None:
        super().__init__(detail, status_code)
        self.retry_after = retry_after


class JobFailed(TripletLabError):
    """A training job ended ``failed`` or ``cancelled``; ``job`` is its last state."""

    def __init__(self, job: dict[str, Any]) -> None:
        reason = job.get("error") or job.get("status", "")
        super().__init__(f"job {job.get('id')} ({job.get('kind')}) {job.get('status')}: {reason}")
        self.job = job


_BY_STATUS: dict[int, type[TripletLabError]] = {
    cls.status_code: cls  # type: ignore[misc]
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        Conflict,
        PayloadTooLarge,
        InvalidInput,
        TooManyRequests,
        ServiceUnavailable,
    )
}


def raise_for_status(response: httpx.Response) -> None:
    """Raise the :class:`TripletLabError` of a refused response, carrying its ``detail``."""
    if response.is_success:
        return
    response.read()
    try:
        detail = response.json()["detail"]
    except (ValueError, KeyError, TypeError):
        detail = response.text or response.reason_phrase
    if not isinstance(detail, str):  # FastAPI's own list of errors, should one get through
        detail = str(detail)
    cls = _BY_STATUS.get(response.status_code, TripletLabError)
    if cls in (TooManyRequests, ServiceUnavailable):
        retry_after = float(response.headers.get("retry-after", "1"))
        raise cls(detail, response.status_code, retry_after=retry_after)  # type: ignore[call-arg]
    raise cls(detail, response.status_code)

"""Triplet Lab from Python: ``from tripletlab import Client``.

The server itself is the ``app`` package (``tripletlab serve``); this package is the client a
researcher uses from a notebook or a script (:mod:`tripletlab.client`).
"""

from tripletlab.client import Client
from tripletlab.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidInput,
    JobFailed,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    TooManyRequests,
    TripletLabError,
    Unauthorized,
)

__all__ = [
    "BadRequest",
    "Client",
    "Conflict",
    "Forbidden",
    "InvalidInput",
    "JobFailed",
    "NotFound",
    "PayloadTooLarge",
    "ServiceUnavailable",
    "TooManyRequests",
    "TripletLabError",
    "Unauthorized",
]

"""What an operator is told when the database fails, and what a client is answered.

A database error that no request can mend is one of three faults (:func:`classify`):

* **disk full**: SQLite's ``database or disk is full`` (``SQLITE_FULL``), PostgreSQL's
  SQLSTATE 53100 (``disk_full``), any ``No space left on device``, and the operating
  system's ``ENOSPC`` / ``EDQUOT`` (a spooled upload, a media file). It lasts until someone
  frees space, so a client is told so (:data:`DISK_FULL_DETAIL`) and the log names the path
  once per episode (:func:`report_disk_full`), not once per refused request;
* **lost**: the database server cannot be reached or dropped the connection (a restart, a
  crash, a network cut): PostgreSQL's SQLSTATE classes 08 and 57P0x, a connection that
  failed before the server said anything, a connection SQLAlchemy found dead. One line when
  it is lost and one when a new connection succeeds again, with how long it took
  (:func:`watch`), instead of a traceback per request or per job-runner tick;
* **busy**: anything else an ``OperationalError`` says (SQLite's lock held past its
  timeout, a PostgreSQL lock or statement timeout). Transient: a client retries in a
  moment, and nothing is logged.

In issue 31's probe of ``main``, a full disk answered the generic "busy or unavailable"
503 and logged nothing, and a PostgreSQL restart left job-runner tracebacks.

:func:`watch` listens to every SQLAlchemy engine of the process (``handle_error``), so
the request handler, the job runner, imports and exports report alike, whichever engine
they use. Nothing here knows of HTTP: ``app.errors`` turns a fault into its response.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
import threading
import time
import weakref
from enum import StrEnum
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.exc import DBAPIError

# The server's log (uvicorn's, as app.supervisor's): these lines read as the server's own.
log = logging.getLogger("uvicorn.error")

DISK_FULL_DETAIL = (
    "the server is out of disk space; nothing was changed. Retry later: an operator must "
    "free space first"
)
UNAVAILABLE_DETAIL = "the database is busy or unavailable; nothing was changed, retry shortly"
EPISODE_GAP_S = 60.0  # a disk full again after this long without the error is a new episode

_DISK_FULL_SQLSTATE = "53100"
_LOST_SQLSTATES = ("57P01", "57P02", "57P03")  # admin / crash shutdown, cannot connect now
_NO_SPACE = "no space left on device"
_SQLITE_FULL = 13


class Fault(StrEnum):
    DISK_FULL = "disk full"
    LOST = "lost"
    BUSY = "busy"


def classify(error: BaseException) -> Fault:
    """Which fault ``error`` (SQLAlchemy's, the driver's, or an ``OSError``) reports."""
    original = error.orig if isinstance(error, DBAPIError) else error
    if isinstance(original, OSError) and original.errno in (errno.ENOSPC, errno.EDQUOT):
        return Fault.DISK_FULL
    if getattr(original, "sqlite_errorcode", None) == _SQLITE_FULL:
        return Fault.DISK_FULL
    message = str(original).lower()
    sqlstate = getattr(original, "sqlstate", None)
    if sqlstate == _DISK_FULL_SQLSTATE or _NO_SPACE in message or "disk is full" in message:
        return Fault.DISK_FULL
    if isinstance(original, sqlite3.Error):
        return Fault.BUSY  # a file: it is never lost, only locked (or full)
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return Fault.LOST
    if sqlstate is not None:
        lost = sqlstate.startswith("08") or sqlstate in _LOST_SQLSTATES
        return Fault.LOST if lost else Fault.BUSY
    # psycopg's OperationalError without a SQLSTATE: the server never answered (refused,
    # unreachable, closed the connection unexpectedly).
    return Fault.LOST if type(original).__name__ == "OperationalError" else Fault.BUSY


# Disk full: once per episode and path.
_lock = threading.Lock()
_disk_full_seen: dict[str, float] = {}  # path -> when the error was last seen


def report_disk_full(where: str, error: BaseException) -> bool:
    """Log that ``where`` (a database file, a database, a directory) is out of space,
    unless it was already said in this episode (the error seen within
    :data:`EPISODE_GAP_S`); whether it was logged."""
    now = time.monotonic()
    with _lock:
        last = _disk_full_seen.get(where)
        _disk_full_seen[where] = now
    if last is not None and now - last < EPISODE_GAP_S:
        return False
    original = error.orig if isinstance(error, DBAPIError) else error
    log.error(
        "out of disk space at %s (%s): writes are refused with 503 until space is freed",
        where,
        _first_line(original),
    )
    return True


def disk_full_path(error: BaseException, engine: Engine | None = None) -> str:
    """Where the disk is full, as well as ``error`` and the engine tell: the SQLite file,
    the PostgreSQL database (its server's message names the file), or the OS error's file."""
    if isinstance(error, OSError):
        return error.filename or "a temporary file"
    if engine is None:
        return "the database"
    url = engine.url
    if url.get_backend_name() == "sqlite":
        return str(url.database)
    return url.render_as_string(hide_password=True)


# Lost and back: once each, per engine.
_lost_since: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()
_watching_connects: weakref.WeakSet[Engine] = weakref.WeakSet()


def _lost(engine: Engine, error: BaseException) -> None:
    with _lock:
        if engine in _lost_since:
            return
        _lost_since[engine] = time.monotonic()
        listen = engine not in _watching_connects
        _watching_connects.add(engine)
    if listen:
        event.listen(engine, "connect", lambda *_: _connected(engine))
    original = error.orig if isinstance(error, DBAPIError) else error
    log.error(
        "database %s lost (%s): requests answer 503 until it is back",
        engine.url.render_as_string(hide_password=True),
        _first_line(original),
    )


def _connected(engine: Engine) -> None:
    with _lock:
        since = _lost_since.pop(engine, None)
    if since is not None:
        log.warning(
            "database %s back after %.1f s",
            engine.url.render_as_string(hide_password=True),
            time.monotonic() - since,
        )


def lost(engine: Engine) -> bool:
    """Whether ``engine``'s database is lost (and not back yet)."""
    return engine in _lost_since


def _on_error(context: Any) -> None:
    error = context.sqlalchemy_exception or context.original_exception
    fault = classify(error)
    if fault is Fault.BUSY and context.is_disconnect:
        fault = Fault.LOST
    if fault is Fault.DISK_FULL:
        report_disk_full(disk_full_path(error, context.engine), error)
    elif fault is Fault.LOST and context.engine is not None:
        _lost(context.engine, error)


_watching = False


def watch() -> None:
    """Report the faults of every engine of this process (idempotent)."""
    global _watching
    with _lock:
        if _watching:
            return
        _watching = True
    event.listen(Engine, "handle_error", _on_error)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")

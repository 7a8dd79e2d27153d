"""What routes declare they need: a database session, the caller's key, the project."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from functools import lru_cache
from inspect import isgeneratorfunction
from typing import Annotated
from weakref import WeakKeyDictionary

from fastapi import Depends, Header, Path, Query, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.api.edge import client_gone
from app.api.turns import RETRY_AFTER_S
from app.config import Settings, get_settings
from app.db.models import ApiKey, Project
from app.db.session import REQUEST_SESSIONS, get_engine, session_factory
from app.errors import ClientGone, Forbidden, ServiceUnavailable
from app.schemas.common import MAX_INT32
from app.services.auth import authenticate
from app.services.projects import get_project
from app.services.signin import SESSION_COOKIE, api_key_of_session


async def get_db(request: Request) -> AsyncIterator[Session]:
    """A session for one request; services commit what must be kept before returning.

    Creating a session does no I/O (it connects on first use, in the route's thread), so
    this dependency runs on the event loop and costs no thread hop. A request first takes
    one of :data:`app.db.session.REQUEST_SESSIONS` places, waiting on the event loop: a
    request's session keeps its connection across the thread hops of its dependencies and
    route, so with more requests holding sessions than the pool has connections, threads
    waited for connections held by requests that waited for threads (a study's launch:
    every request failed after the pool's 30 s timeout). Bounded, every request that holds
    a session gets a connection and a thread; the others wait without either, and get 503
    with ``Retry-After`` after ``TRIPLETLAB_QUEUE_SECONDS``.
    """
    async with _session_place(request):
        with _sessions(get_settings().database_url)() as session:
            yield session


@asynccontextmanager
async def _session_place(request: Request) -> AsyncIterator[None]:
    loop = asyncio.get_running_loop()
    places = _places.get(loop)
    if places is None:
        places = _places[loop] = asyncio.Semaphore(REQUEST_SESSIONS)
    wait_s = get_settings().queue_seconds
    try:
        await asyncio.wait_for(places.acquire(), wait_s)
    except TimeoutError:
        raise ServiceUnavailable(
            f"the server is busy (no database session within {wait_s:g} s); nothing was "
            "changed, retry shortly",
            retry_after=RETRY_AFTER_S,
        ) from None
    try:
        if await client_gone(request.scope):
            raise ClientGone("the client closed the connection before its turn")
        yield
    finally:
        places.release()


_places: WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = WeakKeyDictionary()


def request_session(request: Request) -> AbstractContextManager[Session]:
    """``with request_session(request) as db``: the session ``Depends(get_db)`` gives, for
    the worker's hot routes, which declare no dependency. FastAPI resolving one dependency
    (its loop over sub-dependencies, the generator's exit stack and cancel scope) took ~11 %
    of the server's interpreter time per round trip under load (py-spy ``--gil``).

    An override of :func:`get_db` in ``app.dependency_overrides`` (tests) is honoured as
    ``Depends`` honours it, if it is a plain function or a generator function.
    """
    override = request.app.dependency_overrides.get(get_db)
    if override is None:
        return _sessions(get_settings().database_url)()
    if isgeneratorfunction(override):
        return contextmanager(override)()
    return nullcontext(override())


def request_engine(request: Request) -> Engine | None:
    """The engine of the sessions :func:`request_session` gives, without opening one (a
    session's creation and closing were 78 k of a round trip's 1,845 k instructions on
    PostgreSQL, callgrind); None if an override of :func:`get_db` binds them to something
    else (a connection inside a test's transaction)."""
    if request.app.dependency_overrides.get(get_db) is None:
        return get_engine(get_settings().database_url)
    with request_session(request) as db:
        bind = db.get_bind()
    return bind if isinstance(bind, Engine) else None


@lru_cache
def _sessions(url: str) -> sessionmaker[Session]:
    # One factory per database: a new sessionmaker defines a new Session subclass, and
    # SQLAlchemy's event system registers each one (profiled: a tenth of a round trip).
    return session_factory(get_engine(url))


RowId = Annotated[int, Path(ge=0, le=MAX_INT32, description="A row id (a database INTEGER).")]
ObjectIndex = Annotated[
    int, Path(ge=0, le=MAX_INT32, description="An object's index in its project (0, 1, 2, …).")
]
Offset = Annotated[int, Query(ge=0, le=MAX_INT32, description="Rows to skip.")]

SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_db)]


def get_current_key(
    request: Request, db: SessionDep, authorization: Annotated[str | None, Header()] = None
) -> ApiKey:
    if authorization is None:  # the dashboard's pages call the API with their session
        cookie, csrf = request.cookies.get(SESSION_COOKIE), request.headers.get("x-csrf-token")
        if key := api_key_of_session(db, cookie, request.method, csrf):
            return key
    return authenticate(db, authorization)


CurrentKey = Annotated[ApiKey, Depends(get_current_key)]


def get_admin_key(key: CurrentKey) -> ApiKey:
    if key.role != "admin":
        raise Forbidden("this route needs an admin key")
    return key


AdminKey = Annotated[ApiKey, Depends(get_admin_key)]


def get_owned_project(
    db: SessionDep, key: CurrentKey, slug: Annotated[str, Path(max_length=64)]
) -> Project:
    return get_project(db, slug, key)


OwnedProject = Annotated[Project, Depends(get_owned_project)]

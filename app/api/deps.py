"""What routes declare they need: a database session, the caller's key, the project."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import lru_cache
from inspect import isgeneratorfunction
from typing import Annotated

from fastapi import Depends, Header, Path, Query, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings, get_settings
from app.db.models import ApiKey, Project
from app.db.session import get_engine, session_factory
from app.errors import Forbidden
from app.schemas.common import MAX_INT32
from app.services.auth import authenticate
from app.services.projects import get_project
from app.services.signin import SESSION_COOKIE, api_key_of_session


async def get_db() -> AsyncIterator[Session]:
    """A session for one request; services commit what must be kept before returning.

    Creating a session does no I/O (it connects on first use, in the route's thread), so
    this dependency runs on the event loop and costs no thread hop.
    """
    with _sessions(get_settings().database_url)() as session:
        yield session


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

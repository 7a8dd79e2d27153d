"""The worker API: open a session, get the next question, answer it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.api.deps import SessionDep, request_engine, request_session
from app.api.ratelimit import check_worker_limits, limit_worker
from app.api.turns import in_turn
from app.db.models import Project
from app.errors import NotFound
from app.schemas.worker import (
    AnswerCreate,
    AnswerRecorded,
    NextQuery,
    PublicProject,
    SessionCreate,
    SessionOpened,
)
from app.services import preview, round_trip, sessions, study_state

router = APIRouter(prefix="/api/w", tags=["worker"], dependencies=[Depends(limit_worker)])
# The routes a worker calls for every question, matched before any other (app.main).
session_router = APIRouter(prefix="/api/w", tags=["worker"])

# Those routes (GET …/next, POST …/answers) check the rate limits, read the Authorization
# header and open their database session themselves (``request_session``), declaring no
# dependency: as dependencies and a Header parameter, FastAPI's resolution of them cost
# ~100 k instructions each per request (callgrind: 13 % of the event loop's share of a
# round trip), the session's ~11 % of the interpreter's time under load. The header is
# documented as FastAPI documents it; a request over its rate with an invalid body gets
# 422, not 429.
AUTHORIZATION_HEADER = {
    "name": "authorization",
    "in": "header",
    "required": False,
    "schema": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Authorization"},
}
# Their path's session id too: as a parameter of the function, FastAPI's resolution of it
# (with the header and query lists it walks for every request) cost ~50 k instructions.
SESSION_ID = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "title": "Session Id"},
}
HOT = {"openapi_extra": {"parameters": [SESSION_ID, AUTHORIZATION_HEADER]}}
# POST …/answers reads and validates its body itself too (:func:`answer_in`), documented
# as FastAPI documents a body a route reads itself.
ANSWER_BODY = {
    "required": True,
    "content": {"application/json": {"schema": AnswerCreate.model_json_schema()}},
}


async def answer_in(request: Request) -> AnswerCreate:
    """The answer the request's body holds, read and validated by pydantic in one pass, or
    FastAPI's 422 (the errors located in ``body``) if it holds none. FastAPI's own reading
    of a body parameter (its media type parsed by the ``email`` package, ``json.loads``,
    then validation) cost 62 k instructions of a round trip's 1,284 k on the event loop
    (callgrind). A body declared as another media type than JSON is refused, as FastAPI
    refuses it."""
    body = await request.body()
    media_type = request.headers.get("content-type", "application/json").partition(";")[0]
    media_type = media_type.strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise RequestValidationError(
            [{"type": "content_type", "loc": ("body",), "input": None,
              "msg": f"the body must be JSON (Content-Type: application/json), not {media_type!r}"}]
        )  # fmt: skip
    try:
        return AnswerCreate.model_validate_json(body)
    except ValidationError as error:
        errors = error.errors(include_url=False)
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in errors], body=body
        ) from None


def authorized(request: Request) -> str | None:
    """The request's ``Authorization`` header, once its rate limits let it through."""
    check_worker_limits(request)
    return request.headers.get("authorization")


def public_project(db: SessionDep, slug: str) -> Project:
    project = db.scalar(select(Project).where(Project.slug == slug))
    if project is None:
        raise NotFound(f"no project with slug {slug!r}")
    return project


ProjectDep = Annotated[Project, Depends(public_project)]


@router.get("/{slug}", response_model=PublicProject)
def read_public_project(project: ProjectDep) -> PublicProject:
    return PublicProject(
        slug=project.slug,
        name=project.name,
        instructions=project.instructions,
        consent=project.consent,
        question=project.question,
        pair_question=project.pair_question,
        accepting=study_state.accepting(project),
        status=study_state.status(project),
    )


@router.post("/{slug}/sessions", status_code=status.HTTP_201_CREATED, response_model=SessionOpened)
async def create_session(
    slug: Annotated[str, Path(max_length=64)], data: SessionCreate, request: Request
) -> Response:
    """Open (or resume) the session of the participant named by the platform parameters; with
    a ``preview`` token from the dashboard, a researcher's preview session.

    The whole open is one function in one turn (:func:`app.api.turns.in_turn`): at a study's
    launch, hundreds of these arrive at once, and they wait on the event loop for their
    turn, holding no connection, rather than in threads that hold one (see ``get_db``); a
    request whose client gave up while it waited opens nothing.
    """
    identity = sessions.identify(
        data.model_dump(exclude_none=True, exclude={"simulated", "preview"})
    )
    source = "simulated" if data.simulated else "crowd"
    if data.preview is not None:  # a researcher's preview (app/services/preview.py)
        source, identity.platform = study_state.PREVIEW, preview.PLATFORM
    with request_session(request) as db:
        opened = await in_turn(
            _open_session, db, slug, identity, source, data.preview, request=request
        )
    return _json(opened, status.HTTP_201_CREATED)


def _open_session(
    db: Session, slug: str, identity: sessions.Identity, source: str, preview_token: str | None
) -> SessionOpened:
    if preview_token is not None:
        preview.check_token(public_project(db, slug), preview_token)
    opened = sessions.open_session(db, slug, identity, source)
    return SessionOpened(
        session_id=opened.session_id,
        session_token=opened.token,
        total=opened.total,
        answered=opened.answered,
    )


@session_router.get("/sessions/{session_id}/next", response_model=NextQuery, **HOT)
async def read_next_query(request: Request) -> Response:
    """The open question of the session (the same one until it is answered), its end, or a
    short wait (``wait``, ``retry_after``) when nothing can be asked right now."""
    session_id = request.path_params["session_id"]
    authorization = authorized(request)
    sessions_of = _session_factory(request)
    shown = await in_turn(
        round_trip.next_question, sessions_of, session_id, authorization, request=request
    )
    return _json(shown, 200)


@session_router.post(
    "/sessions/{session_id}/answers",
    status_code=status.HTTP_201_CREATED,
    response_model=AnswerRecorded,
    openapi_extra={**HOT["openapi_extra"], "requestBody": ANSWER_BODY},
)
async def create_answer(request: Request) -> Response:
    """Record the answer to the question ``token``; resending the same answer is harmless.

    The reply carries the session's next question as ``next`` (what ``GET …/next`` would
    give), so a worker needs one request per question.
    """
    session_id = request.path_params["session_id"]
    authorization = authorized(request)  # before the body is read: over a limit, nothing is
    data = await answer_in(request)
    recorded = await round_trip.record_answer(
        request_engine(request), _session_factory(request), in_turn, session_id, authorization, data
    )
    return _json(recorded, status.HTTP_201_CREATED)


def _session_factory(request: Request) -> Callable[[], Session]:
    """Sessions like the request's (``get_db``, or its override in tests), one per use."""
    return lambda: request_session(request)


def _json(reply: BaseModel, status_code: int) -> Response:
    """``reply`` as JSON, serialised once by pydantic: a route that returns a ``Response``
    skips FastAPI's validation of what it returns against its ``response_model``, which a
    reply built as that model does not need, and its own serialisation (27 k of a round
    trip's 1,389 k instructions on the event loop, callgrind). The ``response_model`` stays
    declared, for the API's documentation."""
    return Response(reply.model_dump_json(), status_code, media_type="application/json")

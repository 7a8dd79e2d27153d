"""The worker API: open a session, get the next question, answer it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any
from weakref import WeakKeyDictionary

from fastapi import APIRouter, Depends, Request, Response, status
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.api.deps import SessionDep, request_engine, request_session
from app.api.ratelimit import check_worker_limits, limit_worker
from app.api.turns import in_turn, sqlite_database
from app.db.driver import run_text
from app.db.models import Project, WorkSession
from app.db.session import ensure_write
from app.errors import NotFound
from app.schemas.worker import (
    AnswerCreate,
    AnswerRecorded,
    MTurkSubmit,
    NextQuery,
    PublicProject,
    SessionCreate,
    SessionOpened,
    ShownObject,
    ShownQuery,
)
from app.services import issuance, known_sessions, preview, responses, sessions, study_state
from app.services.projects import project_plan

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
def create_session(project: ProjectDep, data: SessionCreate, db: SessionDep) -> SessionOpened:
    """Open (or resume) the session of the participant named by the platform parameters."""
    identity = sessions.identify(
        data.model_dump(exclude_none=True, exclude={"simulated", "preview"})
    )
    plan = project_plan(project)
    total = plan.queries_per_session if plan else 0
    source = "simulated" if data.simulated else "crowd"
    if data.preview is not None:  # a researcher's preview (app/services/preview.py)
        preview.check_token(project, data.preview)
        source, identity.platform = study_state.PREVIEW, preview.PLATFORM
    work, token = sessions.open_session(db, project, identity, total, source)
    return SessionOpened(
        session_id=work.id, session_token=token, total=work.total, answered=work.answered
    )


@session_router.get("/sessions/{session_id}/next", response_model=NextQuery, **HOT)
async def read_next_query(request: Request) -> Response:
    """The open question of the session (the same one until it is answered), or the end."""
    session_id = request.path_params["session_id"]
    authorization = authorized(request)
    with request_session(request) as db:
        return _json(await in_turn(_next_query, db, session_id, authorization), 200)


def _next_query(db: Session, session_id: str, authorization: str | None) -> NextQuery:
    work, project, issued = issuance.next_for_session(db, session_id, authorization)
    known_sessions.remember(db, work, project)
    return _shown(db, work, project, issued)


def _shown(db: Session, work: WorkSession, project: Project, issued: issuance.Issued) -> NextQuery:
    if issued.query is not None:
        return _question(
            issued.query.token, issued.query.kind, issued.objects, work.answered, work.total
        )
    return _done(db, project, work, issued.message)


def _question(
    token: str, kind: str, objects: Sequence[Any], answered: int, total: int
) -> NextQuery:
    """The question of ``token`` as the worker is shown it (``objects``: rows of index, name,
    text, image_url, in the order shown), after ``answered`` of ``total`` answers."""
    return NextQuery(
        query=ShownQuery(
            token=token,
            kind=kind,
            objects=[
                ShownObject(index=o.index, name=o.name, text=o.text, image_url=o.image_url)
                for o in objects
            ],
            position=answered + 1,
            total=total,
        )
    )


def _done(db: Session, project: Project, work: WorkSession, message: str) -> NextQuery:
    if work.finished_at is None:
        paused = study_state.come_back_later(project, work.source)
        message = message or "There is nothing to answer right now."
        return NextQuery(done=True, paused=paused, message=message)
    if not message and work.answered < work.total:
        message = issuance.EXHAUSTED_MESSAGE
    code = sessions.completion_code(work.id)
    plan = project_plan(project)
    redirect = plan.completion.redirect_url if plan else None
    participant = sessions.participant_of(db, work)
    submit = None
    params = work.platform_params or participant.platform_params or {}
    if (
        participant.platform == "mturk"
        and params.get("turkSubmitTo")
        and params.get("assignmentId")
    ):
        submit = MTurkSubmit(
            url=params["turkSubmitTo"].rstrip("/") + "/mturk/externalSubmit",
            assignmentId=params["assignmentId"],
        )
    return NextQuery(
        done=True,
        completion_code=code,
        redirect_url=redirect.replace("{code}", code) if redirect else None,
        message=message or "Thank you! You have answered every question.",
        mturk_submit=submit,
    )


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
    data = await answer_in(request)
    authorization = authorized(request)
    engine = request_engine(request)
    known = None
    if engine is not None:
        known = known_sessions.prepare(
            session_id, authorization, data.token, data.choice, data.client_ms
        )
    if known is not None and engine.dialect.name != "sqlite":  # type: ignore[union-attr]
        # PostgreSQL: one statement on the event loop's own connection.
        quick = await known_sessions.answer(engine, known)  # type: ignore[arg-type]
        if quick is not None:
            return _json(_quick_reply(quick), status.HTTP_201_CREATED)
        known = None  # the usual way
    answer = (session_id, authorization, data, known)
    with request_session(request) as db:
        if not sqlite_database():
            # PostgreSQL runs round trips side by side and flushes the commits that wait
            # together at once: no group of its own (see AnswerGroups).
            recorded = await in_turn(_record_alone, db, answer)
        else:
            loop = asyncio.get_running_loop()
            if loop not in _groups:
                _groups[loop] = AnswerGroups()
            recorded = await _groups[loop].record(db, answer)
    return _json(recorded, status.HTTP_201_CREATED)


def _reply(result: Any) -> Any:
    """``result`` (of :func:`_record`, or an error), with an answer taken the known way as
    its reply."""
    return _quick_reply(result) if isinstance(result, known_sessions.Answered) else result


def _quick_reply(quick: known_sessions.Answered) -> AnswerRecorded:
    """The reply to an answer taken the known way (``app.services.known_sessions``)."""
    shown = _question(quick.token, quick.kind, quick.objects, quick.answered, quick.total)
    return AnswerRecorded(answered=quick.answered, total=quick.total, done=False, next=shown)


def _json(reply: BaseModel, status_code: int) -> Response:
    """``reply`` as JSON, serialised once by pydantic: a route that returns a ``Response``
    skips FastAPI's validation of what it returns against its ``response_model``, which a
    reply built as that model does not need, and its own serialisation (27 k of a round
    trip's 1,389 k instructions on the event loop, callgrind). The ``response_model`` stays
    declared, for the API's documentation."""
    return Response(reply.model_dump_json(), status_code, media_type="application/json")


# Session id, authorization, the answer, and (SQLite) the answer ready to take the known way.
Answer = tuple[str, str | None, AnswerCreate, known_sessions.Prepared | None]
Served = tuple[WorkSession, Project] | None  # a session served the usual way: to remember
MAX_GROUP = 64


@dataclass
class _Pending:
    db: Session
    answer: Answer
    future: asyncio.Future[AnswerRecorded]


class AnswerGroups:
    """Group commit on SQLite: the answers that arrive while a transaction waits for the
    write lock or the disk are recorded together in the next one, each in its own
    savepoint, and committed once.

    Every answer is committed, durably, before its reply (``synchronous=FULL``), but one
    wait for the disk serves the whole group: the wait, not the work, is what bounded
    answers per second (profiled: the commit was half of the serialised time of a round
    trip on SQLite, whose one writer at a time cannot overlap them). A group runs in one
    thread turn (see :func:`app.api.turns.in_turn`) with the session of its first request,
    which awaits the group. Its answers are taken once the turn holds the write lock: with
    two server processes a turn waited for the other's writer most of the time (profiled:
    43 % of its thread's time), and the answers that arrived meanwhile had waited for a
    turn of their own after it.
    """

    def __init__(self) -> None:
        self.pending: list[_Pending] = []
        self.taking = threading.Lock()  # the turn's thread takes what the loop appends
        self.task: asyncio.Task[None] | None = None

    async def record(self, db: Session, answer: Answer) -> AnswerRecorded:
        future: asyncio.Future[AnswerRecorded] = asyncio.get_running_loop().create_future()
        with self.taking:
            self.pending.append(_Pending(db, answer, future))
        if self.task is None:
            self.task = asyncio.create_task(self._drain())
        return await future

    def _take(self) -> list[_Pending]:
        with self.taking:
            group, self.pending = self.pending[:MAX_GROUP], self.pending[MAX_GROUP:]
        return group

    def _record_taken(self, db: Session) -> list[tuple[_Pending, Result]]:
        """In the turn's thread: hold the write lock, then record the answers waiting."""
        try:
            ensure_write(db, durable=True)
        except Exception as error:  # e.g. the database is unreachable: all learn it
            return [(pending, error) for pending in self._take()]
        group = self._take()
        if not group:  # taken by a drain cancelled meanwhile
            db.rollback()
            return []
        try:
            results = _record_group(db, [pending.answer for pending in group])
        except Exception as error:  # its commit failed, say: none of them is stored
            db.rollback()  # the write lock released now, not when the session closes
            results = [error] * len(group)
        return list(zip(group, results, strict=True))

    async def _drain(self) -> None:
        try:
            while self.pending:
                recorded = await in_turn(self._record_taken, self.pending[0].db)
                for pending, result in recorded:
                    if pending.future.done():
                        continue
                    if isinstance(result, BaseException):
                        pending.future.set_exception(result)
                    else:
                        pending.future.set_result(result)
        finally:
            self.task = None
            while self.pending:  # left only if this task was cancelled
                for pending in self._take():
                    if not pending.future.done():
                        pending.future.set_exception(RuntimeError("the server is shutting down"))


_groups: WeakKeyDictionary[asyncio.AbstractEventLoop, AnswerGroups] = WeakKeyDictionary()
Result = AnswerRecorded | Exception  # the reply or the error


def _record_group(db: Session, answers: list[Answer]) -> list[Result]:
    """Record ``answers`` in one transaction, each in a savepoint, undone alone if it fails;
    see :class:`AnswerGroups`."""
    if len(answers) == 1:
        return [_record_or_error(db, answers[0])]
    ensure_write(db, durable=True)
    transaction = db.get_transaction()
    assert transaction is not None
    results: list[Result | known_sessions.Answered] = []
    served: list[Served] = []
    for answer in answers:
        _savepoint(db, "SAVEPOINT")
        try:
            result: Result | known_sessions.Answered
            result, session_served = _record(db, answer, commit=False)
            served.append(session_served)
            if session_served is not None:
                db.flush()  # what the answer changed in its objects, inside its savepoint
            _savepoint(db, "RELEASE")
        except Exception as error:
            if db.get_transaction() is not transaction or not transaction.is_active:
                break  # rolled back with the others' answers: record each alone
            _savepoint(db, "ROLLBACK TO")
            _savepoint(db, "RELEASE")
            # The session's objects may hold what the rollback undid: the answers after
            # this one load theirs anew.
            db.expunge_all()
            result = error
        results.append(result)
    else:
        db.commit()  # the write lock released: what follows does not hold the other writers
        for session_served in served:
            if session_served is not None:
                known_sessions.remember(db, *session_served)
        return [_reply(result) for result in results]
    db.rollback()
    return [_record_or_error(db, answer) for answer in answers]


def _savepoint(db: Session, command: str) -> None:
    """``SAVEPOINT``, ``RELEASE`` or ``ROLLBACK TO`` a group's answer, as text on the driver's
    cursor (through SQLAlchemy's execution, so its errors are SQLAlchemy's, as everywhere):
    ``Session.begin_nested`` spent 17 us per answer in its bookkeeping, inside the writer's
    hold, where this takes 9 us (its rollback kept the session's objects that the savepoint
    did not touch, which :func:`_record_group` gives up on the rare error)."""
    run_text(db.connection(), f"{command} answer")


def _record_or_error(db: Session, answer: Answer) -> Result:
    try:
        return _record_alone(db, answer)
    except Exception as error:
        return error


def _record_alone(db: Session, answer: Answer) -> AnswerRecorded:
    try:
        recorded, served = _record(db, answer, commit=True)
    except Exception:
        db.rollback()
        raise
    if served is not None:
        known_sessions.remember(db, *served)
    return _reply(recorded)


def _record(
    db: Session, answer: Answer, *, commit: bool
) -> tuple[AnswerRecorded | known_sessions.Answered, Served]:
    """Record ``answer`` and issue the session's next question: the known way if it can
    (SQLite, ``known_sessions.answer_in``: its reply is made by :func:`_reply` once the
    transaction has committed), else the usual way, in the same transaction. ``commit``:
    commit it here (else the group does)."""
    session_id, authorization, data, known = answer
    if known is not None:
        ensure_write(db, durable=True)
        quick = known_sessions.answer_in(db, known)
        if quick is not None:
            if commit:
                db.commit()
            return quick, None
    work, project, issued = responses.answer_and_next(
        db, session_id, authorization, data.token, data.choice, data.client_ms, commit=commit
    )
    return _recorded(db, work, project, issued), (work, project)


def _recorded(
    db: Session, work: WorkSession, project: Project, issued: issuance.Issued
) -> AnswerRecorded:
    return AnswerRecorded(
        answered=work.answered,
        total=work.total,
        done=work.finished_at is not None,
        next=_shown(db, work, project, issued),
    )

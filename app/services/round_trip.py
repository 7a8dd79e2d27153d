"""A worker's round trip: the answer stored and the session's next question handed out.

An answer is stored one way per database, from the same parts (``round_trip_sql``):

* **PostgreSQL**: answers that wait together for one of the event loop's connections
  (``app.db.loop_connections``) go in one statement, :data:`round_trip_sql.ANSWER_BATCH`
  (a batch of one is the ordinary case), in autocommit, on the event loop: no thread, no
  SQLAlchemy (:class:`Batches`);
* **SQLite**: answers that arrive while a transaction waits for the write lock or the disk
  are stored together in the next one, each in a savepoint, committed once with
  ``synchronous=FULL`` (:class:`Groups`): one wait for the disk serves them all.

Either way the answer's statements claim the session's next question from the pool when
the rules say it comes from there (``app.active.rules.next_question``). Everything else is
the **slow path** (:func:`next_for_session`, in a thread turn, with a SQLAlchemy session): a
session's question on load or resume, a repeat, a pool empty for this participant (it fills
the pool itself), and the reasons an answer was refused (:func:`explain_refusal`).

What a statement decides with (the plan's seed, repeat rate, thresholds) is the project's
plan as this process last read it (:func:`context`), named by the query's token
(``rules.query_token``: project, count, secret); the statement checks that the plan is
still the project's, and that the session is as the token counts it; otherwise nothing is
changed and the answer is sent again with the plan read anew, or explained.

Every acknowledged answer is committed before its reply (autocommit on PostgreSQL; the
group's durable commit on SQLite); a question is never given twice to a participant and
never beyond its places (the rules of ``round_trip_sql``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

import psycopg
from sqlalchemy import Engine, bindparam, select
from sqlalchemy.orm import Session

from app.active import rules
from app.config import get_settings
from app.db.driver import first, rows, rows_async, run, run_text
from app.db.loop_connections import SIZE, loop_connections
from app.db.models import Answer, Participant, Project, Query, utcnow
from app.db.session import ensure_write
from app.errors import (
    AppError,
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    ServiceUnavailable,
)
from app.learning.shapes import check_choice, shape_of
from app.schemas.plans import Plan
from app.schemas.worker import (
    AnswerCreate,
    AnswerRecorded,
    MTurkSubmit,
    NextQuery,
    ShownObject,
    ShownQuery,
)
from app.services import pool, round_trip_sql, sessions, study_state
from app.services.quality import SET_AUTOMATIC_FLAG, flag_change

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_BATCH = 16  # answers in one statement at most (the others' answers wait behind it)
MAX_GROUP = 64  # answers in one SQLite transaction at most
SPARE_CANDIDATES = 2  # open questions a batch claims beyond one per answer
MAX_CLIENT_MS = 24 * 3600 * 1000
FILL_ATTEMPTS = 5  # fills a slow path tries before it asks the worker to wait
WAIT_SECONDS = 3  # a worker told to wait asks again after this
PAUSED_SECONDS = 30  # a worker of a paused study (or one not launched yet), after this
EXHAUSTED_MESSAGE = "This study has collected all the answers it needs. Thank you!"
WAITING_MESSAGE = "The next questions wait for answers other workers are giving right now."
DONE_MESSAGE = "Thank you! You have answered every question."


class Gone(AppError):
    status_code = 410


class DatabaseUnavailable(ServiceUnavailable):
    """The database could not be reached (nothing was changed)."""

    def __init__(self, error: str) -> None:
        super().__init__(
            "the database is busy or unavailable; nothing was changed, retry shortly",
            retry_after=1,
        )
        log.warning("the database is out of reach: %s", error)


# -- the plan a statement decides with --------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """A project's plan as this process read it last (``plan`` None: the project has none)."""

    project_id: int
    plan: Plan | None
    plan_json: str  # as the statement compares it with the project's own
    stored_plan: dict[str, Any] | None  # as stored (the plan's JSON, read)
    shaped: bool = False  # the plan asks odd-one-outs or ranked grids (Plan.shaped)


_contexts: dict[int, Context] = {}


def forget() -> None:
    """Forget every plan read (tests that empty the database)."""
    _contexts.clear()


_PLAN = select(Project.plan).where(Project.id == bindparam("project"))


def context(db: Session, project_id: int, fresh: bool = False) -> Context | None:
    """The project's plan as decided with (read anew when ``fresh``); None if no project."""
    found = None if fresh else _contexts.get(project_id)
    if found is not None:
        return found
    plan = db.execute(_PLAN, {"project": project_id}).first()
    db.rollback()
    if plan is None:
        _contexts.pop(project_id, None)
        return None
    stored = plan[0]
    validated = Plan.model_validate(stored) if stored else None
    found = _contexts[project_id] = Context(
        project_id,
        validated,
        json.dumps(stored),
        stored,
        validated is not None and validated.shaped,
    )
    return found


# -- the answer's parameters ------------------------------------------------------------------


def _params(
    ctx: Context, session_id: str, authorization: str | None, data: AnswerCreate, answered: int
) -> dict[str, Any]:
    """What the answer's statement takes, the next question decided by the rules: the answer
    is the session's number ``answered + 1``."""
    plan = ctx.plan
    assert plan is not None
    decision = rules.next_question(
        plan.seed, plan.repeat_rate, session_id, answered + 1, 2**31, ctx.shaped
    )
    choice, picks = _choice(data.choice)
    return {
        "session": session_id,
        "token": data.token,
        "token_hash": sessions.token_hash(authorization) or "",
        "answered": answered,
        "choice": choice,
        # A ranked grid's picks in order (JSON); the statement checks them (``picks_offered``)
        "picks": picks,
        "order_keys": decision.order,
        "client_ms": data.client_ms,
        "code_hash": sessions.session_code_hash(session_id),
        "swap": decision.swap,
        "issued_token": rules.query_token(ctx.project_id, answered + 1),
        # Not while the study is paused, stopped or a draft (a preview's session then takes
        # the slow path, where study_state.accepting serves it).
        "claim_next": decision.from_pool
        and plan.status == "running"
        and get_settings().claim_with_answer,
    }


def _choice(choice: int | list[int]) -> tuple[int | None, str | None]:
    """The answer's ``choice`` as the statements take it: an index or outcome, or for a
    list (a ranked grid's picks) its first pick and the list as JSON."""
    if isinstance(choice, list):
        return (choice[0] if choice else None), json.dumps(choice)
    return choice, None


def _listed(value: Any) -> list[int] | None:
    """A JSON list column as the driver gives it (SQLite: text)."""
    return json.loads(value) if isinstance(value, str) else value


def _shared(ctx: Context, now: datetime) -> dict[str, Any]:
    """The parameters every answer of a batch or group shares."""
    plan = ctx.plan
    assert plan is not None
    return {
        "project": ctx.project_id,
        "plan": ctx.plan_json,
        "now": now,
        "expires": rules.lease_end(now, get_settings().lease_seconds),
        "min_ms": plan.min_answer_ms,
        "max_views": plan.max_object_views,
    }


@dataclass
class Stored:
    """What storing an answer did: ``status`` stored, deferred (another session of the
    participant in the same statement: sent again), stale (the plan changed: sent again with
    it read anew) or refused (:func:`explain_refusal` says why); for a stored answer, the
    session's count, total and end, the participant's counters, and the next question if
    the statement claimed it."""

    status: str
    answered: int = 0
    total: int = 0
    finished: bool = False
    counts: Any = None
    next: ShownQuery | None = None
    question_id: int | None = None  # the next question's, when the statement claimed it


def _shown_query(
    token: str,
    kind: str,
    shown: Sequence[int],
    objects: dict[int, Any],
    answered: int,
    total: int,
    k: int | None = None,
) -> ShownQuery:
    return ShownQuery(
        token=token,
        kind=kind,
        objects=[
            ShownObject(index=i, name=objects[i][1], text=objects[i][2], image_url=objects[i][3])
            for i in shown
        ],
        position=answered + 1,
        total=total,
        k=k if kind == "rank" else None,
    )


# -- answers stored together, one way per database ---------------------------------------------


@dataclass
class _Waiting:
    ctx: Context
    params: dict[str, Any]
    future: asyncio.Future[Stored]


class _Take:
    """The answers a sender sends: taken from the line at the first call (once the sender
    can send them: its connection lent, its write lock held), the same at every call after."""

    def __init__(self, take: Callable[[], list[_Waiting]]) -> None:
        self._from, self._taken = take, None

    def __call__(self) -> list[_Waiting]:
        if self._taken is None:
            self._taken = self._from()
        return self._taken


Send = Callable[[_Take], Awaitable[list[Stored | Exception]]]


class Line:
    """The answers waiting to be stored in this event loop, and their senders: a free sender
    takes every answer waiting (:meth:`_take`) and stores them together with ``send``, up to
    ``senders`` at a time. Nothing waits for a batch to fill: an answer that finds a sender
    free goes at once, alone.

    PostgreSQL (:func:`_postgres`): a sender per loop connection; its answers (up to
    :data:`MAX_BATCH`, of one project and plan) go in one statement. A statement's own cost
    on the server (bind, locks, starting its plan, commit) was more than half of
    PostgreSQL's CPU per round trip; batched, it is paid once (bench/results/
    answer_batches.txt). SQLite (:func:`_sqlite`): one sender (one writer at a time); the
    answers that arrived while it waited for the write lock or the disk are stored in one
    transaction, each in a savepoint, committed once, durably: one wait for the disk serves
    them all (the commit was half of a round trip's serialised time, profiled). Its answers
    are taken once it holds the lock (with two server processes a sender waited for the
    other's writer most of the time, and answers arriving meanwhile waited for the next).
    """

    def __init__(self, send: Send, senders: int, most: int) -> None:
        self._send_batch, self._senders_at_most, self._most = send, senders, most
        self._waiting: list[_Waiting] = []
        self._taking = threading.Lock()  # a SQLite sender takes in its turn's thread
        self._sending = 0
        self._senders: set[asyncio.Task[None]] = set()  # held: the loop keeps weak ones

    async def store(self, ctx: Context, params: dict[str, Any]) -> Stored:
        future: asyncio.Future[Stored] = asyncio.get_running_loop().create_future()
        with self._taking:
            self._waiting.append(_Waiting(ctx, params, future))
        if self._sending < self._senders_at_most:
            self._sending += 1
            sender = asyncio.get_running_loop().create_task(self._send())
            self._senders.add(sender)
            sender.add_done_callback(self._senders.discard)
        return await future

    async def _send(self) -> None:
        try:
            while self._waiting:
                take = _Take(self._take)
                try:
                    results = await self._send_batch(take)
                except BaseException:  # cancelled (the loop shuts down): the requests too
                    for waiting in take():
                        waiting.future.cancel()
                    raise
                for waiting, result in zip(take(), results, strict=True):
                    if waiting.future.done():
                        continue
                    if isinstance(result, Exception):
                        waiting.future.set_exception(result)
                    else:
                        waiting.future.set_result(result)
        finally:
            self._sending -= 1

    def _take(self) -> list[_Waiting]:
        """The first answer waiting and those after it that may go with it: of the same plan
        and other sessions, none sent alone; the rest wait on, in their order."""
        with self._taking:
            batch: list[_Waiting] = []
            left: list[_Waiting] = []
            seen: set[str] = set()
            for waiting in self._waiting:
                if waiting.future.done():  # its request was cancelled
                    continue
                params = waiting.params
                if batch and (
                    len(batch) == self._most
                    or waiting.ctx is not batch[0].ctx
                    or params["session"] in seen
                    or params["alone"]
                    or batch[0].params["alone"]
                ):
                    left.append(waiting)
                    continue
                batch.append(waiting)
                seen.add(params["session"])
            self._waiting = left
        return batch


def _postgres(engine: Engine) -> Send:
    connections = loop_connections(engine)

    async def send(take: _Take) -> list[Stored | Exception]:
        try:
            async with connections.connection() as connection:
                # Taken once the connection is lent: a request cancelled meanwhile is left out.
                return await _send_batch(connection, take())  # type: ignore[return-value]
        except (psycopg.IntegrityError, psycopg.errors.TransactionRollback):
            # A race lost (another statement gave the participant the question first; a
            # deadlock ended this one): nothing changed, send them again.
            return [Stored("again") for _ in take()]
        except psycopg.OperationalError as error:  # the database is out of reach
            return [DatabaseUnavailable(str(error)) for _ in take()]
        except Exception as error:
            if len(take()) > 1:  # each alone: only an answer that cannot be taken fails
                log.warning("a batch of %d answers failed", len(take()), exc_info=True)
                return [Stored("alone") for _ in take()]
            return [error]

    return send


async def _send_batch(
    connection: psycopg.AsyncConnection[Any], batch: list[_Waiting]
) -> list[Stored]:
    ctx = batch[0].ctx
    params = _shared(ctx, utcnow())
    for name in round_trip_sql.BATCH_COLUMNS:
        params[f"batch_{name}"] = [waiting.params[name] for waiting in batch]
    params["candidates"] = len(batch) + SPARE_CANDIDATES
    found = await rows_async(connection, round_trip_sql.ANSWER_BATCH, params)
    results = [_stored_pg(row, batch[row.ord - 1].params) for row in found]
    for result in results:
        change = _review(ctx, result)
        if change is not None:
            await rows_async(connection, _SET_FLAG, change)
    return results


_SET_FLAG = round_trip_sql.Statement(SET_AUTOMATIC_FLAG.postgresql + " RETURNING id", "")


def _review(ctx: Context, stored: Stored) -> dict[str, Any] | None:
    """The participant's new flag after a stored answer, if a review is due and changes it."""
    if stored.counts is None or not rules.review_due(stored.answered, stored.finished):
        return None
    return flag_change(stored.counts, ctx.plan)  # type: ignore[arg-type]


def _stored_pg(row: Any, params: dict[str, Any]) -> Stored:
    if not row.stored:
        if row.plan_ok is False:
            return Stored("stale")
        if row.token_ok and row.count_ok and row.plan_ok and not row.taken:
            return Stored("deferred")
        return Stored("refused")
    shown = None
    if row.query_id is not None:
        order = _listed(row.shown) or [i for i in (row.s1, row.s2, row.s3) if i is not None]
        objects = {o[0]: o for o in row.shown_objects}
        shown = _shown_query(
            params["issued_token"], row.kind, order, objects, row.answered, row.total, row.k
        )
    finished = row.finished_at is not None
    return Stored("stored", row.answered, row.total, finished, row, shown, row.question_id)


def _sqlite(sessions_of: Callable[[], Session], in_turn: Callable[..., Any]) -> Send:
    async def send(take: _Take) -> list[Stored | Exception]:
        return await in_turn(_store_group, sessions_of, take)

    return send


def _store_group(sessions_of: Callable[[], Session], take: _Take) -> list[Stored | Exception]:
    """In the turn's thread: hold the write lock, then store the answers waiting."""
    with sessions_of() as db:
        try:
            ensure_write(db, durable=True)
        except Exception as error:  # e.g. the database is unreachable: all learn it
            return [error for _ in take()]
        group = take()
        results: list[Stored | Exception] = []
        connection = db.connection()
        alone = len(group) == 1  # no other answer to keep if it fails: no savepoint
        for waiting in group:
            if not alone:
                run_text(connection, "SAVEPOINT answer")
            try:
                results.append(_store_sqlite(db, waiting.ctx, waiting.params))
                if not alone:
                    run_text(connection, "RELEASE answer")
            except Exception as error:
                if alone:
                    db.rollback()
                else:
                    run_text(connection, "ROLLBACK TO answer")
                    run_text(connection, "RELEASE answer")
                results.append(error)
        try:
            db.commit()
        except Exception as error:  # its commit failed: none of them is stored
            db.rollback()
            results = [error] * len(group)
    return results


_lines: WeakKeyDictionary[Any, Line] = WeakKeyDictionary()


def _line(engine: Engine, sessions_of: Callable[[], Session], in_turn: Callable[..., Any]) -> Line:
    """This event loop's line of answers (one database per process)."""
    loop = asyncio.get_running_loop()
    line = _lines.get(loop)
    if line is None:
        if engine.dialect.name == "postgresql":
            line = Line(_postgres(engine), SIZE, MAX_BATCH)
        else:
            line = Line(_sqlite(sessions_of, in_turn), 1, MAX_GROUP)
        _lines[loop] = line
    return line


def _store_sqlite(db: Session, ctx: Context, answer: dict[str, Any]) -> Stored:
    """The answer's parts as statements of their own, in the group's transaction."""
    conn = db.connection()
    params = {**_shared(ctx, utcnow()), **answer}
    held = first(conn, round_trip_sql.HELD, params)
    if held is None or not (held.token_ok and held.count_ok and held.plan_ok):
        return Stored("stale" if held is not None and not held.plan_ok else "refused")
    params.update(participant=held.participant, source=held.source)
    claimed = first(conn, round_trip_sql.CLAIM, params)
    if claimed is None:
        return Stored("refused")
    if not claimed.is_repeat:
        run(conn, round_trip_sql.PLACE, {"question": claimed.question_id})
    stored = first(conn, round_trip_sql.STORE, {**params, "query": claimed.id})
    session = first(conn, round_trip_sql.SESSION, params)
    counts = first(conn, round_trip_sql.COUNTS, {**params, "answer": stored.id})
    finished = session.finished_at is not None
    change = _review(ctx, Stored("stored", session.answered, 0, finished, counts))
    if change is not None:
        run(conn, SET_AUTOMATIC_FLAG, change)
    shown = question = None
    if params["claim_next"] and not finished:
        question = pool.first_open(db, ctx.project_id, held.participant, params["max_views"])
        if question is not None:
            order = rules.shown_order(
                *question[1:5], params["swap"], _listed(question[5]), params["order_keys"]
            )
            shown = _issue(
                db, ctx.project_id, answer["session"], held.participant, question, order,
                False, params["issued_token"], session.answered, session.total, params["now"],
            )  # fmt: skip
    question_id = question[0] if shown is not None else None
    return Stored("stored", session.answered, session.total, finished, counts, shown, question_id)


def _issue(
    db: Session,
    project_id: int,
    session_id: str,
    participant_id: int,
    question: Any,
    order: Sequence[int | None],
    is_repeat: bool,
    token: str,
    answered: int,
    total: int,
    now: datetime,
) -> ShownQuery:
    """Hand ``question`` (id, kind, o1, o2, o3, objects, k) to the session, its objects
    shown in ``order``: one more place leased (not for a repeat, which takes none), the query
    inserted, its objects read."""
    conn = db.connection()
    if not is_repeat:
        run(conn, round_trip_sql.LEASE, {"question": question[0]})
    shown = [*order, None][:3]
    listed = question[1] in rules.SHAPED
    values = {
        "project": project_id,
        "question": question[0],
        "session": session_id,
        "participant": participant_id,
        "kind": question[1],
        "s1": shown[0],
        "s2": shown[1],
        "s3": shown[2],
        "is_repeat": is_repeat,
        "issued_token": token,
        "now": now,
        "expires": rules.lease_end(now, get_settings().lease_seconds),
        "objects": json.dumps(list(order)) if listed else None,
        "k": question[6],
    }
    run(conn, round_trip_sql.QUERY, values)
    if listed:
        found = rows(conn, round_trip_sql.SHOWN_LISTED, {**values, "shown": values["objects"]})
    else:
        found = rows(conn, round_trip_sql.SHOWN_OBJECTS, values)
    objects = {row[0]: row for row in found}
    return _shown_query(
        token, question[1], [i for i in order if i is not None], objects, answered, total,
        question[6],
    )  # fmt: skip


# -- the slow path ---------------------------------------------------------------------------------


def next_for_session(db: Session, session_id: str, authorization: str | None) -> NextQuery:
    """The session's open question, or a new one, or its end, or a wait: for a page's load
    or resume, and after an answer whose statement did not hand out the next question (a
    repeat, a pool empty for this participant). Fills the pool when it finds nothing, in a
    transaction of its own; asks the worker to wait only when nothing can be asked now."""
    filled: pool.Filled | None = None
    for _ in range(FILL_ATTEMPTS):
        ensure_write(db)
        work = sessions.held_session(db, session_id, authorization)
        shown = _next_held(db, work)
        if shown is not None:
            db.commit()
            return shown
        db.commit()  # nothing to ask this participant: the locks go before the project's
        if filled is not None and not filled.available:
            break  # a fill added nothing, and nothing is there for this participant
        # Claimed again after every fill, even one that added nothing: requests that found
        # the pool empty together wait for the project in turn, and all but the first find
        # the questions the first one's fill created.
        filled = pool.fill_alone(db, work.project_id)
        if filled is None:
            break
    if filled is not None and filled.waiting:  # its trees wait for others' answers
        return NextQuery(wait=True, retry_after=WAIT_SECONDS, message=WAITING_MESSAGE)
    # Nothing more for this participant (seen it all, every object at its cap, the plan
    # exhausted), even where others may still be asked: the session ends politely.
    return _finish(db, session_id, authorization, EXHAUSTED_MESSAGE)


def _next_held(db: Session, work: Any) -> NextQuery | None:
    """What the held session is shown next, or None if the pool has nothing for it."""
    conn = db.connection()
    current = first(conn, round_trip_sql.OPEN_QUERY, {"session": work.id, "now": utcnow()})
    if current is not None:
        listed = _listed(current.objects)
        order = listed or [i for i in (current.o1, current.o2, current.o3) if i is not None]
        params = {"project": work.project_id, "s1": current.o1, "s2": current.o2}
        if listed:
            found = rows(conn, round_trip_sql.SHOWN_LISTED, {**params, "shown": current.objects
                         if isinstance(current.objects, str) else json.dumps(listed)})  # fmt: skip
        else:
            found = rows(conn, round_trip_sql.SHOWN_OBJECTS, {**params, "s3": current.o3})
        objects = {row[0]: row for row in found}
        return NextQuery(
            query=_shown_query(
                current.token, current.kind, order, objects, work.answered, work.total, current.k
            )
        )
    if work.finished_at is not None:
        return _done(db, work, DONE_MESSAGE)
    if not study_state.accepting(work, work.source) or work.total == 0:
        # Stopped: the session ends with its code. A draft, paused, or no plan yet: it goes
        # on when the study does (the page asks again).
        if study_state.ended(work):
            if work.answered:
                sessions.finish(db, work.id)
                return _done(db, work, study_state.closed_message(work))
            return NextQuery(done=True, message=study_state.closed_message(work))
        paused = study_state.come_back_later(work, work.source)
        return NextQuery(wait=True, paused=paused, retry_after=PAUSED_SECONDS,
                         message=study_state.closed_message(work))  # fmt: skip
    plan = Plan.model_validate(work.plan)
    decision = rules.next_question(
        plan.seed, plan.repeat_rate, work.id, work.answered, work.total, plan.shaped
    )
    now = utcnow()
    token = rules.query_token(work.project_id, work.answered)
    if decision.done:
        sessions.finish(db, work.id)
        return _done(db, work, DONE_MESSAGE)
    if decision.repeat_draw is not None:
        params = {
            "session": work.id,
            "participant": work.participant_id,
            "draw": decision.repeat_draw,
            "max_views": plan.max_object_views,
        }
        repeat = first(conn, round_trip_sql.REPEAT, params)
        if repeat is not None:
            order = rules.repeat_order(repeat.kind, repeat.o1, repeat.o2, repeat.shown_o2,
                                       repeat.shown_o3, decision.swap,
                                       _listed(repeat.shown))  # fmt: skip
            shown = _issue(db, work.project_id, work.id, work.participant_id, repeat, order,
                           True, token, work.answered, work.total, now)  # fmt: skip
            return NextQuery(query=shown)
    question = pool.first_open(db, work.project_id, work.participant_id, plan.max_object_views)
    if question is None:
        return None
    order = rules.shown_order(*question[1:5], decision.swap, _listed(question[5]), decision.order)
    shown = _issue(db, work.project_id, work.id, work.participant_id, question, order, False,
                   token, work.answered, work.total, now)  # fmt: skip
    return NextQuery(query=shown)


def _finish(db: Session, session_id: str, authorization: str | None, message: str) -> NextQuery:
    """The plan has nothing more for this session: it ends (with its code, if it answered)."""
    ensure_write(db)
    work = sessions.held_session(db, session_id, authorization)
    if work.finished_at is None and work.answered:
        sessions.finish(db, work.id)
        work = sessions.held_session(db, session_id, authorization)
    db.commit()
    if work.finished_at is None:
        return NextQuery(done=True, message=message)
    return _done(db, work, message)


def _done(db: Session, work: Any, message: str) -> NextQuery:
    """The end of a finished session: its completion code, where to go, what to submit."""
    code = sessions.completion_code(work.id)
    plan = Plan.model_validate(work.plan) if work.plan else None
    redirect = plan.completion.redirect_url if plan else None
    if not message or (message == DONE_MESSAGE and work.answered < work.total):
        message = EXHAUSTED_MESSAGE
    participant = db.get(Participant, work.participant_id)
    params = work.platform_params or (participant.platform_params if participant else {}) or {}
    submit = None
    if (
        participant is not None
        and participant.platform == "mturk"
        and params.get("turkSubmitTo")
        and params.get("assignmentId")
    ):
        submit = MTurkSubmit(url=params["turkSubmitTo"].rstrip("/") + "/mturk/externalSubmit",
                             assignmentId=params["assignmentId"])  # fmt: skip
    return NextQuery(
        done=True,
        completion_code=code,
        redirect_url=redirect.replace("{code}", code) if redirect else None,
        message=message,
        mturk_submit=submit,
    )


def explain_refusal(
    db: Session, session_id: str, authorization: str | None, data: AnswerCreate
) -> AnswerRecorded:
    """Why the answer to ``data.token`` was not stored: an error naming the reason, or, for
    the same answer sent again, the session as it is now (harmless)."""
    work = sessions.held_session(db, session_id, authorization, hold=False)
    # Columns, not the ORM object: the rollback would expire it, and reading it again after
    # a concurrent project deletion raised ObjectDeletedError (a 500) instead of the 404.
    query = db.execute(
        select(
            Query.id,
            Query.session_id,
            Query.status,
            Query.expires_at,
            Query.kind,
            Query.o1,
            Query.o2,
            Query.o3,
            Query.objects,
            Query.k,
        ).where(Query.token == data.token)
    ).first()
    db.rollback()
    if query is None:
        raise NotFound("unknown question token")
    if query.session_id != session_id:
        raise Forbidden("this question token belongs to another session")
    if query.status == "answered":
        stored = db.execute(
            select(Answer.choice, Answer.choices).where(Answer.query_id == query.id)
        ).first()
        db.rollback()
        given = data.choice
        same = stored is not None and given == (
            stored.choices if isinstance(given, list) else stored.choice
        )
        if not same:
            raise Conflict("this question was already answered with a different choice")
        return _recorded(next_for_session(db, session_id, authorization), work.total)
    if query.status == "expired" or query.expires_at <= utcnow():
        raise Gone("this question's lease expired; ask for the next question")
    _check_choice(query, data.choice)
    raise Gone("this question's lease just ended; ask for the next question")


def _check_choice(query: Any, choice: int | list[int]) -> None:
    """A choice the query did not offer: 422 naming ``choice`` (``shapes.check_choice``)."""
    objects = query.objects or [i for i in (query.o1, query.o2, query.o3) if i is not None]
    if query.kind == "triplet" and isinstance(choice, int) and choice not in objects[1:]:
        raise InvalidInput(
            f"choice {choice} is not one of the candidates shown ({query.o2} or {query.o3})",
            ("choice",),
        )
    if query.kind == "pair" and isinstance(choice, int) and choice not in (-1, 0, 1):
        raise InvalidInput(
            "a pair's choice must be −1 (left better), 0 (about the same) or 1 (right better), "
            f"got {choice}",
            ("choice",),
        )
    try:
        check_choice(shape_of(objects, query.kind, query.k), objects, choice)
    except ValueError as error:
        raise InvalidInput(f"choice {choice}: {error}", ("choice",)) from error


def _recorded(shown: NextQuery, total: int) -> AnswerRecorded:
    answered = shown.query.position - 1 if shown.query is not None else total
    return AnswerRecorded(answered=answered, total=total, done=shown.done, next=shown)


# -- the answer, from the request ---------------------------------------------------------------

RETRIES = 20  # an answer sent again (deferred, a race lost, its plan changed) at most this often


async def record_answer(
    engine: Engine,
    sessions_of: Callable[[], Session],
    in_turn: Callable[..., Any],
    session_id: str,
    authorization: str | None,
    data: AnswerCreate,
) -> AnswerRecorded:
    """Store the answer and give the session's next question (see the module)."""
    if data.client_ms is not None and not 0 <= data.client_ms <= MAX_CLIENT_MS:
        raise InvalidInput(f"client_ms must be between 0 and {MAX_CLIENT_MS}, got {data.client_ms}")
    explain = (_with_session, explain_refusal, sessions_of, session_id, authorization, data)
    facts = rules.token_facts(data.token)
    if facts is None:
        return await in_turn(*explain)
    fresh = alone = False
    for _ in range(RETRIES):
        ctx = _contexts.get(facts.project_id) if not fresh else None
        if ctx is None or ctx.plan is None:  # a plan-less project read earlier: read it anew
            ctx = await in_turn(_with_session, context, sessions_of, facts.project_id, True)
        if ctx is None or ctx.plan is None:
            return await in_turn(*explain)
        params = _params(ctx, session_id, authorization, data, facts.answered)
        params["alone"] = alone
        stored = await _line(engine, sessions_of, in_turn).store(ctx, params)
        if stored.status == "stored":
            return await _after(
                engine, sessions_of, in_turn, ctx, session_id, authorization, stored
            )
        # deferred, again: sent again; stale: with the plan read anew; alone: in a batch
        # of its own (its batch failed); refused: explained.
        fresh = stored.status == "stale"
        alone = alone or stored.status == "alone"
        if stored.status == "refused":
            return await in_turn(*explain)
    raise ServiceUnavailable("the server is busy; nothing was changed, retry shortly", 1)


async def _after(
    engine: Engine,
    sessions_of: Callable[[], Session],
    in_turn: Callable[..., Any],
    ctx: Context,
    session_id: str,
    authorization: str | None,
    stored: Stored,
) -> AnswerRecorded:
    """The reply to a stored answer: its next question, from the statement, or the end, or
    the slow path's."""
    if stored.question_id is not None:
        pool.producer(engine).claimed(ctx.project_id, stored.question_id)
    if stored.next is not None:
        nxt = NextQuery(query=stored.next)
    else:  # the end (its code), a repeat, or a pool that had nothing for the participant
        nxt = await in_turn(_with_session, next_for_session, sessions_of, session_id, authorization)
    return AnswerRecorded(
        answered=stored.answered, total=stored.total, done=stored.finished, next=nxt
    )


def _with_session(function: Callable[..., T], sessions_of: Callable[[], Session], *args: Any) -> T:
    """``function(db, *args)`` with a session of its own (run in a thread turn)."""
    with sessions_of() as db:
        return function(db, *args)


def next_question(
    sessions_of: Callable[[], Session], session_id: str, authorization: str | None
) -> NextQuery:
    """:func:`next_for_session` with a session of its own (``GET …/next``)."""
    return _with_session(next_for_session, sessions_of, session_id, authorization)

"""Which question a worker sees next: leases, redundancy, repeats, and the plan's strategies.

The plan's questions are created ahead, a batch at a time, by :func:`fill_pool` under the
project's hold (its row lock on PostgreSQL, the write lock on SQLite), so budgets are never
overrun and the plan's progress is saved once per batch. Issuing holds only the session and
its participant: it claims an open question this participant has not seen (on PostgreSQL
passing over those being claimed by other round trips, see ``round_trip_sql``) and leases
one place of it, so no question is over-issued and the workers of one project do not wait
for each other. Only when no question is open for the participant does it fill the pool:
in the same transaction on SQLite, in one of its own on PostgreSQL (which takes the
project's row first: the round trip's locks are never held while waiting for it).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import struct
from collections import Counter, namedtuple
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Row, bindparam, delete, exists, insert, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.active.base import Proposal
from app.active.planner import Planner
from app.config import get_settings
from app.db import statistics
from app.db.models import Object, Project, Query, Question, WorkSession, utcnow
from app.db.session import ensure_write
from app.errors import InvalidInput
from app.schemas.plans import Plan
from app.services import round_trip_sql, study_state
from app.services.comprf import (
    comprf_positions,
    prepared_planner,
    stored_plan_has_comprf,
    waiting_for_answers,
)
from app.services.projects import hold_project, lock_project
from app.services.round_trip_sql import Repeatable
from app.services.sessions import authenticate_session_in_project, session_code_hash

MAX_PROPOSALS = 100  # proposals tried per fill beyond its batch before it gives up
# Questions a fill creates at once. On PostgreSQL every round trip that finds the pool empty
# takes the fill's path (its answer committed, the project waited for, the claim again):
# with 50 workers a batch of 32 sent many of them there at each refill. Measured at 50
# workers (bench/worker_throughput.py, in turns): with 2 processes 589-615/s at 32, 668/s
# at 64, 692-710/s at 128, 728/s at 256; SQLite within its spread.
POOL_BATCH = 128
FILL_ATTEMPTS = 5  # fills a request tries before it asks the worker to come back
MIN_ANSWERS_BEFORE_REPEAT = 3
EXHAUSTED_MESSAGE = "This study has collected all the answers it needs. Thank you!"
WAITING_MESSAGE = (
    "The next questions wait for answers other workers are giving now. "
    "Please ask again in a minute."
)
M = TypeVar("M", Query, Question)


IssuedQuery = namedtuple(
    "IssuedQuery",
    "project_id question_id session_id participant_id kind o1 o2 o3 status is_repeat token "
    "issued_at expires_at answered_at id",
)
"""A query as issued by the round trip's step (its row's values): read only, so no ORM
object is built (profiled: building one cost more than the statement that issued it)."""
OpenQuestion = namedtuple("OpenQuestion", "id kind o1 o2 o3")
"""What issuing needs of an open question (see :class:`Prefetched`)."""


@dataclass
class Issued:
    query: Query | IssuedQuery | None
    done: bool = False
    message: str = ""
    objects: Sequence[Any] = ()  # the query's objects in the order shown: rows of (index,
    # name, text, image_url)
    fill_first: bool = False  # no open question for the session: fill the pool and ask again


@dataclass
class Prefetched:
    """What storing the answer read for issuing (see round_trip_sql.answer): the first open
    question the participant has not seen (its id, kind and objects only), or None; and
    that question issued, if the answer's statement issued it (see :class:`Ticket`)."""

    open_question: OpenQuestion | None
    issued: Issued | None = None


@dataclass(frozen=True)
class Ticket:
    """The query of the session's next question, decided before its answer is stored, so
    that the answer's statement can issue it too (PostgreSQL: ``round_trip_sql.answer``
    with ``issue``): the order shown, drawn as :func:`next_query` would draw it after the
    answer, and the query's token."""

    swap: bool
    token: str
    repeat_draw: int | None = None  # a repeat drawn: the draw that picks it (one statement)


def planner_for(project: Project, plan: Plan | None = None) -> Planner:
    """The planner of ``project``'s plan; ``ValueError`` if the plan cannot run on it."""
    plan = plan or Plan.model_validate(project.plan)
    specs = [s.model_dump() for s in plan.strategies]
    return Planner(specs, project.n_objects, plan.seed, gold_rate=plan.gold_rate)


# The statements of the hot path are built once, with parameters: building a SQLAlchemy
# statement costs more than SQLite takes to run it (profiled). Those that read at most one
# row select from the table (Core), and the row becomes a detached object (see _detached).
_queries = Query.__table__
_questions = Question.__table__
_q = _questions.c
_OPEN_QUERY = (
    select(_queries)
    .where(
        _queries.c.session_id == bindparam("session"),
        _queries.c.status == "issued",
        _queries.c.expires_at > bindparam("now"),
    )
    .order_by(_queries.c.id.desc())
    .limit(1)
)
_EXPIRE_LEASES = (
    update(_queries)
    .where(
        _queries.c.project_id == bindparam("project"),
        _queries.c.status == "issued",
        _queries.c.expires_at <= bindparam("now"),
    )
    .values(status="expired")
    .returning(_queries.c.question_id, _queries.c.is_repeat)
)
_INSERT_QUERY = insert(_queries).returning(_queries.c.id)
_projects = Project.__table__
# Core, not the unit of work's flush (profiled); ``updated_at`` still follows (onupdate).
_SAVE_PLAN_PROGRESS = (
    update(_projects)
    .where(_projects.c.id == bindparam("project"))
    .values(
        plan_state=bindparam("state", type_=_projects.c.plan_state.type),
        plan_step=bindparam("step"),
    )
)
_objects = Object.__table__
_SHOWN_OBJECTS = select(
    _objects.c.index, _objects.c.name, _objects.c.text, _objects.c.image_url
).where(
    _objects.c.project_id == bindparam("project"),
    _objects.c.index.in_(bindparam("indices", expanding=True)),
)


def open_query(db: Session, work: WorkSession) -> Query | None:
    """The question this session holds and has not answered, if its lease still runs."""
    row = db.execute(_OPEN_QUERY, {"session": work.id, "now": utcnow()}).first()
    return _detached(Query, row)


def _detached(cls: type[M], row: Row | None) -> M | None:
    """``row`` as a new object that is only read, never added to the session: setting up the
    ORM's loading of a result costs more than running the query, even when it has no row
    (profiled)."""
    return None if row is None else cls(**row._mapping)


def next_for_session(
    db: Session, session_id: str, authorization: str | None
) -> tuple[WorkSession, Project, Issued]:
    """Authenticate the session and give its next question, in one writing transaction (and,
    on PostgreSQL when no question is open for it, after a fill of the pool in another).

    Most calls issue a question, so the transaction takes the write lock before its first
    read: on SQLite what it reads is then current and no read transaction has to end first;
    on PostgreSQL the session's and its participant's rows are locked as they are read.
    """
    exhausted = False
    for _ in range(FILL_ATTEMPTS):
        ensure_write(db)
        work, project = authenticate_session_in_project(db, session_id, authorization, hold=True)
        held = hold_for_issuing(db, project)
        issued = next_query(db, project, work, exhausted=exhausted, held=held)
        db.commit()
        if not issued.fill_first:
            return work, project, issued
        exhausted = not fill_pool_alone(db, project, work)
    return work, project, Issued(None, done=True, message=WAITING_MESSAGE)


def next_query(
    db: Session,
    project: Project,
    work: WorkSession,
    *,
    none_open: bool = False,
    prefetched: Prefetched | None = None,
    exhausted: bool = False,
    held: bool = False,
) -> Issued:
    """The session's open question, or a newly issued one, or the end of the session.

    The transaction must already hold ``work`` and its participant and have read ``project``
    since (``authenticate_session_in_project(hold=True)``). ``none_open``: the session is
    known to hold no open question. ``prefetched``: the open question claimed under the
    same hold. ``held``: the transaction holds the project (:func:`hold_for_issuing`). When
    no question is open for the participant, the pool is filled here if it does, else the
    result asks the caller to do it in a transaction of its own (``fill_first``);
    ``exhausted``: that fill found the plan has nothing more for this participant. The
    caller commits (the question issued is only valid once committed).
    """
    if work.finished_at is not None:
        return Issued(None, done=True)
    current = None if none_open else open_query(db, work)
    if current is not None:
        return Issued(current, objects=query_objects(db, project, current))
    if not project.plan or work.total == 0:
        return Issued(None, done=True, message="This study is not collecting answers right now.")

    if work.answered >= work.total:
        finish_session(db, work)
        return Issued(None, done=True)
    if not study_state.accepting(project, work.source):  # draft, paused or stopped
        if study_state.ended(project) and work.answered:
            finish_session(db, work)
        return Issued(None, done=True, message=study_state.closed_message(project))
    now = utcnow()
    plan = Plan.model_validate(project.plan)
    rng = _draws(plan, work.id, work.answered)
    question: Repeatable | OpenQuestion | None
    question, is_repeat = _repeat_question(db, work, plan, rng)
    # The order shown is drawn now (a repeated triplet is shown mirrored: no draw), so the
    # draws are the same whichever way the question is found and issued.
    mirrored = is_repeat and question is not None and question.kind == "triplet"
    swap = False if mirrored else bool(rng.random() < 0.5)
    learning = None
    if comprf_positions(plan):
        if not held:  # the plan changed since the hold was decided: start again
            return Issued(None, fill_first=True)
        learning = prepared_planner(db, project, plan)  # comprf: its trees, current
        prefetched = None  # preparing may have closed questions
    if question is None and prefetched is not None:
        question = prefetched.open_question
    elif question is None:
        question = _open_question(db, project, work)
    if question is None and not exhausted:
        if not held:
            return Issued(None, fill_first=True)
        batch = 1 if learning is not None else POOL_BATCH  # comprf: asked as answers come
        if fill_pool(db, project, work, learning, batch):
            question = _open_question(db, project, work)
    if question is None and waiting_for_answers(learning):  # comprf: the session goes on
        return Issued(None, done=True, message=WAITING_MESSAGE)
    if question is None:
        message = EXHAUSTED_MESSAGE
        if work.answered:
            finish_session(db, work)
        return Issued(None, done=True, message=message)

    if not is_repeat:
        return _issue_existing(db, project, work, question, swap, now)
    query = _issue_repeat(db, project, work, question, swap, now)
    objects = query_objects(db, project, query)
    return Issued(query, objects=objects)


def ticket_after_answer(db: Session, project: Project, work: WorkSession) -> Ticket | None:
    """The :class:`Ticket` of the question ``work`` (held, before its answer) is asked next,
    on PostgreSQL, when :func:`next_query` would issue the open question claimed with the
    answer; None when it must decide more: the answer ends the session, a repeat is drawn
    (both need statements of their own), the plan has a comprf strategy (its trees are
    brought up to date first), or there is no plan. SQLite runs the issue as statements of
    their own anyway (no data-modifying CTEs): None."""
    answered = work.answered + 1  # as next_query sees the session after the answer
    if db.get_bind().dialect.name != "postgresql" or not project.plan:
        return None
    if not study_state.accepting(project, work.source):
        return None
    if work.finished_at is not None or answered >= work.total:
        return None
    return ticket_for(Plan.model_validate(project.plan), work.id, answered)


def ticket_for(
    plan: Plan, session_id: str, answered: int, *, repeats: bool = False
) -> Ticket | None:
    """The :class:`Ticket` of the session's question after ``answered`` answers (not its
    last), drawn as :func:`next_query` draws (a repeat, which one, the order shown); None if
    the plan has a comprf strategy, or if a repeat is drawn and not ``repeats`` (the
    caller's statement issues only open questions). A repeated pair is shown in the order
    ``swap`` says, a repeated triplet mirrored."""
    if comprf_positions(plan):
        return None
    rng = _draws(plan, session_id, answered)
    repeat_draw = None
    if _repeat_drawn(plan, answered, rng):
        if not repeats:
            return None
        repeat_draw = int(rng.integers(round_trip_sql.DRAW_RANGE))
    swap = bool(rng.random() < 0.5)
    return Ticket(swap=swap, token=query_token(answered), repeat_draw=repeat_draw)


def query_token(answered: int) -> str:
    """A new query's token: the session's count of answers when the query is issued, a dot,
    then 24 random bytes (as secret as before). A session holds one query at a time, so the
    count is the session's when the query is answered: any server process that knows the
    session can then answer it in one statement, which checks the count against the
    session's row (``app.services.known_sessions``)."""
    return f"{answered}.{secrets.token_urlsafe(24)}"


def answered_when_issued(token: str) -> int | None:
    """The count of answers a token of :func:`query_token` carries; None for another token."""
    count, dot, _ = token.partition(".")
    return int(count) if dot and count.isdigit() and len(count) <= 9 else None


def issued_with_answer(
    project: Project,
    work: WorkSession,
    question: OpenQuestion,
    ticket: Ticket,
    issued: round_trip_sql.IssuedWith,
    now: datetime,
) -> Issued:
    """What :func:`_issue_existing` returns, for the query of ``question`` that the answer's
    statement issued with ``ticket``."""
    shown = shown_order(question.kind, question.o1, question.o2, question.o3, ticket.swap)
    query = _query_values(project, work, question, shown, False, now, ticket.token)
    query["id"] = issued.query_id
    return Issued(IssuedQuery(**query), objects=[issued.objects[i] for i in shown if i is not None])


def hold_for_issuing(db: Session, project: Project) -> bool:
    """Hold the project now, before the round trip locks any question, where issuing needs
    it: always on SQLite (its write lock is held already), and for a plan with a comprf
    strategy (its trees are brought up to date under the project's hold, which closes
    questions: a round trip holding a question's row while waiting for the project could
    deadlock with it). Whether the transaction holds the project."""
    if db.get_bind().dialect.name == "sqlite":
        return True
    if stored_plan_has_comprf(project.plan):
        hold_project(db, project)  # its plan's progress re-read: it was read before the lock
        return True
    return False


def fill_pool_alone(db: Session, project: Project, work: WorkSession) -> bool:
    """:func:`fill_pool` in a transaction of its own, which takes the project's row before
    any other (PostgreSQL: the round trip holds rows that the fill's freeing of leases may
    wait for, so it must not wait for the project while holding them)."""
    lock_project(db, project)
    # The round trips that found the pool empty together wait for the project in turn: all
    # but the first find the questions it created, and go on without freeing leases again.
    if _open_question(db, project, work) is not None:
        db.commit()
        return True
    step = project.plan_step
    available = fill_pool(db, project, work)
    db.commit()
    if project.plan_step != step:  # the plan proposed questions (not only a lease freed)
        statistics.refresh_if_stale(db)  # a fresh database's tables grow fast
    return available


def fill_pool(
    db: Session,
    project: Project,
    work: WorkSession | None,
    planner: Planner | None = None,
    batch: int = POOL_BATCH,
) -> bool:
    """Free the project's expired leases and, if no question is open that ``work``'s
    participant has not seen, let the plan create up to ``batch`` new ones (open, no place
    taken: issuing takes them). Whether such a question is open now. Without ``work`` (a
    fill ahead, ``app.services.fill_ahead``): create them; whether any was created.

    The transaction must hold the project (``projects.hold_project``; SQLite's write lock).
    """
    expire_leases(db, project, utcnow())
    if work is not None and _open_question(db, project, work) is not None:
        return True
    plan = Plan.model_validate(project.plan)
    planner = planner or planner_for(project, plan)
    state: dict[str, Any] = project.plan_state or planner.initial_state()
    step = project.plan_step
    created = 0
    proposals_left = batch + MAX_PROPOSALS
    exhausted = False
    while created < batch and proposals_left and not exhausted:
        # What is still wanted, proposed as if each were new, then created in one
        # statement; a proposal the project has already is uncounted and another one asked.
        proposed: list[tuple[int, dict[str, Any]]] = []
        while len(proposed) < batch - created and proposals_left:
            proposal = planner.propose(state, step)
            step += 1
            proposals_left -= 1
            if proposal is None:
                exhausted = True
                break
            position, question = proposal
            proposed.append((position, _question_values(question, position, planner, plan)))
            state = _counted(state, position, +1)
        if not proposed:
            break
        new = round_trip_sql.new_questions(db, project.id, [v for _, v in proposed], utcnow())
        for position, values in proposed:
            if values["key"] in new:
                new.discard(values["key"])  # a key proposed twice in the batch counts once
                created += 1
            else:
                state = _counted(state, position, -1)
    db.execute(_SAVE_PLAN_PROGRESS, {"project": project.id, "state": state, "step": step})
    set_committed_value(project, "plan_state", state)
    set_committed_value(project, "plan_step", step)
    return created > 0


_UNASKED = (
    delete(_questions)
    .where(
        _q.project_id == bindparam("project"),
        _q.live == 0,
        _q.answered == 0,
        ~exists().where(_queries.c.question_id == _q.id),
    )
    .returning(_q.strategy_position)
)


def discard_unasked(db: Session, project: Project, position: int | None = None) -> int:
    """Delete the questions of the pool no one was ever given (of the strategy at
    ``position``, or all): when the plan changes, or a strategy's proposals do (an adaptive
    strategy's new batch), they would be asked in place of its new ones. Their places in
    the budget are given back. The caller holds the project (``projects.lock_project``); how
    many were discarded."""
    statement = _UNASKED
    if position is not None:
        statement = statement.where(_q.strategy_position == position)
    positions = db.scalars(statement, {"project": project.id}).all()
    state = project.plan_state
    if positions and state and "created" in state:
        created = [*state["created"]]
        for at, count in Counter(positions).items():
            if 0 <= at < len(created):
                created[at] = max(created[at] - count, 0)
        project.plan_state = {**state, "created": created}
    return len(positions)


def expire_leases(db: Session, project: Project, now: datetime) -> int:
    """Free the questions whose lease ran out, so someone else may be asked; how many."""
    expired = db.execute(_EXPIRE_LEASES, {"project": project.id, "now": now}).all()
    # Repeats never held a place among a question's wanted answers.
    freed = Counter(question_id for question_id, is_repeat in expired if not is_repeat)
    for question_id, count in freed.items():
        count_places(db, question_id, live=-count)
    return len(expired)


# Built once on the table (no ORM bookkeeping).
COUNT_PLACES = (
    update(_questions)
    .where(_q.id == bindparam("question"))
    .values(
        live=_q.live + bindparam("live"),
        is_open=_q.answered + _q.live + bindparam("live") < _q.wanted,
    )
)


def count_places(db: Session, question_id: int, *, live: int) -> None:
    """Shift a question's leased count in SQL (atomic under concurrency) and keep
    ``is_open``: whether someone else may still be asked it. (A round trip's lease and
    answer are counted by its own statements, ``round_trip_sql._LEASE`` and ``_PLACE``.)"""
    db.execute(COUNT_PLACES, {"question": question_id, "live": live})


def _session_number(session_id: str) -> int:
    return int(session_id.replace("-", "")[:8], 16)


class Draws:
    """The draws for a session's question after ``answered`` answers, in this order: whether
    it is a repeat (:func:`_repeat_drawn`), which one (if so), the order shown.

    A counter-based generator: the words of a hash of (the plan's seed, the session,
    ``answered``), so a replay draws the same. numpy's ``default_rng`` gave the same
    guarantee but took 14 us to seed, 44-66 us in the server under load, inside SQLite's
    writer hold; this takes under 1 us. A question takes at most three draws.
    """

    __slots__ = ("_words",)

    def __init__(self, seed: int, session_number: int, answered: int) -> None:
        key = struct.pack("<3q", seed, session_number, answered)
        digest = hashlib.blake2b(key, digest_size=32, person=b"tripletlab-draw").digest()
        self._words = list(struct.unpack("<4Q", digest))

    def random(self) -> float:
        """Uniform in [0, 1): the word's top 53 bits."""
        return (self._words.pop() >> 11) * 2.0**-53

    def integers(self, high: int) -> int:
        """Uniform in [0, high), by multiply and shift (bias under high / 2**64)."""
        return (self._words.pop() * high) >> 64


def _draws(plan: Plan, session_id: str, answered: int) -> Draws:
    return Draws(plan.seed, _session_number(session_id), answered)


def _repeat_drawn(plan: Plan, answered: int, rng: Draws) -> bool:
    """Whether the session, after ``answered`` answers, is asked a repeat now (a draw of
    ``rng`` if the plan asks for repeats and the session answered enough)."""
    if plan.repeat_rate == 0 or answered < MIN_ANSWERS_BEFORE_REPEAT:
        return False
    return bool(rng.random() < plan.repeat_rate)


def _repeat_question(
    db: Session, work: WorkSession, plan: Plan, rng: Draws
) -> tuple[Repeatable | None, bool]:
    """Now and then, a question this session answered (one of its last
    ``round_trip_sql.REPEAT_WINDOW`` answers), to be asked again mirrored."""
    if not _repeat_drawn(plan, work.answered, rng):
        return None, False
    # Picked in SQL: loading the candidates (as this once did) made every repeat cost more
    # than the last. The draw is taken whether or not there is a candidate: the same draws
    # follow either way.
    draw = int(rng.integers(round_trip_sql.DRAW_RANGE))
    question = round_trip_sql.repeat(db, work.id, work.participant_id, draw)
    return question, question is not None


def _open_question(db: Session, project: Project, work: WorkSession) -> OpenQuestion | None:
    """A question that still needs answers and that this participant has not seen, claimed
    by this transaction (see round_trip_sql)."""
    row = round_trip_sql.open_question(db, project.id, work.participant_id)
    return None if row is None else OpenQuestion(*row)


def _counted(state: dict[str, Any], position: int, change: int) -> dict[str, Any]:
    """``state`` with ``change`` more questions created by the strategy at ``position`` (a
    new dict: the project's stored state is not changed in place)."""
    if position < 0:
        return state
    created = [*state["created"]]
    created[position] += change
    return {**state, "created": created}


def _question_values(
    proposal: Proposal, position: int, planner: Planner, plan: Plan
) -> dict[str, Any]:
    """The row of the question of ``proposal`` (see ``round_trip_sql.new_questions``)."""
    strategy = planner.planned[position].strategy if position >= 0 else planner.gold_source
    wanted = strategy.answers_wanted(proposal, plan.redundancy) if strategy is not None else 1
    objects = [*proposal.objects, None][:3]
    return {
        "key": proposal.key,
        "kind": proposal.kind,
        "o1": objects[0],
        "o2": objects[1],
        "o3": objects[2],
        "strategy": proposal.strategy,
        "strategy_position": position,
        "strategy_ref": _json(proposal.ref or None),
        "gold_choice": proposal.gold_choice,
        "wanted": wanted,
    }


def shown_order(kind: str, o1: int, o2: int, o3: int | None, swap: bool) -> tuple[int, ...]:
    """The objects in the order shown: a triplet's candidates, or a pair, swapped or not."""
    if kind == "triplet":
        return (o1, o3, o2) if swap else (o1, o2, o3)  # type: ignore[return-value]
    return (o2, o1) if swap else (o1, o2)


def _query_values(
    project: Project,
    work: WorkSession,
    question: OpenQuestion | Repeatable,
    shown: tuple[int, ...],
    is_repeat: bool,
    now: datetime,
    token: str | None = None,
) -> dict[str, Any]:
    """The row of a query handing ``question`` to ``work``, with ``token`` or a fresh one."""
    objects = [*shown, None][:3]
    return {
        "project_id": project.id,
        "question_id": question.id,
        "session_id": work.id,
        "participant_id": work.participant_id,
        "kind": question.kind,
        "o1": objects[0],
        "o2": objects[1],
        "o3": objects[2],
        "status": "issued",
        "is_repeat": is_repeat,
        "token": token or query_token(work.answered),
        "issued_at": now,
        "expires_at": lease_end(now),
        "answered_at": None,
    }


def _issue_repeat(
    db: Session,
    project: Project,
    work: WorkSession,
    question: Repeatable,
    swap: bool,
    now: datetime,
) -> Query:
    """Hand ``question``, which ``work`` answered, to it again with a fresh token: a triplet
    mirrored, a pair in the order drawn (``swap``). A repeat takes no place among the
    question's wanted answers (any other question goes through :func:`_issue_existing`)."""
    shown = shown_order(question.kind, question.o1, question.o2, question.o3, swap)
    if question.kind == "triplet":
        shown = (question.o1, question.shown_o3, question.shown_o2)  # mirrored
    values = _query_values(project, work, question, shown, True, now)
    values["id"] = db.execute(_INSERT_QUERY, values).scalar_one()  # Core, not the ORM's flush
    return Query(**values)


def _issue_existing(
    db: Session,
    project: Project,
    work: WorkSession,
    question: OpenQuestion,
    swap: bool,
    now: datetime,
) -> Issued:
    """Lease one more place of ``question``, claimed by this transaction, and issue its
    query, in one step (round_trip_sql.issue)."""
    shown = shown_order(question.kind, question.o1, question.o2, question.o3, swap)
    query = _query_values(project, work, question, shown, False, now)
    query["id"], query["question_id"], objects = round_trip_sql.issue(
        db,
        {
            "question": question.id,
            "project": query["project_id"],
            "session": query["session_id"],
            "participant": query["participant_id"],
            "kind": query["kind"],
            "s1": query["o1"],
            "s2": query["o2"],
            "s3": query["o3"],
            "issued_token": query["token"],
            "now": query["issued_at"],
            "expires": query["expires_at"],
        },
        [i for i in shown if i is not None],
    )
    return Issued(IssuedQuery(**query), objects=objects)


def lease_end(issued_at: datetime) -> datetime:
    """When the lease of a query issued at ``issued_at`` ends."""
    return issued_at + timedelta(seconds=get_settings().lease_seconds)


def _json(value: Any) -> str:
    return json.dumps(value)  # as SQLAlchemy's JSON type does (None: JSON null)


def finish_session(db: Session, work: WorkSession) -> None:
    if work.finished_at is None:
        work.finished_at = utcnow()
        work.completion_code_hash = session_code_hash(work.id)


def query_objects(db: Session, project: Project, query: Query) -> list[Row]:
    """The query's objects in the order shown: rows of (index, name, text, image_url)."""
    indices = [i for i in (query.o1, query.o2, query.o3) if i is not None]
    rows = db.execute(_SHOWN_OBJECTS, {"project": project.id, "indices": indices})
    by_index = {row.index: row for row in rows}
    return [by_index[i] for i in indices]


def check_plan(project: Project, plan: Plan) -> None:
    """Refuse a plan its project cannot run (422 naming the strategy and the reason)."""
    try:
        planner_for(project, plan)
    except ValueError as error:
        raise InvalidInput(str(error), getattr(error, "loc", None)) from error

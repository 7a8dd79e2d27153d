"""Recording a worker's answer: exactly once per token, committed before the reply."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.db.models import Answer, Project, Query, Question, WorkSession, utcnow
from app.db.session import ensure_write
from app.errors import AppError, Conflict, Forbidden, InvalidInput, NotFound
from app.services import round_trip_sql
from app.services.issuance import (
    COUNT_PLACES,
    Issued,
    Prefetched,
    finish_session,
    next_for_session,
    next_query,
)
from app.services.projects import project_plan
from app.services.quality import count_answer, min_answer_ms, review_counts
from app.services.sessions import (
    authenticate_session_in_project,
    completion_code,
    completion_code_hash,
)

QUALITY_REVIEW_EVERY = 5
EXPIRE_LEASES_EVERY = 1.0  # seconds; answering frees expired leases at most this often
MAX_CLIENT_MS = 24 * 3600 * 1000


_answers = Answer.__table__
_questions = Question.__table__
_sessions = WorkSession.__table__

# Built once (hot path): Core statements on the tables, so running them costs no ORM
# bookkeeping (profiled: the unit of work's flush cost more than the INSERT itself).
# Mark a query answered unless another request did first.
_queries = Query.__table__
_q = _queries.c
_choice = bindparam("choice")
_CLAIM = (
    update(_queries)
    .where(
        _q.token == bindparam("given_token"),
        _q.session_id == bindparam("session"),
        _q.status == "issued",
        _q.expires_at > bindparam("now"),
        or_(
            and_(_q.kind == "triplet", or_(_q.o2 == _choice, _q.o3 == _choice)),
            and_(_q.kind != "triplet", _choice.in_((-1, 0, 1))),
        ),
    )
    .values(status="answered", answered_at=bindparam("now"))
    .returning(*_q)
)
_QUESTION_FACTS = select(_questions.c.strategy, _questions.c.gold_choice).where(
    _questions.c.id == bindparam("question")
)
# One place among the question's wanted answers goes from leased to answered.
_COUNT_ANSWERED_PLACE = COUNT_PLACES.returning(_questions.c.strategy, _questions.c.gold_choice)
_INSERT_ANSWER = insert(_answers)
# In SQL, so two answers of one session racing on PostgreSQL cannot lose a count.
_COUNT_SESSION_ANSWER = (
    update(_sessions)
    .where(_sessions.c.id == bindparam("session"))
    .values(answered=_sessions.c.answered + 1)
    .returning(_sessions.c.answered)
)
_FIRST_ANSWER = (
    select(_answers.c.a, _answers.c.b, _answers.c.outcome)
    .join(Query, Query.id == _answers.c.query_id)
    .where(
        Query.session_id == bindparam("session"),
        Query.question_id == bindparam("question"),
        ~Query.is_repeat,
    )
)


_WROTE = "answer_wrote"


def wrote(db: Session) -> bool:
    """Whether the latest :func:`answer_and_next` on ``db`` may have written anything (it
    writes nothing before it stores the answer, and nothing if the answer is refused)."""
    return bool(db.info.get(_WROTE, True))


class Gone(AppError):
    status_code = 410


class TransactionLost(Exception):
    """The transaction shared with other answers was rolled back (see ``answer_and_next``)."""


def answer_and_next(
    db: Session,
    session_id: str,
    authorization: str | None,
    token: str,
    choice: int,
    client_ms: float | None,
    *,
    commit: bool = True,
) -> tuple[WorkSession, Project, Issued]:
    """Record the session's answer and give its next question, in one durable transaction.

    One request per question: the answer's reply carries the next question. The transaction
    holds the project from its start (SQLite: the write lock; PostgreSQL: the project's row,
    locked before any other row, the order issuing takes them in), so answering and issuing
    are serialised per project and the answer is committed, durably, with the issue.
    ``commit=False`` leaves the commit to the caller, who may record other answers in the
    same transaction first (group commit: one wait for the disk for them all).
    """
    ensure_write(db, durable=True)
    transaction = db.get_transaction()
    db.info[_WROTE] = False
    work, project = authenticate_session_in_project(db, session_id, authorization, hold=True)
    work, stored, prefetched = record_answer(
        db, work, token, choice, client_ms, project=project, commit=False
    )
    db.info[_WROTE] = True  # issuing writes
    if db.get_transaction() is not transaction:
        # A race with the same token ended the transaction (and its hold): issue anew. Not
        # in a group: the others' answers went with the transaction, which they must know.
        if not commit:
            raise TransactionLost
        work, project, issued = next_for_session(db, session_id, authorization)
        return work, project, issued
    # Having just answered its question, the session holds no other: a session is issued
    # one at a time, under the same hold.
    issued = next_query(
        db,
        project,
        work,
        none_open=stored,
        expire_every=EXPIRE_LEASES_EVERY,
        prefetched=prefetched,
    )
    if commit:
        db.commit()
    return work, project, issued


def record_answer(
    db: Session,
    work: WorkSession,
    token: str,
    choice: int,
    client_ms: float | None,
    *,
    project: Project | None = None,
    commit: bool = True,
) -> tuple[WorkSession, bool, Prefetched | None]:
    """Store the answer to the query ``token``; a repeat of the same answer stores nothing.

    Returns the session, whether the answer was stored now, and on PostgreSQL, where the
    answer is stored by one statement that also reads for issuing, what it read (see
    :class:`~app.services.issuance.Prefetched`; None on SQLite). The answer is committed
    before this returns, unless ``commit`` is false: then the caller commits the
    transaction (durable, see :func:`answer_and_next`). ``project``: ``work``'s project, if
    already read.
    """
    if client_ms is not None and (
        not math.isfinite(client_ms) or not 0 <= client_ms <= MAX_CLIENT_MS
    ):
        raise InvalidInput(f"client_ms must be between 0 and {MAX_CLIENT_MS}, got {client_ms}")
    ensure_write(db, durable=True)  # the answer's commit waits for the disk (begin_write)
    now = utcnow()
    project = project or db.get(Project, work.project_id)
    assert project is not None  # a foreign key guarantees it
    db.info[_WROTE] = True  # from here on, until known otherwise
    if db.get_bind().dialect.name == "postgresql":
        stored = _record_in_one_statement(db, work, project, token, choice, client_ms, now)
        if stored is None:
            db.info[_WROTE] = False  # the statement changes all or nothing: nothing
            return _not_claimed(db, work, token, choice), False, None
        if commit:
            db.commit()
        return work, True, stored
    # The usual case in one statement: this session's question, still leased, and a choice it
    # offered, marked answered (unless another request did first). Otherwise, find out why.
    row = db.execute(
        _CLAIM, {"given_token": token, "session": work.id, "now": now, "choice": choice}
    ).first()
    if row is None:
        db.info[_WROTE] = False  # claimed nothing, changed nothing
        return _not_claimed(db, work, token, choice), False, None
    query = Query(**row._mapping)  # read only, never added to the session
    position = _position(query, choice)

    if query.is_repeat:  # a repeat never held a place among the question's wanted answers
        strategy, gold_choice = db.execute(_QUESTION_FACTS, {"question": query.question_id}).one()
    else:
        strategy, gold_choice = db.execute(
            _COUNT_ANSWERED_PLACE, {"question": query.question_id, "live": -1, "answered": 1}
        ).one()
    answer = _answer_values(work, query, strategy, gold_choice, choice, position, client_ms, now)
    if query.is_repeat:
        answer["consistent"] = _agrees_with_first_answer(db, work, query, answer)
    try:
        db.execute(_INSERT_ANSWER, answer)
    except IntegrityError:  # another request stored an answer to this query first
        db.rollback()
        return _not_claimed(db, work, token, choice), False, None
    answered = db.execute(_COUNT_SESSION_ANSWER, {"session": work.id}).scalar_one()
    set_committed_value(work, "answered", answered)
    if work.answered >= work.total:
        finish_session(db, work)
    counts = count_answer(db, work.participant_id, answer, min_answer_ms(project))
    if work.finished_at is not None or work.answered % QUALITY_REVIEW_EVERY == 0:
        plan = project_plan(project)
        if plan is not None:
            review_counts(db, counts, plan)
    if commit:
        db.commit()
    return work, True, None


def _record_in_one_statement(
    db: Session,
    work: WorkSession,
    project: Project,
    token: str,
    choice: int,
    client_ms: float | None,
    now: datetime,
) -> Prefetched | None:
    """PostgreSQL: the steps of :func:`record_answer` in one statement
    (round_trip_sql.ANSWER); None if the question was not claimed (nothing changed)."""
    params = {
        "token": token,
        "session": work.id,
        "now": now,
        "choice": choice,
        "project": project.id,
        "participant": work.participant_id,
        "source": work.source,
        "client_ms": client_ms,
        "min_ms": min_answer_ms(project),
        "code_hash": completion_code_hash(completion_code(work.id)),
    }
    try:
        row = db.execute(round_trip_sql.ANSWER, params).first()
    except IntegrityError:  # another request stored an answer to this query first
        db.rollback()
        return None
    if row is None:
        return None
    set_committed_value(work, "answered", row.session_answered)
    set_committed_value(work, "finished_at", row.session_finished_at)
    set_committed_value(work, "completion_code_hash", row.session_code_hash)
    if work.finished_at is not None or work.answered % QUALITY_REVIEW_EVERY == 0:
        plan = project_plan(project)
        if plan is not None:
            review_counts(db, row, plan)
    if row.q_id is None:
        return Prefetched(None)
    question = {k[2:]: v for k, v in row._mapping.items() if k.startswith("q_")}
    return Prefetched(Question(**question))


def _not_claimed(db: Session, work: WorkSession, token: str, choice: int) -> WorkSession:
    """Why the answer to ``token`` was not taken: the same answer again (harmless: the
    session as it is), or an error that names the reason."""
    query = db.scalar(select(Query).where(Query.token == token))
    if query is None:
        raise NotFound("unknown question token")
    if query.session_id != work.id:
        raise Forbidden("this question token belongs to another session")
    if query.status == "answered":
        return _same_or_conflict(db, query, choice, work)
    if query.status == "expired" or query.expires_at <= utcnow():
        raise Gone("this question's lease expired; ask for the next question")
    _position(query, choice)  # names what is wrong with the choice
    raise Gone("this question's lease just ended; ask for the next question")


def _position(query: Query, choice: int) -> int:
    """Where the chosen answer was shown: −1 left, 0 'about the same', 1 right."""
    if query.kind == "triplet":
        if choice == query.o2:
            return -1
        if choice == query.o3:
            return 1
        raise InvalidInput(
            f"choice {choice} is not one of the candidates shown ({query.o2} or {query.o3})"
        )
    if choice not in (-1, 0, 1):
        raise InvalidInput(
            f"a pair's choice must be −1 (left better), 0 (about the same) or 1 (right better), "
            f"got {choice}"
        )
    return choice


def _answer_values(
    work: WorkSession,
    query: Query,
    strategy: str,
    gold_choice: int | None,
    choice: int,
    position: int,
    client_ms: float | None,
    now: datetime,
) -> dict[str, Any]:
    if query.kind == "triplet":
        other = query.o3 if choice == query.o2 else query.o2
        a, b, c, outcome = query.o1, choice, other, None
    else:
        a, b, c, outcome = query.o1, query.o2, None, choice
    return {
        "project_id": work.project_id,
        "query_id": query.id,
        "kind": query.kind,
        "a": a,
        "b": b,
        "c": c,
        "outcome": outcome,
        "position": position,
        "choice": choice,
        "source": work.source,
        "strategy": strategy,
        "gold_correct": None if gold_choice is None else choice == gold_choice,
        "consistent": None,
        "session_id": work.id,
        "participant_id": work.participant_id,
        "server_ms": (now - query.issued_at).total_seconds() * 1000,
        "client_ms": client_ms,
        "created_at": now,
    }


def _agrees_with_first_answer(
    db: Session, work: WorkSession, query: Query, answer: dict[str, Any]
) -> bool | None:
    first = db.execute(_FIRST_ANSWER, {"session": work.id, "question": query.question_id}).first()
    if first is None:
        return None
    if query.kind == "triplet":
        return first.b == answer["b"]
    # Pairs: the same verdict about the same two objects, whichever side they were shown on.
    first_verdict = first.outcome if first.a == answer["a"] else -first.outcome
    return first_verdict == answer["outcome"]


def _same_or_conflict(db: Session, query: Query, choice: int, work: WorkSession) -> WorkSession:
    stored = db.scalar(select(Answer).where(Answer.query_id == query.id))
    if stored is None or stored.choice != choice:
        raise Conflict("this question was already answered with a different choice")
    db.refresh(work)
    return work

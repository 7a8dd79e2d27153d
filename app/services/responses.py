"""Recording a worker's answer: exactly once per token, committed before the reply."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.db.models import Answer, Project, Query, Question, WorkSession, utcnow
from app.db.session import ensure_write
from app.errors import AppError, Conflict, Forbidden, InvalidInput, NotFound
from app.services.issuance import COUNT_PLACES, finish_session
from app.services.projects import project_plan
from app.services.quality import review_participant
from app.services.sessions import authenticate_session

QUALITY_REVIEW_EVERY = 5
MAX_CLIENT_MS = 24 * 3600 * 1000


_answers = Answer.__table__
_questions = Question.__table__
_sessions = WorkSession.__table__

# Built once (hot path): Core statements on the tables, so running them costs no ORM
# bookkeeping (profiled: the unit of work's flush cost more than the INSERT itself).
# Mark a query answered unless another request did first.
_CLAIM = (
    update(Query.__table__)
    .where(Query.id == bindparam("query"), Query.status == "issued")
    .values(status="answered", answered_at=bindparam("now"))
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


class Gone(AppError):
    status_code = 410


def record_session_answer(
    db: Session,
    session_id: str,
    authorization: str | None,
    token: str,
    choice: int,
    client_ms: float | None,
) -> WorkSession:
    """Authenticate the session and record its answer, in one writing transaction.

    An answer always writes, so the transaction takes the write lock before its first read:
    what it reads is current, and no read transaction has to end first.
    """
    ensure_write(db, durable=True)
    work = authenticate_session(db, session_id, authorization)
    return record_answer(db, work, token, choice, client_ms)


def record_answer(
    db: Session,
    work: WorkSession,
    token: str,
    choice: int,
    client_ms: float | None,
) -> WorkSession:
    """Store the answer to the query ``token``; a repeat of the same answer stores nothing.

    The answer is committed before this returns.
    """
    if client_ms is not None and (
        not math.isfinite(client_ms) or not 0 <= client_ms <= MAX_CLIENT_MS
    ):
        raise InvalidInput(f"client_ms must be between 0 and {MAX_CLIENT_MS}, got {client_ms}")
    query = db.scalar(select(Query).where(Query.token == token))
    if query is None:
        raise NotFound("unknown question token")
    if query.session_id != work.id:
        raise Forbidden("this question token belongs to another session")
    if query.status == "answered":
        return _same_or_conflict(db, query, choice, work)
    if query.status == "expired" or query.expires_at <= utcnow():
        raise Gone("this question's lease expired; ask for the next question")
    position = _position(query, choice)

    ensure_write(db, durable=True)  # the answer's commit waits for the disk (begin_write)
    now = utcnow()
    query_id = query.id
    claimed = db.execute(_CLAIM, {"query": query_id, "now": now}).rowcount
    if not claimed:
        # Another request with this token won the race (or the lease just ended).
        db.rollback()  # expires ``query``: its id was kept before
        if db.scalar(select(Query.id).where(Query.id == query_id)) is None:
            # Deleted with its project while this request waited for the row.
            raise NotFound("unknown question token")
        db.refresh(query)
        if query.status == "answered":
            return _same_or_conflict(db, query, choice, work)
        raise Gone("this question's lease expired; ask for the next question")

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
    except IntegrityError:
        db.rollback()
        db.refresh(query)
        return _same_or_conflict(db, query, choice, work)
    answered = db.execute(_COUNT_SESSION_ANSWER, {"session": work.id}).scalar_one()
    set_committed_value(work, "answered", answered)
    if work.answered >= work.total:
        finish_session(db, work)
    if work.finished_at is not None or work.answered % QUALITY_REVIEW_EVERY == 0:
        # Only now is the project read: most answers need nothing from it.
        project = db.get(Project, work.project_id)
        assert project is not None  # a foreign key guarantees it
        plan = project_plan(project)
        if plan is not None:
            review_participant(db, project, work.participant_id, plan)
    db.commit()
    return work


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

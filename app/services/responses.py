"""Recording a worker's answer: exactly once per token, committed before the reply."""

from __future__ import annotations

import math

from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.models import Answer, Project, Query, Question, WorkSession, utcnow
from app.db.session import begin_write
from app.errors import AppError, Conflict, Forbidden, InvalidInput, NotFound
from app.services.issuance import count_places, finish_session
from app.services.projects import project_plan
from app.services.quality import review_participant

QUALITY_REVIEW_EVERY = 5
MAX_CLIENT_MS = 24 * 3600 * 1000


# Built once (hot path): mark a query answered unless another request did first.
_CLAIM = (
    update(Query)
    .where(Query.id == bindparam("query"), Query.status == "issued")
    .values(status="answered", answered_at=bindparam("now"))
    .execution_options(synchronize_session=False)
)


class Gone(AppError):
    status_code = 410


def record_answer(
    db: Session,
    project: Project,
    work: WorkSession,
    token: str,
    choice: int,
    client_ms: float | None,
) -> WorkSession:
    """Store the answer to the query ``token``; a repeat of the same answer stores nothing."""
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

    begin_write(db)
    now = utcnow()
    claimed = db.execute(_CLAIM, {"query": query.id, "now": now}).rowcount
    if not claimed:
        # Another request with this token won the race (or the lease just ended).
        db.rollback()
        db.refresh(query)
        if query.status == "answered":
            return _same_or_conflict(db, query, choice, work)
        raise Gone("this question's lease expired; ask for the next question")

    question = db.get(Question, query.question_id)
    assert question is not None
    answer = _answer_row(project, work, query, question, choice, position, client_ms, now)
    if query.is_repeat:
        answer.consistent = _agrees_with_first_answer(db, work, query, answer)
    else:
        count_places(db, question.id, live=-1, answered=1)
    db.add(answer)
    work.answered += 1
    if work.answered >= work.total:
        finish_session(db, work)
    try:
        db.flush()
    except IntegrityError:
        db.rollback()
        db.refresh(query)
        return _same_or_conflict(db, query, choice, work)
    if work.finished_at is not None or work.answered % QUALITY_REVIEW_EVERY == 0:
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


def _answer_row(
    project: Project,
    work: WorkSession,
    query: Query,
    question: Question,
    choice: int,
    position: int,
    client_ms: float | None,
    now,  # type: ignore[no-untyped-def]
) -> Answer:
    if query.kind == "triplet":
        other = query.o3 if choice == query.o2 else query.o2
        a, b, c, outcome = query.o1, choice, other, None
    else:
        a, b, c, outcome = query.o1, query.o2, None, choice
    return Answer(
        project_id=project.id,
        query_id=query.id,
        kind=query.kind,
        a=a,
        b=b,
        c=c,
        outcome=outcome,
        position=position,
        choice=choice,
        source=work.source,
        strategy=question.strategy,
        gold_correct=None if question.gold_choice is None else choice == question.gold_choice,
        session_id=work.id,
        participant_id=work.participant_id,
        server_ms=(now - query.issued_at).total_seconds() * 1000,
        client_ms=client_ms,
        created_at=now,
    )


def _agrees_with_first_answer(
    db: Session, work: WorkSession, query: Query, answer: Answer
) -> bool | None:
    first = db.scalar(
        select(Answer)
        .join(Query, Query.id == Answer.query_id)
        .where(
            Query.session_id == work.id, Query.question_id == query.question_id, ~Query.is_repeat
        )
    )
    if first is None:
        return None
    if query.kind == "triplet":
        return first.b == answer.b
    # Pairs: the same verdict about the same two objects, whichever side they were shown on.
    first_verdict = first.outcome if first.a == answer.a else -first.outcome
    return first_verdict == answer.outcome


def _same_or_conflict(db: Session, query: Query, choice: int, work: WorkSession) -> WorkSession:
    stored = db.scalar(select(Answer).where(Answer.query_id == query.id))
    if stored is None or stored.choice != choice:
        raise Conflict("this question was already answered with a different choice")
    db.refresh(work)
    return work

"""Recording a worker's answer: exactly once per token, committed before the reply."""

from __future__ import annotations

import math
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.db.models import Answer, Project, Query, WorkSession, utcnow
from app.db.session import ensure_write
from app.errors import AppError, Conflict, Forbidden, InvalidInput, NotFound
from app.services import round_trip_sql
from app.services.issuance import (
    Issued,
    OpenQuestion,
    Prefetched,
    Ticket,
    hold_for_issuing,
    issued_with_answer,
    lease_end,
    next_for_session,
    next_query,
    ticket_after_answer,
)
from app.services.projects import project_plan
from app.services.quality import min_answer_ms, review_counts
from app.services.sessions import authenticate_session_in_project, session_code_hash

QUALITY_REVIEW_EVERY = 5
MAX_CLIENT_MS = 24 * 3600 * 1000


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
    holds the session and its participant from its start (SQLite: the write lock;
    PostgreSQL: their rows), so answering and issuing are serialised per participant, and
    the answer is committed, durably, with the issue. When no question is open for the
    participant on PostgreSQL, the answer is committed first and the pool filled in
    transactions of their own (see ``issuance.next_for_session``).
    ``commit=False`` (SQLite only) leaves the commit to the caller, who may record other
    answers in the same transaction first (group commit: one wait for the disk for them
    all).
    """
    ensure_write(db, durable=True)
    transaction = db.get_transaction()
    work, project = authenticate_session_in_project(db, session_id, authorization, hold=True)
    held = hold_for_issuing(db, project)
    # PostgreSQL, the usual case: the answer's statement issues the next question too.
    ticket = ticket_after_answer(db, project, work)
    work, stored, prefetched = record_answer(
        db, work, token, choice, client_ms, project=project, commit=False, ticket=ticket
    )
    if db.get_transaction() is not transaction:
        # A race with the same token ended the transaction (and its hold): issue anew. Not
        # in a group: the others' answers went with the transaction, which they must know.
        if not commit:
            raise TransactionLost
        work, project, issued = next_for_session(db, session_id, authorization)
        return work, project, issued
    if prefetched is not None and prefetched.issued is not None:
        issued = prefetched.issued
    else:
        # Having just answered its question, the session holds no other: a session is
        # issued one at a time, under the same hold.
        issued = next_query(db, project, work, none_open=stored, prefetched=prefetched, held=held)
    if issued.fill_first:
        if not commit:  # only PostgreSQL asks for it, and there answers are not grouped
            raise RuntimeError("a fill of the pool needs a transaction of its own")
        db.commit()
        return next_for_session(db, session_id, authorization)
    if commit:
        db.commit()
    return work, project, issued


def client_ms_valid(client_ms: float | None) -> bool:
    """Whether ``client_ms`` (the time the worker's page measured) is absent or a finite
    number of milliseconds between 0 and :data:`MAX_CLIENT_MS`."""
    return client_ms is None or (math.isfinite(client_ms) and 0 <= client_ms <= MAX_CLIENT_MS)


def record_answer(
    db: Session,
    work: WorkSession,
    token: str,
    choice: int,
    client_ms: float | None,
    *,
    project: Project | None = None,
    commit: bool = True,
    ticket: Ticket | None = None,
) -> tuple[WorkSession, bool, Prefetched | None]:
    """Store the answer to the query ``token``; a repeat of the same answer stores nothing.

    Returns the session, whether the answer was stored now, and what storing it read for
    issuing (see :class:`~app.services.issuance.Prefetched`). The answer is committed
    before this returns, unless ``commit`` is false: then the caller commits the
    transaction (durable, see :func:`answer_and_next`). ``project``: ``work``'s project, if
    already read. ``ticket``: issue the open question claimed with it, in the same statement.
    """
    if not client_ms_valid(client_ms):
        raise InvalidInput(f"client_ms must be between 0 and {MAX_CLIENT_MS}, got {client_ms}")
    ensure_write(db, durable=True)  # the answer's commit waits for the disk (begin_write)
    now = utcnow()
    project = project or db.get(Project, work.project_id)
    assert project is not None  # a foreign key guarantees it
    stored = _store(db, work, project, token, choice, client_ms, now, ticket)
    if stored is None:
        return _not_claimed(db, work, token, choice), False, None
    if commit:
        db.commit()
    return work, True, stored


def _store(
    db: Session,
    work: WorkSession,
    project: Project,
    token: str,
    choice: int,
    client_ms: float | None,
    now: datetime,
    ticket: Ticket | None,
) -> Prefetched | None:
    """The steps of :func:`record_answer` (round_trip_sql.answer): what they read for
    issuing, or None if the question was not claimed (nothing changed)."""
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
        "code_hash": session_code_hash(work.id),
        "issue": ticket is not None,
        "swap": ticket is not None and ticket.swap,
        "issued_token": ticket and ticket.token,
        "expires": lease_end(now),
    }
    try:
        row = round_trip_sql.answer(db, params)
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
            review_counts(db, row, plan)  # type: ignore[arg-type]
    if row.open_question is None:
        return Prefetched(None)
    question = OpenQuestion(*row.open_question)
    if row.issued is None or ticket is None:
        return Prefetched(question)
    issued = issued_with_answer(project, work, question, ticket, row.issued, now)
    return Prefetched(question, issued)


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


def _same_or_conflict(db: Session, query: Query, choice: int, work: WorkSession) -> WorkSession:
    stored = db.scalar(select(Answer).where(Answer.query_id == query.id))
    if stored is None or stored.choice != choice:
        raise Conflict("this question was already answered with a different choice")
    db.refresh(work)
    return work

"""A round trip taken the known way, for a session this server process knows: on PostgreSQL
in one statement, on SQLite without reading the session first.

A round trip (``responses.answer_and_next``) sends the database four messages: ``BEGIN``,
the statement that authenticates the session and holds it and its participant, the answer's
statement, ``COMMIT``. What the first statement reads, the process learnt when it served the
session before (its participant, its token's hash, its project's plan); the session's count
of answers, which moves, comes with the answer: the query's token carries the count when it
was issued (``issuance.query_token``), whichever process issued it. For such a session the
process decides the next question's :class:`~app.services.issuance.Ticket` from these, on
the event loop (:func:`prepare`), and then:

* on PostgreSQL (:func:`answer`) sends one statement, in autocommit, on the event loop
  (``round_trip_sql.answer_held`` on a connection of ``app.db.loop_connections``: no thread
  hop, no SQLAlchemy). It holds the session and its participant itself and does anything
  only if the session is still as remembered and counted. The next question is the open
  question it claims, or, when a repeat is drawn, the repeat it picks
  (``round_trip_sql.ANSWER_HELD_REPEAT``). Answers whose next question is not a repeat and
  that wait for a connection together share one statement (``app.services.answer_batches``,
  ``round_trip_sql.answer_held_batch``), which does for each what its own would;
* on SQLite (:func:`answer_in`) runs the answer's steps in its group's transaction, under
  the write lock (``app.api.worker.AnswerGroups``), its claim only if the session is as
  remembered and counted (``round_trip_sql.answer_held_in``): the session is not read and
  loaded first, and the ticket was drawn before the lock was taken. The next question is
  the repeat it picks, if one is drawn and qualifies, else the open question.

Either way these are the same questions, shown in the same order, as the usual way issues
(``tests/api/test_issue_with_answer.py``). Otherwise (a session seen first, a stale memory,
a wrong token, the session's last answer, a comprf plan, no question open or, on PostgreSQL,
none to repeat, an error) nothing was changed, or the answer was stored and the question
alone is missing, and the round trip is run the usual way (on SQLite in the same
transaction), which learns the session anew: an answer sent again is recognised there as the
same answer (``responses._not_claimed``) and the next question issued.

Every guarantee holds as in the usual round trip: the answer is committed (autocommit is a
commit per statement; on SQLite the group's durable commit) before the reply; the query is
claimed exactly once (its row); a question is never given twice to a participant (on
PostgreSQL the answer's snapshot is taken before the participant is held, so the unique
index on (participant, question, is_repeat) refuses what the snapshot could not see, and the
round trip is run again the usual way; SQLite's write lock serialises every writer). The
quality review that every fifth answer runs follows: on PostgreSQL on the same connection,
after the answer's commit, written only if the flag changes and the participant's counters
have not moved since (``quality.flag_change``); on SQLite in the same transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.db.loop_connections import loop_connections
from app.db.models import Project, WorkSession, utcnow
from app.schemas.plans import Plan
from app.services import fill_ahead, issuance, round_trip_sql, study_state
from app.services.answer_batches import answer_alone, answer_batches, review_due
from app.services.comprf import stored_plan_has_comprf
from app.services.issuance import lease_end
from app.services.quality import min_answer_ms, review_counts
from app.services.responses import client_ms_valid
from app.services.sessions import session_code_hash, token_hash

MAX_KNOWN = 50_000  # sessions remembered per process (~0.5 kB each): the oldest forgotten


@dataclass(frozen=True, slots=True)
class Known:
    """What the process remembers of a session after serving it (``answered``: its count
    then, for a token that carries none)."""

    participant_id: int
    project_id: int
    source: str
    total: int
    answered: int
    token_hash: str
    plan_json: str  # the project's plan as read, to compare with the project's own
    plan: Plan
    min_ms: int


@dataclass(frozen=True, slots=True)
class Answered:
    """A round trip done in one statement: the session's count and total after the answer,
    and the next question's token, kind and objects in the order shown."""

    answered: int
    total: int
    token: str
    kind: str
    objects: list[round_trip_sql.ShownObject]


_known: dict[str, Known] = {}  # by session id, oldest first
_plans: dict[int, tuple[str, Plan]] = {}  # by project id: its plan, as JSON and validated


def remember(db: Session, work: WorkSession, project: Project) -> None:
    """Remember ``work`` as the transaction just committed left it, if its next answer could
    be taken the known way."""
    if not _own_connections(db):
        return
    _known.pop(work.id, None)
    if work.finished_at is not None or not project.plan or stored_plan_has_comprf(project.plan):
        return
    if not study_state.accepting(project, work.source):  # its next question waits: the usual way
        return
    if work.answered + 1 >= work.total:
        return  # its next answer is its last
    plan_json = json.dumps(project.plan)
    plan = _plans.get(project.id)
    if plan is None or plan[0] != plan_json:
        plan = _plans[project.id] = (plan_json, Plan.model_validate(project.plan))
    _known[work.id] = Known(
        participant_id=work.participant_id,
        project_id=project.id,
        source=work.source,
        total=work.total,
        answered=work.answered,
        token_hash=work.token_hash,
        plan_json=plan[0],  # one string for all the project's sessions
        plan=plan[1],
        min_ms=min_answer_ms(project),
    )
    while len(_known) > MAX_KNOWN:
        try:
            _known.pop(next(iter(_known)), None)
        except (RuntimeError, StopIteration):  # changed by the other thread meanwhile
            continue


def _own_connections(db: Session) -> bool:
    """Whether ``db`` is bound to an engine (not to a connection inside a transaction, as
    tests that roll back everything bind it): on PostgreSQL the event loop's own connections
    then reach its database in autocommit."""
    return isinstance(db.get_bind(), Engine)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A known session's answer, ready to send: what the process remembers of the session,
    the next question's ticket and the statement's parameters."""

    session_id: str
    known: Known
    ticket: issuance.Ticket
    params: dict[str, Any]


def prepare(
    session_id: str,
    authorization: str | None,
    token: str,
    choice: int,
    client_ms: float | None,
) -> Prepared | None:
    """The answer to send the known way, if the session is known and the answer is not its
    last; None if the round trip must run the usual way (see the module). The memory of the
    session is taken: the answer puts it back, updated."""
    known = _known.pop(session_id, None)
    if known is None:
        return None
    # The session's count when the query was issued, as its token says (whichever process
    # issued it), else as this process last saw it; the statement checks it.
    before = issuance.answered_when_issued(token)
    if before is None:
        before = known.answered
    answered = before + 1
    if answered >= known.total or token_hash(authorization) != known.token_hash:
        return None  # the session's last answer, or the usual way names what is wrong
    if not client_ms_valid(client_ms):
        return None
    ticket = issuance.ticket_for(known.plan, session_id, answered, repeats=True)
    if ticket is None:
        return None
    now = utcnow()
    params: dict[str, Any] = {
        "token": token,
        "session": session_id,
        "now": now,
        "choice": choice,
        "project": known.project_id,
        "participant": known.participant_id,
        "source": known.source,
        "client_ms": client_ms,
        "min_ms": known.min_ms,
        "code_hash": session_code_hash(session_id),
        "issue": True,
        "swap": ticket.swap,
        "issued_token": ticket.token,
        "expires": lease_end(now),
        "draw": ticket.repeat_draw,
        "token_hash": known.token_hash,
        "answered": before,
        "plan": known.plan_json,
    }
    return Prepared(session_id, known, ticket, params)


async def answer(engine: Engine, prepared: Prepared) -> Answered | None:
    """Record the answer and issue the next question in one statement, on the event loop
    (PostgreSQL; ``engine``: the database's, as the request's sessions are bound to); None
    if the round trip must run the usual way (see the module). An answer whose next
    question is not a repeat is sent with the others waiting (``app.services.answer_batches``)."""
    connections = loop_connections(engine)
    if prepared.ticket.repeat_draw is None:
        row = await answer_batches(connections).answer(prepared.params, prepared.known.plan)
    else:
        row = await answer_alone(connections, prepared.params, prepared.known.plan)
    answered = _answered(prepared, row)
    if answered is not None and prepared.ticket.repeat_draw is None:
        fill_ahead.filler(engine).claimed(prepared.known.project_id, row.open_question[0])  # type: ignore[union-attr]
    return answered


def answer_in(db: Session, prepared: Prepared) -> Answered | None:
    """:func:`answer` on SQLite, in ``db``'s writing transaction (a group's, see
    ``app.api.worker.AnswerGroups``), the review in it too; None if the round trip must run
    the usual way, in the same transaction: the answer may be stored already (no question
    was open), which the usual way takes as sent again."""
    row = round_trip_sql.answer_held_in(db, prepared.params)
    if review_due(row):
        review_counts(db, row, prepared.known.plan)  # type: ignore[arg-type]
    return _answered(prepared, row)


def _answered(prepared: Prepared, row: round_trip_sql.Answered | None) -> Answered | None:
    """The round trip done, as the statements returned it, and the session remembered as
    it left it; None if they changed nothing or issued no question."""
    if row is None or row.issued is None:
        # Nothing changed, or the answer was stored but no question was open: the usual way
        # takes it as sent again, fills the pool and issues the question.
        return None
    known = prepared.known
    _known[prepared.session_id] = replace(known, answered=row.session_answered)
    _, kind, *_ = row.open_question  # type: ignore[misc]
    return Answered(
        answered=row.session_answered,
        total=known.total,
        token=prepared.ticket.token,
        kind=kind,
        objects=[row.issued.objects[index] for index in row.issued.shown],
    )

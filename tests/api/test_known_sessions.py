"""A round trip taken the known way, for a session the server process knows
(``app.services.known_sessions``; PostgreSQL: one statement, SQLite: the steps without
reading the session first): the rows it writes follow the rules, and whatever the process
remembers wrongly, or cannot do the known way, is run the usual way.

These run on committed requests, as on a real server: on PostgreSQL the statement runs in
autocommit on a connection of its own, which a test's rolled-back transaction would not let
it do."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.loop_connections import application_name
from app.db.models import Answer, Project, Query, Question, WorkSession
from app.services import fill_ahead, known_sessions
from app.services.issuance import POOL_BATCH
from tests.api.test_round_trip_rows import check_round_trip_rows
from tests.factories import (
    answer,
    first_choice,
    make_objects,
    make_project,
    next_query,
    open_session,
    set_plan,
    statements_sent,
)

ONE_STATEMENT = "known"  # PostgreSQL: round_trip_sql.ANSWER_HELD; SQLite: CLAIM_HELD
USUAL_ANSWER = "usual"  # PostgreSQL: round_trip_sql.ANSWER; SQLite: CLAIM


def _answer_statement(statement: str) -> str | None:
    """Which way an answer's first statement takes: the known way or the usual way."""
    sql = " ".join(statement.split())
    if sql.startswith("WITH held AS"):
        return ONE_STATEMENT
    if sql.startswith("WITH claim AS"):
        return USUAL_ANSWER
    if sql.startswith("UPDATE queries SET status = 'answered'"):
        return ONE_STATEMENT if "sessions.token_hash" in sql else USUAL_ANSWER
    return None


@pytest.fixture
def sent(engine: Engine) -> Iterator[list[str]]:
    """The answer statements sent, by the way they take."""
    texts: list[str] = []

    def record(statement: str) -> None:
        way = _answer_statement(statement)
        if way is not None:
            texts.append(way)

    with statements_sent(engine, record):
        yield texts


def _answers_of(engine: Engine, session_id: str) -> int:
    with Session(engine) as db:
        return db.scalar(select(func.count()).where(Answer.session_id == session_id)) or 0


def _study(client, headers, slug: str, n_objects: int = 20, **plan: Any) -> None:  # type: ignore[no-untyped-def]
    """The project ``slug`` with ``n_objects`` objects and a plan of random triplets, ten a
    session and no gold unless ``plan`` says otherwise."""
    make_project(client, headers, slug)
    make_objects(client, headers, slug, n_objects)
    set_plan(client, headers, slug, **{"queries_per_session": 10, "gold_rate": 0, **plan})


def _first_question(client, slug: str, participant: str = "w") -> tuple[str, dict, dict]:  # type: ignore[no-untyped-def]
    """A new session of ``participant``: its id, its headers and its first question."""
    session_id, session = open_session(client, slug, participant=participant)
    return session_id, session, next_query(client, session_id, session)


def _answer_shown(client, session_id: str, session: dict, body: dict, ms: float = 900):  # type: ignore[no-untyped-def]
    """Answer the question ``body`` shows with a valid choice; the response."""
    query = body["query"]
    return answer(client, session_id, session, query["token"], first_choice(query), ms)


def other_connection(engine: Engine) -> psycopg.Connection[Any]:
    """A psycopg connection of its own to ``engine``'s database (PostgreSQL), outside
    SQLAlchemy: another transaction, to hold rows while a round trip runs."""
    url = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    return psycopg.connect(url)


def in_background(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """``call()`` in a thread of its own, started: the thread, and the list its result is
    appended to once it returns."""
    results: list[Any] = []
    thread = threading.Thread(target=lambda: results.append(call()))
    thread.start()
    return thread, results


def first_open_question(engine: Engine, project_id: int, passing_over: list[int]) -> int | None:
    """The open question of the project with the lowest id, passing over ``passing_over``:
    the one a round trip claims next."""
    with Session(engine) as db:
        return db.scalar(
            select(Question.id)
            .where(Question.project_id == project_id, Question.is_open)
            .where(Question.id.not_in(passing_over))
            .order_by(Question.id)
            .limit(1)
        )


def test_rows_follow_the_rules_when_answered_in_one_statement(
    committed_project, engine, sent
) -> None:  # type: ignore[no-untyped-def]
    client, headers, slug = committed_project
    with Session(engine, expire_on_commit=False) as db:
        check_round_trip_rows(client, headers, db, slug)
    # Each session's last answer takes the usual way, and on PostgreSQL repeats with no
    # question to pick (40 % of the questions here are repeats); most of the rest were
    # answered the known way.
    assert sent.count(ONE_STATEMENT) >= 30, sent


def test_the_count_of_answers_comes_from_the_token(committed_project, engine, sent) -> None:  # type: ignore[no-untyped-def]
    """A query's token carries the session's count of answers when it was issued
    (issuance.query_token): a process whose memory of the session is old (another process
    answered since) still answers in one statement; the statement checks the count."""
    client, headers, slug = committed_project
    _study(client, headers, slug)
    session_id, session, body = _first_question(client, slug)
    stale = known_sessions._known[session_id]
    for _ in range(2):
        body = _answer_shown(client, session_id, session, body).json()["next"]
    assert sent == [ONE_STATEMENT] * 2
    assert body["query"]["token"].startswith("2.")
    # As if another server process had answered since: the memory of two answers ago.
    known_sessions._known[session_id] = stale
    sent.clear()
    response = _answer_shown(client, session_id, session, body)
    assert response.status_code == 201, response.text
    assert response.json()["answered"] == 3
    assert response.json()["next"]["query"]["position"] == 4
    assert sent == [ONE_STATEMENT]
    # The count checked: a session whose row says otherwise is answered the usual way.
    body = response.json()["next"]
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE sessions SET answered = answered + 1 WHERE id = :id"), {"id": session_id}
        )
    sent.clear()
    response = _answer_shown(client, session_id, session, body)
    assert response.status_code == 201, response.text
    assert sent == [ONE_STATEMENT, USUAL_ANSWER]  # tried, changed nothing; then the usual way
    assert response.json()["answered"] == 5  # the row's count (4) and this answer
    assert _answers_of(engine, session_id) == 4


def test_a_lost_connection_is_answered_the_usual_way(committed_project, postgres, sent) -> None:  # type: ignore[no-untyped-def]
    """The event loop's connections (app.db.loop_connections) lost, as when the database
    restarts: the answer is taken the usual way, once, and the next in one statement again
    on a new connection."""
    client, headers, slug = committed_project
    _study(client, headers, slug)
    session_id, session, body = _first_question(client, slug)
    body = _answer_shown(client, session_id, session, body).json()["next"]
    assert sent == [ONE_STATEMENT]
    with postgres.begin() as connection:
        ended = connection.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = :name"
            ),
            {"name": application_name()},
        ).scalars()
        assert True in list(ended)
    sent.clear()
    response = _answer_shown(client, session_id, session, body)
    assert response.status_code == 201, response.text
    assert sent == [ONE_STATEMENT, USUAL_ANSWER]  # failed on the lost connection
    assert response.json()["answered"] == 2 and _answers_of(postgres, session_id) == 2
    sent.clear()
    response = _answer_shown(client, session_id, session, response.json()["next"])
    assert response.status_code == 201, response.text
    assert sent == [ONE_STATEMENT]
    assert _answers_of(postgres, session_id) == 3


def test_a_wrong_token_is_refused_and_changes_nothing(committed_project, engine, sent) -> None:  # type: ignore[no-untyped-def]
    client, headers, slug = committed_project
    _study(client, headers, slug)
    session_id, session, body = _first_question(client, slug)
    assert session_id in known_sessions._known
    wrong = {"Authorization": "Bearer not-the-token"}
    response = _answer_shown(client, session_id, wrong, body)
    assert response.status_code == 401, response.text
    assert sent == [] and _answers_of(engine, session_id) == 0
    response = _answer_shown(client, session_id, session, body)
    assert response.status_code == 201, response.text
    assert _answers_of(engine, session_id) == 1


def test_an_answer_sent_again_is_the_same_answer(committed_project, engine, sent) -> None:  # type: ignore[no-untyped-def]
    client, headers, slug = committed_project
    _study(client, headers, slug)
    session_id, session, body = _first_question(client, slug)
    query = body["query"]
    choice = first_choice(query)
    first = answer(client, session_id, session, query["token"], choice)
    assert first.status_code == 201 and sent == [ONE_STATEMENT]
    again = answer(client, session_id, session, query["token"], choice)
    assert again.status_code == 201, again.text
    assert again.json()["answered"] == 1
    assert again.json()["next"]["query"]["token"] == first.json()["next"]["query"]["token"]
    other = query["objects"][2]["index"] if query["kind"] == "triplet" else 1
    assert answer(client, session_id, session, query["token"], other).status_code == 409
    assert _answers_of(engine, session_id) == 1


def test_the_review_after_a_one_statement_answer_flags(committed_project, engine, sent) -> None:  # type: ignore[no-untyped-def]
    client, headers, slug = committed_project
    _study(
        client, headers, slug, queries_per_session=12, min_answer_ms=500,
        quality={"min_answers": 5, "max_fast_share": 0.5, "max_position_bias": 1},
    )  # fmt: skip
    session_id, session, body = _first_question(client, slug, "hasty")
    for _ in range(5):
        body = _answer_shown(client, session_id, session, body, ms=100).json()["next"]
    assert sent == [ONE_STATEMENT] * 5  # the fifth answer's review ran after its statement
    rows = client.get(f"/api/projects/{slug}/participants", headers=headers).json()["data"]
    assert rows[0]["flagged"] is True and "too fast" in rows[0]["flag_reason"]


def test_no_open_question_left_is_run_the_usual_way(
    committed_project, engine, sent, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """The answer is stored in one statement, which finds no question left for the
    participant: the usual way takes the same answer again as sent twice and ends the
    session, every answer stored once. On PostgreSQL the pool filled ahead looks once,
    finds the plan has nothing more, and does not look again at every claim
    (fill_ahead.QUIET_S); SQLite fills it in the usual way's round trip."""
    client, headers, slug = committed_project
    _study(client, headers, slug, n_objects=4, queries_per_session=40)  # 12 triplets in all
    looks = []
    top_up = fill_ahead.top_up
    monkeypatch.setattr(fill_ahead, "top_up", lambda *args: looks.append(args) or top_up(*args))
    filler = fill_ahead.filler(engine)
    session_id, session, body = _first_question(client, slug)
    replies = []
    while not body.get("done"):
        response = _answer_shown(client, session_id, session, body)
        assert response.status_code == 201, response.text
        replies.append(response.json())
        body = replies[-1]["next"]
        filler.wait()
    assert len(looks) == (1 if engine.dialect.name == "postgresql" else 0), looks
    answered = replies[-1]["answered"]
    assert replies[-1]["done"] is True and answered < 40
    # Each answer in one statement; the last found no question left, and the usual way
    # took the same answer again (nothing claimed) and ended the session.
    assert sent == [ONE_STATEMENT] * answered + [USUAL_ANSWER]
    assert _answers_of(engine, session_id) == answered
    with Session(engine) as db:
        work = db.get(WorkSession, session_id)
        assert work is not None and work.answered == answered and work.finished_at is not None


def test_a_question_is_given_to_a_participant_once(client, auth_headers, db: Session) -> None:
    """The unique index the one statement relies on, on both databases: a second query of
    a question to the same participant is refused (a repeat is the one exception)."""
    make_project(client, auth_headers, "once")
    make_objects(client, auth_headers, "once", 10)
    set_plan(client, auth_headers, "once", queries_per_session=5, gold_rate=0)
    session_id, session = open_session(client, "once", participant="w")
    next_query(client, session_id, session)
    project_id = db.scalar(select(Project.id).where(Project.slug == "once"))
    given = db.scalars(select(Query).where(Query.project_id == project_id)).one()

    def again(is_repeat: bool) -> Query:
        return Query(
            project_id=given.project_id, question_id=given.question_id,
            session_id=given.session_id, participant_id=given.participant_id, kind=given.kind,
            o1=given.o1, o2=given.o2, o3=given.o3, status="issued", is_repeat=is_repeat,
            token=uuid.uuid4().hex, issued_at=given.issued_at, expires_at=given.expires_at,
        )  # fmt: skip

    with db.begin_nested():
        db.add(again(is_repeat=True))  # asked again as a repeat: allowed, once
    with pytest.raises(IntegrityError), db.begin_nested():
        db.add(again(is_repeat=False))
    with pytest.raises(IntegrityError), db.begin_nested():
        db.add(again(is_repeat=True))


def test_the_oldest_sessions_are_forgotten_past_the_bound(committed_project, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    client, headers, slug = committed_project
    _study(client, headers, slug)
    monkeypatch.setattr(known_sessions, "_known", {})
    monkeypatch.setattr(known_sessions, "MAX_KNOWN", 2)
    opened = [open_session(client, slug, participant=f"w{i}") for i in range(3)]
    for session_id, session in opened:
        next_query(client, session_id, session)
    assert [s in known_sessions._known for s, _ in opened] == [False, True, True]


def test_the_plan_is_what_must_not_change(committed_project, engine, sent) -> None:  # type: ignore[no-untyped-def]
    """A fill of the pool writes the project's row (its planner's state, ``updated_at``):
    the memory of its sessions stays good. A change of the plan makes it stale."""
    client, headers, slug = committed_project
    _study(client, headers, slug)
    session_id, session, body = _first_question(client, slug)

    def answered_with(sql: str) -> list[str]:
        with engine.begin() as connection:
            connection.execute(text(sql), {"slug": slug})
        sent.clear()
        response = _answer_shown(client, session_id, session, body)
        assert response.status_code == 201, response.text
        return response.json()["next"]

    postgresql = engine.dialect.name == "postgresql"
    body = answered_with(
        "UPDATE projects SET plan_step = plan_step + 1, updated_at = "
        f"{'now()' if postgresql else 'updated_at'} WHERE slug = :slug"
    )
    assert sent == [ONE_STATEMENT]
    # The plan rewritten in another spacing (and on PostgreSQL key order) is the same plan.
    rewritten = "CAST(CAST(plan AS JSONB) AS JSON)" if postgresql else "json(plan)"
    body = answered_with(f"UPDATE projects SET plan = {rewritten} WHERE slug = :slug")
    assert sent == [ONE_STATEMENT]
    changed = (
        "CAST(jsonb_set(CAST(plan AS JSONB), '{min_answer_ms}', '100') AS JSON)"
        if postgresql
        else "json_set(plan, '$.min_answer_ms', 100)"
    )
    body = answered_with(f"UPDATE projects SET plan = {changed} WHERE slug = :slug")
    assert sent == [ONE_STATEMENT, USUAL_ANSWER]  # stale: tried, then the usual way
    assert _answers_of(engine, session_id) == 3


def test_the_pool_is_filled_before_it_runs_dry(committed_project, postgres, sent) -> None:  # type: ignore[no-untyped-def]
    """app.services.fill_ahead: a batch is added in the background while questions are
    left, so no round trip finds the pool empty and takes the usual way to fill it."""
    client, headers, slug = committed_project
    _study(client, headers, slug, n_objects=100, queries_per_session=300)
    session_id, session, body = _first_question(client, slug)
    filler = fill_ahead.filler(postgres)
    for _ in range(POOL_BATCH + 40):
        response = _answer_shown(client, session_id, session, body)
        assert response.status_code == 201, response.text
        body = response.json()["next"]
        filler.wait()  # a fill the answer set off has ended
    assert USUAL_ANSWER not in sent, sent.count(USUAL_ANSWER)
    with Session(postgres) as db:
        project_id = db.scalar(select(Project.id).where(Project.slug == slug))
        created = db.scalar(select(func.count()).where(Question.project_id == project_id))
    assert created == POOL_BATCH + fill_ahead.BATCH  # the first fill's, one ahead, no more


def test_the_answered_question_is_held_before_an_open_one(
    committed_project, postgres, sent
) -> None:  # type: ignore[no-untyped-def]
    """The answer's statement counts the question answered before it claims the next open
    one: while another transaction holds the answered question, the statement waits without
    holding an open question, so that transaction, claiming it next, does not wait for the
    statement (the two waited for each other, until PostgreSQL's deadlock check ended one
    after 1 s). Redundancy 3: an answered question stays open."""
    client, headers, slug = committed_project
    _study(client, headers, slug, redundancy=3)
    session_id, session, body = _first_question(client, slug)
    with Session(postgres) as db:
        answered = db.scalar(select(Query.question_id).where(Query.session_id == session_id))
        project_id = db.scalar(select(Project.id).where(Project.slug == slug))
    first_open = first_open_question(postgres, project_id, [answered])
    with other_connection(postgres) as other:
        other.execute("SELECT 1 FROM questions WHERE id = %s FOR NO KEY UPDATE", [answered])
        answering, replies = in_background(lambda: _answer_shown(client, session_id, session, body))
        time.sleep(0.5)  # the statement is waiting for the answered question
        claimed = other.execute(
            "SELECT id FROM questions WHERE id = %s FOR NO KEY UPDATE NOWAIT", [first_open]
        ).fetchall()
        assert claimed == [(first_open,)]  # not held by the statement
        other.rollback()
        answering.join(timeout=30)
    assert replies[0].status_code == 201, replies[0].text
    assert sent == [ONE_STATEMENT]

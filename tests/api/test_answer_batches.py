"""Answers of known sessions sent together, in one statement (PostgreSQL,
``app.services.answer_batches``, ``round_trip_sql.answer_held_batch``): the rows they write
follow the same rules as answers sent one by one, and what one answer of a batch cannot do
the known way it leaves to the usual way, changing nothing.

The answers of several sessions are handed to ``known_sessions.answer`` together, on one
event loop, as a server process's requests arrive: those that arrive before a sender is
free go together. Committed requests, as in ``test_known_sessions``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select, text
from sqlalchemy.orm import Session

from app.db.models import Answer, Participant, Query, Question, WorkSession
from app.services import known_sessions, round_trip_sql
from tests.api.test_known_sessions import _study as known_study
from tests.api.test_known_sessions import first_open_question, in_background, other_connection
from tests.api.test_round_trip_rows import check_round_trip_rows
from tests.factories import open_session


@pytest.fixture
def batches(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """The size of every batch sent in one statement."""
    sizes: list[int] = []
    send = round_trip_sql.answer_held_batch

    async def counted(connection, batch):  # type: ignore[no-untyped-def]
        sizes.append(len(batch))
        return await send(connection, batch)

    monkeypatch.setattr(round_trip_sql, "answer_held_batch", counted)
    return sizes


def _choice(query: dict, rng: np.random.Generator) -> int:
    if query["kind"] == "triplet":
        return query["objects"][int(rng.integers(1, 3))]["index"]
    return int(rng.integers(-1, 2))


def _post(client: TestClient, session_id: str, headers: dict, token: str, choice: int, ms):  # type: ignore[no-untyped-def]
    response = client.post(
        f"/api/w/sessions/{session_id}/answers",
        json={"token": token, "choice": choice, "client_ms": ms},
        headers=headers,
    )
    assert response.status_code == 201, response.text
    return response.json()


def _together(engine: Engine, prepared: list[known_sessions.Prepared]) -> list[Any]:
    async def send() -> list[Any]:
        return await asyncio.gather(*(known_sessions.answer(engine, p) for p in prepared))

    return asyncio.run(send())


def answer_together(engine: Engine):  # type: ignore[no-untyped-def]
    """``check_round_trip_rows``'s answering: every participant's answer of a round at
    once, on one event loop, through ``known_sessions.answer`` as the route sends them;
    those it cannot take (or that come back None) the route's usual way."""

    def answering(client, slug: str, names: tuple[str, ...], seed: int) -> int:  # type: ignore[no-untyped-def]
        rng = np.random.default_rng(seed)
        sessions = {}
        for name in names:
            session_id, headers = open_session(client, slug, participant=name)
            response = client.get(f"/api/w/sessions/{session_id}/next", headers=headers)
            sessions[session_id] = (headers, response.json())
        n = 0
        while sessions:
            chosen, prepared = {}, {}
            for session_id, (headers, body) in sessions.items():
                query = body["query"]
                choice = _choice(query, rng)
                ms = [None, 120.0, 900.0][int(rng.integers(3))]
                chosen[session_id] = (query["token"], choice, ms)
                found = known_sessions.prepare(
                    session_id, headers["Authorization"], query["token"], choice, ms
                )
                if found is not None:
                    prepared[session_id] = found
            quick = {}
            if prepared:
                done = _together(engine, list(prepared.values()))
                quick = dict(zip(prepared, done, strict=True))
            for session_id in list(sessions):
                headers, _ = sessions[session_id]
                done = quick.get(session_id)
                if done is not None:
                    objects = [{"index": o.index} for o in done.objects]
                    body = {"query": {"token": done.token, "kind": done.kind, "objects": objects}}
                else:
                    body = _post(client, session_id, headers, *chosen[session_id])["next"]
                n += 1
                if body.get("done"):
                    del sessions[session_id]
                else:
                    sessions[session_id] = (headers, body)
        return n

    return answering


def test_rows_follow_the_rules_when_answers_are_sent_together(
    committed_project, postgres, batches
) -> None:  # type: ignore[no-untyped-def]
    client, headers, slug = committed_project
    with Session(postgres, expire_on_commit=False) as db:
        check_round_trip_rows(client, headers, db, slug, answering=answer_together(postgres))
    assert batches and max(batches) == 3, batches  # three at once went together


def _study(client, headers, slug: str, **plan: Any) -> None:  # type: ignore[no-untyped-def]
    """``test_known_sessions``'s study, with 30 objects and 20 questions a session."""
    known_study(client, headers, slug, n_objects=30, **{"queries_per_session": 20, **plan})


def _first_questions(client, slug: str, n: int) -> list[tuple[str, dict, dict]]:  # type: ignore[no-untyped-def]
    found = []
    for i in range(n):
        session_id, headers = open_session(client, slug, participant=f"p{i}")
        body = client.get(f"/api/w/sessions/{session_id}/next", headers=headers).json()
        found.append((session_id, headers, body["query"]))
    return found


def _prepared(sessions, choice=None) -> list[known_sessions.Prepared]:  # type: ignore[no-untyped-def]
    prepared = []
    for session_id, headers, query in sessions:
        pick = query["objects"][1]["index"] if choice is None else choice
        authorization = headers["Authorization"]
        found = known_sessions.prepare(session_id, authorization, query["token"], pick, 900)
        assert found is not None and found.ticket.repeat_draw is None
        prepared.append(found)
    return prepared


def test_a_question_with_places_left_goes_to_several_of_a_batch(
    committed_project, postgres, batches
) -> None:  # type: ignore[no-untyped-def]
    """Redundancy 3: the next questions are assigned in the batch's order, each the first
    open question with a place left that the participant has not seen, as single statements
    sent in that order would; places are counted once per answer."""
    client, headers, slug = committed_project
    _study(client, headers, slug, redundancy=3)
    sessions = _first_questions(client, slug, 7)
    done = _together(postgres, _prepared(sessions))
    assert batches == [7]
    assert all(d is not None for d in done)
    with Session(postgres) as db:
        issued = db.execute(
            select(Query.participant_id, Query.question_id)
            .join(WorkSession, WorkSession.id == Query.session_id)
            .where(WorkSession.id.in_([s[0] for s in sessions]), Query.status == "issued")
            .order_by(Query.id)
        ).all()
        assert len(issued) == 7
        per_question: dict[int, int] = {}
        for _, question in issued:
            per_question[question] = per_question.get(question, 0) + 1
        assert max(per_question.values()) <= 3 and len(issued) > len(per_question)
        questions = db.scalars(select(Question).where(Question.id.in_(per_question))).all()
        for question in questions:
            answered = db.scalar(
                select(func.count())
                .select_from(Query)
                .where(Query.question_id == question.id, Query.status == "answered")
            )
            live = db.scalar(
                select(func.count())
                .select_from(Query)
                .where(Query.question_id == question.id, Query.status == "issued")
            )
            assert (question.answered, question.live) == (answered, live)
            assert question.is_open is (question.answered + question.live < question.wanted)
        # No participant was given a question they had seen.
        pairs = db.execute(select(Query.participant_id, Query.question_id)).all()
        assert len(pairs) == len(set(pairs))


def test_an_answer_of_a_batch_not_as_remembered_changes_nothing(
    committed_project, postgres, batches
) -> None:  # type: ignore[no-untyped-def]
    """One session of the batch moved on since the process remembered it, one answer's
    choice is not one its question offered: those two change nothing and come back None
    (the route then takes the usual way); the rest of the batch is stored."""
    client, headers, slug = committed_project
    _study(client, headers, slug)
    sessions = _first_questions(client, slug, 5)
    prepared = _prepared(sessions)
    with postgres.begin() as connection:
        connection.execute(
            text("UPDATE sessions SET answered = answered + 1 WHERE id = :id"),
            {"id": sessions[2][0]},
        )
    prepared[3].params["choice"] = 10_000  # no object of the question
    done = _together(postgres, prepared)
    assert batches == [5]
    assert [d is None for d in done] == [False, False, True, True, False]
    with Session(postgres) as db:
        stored = db.scalars(select(Answer.session_id)).all()
        assert sorted(stored) == sorted(s[0] for i, s in enumerate(sessions) if i not in (2, 3))
        for index in (2, 3):
            work = db.get(WorkSession, sessions[index][0])
            assert work is not None
            assert work.answered == (1 if index == 2 else 0)  # as the test's update left it
            participant = db.get(Participant, work.participant_id)
            assert participant is not None and participant.n_answers == 0


def test_answers_left_without_a_question_go_the_usual_way(
    committed_project, postgres, batches
) -> None:  # type: ignore[no-untyped-def]
    """One question open: one answer of the batch is assigned it; the others are stored and
    find none to assign: each comes back None, for the usual way (which takes it as sent
    again and fills the pool)."""
    client, headers, slug = committed_project
    _study(client, headers, slug)
    sessions = _first_questions(client, slug, 4)
    prepared = _prepared(sessions)
    with postgres.begin() as connection:
        connection.execute(
            text(
                "UPDATE questions SET is_open = false WHERE project_id = :project "
                "AND id NOT IN (SELECT min(id) FROM questions WHERE project_id = :project "
                "AND is_open AND id NOT IN (SELECT question_id FROM queries))"
            ),
            {"project": prepared[0].known.project_id},
        )
    done = _together(postgres, prepared)
    assert batches == [4]
    assert sum(d is not None for d in done) == 1  # the one open question, to one of them
    # The others stored, with no question left: the usual way
    with Session(postgres) as db:
        assert db.scalar(select(func.count()).select_from(Answer)) == 4


def test_a_batch_that_fails_sends_each_answer_the_usual_way(
    committed_project, postgres, batches
) -> None:  # type: ignore[no-untyped-def]
    """A batch the database driver refuses for one answer's sake (here a value it cannot
    send) changes nothing, and every answer of it comes back None: each takes the usual way,
    where only the answer that cannot be taken fails, not the others of its batch."""
    client, headers, slug = committed_project
    _study(client, headers, slug)
    sessions = _first_questions(client, slug, 4)
    prepared = _prepared(sessions)
    prepared[1].params["source"] = object()  # psycopg cannot send it: ProgrammingError
    assert _together(postgres, prepared) == [None] * 4
    assert batches == [4]
    with Session(postgres) as db:
        assert db.scalar(select(func.count()).select_from(Answer)) == 0


def test_answered_questions_are_held_before_open_ones(committed_project, postgres, batches) -> None:  # type: ignore[no-untyped-def]
    """A batch holds the questions it answers before it claims any open question: while
    another transaction holds an answered question, the batch waits without holding an open
    one, so that transaction, claiming it next, does not wait for the batch (with an open
    one held first the two waited for each other, until PostgreSQL's deadlock check ended
    one after 1 s). Redundancy 3: an answered question stays open."""
    client, headers, slug = committed_project
    _study(client, headers, slug, redundancy=3)
    sessions = _first_questions(client, slug, 2)
    prepared = _prepared(sessions)
    with Session(postgres) as db:
        answered = db.scalars(
            select(Query.question_id).where(Query.session_id.in_([s[0] for s in sessions]))
        ).all()
    first_open = first_open_question(postgres, prepared[0].known.project_id, list(answered))
    with other_connection(postgres) as other:
        other.execute("SELECT 1 FROM questions WHERE id = %s FOR NO KEY UPDATE", [answered[0]])
        sender, results = in_background(lambda: _together(postgres, prepared))
        time.sleep(0.5)  # the batch is waiting for the answered question
        claimed = other.execute(
            "SELECT id FROM questions WHERE id = %s FOR NO KEY UPDATE NOWAIT", [first_open]
        ).fetchall()
        assert claimed == [(first_open,)]  # not held by the batch
        other.rollback()
        sender.join(timeout=30)
    done = results[0]
    assert batches == [2] and all(d is not None for d in done), done


def test_a_batch_passes_over_a_participant_held_elsewhere(
    committed_project, postgres, batches
) -> None:  # type: ignore[no-untyped-def]
    """A participant held by another transaction (a request taking the usual way, say): the
    batch does not wait for it; that answer changes nothing and comes back None (the usual
    way takes it, and waits there), the others are stored."""
    client, headers, slug = committed_project
    _study(client, headers, slug)
    sessions = _first_questions(client, slug, 3)
    prepared = _prepared(sessions)
    with other_connection(postgres) as other:
        other.execute(
            "SELECT 1 FROM participants WHERE id = %s FOR NO KEY UPDATE",
            [prepared[1].known.participant_id],
        )
        sender, results = in_background(lambda: _together(postgres, prepared))
        sender.join(timeout=10)
        assert not sender.is_alive()  # it did not wait for the participant
        other.rollback()
    done = results[0]
    assert batches == [3]
    assert [d is None for d in done] == [False, True, False]
    with Session(postgres) as db:
        stored = db.scalars(select(Answer.session_id)).all()
        assert sorted(stored) == sorted([sessions[0][0], sessions[2][0]])

"""The SQL statements of a worker's round trip (one answer whose reply carries the next
question), counted on both databases so that the hot path never grows unnoticed."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event

from tests.factories import (
    answer,
    committed_requests,
    first_choice,
    make_objects,
    make_project,
    next_query,
    open_session,
    set_plan,
)

# Per answered question, the usual case (a new question issued, no repeat, no review),
# transaction control (BEGIN, COMMIT) included: answer (session, claim, question's count,
# answer, session's count, participant's quality counters), issue (new question, plan
# progress, query, shown objects). SQLite holds the whole database under its write lock;
# PostgreSQL locks the session's and the project's rows as it reads them. Answers that
# arrive together share BEGIN and COMMIT (group commit) and add a SAVEPOINT and a RELEASE.
MOST = {"sqlite": 13, "postgresql": 13}


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    sent: list[str] = []

    def record(_conn, _cursor, statement, _parameters, _context, _many) -> None:  # type: ignore[no-untyped-def]
        sent.append(" ".join(statement.split()))

    def begin(_conn) -> None:  # type: ignore[no-untyped-def]
        if engine.dialect.name != "sqlite":  # SQLite's BEGIN is sent as a statement
            sent.append("BEGIN (implicit)")

    def commit(_conn) -> None:  # type: ignore[no-untyped-def]
        sent.append("COMMIT")

    event.listen(engine, "before_cursor_execute", record)
    event.listen(engine, "begin", begin)
    event.listen(engine, "commit", commit)
    yield sent
    event.remove(engine, "before_cursor_execute", record)
    event.remove(engine, "begin", begin)
    event.remove(engine, "commit", commit)


def test_statements_per_round_trip(app, engine: Engine, statements: list[str]) -> None:
    slug = f"count-{uuid.uuid4().hex[:8]}"
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        make_project(client, headers, slug)
        make_objects(client, headers, slug, 30)
        # No gold, no repeats: the usual question; redundancy 1: always a new question.
        set_plan(client, headers, slug, queries_per_session=50, gold_rate=0)
        session_id, session_headers = open_session(client, slug, participant="w1")
        body = next_query(client, session_id, session_headers)
        counts = []
        for i in range(8):
            query = body["query"]
            statements.clear()
            response = answer(
                client, session_id, session_headers, query["token"], first_choice(query)
            )
            assert response.status_code == 201, response.text
            body = response.json()["next"]
            assert body["query"]["token"] != query["token"]
            # Every 5th answer also reviews the participant's quality.
            # A pooled SQLite connection switches to synchronous=FULL once, on its first
            # answer: not counted.
            sent = [s for s in statements if not s.startswith("PRAGMA synchronous")]
            if i and (i + 1) % 5:
                counts.append(len(sent))
                print(f"{len(sent)} statements:", *sent, sep="\n  ")
        client.delete(f"/api/projects/{slug}?force=true", headers=headers)
    assert max(counts) <= MOST[engine.dialect.name], counts

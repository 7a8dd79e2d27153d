"""The SQL statements of a worker's round trip (one answer whose reply carries the next
question), counted on both databases so that the hot path never grows unnoticed."""

from __future__ import annotations

import threading
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
    statements_sent,
)

# Per answered question, the usual case (no repeat, no review), transaction control (BEGIN,
# COMMIT) included; the parts are those of app/services/round_trip_sql.py on both databases.
# The plan's questions were created ahead by the pool's producer (app.services.pool), not
# counted here. PostgreSQL, where each statement is a network round trip: the answer's one
# statement (ANSWER_BATCH: the session held and checked, the answer stored and counted, the
# next question claimed and issued), in autocommit, on the event loop. SQLite (statements are
# calls into the library; it holds the whole database under its write lock): BEGIN, the
# session checked (HELD), one statement per table written (CLAIM, PLACE, STORE, SESSION,
# COUNTS), the next question claimed and issued (OPEN_QUESTION, LEASE, QUERY) and its objects
# read (SHOWN_OBJECTS), COMMIT. Answers that arrive together share BEGIN and COMMIT (group
# commit), each then in a SAVEPOINT with its RELEASE.
MOST = {"sqlite": 12, "postgresql": 1}


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    sent: list[str] = []

    def filling_ahead() -> bool:
        # The pool filled ahead, off the round trip (app.services.pool.Producer).
        return threading.current_thread().name.startswith("producer")

    def record(statement: str) -> None:
        if not filling_ahead():
            sent.append(" ".join(statement.split()))

    def begin(conn) -> None:  # type: ignore[no-untyped-def]
        # SQLite's BEGIN is sent as a statement; in autocommit none is sent.
        if engine.dialect.name == "sqlite" or filling_ahead():
            return
        if not conn.connection.driver_connection.autocommit:
            sent.append("BEGIN (implicit)")

    def commit(_conn) -> None:  # type: ignore[no-untyped-def]
        if not filling_ahead():
            sent.append("COMMIT")

    event.listen(engine, "begin", begin)
    event.listen(engine, "commit", commit)
    with statements_sent(engine, record):
        yield sent
    event.remove(engine, "begin", begin)
    event.remove(engine, "commit", commit)


def _counted_round_trips(
    client: TestClient, session_id: str, session_headers: dict[str, str], statements: list[str]
) -> tuple[list[int], set[str]]:
    """Statements of the session's round trips (the usual ones); the texts sent."""
    body = next_query(client, session_id, session_headers)
    counts = []
    texts: set[str] = set()
    for i in range(8):
        query = body["query"]
        statements.clear()
        response = answer(client, session_id, session_headers, query["token"], first_choice(query))
        assert response.status_code == 201, response.text
        body = response.json()["next"]
        assert body["query"]["token"] != query["token"]
        # Every 5th answer also reviews the participant's quality.
        # A pooled SQLite connection switches to synchronous=FULL once, on its first
        # answer: not counted.
        sent = [s for s in statements if not s.startswith("PRAGMA synchronous")]
        if i and (i + 1) % 5:
            counts.append(len(sent))
            texts.update(sent)
            print(f"{len(sent)} statements:", *sent, sep="\n  ")
    return counts, texts


@pytest.mark.parametrize("question", ["new", "existing"])
def test_statements_per_round_trip(
    app, engine: Engine, statements: list[str], question: str
) -> None:
    slug = f"count-{uuid.uuid4().hex[:8]}"
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        make_project(client, headers, slug)
        make_objects(client, headers, slug, 30)
        # No gold, no repeats: the usual question. Redundancy 1: always a new question;
        # redundancy 2: the second participant is asked the first one's questions.
        redundancy = 1 if question == "new" else 2
        set_plan(client, headers, slug, queries_per_session=50, gold_rate=0, redundancy=redundancy)
        if question == "existing":
            _counted_round_trips(client, *open_session(client, slug, participant="w0"), statements)
        session_id, session_headers = open_session(client, slug, participant="w1")
        counts, texts = _counted_round_trips(client, session_id, session_headers, statements)
        client.delete(f"/api/projects/{slug}?force=true", headers=headers)
    assert max(counts) == MOST[engine.dialect.name], counts
    # The same text every time (no statement built per request, no IN list that varies):
    # psycopg prepares a statement on the server after its fifth run on a connection.
    assert len(texts) == max(counts), sorted(texts)

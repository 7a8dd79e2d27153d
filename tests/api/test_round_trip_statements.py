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
# COMMIT) included; the steps are those of app/services/round_trip_sql.py on both databases:
# the session and its participant locked and read with the project, the answer stored
# (with the open question it claims), the question leased and its query issued. The plan's
# questions were created ahead by a fill of the pool (issuance.fill_pool), not counted
# here: a fill runs once per POOL_BATCH questions. PostgreSQL, where each statement is a
# network round trip, runs each step as one statement, and the answer's also issues the
# next question when it was decided ahead (issuance.Ticket): BEGIN, the session locked,
# the answer with the next question, COMMIT; for a session the server process served
# before (app.services.known_sessions: every round trip here after the first request), the
# answer's statement alone, in autocommit, holding the session itself. SQLite (statements
# are calls into the library, not network round trips; it holds the whole database under
# its write lock) runs one statement per table written: answer (claim, question's count,
# answer, session's count, participant's counters with the open question) and issue (the
# question's count, query with its objects); for a session the server process knows, the
# session is not read first: the answer's claim checks it is as remembered. Answers that
# arrive together share BEGIN and COMMIT (group commit); on SQLite each adds a SAVEPOINT
# and a RELEASE.
MOST = {"sqlite": 9, "postgresql": 1}


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[str]]:
    sent: list[str] = []

    def filling_ahead() -> bool:
        # The pool filled ahead, off the round trip (app.services.fill_ahead).
        return threading.current_thread().name.startswith("fill-ahead")

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

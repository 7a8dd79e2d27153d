"""Commits that store answers wait for the disk; the others need not (SQLite's safety level)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, text

from tests.factories import (
    answer,
    committed_requests,
    first_choice,
    make_objects,
    make_project,
    next_query,
    open_session,
    random_triplets,
    set_plan,
)


@pytest.fixture
def statements(engine: Engine) -> Iterator[list[tuple[int, str]]]:
    """Every SQL statement the engine sends, in order, with the connection it went on."""
    sent: list[tuple[int, str]] = []

    def record(conn, _cursor, statement, _parameters, _context, _many) -> None:  # type: ignore[no-untyped-def]
        sent.append((id(conn.connection.dbapi_connection), " ".join(statement.split()).upper()))

    event.listen(engine, "before_cursor_execute", record)
    yield sent
    event.remove(engine, "before_cursor_execute", record)


def level_of_transaction_with(sent: list[tuple[int, str]], prefix: str) -> str:
    """The safety level in force for the last transaction that ran a statement starting with
    ``prefix`` (the pragma is only sent when the level changes, and NORMAL is set on connect):
    the level its connection was last set to."""
    at = max(i for i, (_, s) in enumerate(sent) if s.startswith(prefix))
    connection = sent[at][0]
    on_it = [s for c, s in sent[:at] if c == connection]
    begin = max(i for i, s in enumerate(on_it) if s.startswith("BEGIN"))
    pragmas = [s for s in on_it[:begin] if s.startswith("PRAGMA SYNCHRONOUS=")]
    return pragmas[-1].split("=")[1] if pragmas else "NORMAL"


def test_answer_commits_are_durable(app, engine: Engine, statements: list[tuple[int, str]]) -> None:
    slug = f"durable-{uuid.uuid4().hex[:8]}"
    sqlite = engine.dialect.name == "sqlite"
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        make_project(client, headers, slug)
        make_objects(client, headers, slug, 6)
        set_plan(client, headers, slug)
        session_id, session_headers = open_session(client, slug, participant="w1")
        body = next_query(client, session_id, session_headers)
        if sqlite:  # a question issued alone (GET …/next) need not wait for the disk
            assert level_of_transaction_with(statements, "INSERT INTO QUERIES") == "NORMAL"
        for _ in range(2):
            query = body["query"]
            response = answer(
                client, session_id, session_headers, query["token"], first_choice(query)
            )
            assert response.status_code == 201, response.text
            body = response.json()["next"]
            if sqlite:  # the answer, and the next question issued in its transaction
                worker_answer = level_of_transaction_with(statements, "INSERT INTO ANSWERS")
                issued = level_of_transaction_with(statements, "INSERT INTO QUERIES")
                assert (worker_answer, issued) == ("FULL", "FULL")

        imported = client.post(
            f"/api/projects/{slug}/answers",
            json={"triplets": random_triplets(6, 5)},
            headers=headers,
        )
        assert imported.status_code == 201, imported.text
        if sqlite:
            # An import is written in chunks (NORMAL) and acknowledged after the transaction
            # that shows them (deleting its ``imports`` row): that one waits for the disk,
            # and its WAL sync carries every chunk committed before it.
            assert level_of_transaction_with(statements, "INSERT INTO ANSWERS") == "NORMAL"
            assert level_of_transaction_with(statements, "DELETE FROM IMPORTS") == "FULL"
        else:  # PostgreSQL: every commit waits for its WAL flush unless configured otherwise
            with engine.connect() as connection:
                assert connection.execute(text("SHOW synchronous_commit")).scalar() == "on"
        client.delete(f"/api/projects/{slug}?force=true", headers=headers)

"""The answer's round trip may issue the next question as drawn before it (issuance.Ticket):
on PostgreSQL in the answer's statement, and for a session the server process knows
(app.services.known_sessions) on either database. It must issue exactly what the separate
steps issue (next_query), the same questions in the same order, each shown in the same
order, with repeats between them (issued the known way, and otherwise left to the separate
steps)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from app.services import issuance, sessions
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

ANSWERS = 40


def _shown_in_session(
    client: TestClient,
    engine: Engine,
    headers: dict[str, str],
    slug: str,
    session_id: str,
    monkeypatch: Any,
    tokens: list[str] | None = None,
) -> list[tuple[str, tuple[str, ...]]]:
    """The questions a new session of a new project ``slug`` is shown, in order: (kind,
    the objects' names in the order shown). Its id is ``session_id`` (the draws follow it).
    Each query stored has the objects in the order shown (a left or right choice is read
    from it)."""
    make_project(client, headers, slug)
    make_objects(client, headers, slug, 12)
    set_plan(
        client,
        headers,
        slug,
        strategies=[{"kind": "random", "weight": 1}, {"kind": "pairs", "weight": 1}],
        queries_per_session=ANSWERS,
        repeat_rate=0.3,
        gold_rate=0,
        seed=7,
    )
    real_uuid4 = uuid.uuid4
    given = iter([uuid.UUID(session_id)])
    monkeypatch.setattr(sessions.uuid, "uuid4", lambda: next(given, None) or real_uuid4())
    opened, session_headers = open_session(client, slug, participant="w1")
    monkeypatch.setattr(sessions.uuid, "uuid4", real_uuid4)
    assert opened == session_id
    body = next_query(client, opened, session_headers)
    shown = []
    stored_order = {}
    while not body.get("done"):
        query = body["query"]
        shown.append((query["kind"], tuple(o["name"] for o in query["objects"])))
        stored_order[query["token"]] = [*(o["index"] for o in query["objects"]), None][:3]
        if tokens is not None:
            tokens.append(query["token"])
        response = answer(client, opened, session_headers, query["token"], first_choice(query))
        assert response.status_code == 201, response.text
        body = response.json()["next"]
    with engine.connect() as connection:
        rows = connection.execute(
            text("SELECT token, o1, o2, o3 FROM queries WHERE session_id = :session"),
            {"session": session_id},
        )
        assert {row.token: [row.o1, row.o2, row.o3] for row in rows} == stored_order
    client.delete(f"/api/projects/{slug}?force=true", headers=headers)
    return shown


def test_answer_issues_what_next_query_issues(
    app, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    tickets: list[Any] = []
    shown_tokens: list[str] = []
    ticket_for = issuance.ticket_for

    def counted(*args: Any, **kwargs: Any) -> Any:
        ticket = ticket_for(*args, **kwargs)
        tickets.append(ticket)
        return ticket

    # The same draws: session ids alike in what the draws read of them (their first 8 hex
    # digits, issuance._session_number), projects alike in seed, objects and plan.
    prefix = uuid.uuid4().hex[:8]
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        # Tickets are drawn by the usual round trip (responses.answer_and_next) and by the
        # one statement of a session the process knows (app.services.known_sessions).
        monkeypatch.setattr(issuance, "ticket_for", counted)
        together = _shown_in_session(
            client,
            engine,
            headers,
            f"with-{prefix}",
            f"{prefix}-0000-4000-8000-000000000001",
            monkeypatch,
            shown_tokens,
        )
        monkeypatch.setattr(issuance, "ticket_for", lambda *args, **kwargs: None)
        apart = _shown_in_session(
            client,
            engine,
            headers,
            f"apart-{prefix}",
            f"{prefix}-0000-4000-8000-000000000002",
            monkeypatch,
        )
    assert len(together) == ANSWERS
    assert together == apart
    # The tickets whose question was shown: a ticket is drawn again, and not used, when the
    # one statement stored the answer but had no question to issue (no repeat to pick) and
    # the usual way took the same answer again.
    used = [ticket for ticket in tickets if ticket is not None and ticket.token in shown_tokens]
    issued_with = len(used)
    # Most answers issued with a ticket (the session's last without), some of them repeats
    # (the known way, app.services.known_sessions).
    repeats = sum(ticket.repeat_draw is not None for ticket in used)
    assert ANSWERS // 2 < issued_with < ANSWERS, issued_with
    assert 0 < repeats < issued_with // 2, repeats
    assert {kind for kind, _ in together} == {"triplet", "pair"}
    # Repeats were asked (a question shown twice): both ways of issuing them ran.
    assert len({frozenset(names) for _, names in together}) < ANSWERS

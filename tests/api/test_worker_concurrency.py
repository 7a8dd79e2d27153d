"""Races between real connections: one answer per token, one taker for the last question."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.models import Answer, Project, Query
from tests.factories import (
    committed_requests,
    first_choice,
    make_objects,
    make_project,
    next_query,
    open_session,
    set_plan,
)


@pytest.fixture
def live(app, engine) -> Iterator[tuple[TestClient, TestClient, dict[str, str], str]]:
    """Two clients whose requests each get their own committed session, like a real server."""
    slug = f"race-{uuid.uuid4().hex[:8]}"
    with (
        committed_requests(app, engine) as headers,
        TestClient(app) as first,
        TestClient(app) as second,
    ):
        yield first, second, headers, slug
        first.delete(f"/api/projects/{slug}?force=true", headers=headers)


def run_together(*calls):  # type: ignore[no-untyped-def]
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def count(engine, model, project_slug: str) -> int:
    with Session(engine) as db:
        project_id = db.scalar(select(Project.id).where(Project.slug == project_slug))
        return db.scalar(
            select(func.count()).select_from(model).where(model.project_id == project_id)
        )


def test_two_clients_posting_one_token_store_exactly_one_answer(live, engine):
    first, second, headers, slug = live
    make_project(first, headers, slug)
    make_objects(first, headers, slug, 6)
    set_plan(first, headers, slug)
    for round_ in range(5):
        session_id, session_headers = open_session(first, slug, participant=f"w{round_}")
        query = next_query(first, session_id, session_headers)["query"]
        body = {"token": query["token"], "choice": first_choice(query), "client_ms": 800}
        url = f"/api/w/sessions/{session_id}/answers"
        responses = run_together(
            lambda url=url, body=body, h=session_headers: first.post(url, json=body, headers=h),
            lambda url=url, body=body, h=session_headers: second.post(url, json=body, headers=h),
        )
        assert [r.status_code for r in responses] == [201, 201]
        assert responses[0].json() == responses[1].json()
    assert count(engine, Answer, slug) == 5


def test_conflicting_choices_racing_store_one_and_refuse_the_other(live, engine):
    first, second, headers, slug = live
    make_project(first, headers, slug)
    make_objects(first, headers, slug, 6)
    set_plan(first, headers, slug)
    session_id, session_headers = open_session(first, slug)
    query = next_query(first, session_id, session_headers)["query"]
    url = f"/api/w/sessions/{session_id}/answers"
    left, right = (o["index"] for o in query["objects"][1:])
    responses = run_together(
        lambda: first.post(
            url, json={"token": query["token"], "choice": left}, headers=session_headers
        ),
        lambda: second.post(
            url, json={"token": query["token"], "choice": right}, headers=session_headers
        ),
    )
    assert sorted(r.status_code for r in responses) == [201, 409]
    assert count(engine, Answer, slug) == 1


def test_two_sessions_racing_for_the_last_question(live, engine):
    first, second, headers, slug = live
    make_project(first, headers, slug)
    make_objects(first, headers, slug, 6)
    set_plan(first, headers, slug, strategies=[{"kind": "random", "weight": 1, "budget": 1}])
    one_id, one_headers = open_session(first, slug, participant="one")
    two_id, two_headers = open_session(first, slug, participant="two")
    results = run_together(
        lambda: first.get(f"/api/w/sessions/{one_id}/next", headers=one_headers).json(),
        lambda: second.get(f"/api/w/sessions/{two_id}/next", headers=two_headers).json(),
    )
    got = [r for r in results if r.get("query")]
    assert len(got) == 1, results
    assert count(engine, Query, slug) == 1

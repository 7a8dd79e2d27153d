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


def test_many_sessions_racing_over_the_pool_ask_each_question_exactly_as_often_as_wanted(
    app, engine
):
    # Six participants answer side by side until the plan runs dry: 10 questions, each
    # wanted from 3 distinct participants. Claiming from the pool must neither over-issue a
    # question nor give one to a participant twice, whoever wins each race.
    slug = f"pool-{uuid.uuid4().hex[:8]}"
    budget, redundancy, n_workers = 10, 3, 6
    with committed_requests(app, engine) as headers, TestClient(app) as admin:
        make_project(admin, headers, slug)
        make_objects(admin, headers, slug, 8)
        strategies = [{"kind": "random", "weight": 1, "budget": budget}]
        set_plan(admin, headers, slug, strategies=strategies, redundancy=redundancy,
                 queries_per_session=budget, gold_rate=0)  # fmt: skip
        sessions = [open_session(admin, slug, participant=f"p{i}") for i in range(n_workers)]
        clients = [TestClient(app) for _ in range(n_workers)]

        def work(i: int):  # type: ignore[no-untyped-def]
            session_id, session_headers = sessions[i]
            client = clients[i]
            body = client.get(f"/api/w/sessions/{session_id}/next", headers=session_headers)
            shown = body.json()
            answered = 0
            while shown.get("query"):
                query = shown["query"]
                reply = client.post(
                    f"/api/w/sessions/{session_id}/answers",
                    json={"token": query["token"], "choice": first_choice(query)},
                    headers=session_headers,
                )
                assert reply.status_code == 201, reply.text
                answered += 1
                shown = reply.json()["next"]
            return answered

        answered = run_together(*[lambda i=i: work(i) for i in range(n_workers)])
        for client in clients:
            client.close()
        with Session(engine) as db:
            project_id = db.scalar(select(Project.id).where(Project.slug == slug))
            per_question = db.execute(
                select(Query.question_id, func.count(), func.count(Query.participant_id.distinct()))
                .where(Query.project_id == project_id, Query.status == "answered")
                .group_by(Query.question_id)
            ).all()
        admin.delete(f"/api/projects/{slug}?force=true", headers=headers)
    assert sum(answered) == budget * redundancy, answered
    assert len(per_question) == budget
    assert all(n == redundancy and distinct == redundancy for _, n, distinct in per_question)


def test_a_round_trip_does_not_wait_for_its_project(live, engine):
    # PostgreSQL: while another transaction holds the project's row as the app does (a fill
    # of the pool, a plan change, an import: projects.lock_project), a worker answering a
    # question still gets the next one from the pool. SQLite has one write lock for
    # everything: nothing to show there.
    if engine.dialect.name != "postgresql":
        return
    first, second, headers, slug = live
    make_project(first, headers, slug)
    make_objects(first, headers, slug, 12)
    set_plan(first, headers, slug, queries_per_session=10, gold_rate=0)
    session_id, session_headers = open_session(first, slug)
    query = next_query(first, session_id, session_headers)["query"]  # the pool is filled
    with Session(engine) as db:
        project_id = db.scalar(select(Project.id).where(Project.slug == slug))
    results: list = []
    with engine.connect() as holder:
        holder.execute(
            select(Project.id).where(Project.id == project_id).with_for_update(key_share=True)
        )
        thread = threading.Thread(
            target=lambda: results.append(
                second.post(
                    f"/api/w/sessions/{session_id}/answers",
                    json={"token": query["token"], "choice": first_choice(query)},
                    headers=session_headers,
                )
            )
        )
        thread.start()
        thread.join(10)
        finished_while_held = not thread.is_alive()
        holder.rollback()
    thread.join(10)
    assert finished_while_held
    assert results[0].status_code == 201, results[0].text
    assert results[0].json()["next"]["query"]["token"] != query["token"]

"""Group commit: answers arriving together are recorded in one transaction (each in its own
savepoint on SQLite; on PostgreSQL a refused answer is refused before it writes), so a
refused answer changes nothing and the others are all kept."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.api import worker
from app.db.models import Answer, Project, Query, WorkSession
from tests.factories import (
    committed_requests,
    first_choice,
    make_objects,
    make_project,
    next_query,
    open_session,
    set_plan,
)

Post = tuple[str, dict, dict]  # url, body, headers


async def together(http: httpx.AsyncClient, posts: list[Post]) -> list[httpx.Response]:
    """The posts sent at once to the app, in one event loop (as on a server)."""
    return list(await asyncio.gather(*(http.post(u, json=b, headers=h) for u, b, h in posts)))


def sessions_shown(
    client: TestClient, headers: dict, slug: str, n: int
) -> tuple[list[tuple[str, dict[str, str]]], list[dict]]:
    """A project ``slug`` of 30 objects, ``n`` sessions of it, and the first question each is
    shown."""
    make_project(client, headers, slug)
    make_objects(client, headers, slug, 30)
    set_plan(client, headers, slug, queries_per_session=20, gold_rate=0)
    sessions = [open_session(client, slug, participant=f"w{i}") for i in range(n)]
    return sessions, [next_query(client, s, h)["query"] for s, h in sessions]


@pytest.fixture
def sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the groups recorded (``worker._record_group``), in order."""
    recorded: list[int] = []
    record_group = worker._record_group

    def counting(db, answers):  # type: ignore[no-untyped-def]
        recorded.append(len(answers))
        return record_group(db, answers)

    monkeypatch.setattr(worker, "_record_group", counting)
    return recorded


def sent_token(response: httpx.Response) -> str:
    return json.loads(response.request.content)["token"]


def test_answers_arriving_together_are_grouped_and_each_kept_or_refused_alone(
    app, engine: Engine, sizes: list[int]
) -> None:
    slug = f"group-{uuid.uuid4().hex[:8]}"
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        sessions, shown = sessions_shown(client, headers, slug, 8)

        def post(i: int, token: str, choice: int) -> Post:
            session_id, session_headers = sessions[i]
            url = f"/api/w/sessions/{session_id}/answers"
            return url, {"token": token, "choice": choice, "client_ms": 900}, session_headers

        async def two_rounds() -> tuple[list[httpx.Response], list[httpx.Response]]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                # Round 1: every session answers (on PostgreSQL each alone: a group holds one
                # project, and the sessions' project is not known yet).
                first = await together(
                    http, [post(i, q["token"], first_choice(q)) for i, q in enumerate(shown)]
                )
                nxt = [r.json()["next"]["query"] for r in first]
                offered = {o["index"] for o in nxt[6]["objects"]}
                not_offered = next(i for i in range(30) if i not in offered)
                # Round 2: six good answers, a resend of one of them, a choice that was not
                # offered, another session's token and an unknown token.
                posts = [post(i, nxt[i]["token"], first_choice(nxt[i])) for i in range(6)]
                posts.append(post(0, nxt[0]["token"], first_choice(nxt[0])))
                posts.append(post(6, nxt[6]["token"], not_offered))
                posts.append(post(7, nxt[6]["token"], first_choice(nxt[6])))
                posts.append(post(7, "no-such-token", 0))
                return first, await together(http, posts)

        first, second = asyncio.run(two_rounds())
        assert [r.status_code for r in first] == [201] * 8, [r.text for r in first]
        assert [r.status_code for r in second] == [201] * 7 + [422, 403, 404], [
            r.text for r in second
        ]
        assert "not one of the candidates" in second[7].json()["detail"]
        assert "another session" in second[8].json()["detail"]
        assert second[6].json() == second[0].json()  # the resend gets the same reply
        assert all(r.json()["next"]["query"]["position"] == 3 for r in second[:6])
        assert max(sizes) > 1, sizes  # some answers were recorded in one group

        with Session(engine) as db:
            project_id = db.scalar(select(Project.id).where(Project.slug == slug))
            n_answers = db.scalar(
                select(func.count()).select_from(Answer).where(Answer.project_id == project_id)
            )
            answered = db.scalars(
                select(WorkSession.answered).where(WorkSession.project_id == project_id)
            ).all()
            refused_status = db.scalar(
                select(Query.status).where(Query.token == sent_token(second[7]))
            )
        assert n_answers == 8 + 6
        assert sorted(answered) == [1, 1, 2, 2, 2, 2, 2, 2]
        assert refused_status == "issued"  # the refused answers changed nothing
        client.delete(f"/api/projects/{slug}?force=true", headers=headers)


def test_an_answer_that_fails_after_writing_is_undone_alone_in_its_group(
    app, engine: Engine, monkeypatch
) -> None:
    """An answer of a group that fails after its statements wrote (here: made to fail once
    they have run) is rolled back to its savepoint: nothing of it stays, and the answers
    before and after it in the group are kept."""
    from app.schemas.worker import AnswerCreate
    from app.services import responses

    slug = f"late-{uuid.uuid4().hex[:8]}"
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        sessions, shown = sessions_shown(client, headers, slug, 3)
        failing = sessions[1][0]
        answer_and_next = responses.answer_and_next

        def late_failure(db, session_id, *args, **kwargs):  # type: ignore[no-untyped-def]
            done = answer_and_next(db, session_id, *args, **kwargs)
            if session_id == failing:
                raise RuntimeError("failed after writing")
            return done

        monkeypatch.setattr(responses, "answer_and_next", late_failure)
        answers = [
            (s, h["Authorization"], AnswerCreate(token=q["token"], choice=first_choice(q)), None)
            for (s, h), q in zip(sessions, shown, strict=True)
        ]
        with Session(engine, expire_on_commit=False) as db:
            results = worker._record_group(db, answers)
        assert isinstance(results[1], RuntimeError)
        assert [r.answered for r in (results[0], results[2])] == [1, 1]  # type: ignore[union-attr]

        with Session(engine) as db:
            project_id = db.scalar(select(Project.id).where(Project.slug == slug))
            answered = dict(
                db.execute(
                    select(WorkSession.id, WorkSession.answered).where(
                        WorkSession.project_id == project_id
                    )
                ).all()
            )
            statuses = dict(
                db.execute(
                    select(Query.token, Query.status).where(Query.project_id == project_id)
                ).all()
            )
            n_answers = db.scalar(
                select(func.count()).select_from(Answer).where(Answer.project_id == project_id)
            )
        assert answered == {sessions[0][0]: 1, failing: 0, sessions[2][0]: 1}
        assert n_answers == 2
        assert statuses[shown[1]["token"]] == "issued"  # its claim undone
        assert statuses[shown[0]["token"]] == statuses[shown[2]["token"]] == "answered"
        client.delete(f"/api/projects/{slug}?force=true", headers=headers)


def test_a_group_takes_the_answers_that_arrived_while_it_waited_for_the_write_lock(
    app, engine: Engine, sizes: list[int], monkeypatch
) -> None:
    """SQLite: an answer's group waits for the write lock, which another writer holds; the
    answers that arrive meanwhile are recorded in that group once it holds the lock, not
    in a group of their own after it (AnswerGroups._record_taken)."""
    if engine.dialect.name != "sqlite":
        pytest.skip("answers are grouped on SQLite")
    from app.db.session import WriterLock, begin_write

    slug = f"wait-{uuid.uuid4().hex[:8]}"
    waiting_for_lock = threading.Event()
    acquire = WriterLock.acquire

    def acquire_noted(lock: WriterLock) -> None:
        if threading.current_thread().name.startswith("turn"):
            waiting_for_lock.set()
        acquire(lock)

    arrived: list[int] = []
    record = worker.AnswerGroups.record

    async def record_noted(groups, db, answer):  # type: ignore[no-untyped-def]
        arrived.append(1)
        return await record(groups, db, answer)

    monkeypatch.setattr(WriterLock, "acquire", acquire_noted)
    monkeypatch.setattr(worker.AnswerGroups, "record", record_noted)
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        sessions, shown = sessions_shown(client, headers, slug, 6)

        async def until(done, what: str) -> None:  # type: ignore[no-untyped-def]
            for _ in range(1000):  # 10 s at most
                if done():
                    return
                await asyncio.sleep(0.01)
            raise AssertionError(f"not {what} within 10 s")

        async def answered_while_locked() -> list[httpx.Response]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:

                def post(i: int) -> asyncio.Task[httpx.Response]:
                    (session_id, session_headers), q = sessions[i], shown[i]
                    body = {"token": q["token"], "choice": first_choice(q)}
                    url = f"/api/w/sessions/{session_id}/answers"
                    return asyncio.create_task(http.post(url, json=body, headers=session_headers))

                with Session(engine) as other:
                    begin_write(other)  # another writer holds the write lock
                    waiting_for_lock.clear()
                    posts = [post(0)]
                    await until(waiting_for_lock.is_set, "waiting for the lock")
                    posts += [post(i) for i in range(1, 6)]
                    await until(lambda: len(arrived) == 6, "arrived")
                    other.rollback()  # the lock released
                return list(await asyncio.gather(*posts))

        responses = asyncio.run(answered_while_locked())
        assert [r.status_code for r in responses] == [201] * 6, [r.text for r in responses]
        assert sizes == [6], sizes
        with Session(engine) as db:
            project_id = db.scalar(select(Project.id).where(Project.slug == slug))
            n_answers = db.scalar(
                select(func.count()).select_from(Answer).where(Answer.project_id == project_id)
            )
        assert n_answers == 6
        client.delete(f"/api/projects/{slug}?force=true", headers=headers)

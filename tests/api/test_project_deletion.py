"""Deleting a project while workers answer: no deadlock, no 5xx, nothing of it left."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.models import Answer, Job, Object, Participant, Project, Query, Question, WorkSession
from tests.factories import committed_requests, first_choice, make_objects, make_project, set_plan

N_WORKERS = 10


def work(*args) -> None:  # type: ignore[no-untyped-def]
    """:func:`answer_until_gone`, counting a server error raised through the client as a 500."""
    try:
        answer_until_gone(*args)
    except Exception as error:  # TestClient re-raises the app's unhandled exceptions
        args[3][f"exception 500 {type(error).__name__}: {error}"] += 1


def answer_until_gone(
    client: TestClient,
    slug: str,
    name: str,
    statuses: Counter,
    stop: threading.Event,
    sessions: dict[str, tuple[str, dict[str, str]]],
) -> None:
    """A worker answering as fast as it can until the project is gone; every status counted."""
    opened = client.post(f"/api/w/{slug}/sessions", json={"participant": name})
    statuses[f"open {opened.status_code}"] += 1
    if opened.status_code != 201:
        return
    session_id = opened.json()["session_id"]
    headers = {"Authorization": f"Bearer {opened.json()['session_token']}"}
    sessions[name] = (session_id, headers)
    while not stop.is_set():
        got = client.get(f"/api/w/sessions/{session_id}/next", headers=headers)
        statuses[f"next {got.status_code}"] += 1
        if got.status_code != 200:
            return
        query = got.json().get("query")
        if query is None:  # not collecting any more (the deletion has begun)
            time.sleep(0.01)
            continue
        sent = client.post(
            f"/api/w/sessions/{session_id}/answers",
            json={"token": query["token"], "choice": first_choice(query), "client_ms": 500},
            headers=headers,
        )
        statuses[f"answer {sent.status_code}"] += 1
        if sent.status_code not in (200, 201):
            return


def test_force_delete_under_concurrent_workers(app, engine):
    slug = f"doomed-{uuid.uuid4().hex[:8]}"
    statuses: Counter = Counter()
    stop = threading.Event()
    sessions: dict[str, tuple[str, dict[str, str]]] = {}
    with committed_requests(app, engine) as headers, TestClient(app) as researcher:
        make_project(researcher, headers, slug)
        make_objects(researcher, headers, slug, 30)
        set_plan(researcher, headers, slug, queries_per_session=1000)
        with Session(engine) as db:
            project_id = db.scalar(select(Project.id).where(Project.slug == slug))
        clients = [TestClient(app) for _ in range(N_WORKERS)]
        threads = [
            threading.Thread(
                target=work, args=(c, slug, f"w{i}", statuses, stop, sessions), daemon=True
            )
            for i, c in enumerate(clients)
        ]
        for client in clients:
            client.__enter__()
        try:
            for thread in threads:
                thread.start()
            deadline = time.monotonic() + 30
            while statuses["answer 201"] < 3 * N_WORKERS:  # every worker is busy answering
                assert time.monotonic() < deadline, statuses
                time.sleep(0.05)
            deleted = researcher.delete(f"/api/projects/{slug}?force=true", headers=headers)
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
        finally:
            stop.set()
            for client in clients:
                client.__exit__(None, None, None)

        assert deleted.status_code == 204, deleted.text
        assert not any(thread.is_alive() for thread in threads)
        # While it was deleted, workers got answers, "not collecting", or a clean 404 for
        # their session or token: never a lock error (503) or a 500.
        codes = {int(key.split()[1]) for key in statuses if key.split()[1].isdigit()}
        assert not any(key.startswith("exception") for key in statuses), statuses
        assert codes <= {200, 201, 404, 410}, statuses
        # Afterwards every worker's session is gone: a clean 404.
        for session_id, session_headers in sessions.values():
            after = researcher.get(f"/api/w/sessions/{session_id}/next", headers=session_headers)
            assert after.status_code == 404, after.text
        assert researcher.get(f"/api/projects/{slug}", headers=headers).status_code == 404
    with Session(engine) as db:
        for model in (Answer, Query, Question, WorkSession, Participant, Object, Job):
            left = db.scalar(
                select(func.count()).select_from(model).where(model.project_id == project_id)
            )
            assert left == 0, model.__tablename__


def test_workers_of_a_deleted_project_get_404(app, engine):
    slug = f"gone-{uuid.uuid4().hex[:8]}"
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        make_project(client, headers, slug)
        make_objects(client, headers, slug, 6)
        set_plan(client, headers, slug)
        opened = client.post(f"/api/w/{slug}/sessions", json={"participant": "late"}).json()
        session = {"Authorization": f"Bearer {opened['session_token']}"}
        query = client.get(f"/api/w/sessions/{opened['session_id']}/next", headers=session)
        token = query.json()["query"]["token"]
        assert client.delete(f"/api/projects/{slug}?force=true", headers=headers).status_code == 204
        late = client.post(
            f"/api/w/sessions/{opened['session_id']}/answers",
            json={"token": token, "choice": first_choice(query.json()["query"])},
            headers=session,
        )
        assert late.status_code == 404, late.text
        assert "session" in late.json()["detail"]
        assert client.post(f"/api/w/{slug}/sessions", json={}).status_code == 404

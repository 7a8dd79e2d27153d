"""Small builders of test data through the public API."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import psycopg
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session


def make_project(
    client: TestClient, headers: dict[str, str], slug: str = "study", **fields: Any
) -> dict:
    response = client.post(
        "/api/projects", json={"slug": slug, "name": slug.title(), **fields}, headers=headers
    )
    assert response.status_code == 201, response.text
    return response.json()


def make_objects(
    client: TestClient,
    headers: dict[str, str],
    slug: str,
    n: int,
    *,
    n_features: int = 2,
    labels: bool = True,
    seed: int = 0,
) -> list[dict]:
    rng = np.random.default_rng(seed)
    objects = [
        {
            "name": f"object {i}",
            "features": rng.normal(size=n_features).round(6).tolist(),
            **({"label": "ab"[i % 2]} if labels else {}),
        }
        for i in range(n)
    ]
    response = client.post(f"/api/projects/{slug}/objects", json=objects, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()["data"]


def random_triplets(n_objects: int, m: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    rows = np.array([rng.choice(n_objects, 3, replace=False) for _ in range(m)])
    return rows.tolist()


def set_plan(client: TestClient, headers: dict[str, str], slug: str, **overrides: Any) -> dict:
    plan = {
        "strategies": [{"kind": "random", "weight": 1}],
        "queries_per_session": 5,
        "repeat_rate": 0,
        **overrides,
    }
    response = client.put(f"/api/projects/{slug}/plan", json=plan, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def open_session(client: TestClient, slug: str, **params: str) -> tuple[str, dict[str, str]]:
    """Open (or resume) a session as one browser would: with a resume secret that browser
    keeps, here derived from the platform parameters (``resume_secret=""`` sends none)."""
    params = params or {"participant": "p1"}
    if "resume_secret" not in params:
        described = ",".join(f"{k}={v}" for k, v in sorted(params.items()))
        params["resume_secret"] = hashlib.sha256(described.encode()).hexdigest()[:32]
    elif not params["resume_secret"]:
        del params["resume_secret"]
    response = client.post(f"/api/w/{slug}/sessions", json=params)
    assert response.status_code == 201, response.text
    body = response.json()
    return body["session_id"], {"Authorization": f"Bearer {body['session_token']}"}


def next_query(client: TestClient, session_id: str, headers: dict[str, str]) -> dict:
    response = client.get(f"/api/w/sessions/{session_id}/next", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def first_choice(query: dict) -> int | list[int]:
    """A valid choice: the left candidate of a triplet, 'about the same' for a pair, the
    first of an odd-one-out's three, a ranked grid's first ``k`` candidates as shown."""
    indices = [o["index"] for o in query["objects"]]
    if query["kind"] == "rank":
        return indices[1 : 1 + query["k"]]
    return {"triplet": indices[1], "odd_one_out": indices[0]}.get(query["kind"], 0)


def answer(
    client: TestClient,
    session_id: str,
    headers: dict[str, str],
    token: str,
    choice: int | list[int],
    ms: float = 900,
):  # type: ignore[no-untyped-def]
    return client.post(
        f"/api/w/sessions/{session_id}/answers",
        json={"token": token, "choice": choice, "client_ms": ms},
        headers=headers,
    )


def answer_all(
    client: TestClient, session_id: str, headers: dict[str, str], ms: float = 900
) -> list[dict]:
    """Answer until the session ends; returns the queries answered."""
    answered = []
    while True:
        body = next_query(client, session_id, headers)
        if body.get("done"):
            return answered
        query = body["query"]
        response = answer(client, session_id, headers, query["token"], first_choice(query), ms)
        assert response.status_code == 201, response.text
        answered.append(query)


@contextmanager
def committed_requests(app, engine: Engine) -> Iterator[dict[str, str]]:  # type: ignore[no-untyped-def]
    """Requests get their own sessions that really commit, as on a real server (for races
    and for jobs that read from other processes); yields a researcher's headers."""
    from sqlalchemy import delete

    from app.api.deps import get_db
    from app.db.models import ApiKey
    from app.services.auth import create_key

    def real_session() -> Iterator[Session]:
        with Session(engine, expire_on_commit=False) as session:
            yield session

    app.dependency_overrides[get_db] = real_session
    with Session(engine) as db:
        key, secret = create_key(db, "researcher", "committed requests")
        key_id = key.id
    try:
        yield {"Authorization": f"Bearer {secret}"}
    finally:
        app.dependency_overrides.clear()
        with Session(engine) as db:  # tests that count keys must not see it
            db.execute(delete(ApiKey).where(ApiKey.id == key_id))
            db.commit()


@contextmanager
def statements_sent(engine: Engine, record: Callable[[str], None]) -> Iterator[None]:
    """Call ``record(sql)`` for each statement this process sends to ``engine``'s database:
    through SQLAlchemy (its ``before_cursor_execute`` event) and on the event loop's own
    connections (``app.db.loop_connections``: psycopg's asyncio cursor, outside SQLAlchemy),
    the real statement sent after it."""

    def listener(_conn, _cursor, statement, _parameters, _context, _many) -> None:  # type: ignore[no-untyped-def]
        record(statement)

    original = psycopg.AsyncRawCursor.execute

    async def execute(self, query, params=None, **kwargs):  # type: ignore[no-untyped-def]
        record(query)
        return await original(self, query, params, **kwargs)

    event.listen(engine, "before_cursor_execute", listener)
    psycopg.AsyncRawCursor.execute = execute  # type: ignore[method-assign]
    try:
        yield
    finally:
        psycopg.AsyncRawCursor.execute = original  # type: ignore[method-assign]
        event.remove(engine, "before_cursor_execute", listener)

"""The round trip's two paths keep each other honest: one scenario run on both databases,
with the next question claimed by the answer's own statement (the fast path) and with every
next question from the slow path (``TRIPLETLAB_CLAIM_WITH_ANSWER=false``), and with only
public SQLAlchemy APIs (``TRIPLETLAB_PRIVATE_CURSOR=false``): the rows stored and the
questions issued, in order, are the same in every run.

The scenario: three participants answer in turn (redundancy 2, gold questions, mirrored
repeats, triplet, pair, odd-one-out and 4-rank-2 strategies with budgets, a small pool
refilled as it runs dry),
one of them lets a lease expire (its late answer is refused with 410 and its question given to
someone else), and answers are sent again (stored once) or with another choice (409). The
fills ahead of the server's producer thread are off (``TRIPLETLAB_FILL_AHEAD=false``), so the
pool is filled at the same points on every path. Concurrent requests are checked by the
rules they must keep, in ``test_round_trip_rows.py`` and ``test_worker_concurrency.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text, update
from sqlalchemy.orm import Session

from app.api.deps import get_db
from app.config import get_settings
from app.db.migrate import upgrade
from app.db.models import Query, utcnow
from app.db.session import make_engine
from app.services import comprf, pool, round_trip, sessions
from app.services.auth import create_key
from tests.factories import make_objects, make_project, open_session, set_plan
from tests.servers import postgres_database

pytestmark = pytest.mark.slow
PARTICIPANTS = ("ann", "bob", "cat")
STEPS = 60


def choose(query: dict[str, Any]) -> int | list[int]:
    """A fixed answer for a question: the lower-indexed candidate of a triplet; a pair's
    outcome from its objects; an odd-one-out's highest index; a ranked grid's k candidates
    in decreasing index order."""
    indices = [o["index"] for o in query["objects"]]
    if query["kind"] == "triplet":
        return min(indices[1:])
    if query["kind"] == "odd_one_out":
        return max(indices)
    if query["kind"] == "rank":
        return sorted(indices[1:], reverse=True)[: query["k"]]
    return (indices[0] + 2 * indices[1]) % 3 - 1


def scenario(client: TestClient, engine: Engine) -> None:
    with Session(engine) as db:
        _, secret = create_key(db, "researcher", "paths")
    headers = {"Authorization": f"Bearer {secret}"}
    make_project(client, headers, "paths")
    make_objects(client, headers, "paths", 9)
    strategies = [
        {"kind": "random", "weight": 2, "budget": 14},
        {"kind": "pairs", "weight": 1, "budget": 6},
        {"kind": "random", "weight": 1, "budget": 5, "shape": {"type": "odd_one_out"}},
        {"kind": "random", "weight": 1, "budget": 5, "shape": {"type": "rank", "n": 4, "k": 2}},
    ]
    set_plan(
        client, headers, "paths", strategies=strategies, redundancy=2, gold_rate=0.15,
        repeat_rate=0.3, queries_per_session=16, seed=5, min_answer_ms=400,
    )  # fmt: skip
    sessions = {name: open_session(client, "paths", participant=name) for name in PARTICIPANTS}
    shown: dict[str, dict | None] = dict.fromkeys(PARTICIPANTS)
    done: set[str] = set()
    stale: tuple[str, dict] | None = None
    for step in range(STEPS):
        name = PARTICIPANTS[step % len(PARTICIPANTS)]
        if name in done:
            continue
        session_id, auth = sessions[name]
        path = f"/api/w/sessions/{session_id}"
        if shown[name] is None:
            body = client.get(f"{path}/next", headers=auth).json()
            if body["done"]:
                done.add(name)
                continue
            shown[name] = body["query"]
        query = shown[name]
        assert query is not None
        if step == 10:
            # ann's lease runs out: the next fill gives her question's place to someone else.
            with Session(engine) as db:
                past = utcnow() - timedelta(seconds=1)
                db.execute(
                    update(Query).where(Query.token == query["token"]).values(expires_at=past)
                )
                db.commit()
            stale, shown[name] = (name, query), None
            continue
        answer = {"token": query["token"], "choice": choose(query), "client_ms": 300 + step * 20}
        reply = client.post(f"{path}/answers", json=answer, headers=auth)
        assert reply.status_code == 201, reply.text
        if step % 7 == 3:  # sent again: stored once; with another choice: refused
            again = client.post(f"{path}/answers", json=answer, headers=auth)
            assert again.status_code == 201, again.text
            if query["kind"] == "pair":
                other = {**answer, "choice": (answer["choice"] + 2) % 3 - 1}
                assert client.post(f"{path}/answers", json=other, headers=auth).status_code == 409
            if query["kind"] == "rank":
                other = {**answer, "choice": answer["choice"][::-1]}
                assert client.post(f"{path}/answers", json=other, headers=auth).status_code == 409
        body = reply.json()
        shown[name] = None if body["done"] else body["next"]["query"]
        if body["done"]:
            done.add(name)
    assert stale is not None
    name, query = stale
    session_id, auth = sessions[name]
    late = {"token": query["token"], "choice": choose(query)}
    assert (
        client.post(f"/api/w/sessions/{session_id}/answers", json=late, headers=auth).status_code
        == 410
    )


TABLES = {
    "answers": "SELECT p.external_id, s.answered AS session_answered, a.kind, a.a, a.b, a.c, "
    "a.outcome, a.position, a.choice, a.source, a.strategy, a.gold_correct, a.consistent, "
    "a.client_ms, a.objects, a.choices FROM answers a "
    "JOIN participants p ON p.id = a.participant_id "
    "JOIN sessions s ON s.id = a.session_id ORDER BY a.id",
    "queries": "SELECT p.external_id, qu.key, q.kind, q.o1, q.o2, q.o3, q.status, q.is_repeat, "
    "q.objects, q.k "
    "FROM queries q JOIN participants p ON p.id = q.participant_id "
    "JOIN questions qu ON qu.id = q.question_id ORDER BY q.id",
    "questions": "SELECT key, kind, o1, o2, o3, strategy, gold_choice, wanted, live, answered, "
    "is_open, objects, k FROM questions ORDER BY id",
    "sessions": "SELECT p.external_id, s.total, s.answered, s.finished_at IS NOT NULL, "
    "s.completion_code_hash IS NOT NULL FROM sessions s "
    "JOIN participants p ON p.id = s.participant_id ORDER BY p.external_id",
    "participants": "SELECT external_id, flagged, flag_reason, n_answers, gold_answers, "
    "gold_correct, fast_answers, left_answers, sided_answers, repeats, consistent_repeats "
    "FROM participants ORDER BY external_id",
}


def stored(engine: Engine) -> dict[str, list[tuple]]:
    with engine.connect() as connection:
        return {
            name: [tuple(row) for row in connection.execute(text(sql))]
            for name, sql in TABLES.items()
        }


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[dict[str, Engine]]:
    made = {
        "sqlite": make_engine(f"sqlite:///{tmp_path / 'paths.db'}"),
        "postgresql": make_engine(postgres_database("paths")),
    }
    for engine in made.values():
        upgrade(engine)
    yield made
    for engine in made.values():
        engine.dispose()


class SessionIds:
    """Session ids in a fixed order: a session's draws (repeat or not, the order shown)
    depend on its id, so every run draws alike."""

    def __init__(self) -> None:
        self.n = 0

    def uuid4(self) -> uuid.UUID:
        self.n += 1
        return uuid.UUID(int=0x1234_5678_0000_4000_8000_000000000000 + self.n)


def run(app: Any, engine: Engine, monkeypatch: Any) -> dict[str, list[tuple]]:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(sessions, "uuid", SessionIds())

    def session() -> Iterator[Session]:
        with Session(engine, expire_on_commit=False) as db:
            yield db

    app.dependency_overrides[get_db] = session
    try:
        with TestClient(app) as client:
            scenario(client, engine)
    finally:
        app.dependency_overrides.clear()
    result = stored(engine)
    with engine.begin() as connection:  # the next run starts from an empty database
        for table in ("answers", "queries", "questions", "sessions", "participants", "objects",
                      "strategy_states", "projects", "api_keys"):  # fmt: skip
            connection.execute(text(f"DELETE FROM {table}"))
    round_trip.forget()
    comprf.forget()
    return result


def normalised(result: dict[str, list[tuple]]) -> dict[str, list[tuple]]:
    """Rows as both databases give them: booleans (SQLite's 0/1) and floats alike."""

    def value(v: Any) -> Any:
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, float):
            return round(v, 3)
        if isinstance(v, str) and v.startswith("["):  # JSON: SQLite's text
            return json.loads(v)
        return v

    return {name: [tuple(value(v) for v in row) for row in rows] for name, rows in result.items()}


def test_every_path_and_database_stores_and_issues_the_same(app, engines, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    settings = get_settings()
    monkeypatch.setattr(settings, "fill_ahead", False)
    monkeypatch.setattr(pool, "POOL_BATCH", 4)  # the pool runs dry, and is refilled, often
    results = {}
    for kind, engine in engines.items():
        for fast in (True, False):
            for private in (True, False):
                monkeypatch.setattr(settings, "claim_with_answer", fast)
                monkeypatch.setattr(settings, "private_cursor", private)
                results[(kind, fast, private)] = normalised(run(app, engine, monkeypatch))
    reference = results[("sqlite", True, True)]
    assert len(reference["answers"]) > 30
    assert any(row[12] is not None for row in reference["answers"])  # repeats were asked
    assert any(row[11] is not None for row in reference["answers"])  # and gold questions
    assert any(row[6] == "expired" for row in reference["queries"])  # a lease ran out
    kinds = {row[2] for row in reference["answers"]}
    assert kinds == {"triplet", "pair", "odd_one_out", "rank"}, kinds
    repeated = {row[2] for row in reference["queries"] if row[7]}
    assert {"odd_one_out", "rank"} & repeated, repeated  # a shaped question asked again
    for key, result in results.items():
        for table, rows in reference.items():
            assert result[table] == rows, (key, table)

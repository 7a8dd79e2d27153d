"""Migration 0006_shapes keeps every row of a study collected before it, on both databases,
and the widened ``kind`` holds ``odd_one_out``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from app.api.deps import get_db
from app.db.migrate import downgrade, upgrade
from app.db.session import make_engine
from app.services import round_trip
from app.services.auth import create_key
from tests.factories import answer_all, make_objects, make_project, open_session, set_plan
from tests.servers import postgres_database

COUNTS = {table: f"SELECT count(*) FROM {table}" for table in ("questions", "queries", "answers")}
ROWS = "SELECT id, kind, a, b, c, outcome, position, choice FROM answers ORDER BY id"


def snapshot(engine: Engine) -> tuple[dict[str, int], list[tuple]]:
    with engine.connect() as connection:
        counts = {name: connection.execute(text(sql)).scalar() for name, sql in COUNTS.items()}
        return counts, [tuple(row) for row in connection.execute(text(ROWS))]


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_upgrade_keeps_the_rows_of_a_study(app, tmp_path, database) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'shapes.db'}" if database == "sqlite" else None
    engine = make_engine(url or postgres_database("shapes_migration"))
    upgrade(engine)

    def session() -> Iterator[Session]:
        with Session(engine, expire_on_commit=False) as db:
            yield db

    # A study of triplets and pairs runs (on head's models: its rows use none of 0006's
    # columns), the schema goes back to 0005 and up again: every row is as it was.
    app.dependency_overrides[get_db] = session
    try:
        with Session(engine) as db:
            _, secret = create_key(db, "researcher", "migration")
        headers = {"Authorization": f"Bearer {secret}"}
        with TestClient(app) as client:
            make_project(client, headers, "old")
            make_objects(client, headers, "old", 10)
            strategies = [{"kind": "random"}, {"kind": "pairs"}]
            set_plan(client, headers, "old", strategies=strategies, queries_per_session=12)
            session_id, session_headers = open_session(client, "old", participant="p")
            answer_all(client, session_id, session_headers)
    finally:
        app.dependency_overrides.clear()
        round_trip.forget()
    before = snapshot(engine)
    assert before[0]["answers"] == 12
    downgrade(engine, "0005_reliability")
    assert snapshot(engine) == before
    upgrade(engine)
    assert snapshot(engine) == before
    with engine.begin() as connection:
        connection.execute(
            text("UPDATE answers SET kind = 'odd_one_out', objects = '[1, 2, 3]' WHERE id = :id"),
            {"id": before[1][0][0]},
        )
        kind = connection.execute(text("SELECT kind FROM answers ORDER BY id LIMIT 1")).scalar()
    assert kind == "odd_one_out"
    downgrade(engine, "0005_reliability")  # the shaped row goes, the others stay
    assert snapshot(engine)[0]["answers"] == 11
    engine.dispose()

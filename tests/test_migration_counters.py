"""Migration 0002_throughput counts the quality counters of existing participants from their
answers, as the answers would have counted them one by one."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.api.deps import get_db
from app.db.migrate import downgrade, upgrade
from app.db.models import Participant
from app.db.session import make_engine
from app.services.auth import create_key
from tests.factories import answer_all, make_objects, make_project, open_session, set_plan

COUNTERS = (
    "n_answers", "gold_answers", "gold_correct", "fast_answers", "left_answers",
    "sided_answers", "repeats", "consistent_repeats",
)  # fmt: skip


def counters(engine: Engine) -> dict[str, tuple[int, ...]]:
    with Session(engine) as db:
        rows = db.scalars(select(Participant)).all()
        return {p.external_id: tuple(getattr(p, c) for c in COUNTERS) for p in rows}


def test_upgrade_counts_existing_answers(app, tmp_path) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(f"sqlite:///{tmp_path / 'counters.db'}")
    upgrade(engine)

    def session() -> Iterator[Session]:
        with Session(engine, expire_on_commit=False) as db:
            yield db

    app.dependency_overrides[get_db] = session
    try:
        with Session(engine) as db:
            _, secret = create_key(db, "researcher", "migration")
        headers = {"Authorization": f"Bearer {secret}"}
        with TestClient(app) as client:
            make_project(client, headers, "old")
            make_objects(client, headers, "old", 12)
            set_plan(
                client, headers, "old", queries_per_session=30, min_answer_ms=500,
                gold_rate=0.2, repeat_rate=0.3,
            )  # fmt: skip
            for name, ms in (("slow", 2000), ("fast", 100)):
                session_id, session_headers = open_session(client, "old", participant=name)
                answer_all(client, session_id, session_headers, ms=ms)
    finally:
        app.dependency_overrides.clear()
    kept = counters(engine)
    assert kept["fast"][COUNTERS.index("fast_answers")] == kept["fast"][0] > 0

    downgrade(engine, "0001")
    upgrade(engine)
    assert counters(engine) == kept
    engine.dispose()

"""PostgreSQL: the tables a worker's round trip searches are analysed while they grow fast,
so the plans kept of its statements are not those made for empty tables
(app.db.statistics, called after a fill of the pool)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from app.db import statistics
from app.db.migrate import upgrade
from app.db.models import Object, Participant, Project, WorkSession
from app.db.session import make_engine
from app.services import imports, pool
from app.services.answers import import_answers
from app.services.projects import delete_project
from tests.conftest import POSTGRES_URL


@pytest.fixture
def schema_engine(engine: Engine) -> Iterator[Engine | None]:
    """An engine on a schema of its own, migrated, whose tables start never analysed (the
    suite's own database is shared and rolled back, so nothing there is ever counted);
    None on SQLite, whose plans are made for each statement run."""
    if engine.dialect.name != "postgresql":
        yield None
        return
    schema = f"stats_{uuid.uuid4().hex[:8]}"
    with engine.begin() as connection:
        connection.execute(text(f"CREATE SCHEMA {schema}"))
    separator = "&" if "?" in POSTGRES_URL else "?"
    own = make_engine(f"{POSTGRES_URL}{separator}options=-csearch_path%3D{schema}")
    try:
        upgrade(own)
        yield own
    finally:
        own.dispose()
        with engine.begin() as connection:
            connection.execute(text(f"DROP SCHEMA {schema} CASCADE"))


def _analysed(engine: Engine) -> dict[str, int]:
    with engine.connect() as connection:
        found = connection.execute(
            text(
                "SELECT relname, analyze_count FROM pg_stat_user_tables "
                "WHERE schemaname = current_schema() AND relname = ANY(:tables)"
            ),
            {"tables": list(statistics.HOT_TABLES)},
        )
        return dict(found.all())


def _counted(engine: Engine, table: str, least: int) -> None:
    """Wait until the server's statistics count ``least`` changed rows of ``table`` (a
    backend reports its counts once it is idle, at most once a second)."""
    deadline = time.monotonic() + 10
    while True:
        with engine.connect() as connection:
            changed = connection.execute(
                text("SELECT pg_stat_get_mod_since_analyze(CAST(:t AS regclass))"), {"t": table}
            ).scalar_one()
        if changed >= least or time.monotonic() > deadline:
            assert changed >= least, f"{table}: {changed} changes counted"
            return
        time.sleep(0.1)


def _project_with_objects(engine: Engine, n_objects: int) -> tuple[Project, WorkSession]:
    with Session(engine, expire_on_commit=False) as db:
        project = Project(
            slug="stats",
            name="stats",
            n_objects=n_objects,
            plan={"strategies": [{"kind": "random", "weight": 1}], "queries_per_session": 50},
        )
        db.add(project)
        db.flush()
        db.add_all(Object(project_id=project.id, index=i, name=f"o{i}") for i in range(n_objects))
        participant = Participant(project_id=project.id, platform="direct", external_id="w")
        db.add(participant)
        db.flush()
        work = WorkSession(
            id=str(uuid.uuid4()),
            project_id=project.id,
            participant_id=participant.id,
            token_hash="x",
            total=50,
        )
        db.add(work)
        db.commit()
        with db.connection() as connection:  # report this backend's counts when it is idle
            connection.execute(text("SELECT pg_stat_force_next_flush()"))
        return project, work


def test_sqlite_is_left_alone(engine, db):
    if engine.dialect.name != "sqlite":
        return
    assert statistics.refresh_if_stale(db) == []
    assert not db.in_transaction()  # not even a look at its tables


def test_a_fill_analyses_the_tables_that_grew_and_only_once(schema_engine):
    if schema_engine is None:
        return
    project, _ = _project_with_objects(schema_engine, statistics.MIN_CHANGED + 50)
    _counted(schema_engine, "objects", statistics.MIN_CHANGED + 50)
    before = _analysed(schema_engine)
    assert before["objects"] == 0

    with Session(schema_engine, expire_on_commit=False) as db:
        filled = pool.fill_alone(db, project.id)  # the slow path's own fill
        assert filled is not None and filled.created

    after = _analysed(schema_engine)
    assert after["objects"] == 1  # 250 objects, never analysed: stale
    assert after["answers"] == 0  # no answer yet: nothing to learn

    # Analysed now: a second look finds nothing stale, and analyses nothing again.
    with Session(schema_engine) as db:
        assert statistics.stale_tables(db) == []
        assert statistics.refresh_if_stale(db) == []
    assert _analysed(schema_engine)["objects"] == 1


def test_a_small_change_is_not_analysed(schema_engine):
    if schema_engine is None:
        return
    _project_with_objects(schema_engine, statistics.MIN_CHANGED // 2)
    _counted(schema_engine, "objects", statistics.MIN_CHANGED // 2)
    with Session(schema_engine) as db:
        assert "objects" not in statistics.stale_tables(db)
        assert statistics.refresh_if_stale(db) == []
    assert _analysed(schema_engine)["objects"] == 0


def test_another_process_analysing_is_not_waited_for(schema_engine):
    if schema_engine is None:
        return
    _project_with_objects(schema_engine, statistics.MIN_CHANGED + 50)
    _counted(schema_engine, "objects", statistics.MIN_CHANGED + 50)
    with schema_engine.connect() as other:  # holds the lock, as another process would
        other.execute(text("SELECT pg_advisory_lock(:key)"), {"key": statistics.LOCK_KEY})
        with Session(schema_engine) as db:
            assert statistics.refresh_if_stale(db) == []
        other.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": statistics.LOCK_KEY})
    assert _analysed(schema_engine)["objects"] == 0
    with Session(schema_engine) as db:
        assert statistics.refresh_if_stale(db) == ["objects"]


def _reltuples(engine: Engine, table: str) -> float:
    with engine.connect() as connection:
        return connection.execute(
            text("SELECT reltuples FROM pg_class WHERE oid = CAST(:t AS regclass)"), {"t": table}
        ).scalar_one()


def test_an_import_and_a_deletion_analyse_the_tables_they_changed_at_once(schema_engine):
    """Issue 31: the first export after a big import was planned on the statistics of the
    table before it (86.8 s instead of 4.2-15 s), until autovacuum came by."""
    if schema_engine is None:
        return
    project, _ = _project_with_objects(schema_engine, 30)
    rng = np.random.default_rng(0)
    n = 12_000
    triplets = np.array([rng.choice(30, 3, replace=False) for _ in range(n)])
    with Session(schema_engine, expire_on_commit=False) as db:
        project = db.merge(project)
        assert imports.run(import_answers(db, project, triplets, [])) == (n, 0)
    assert _analysed(schema_engine)["answers"] == 1
    assert _reltuples(schema_engine, "answers") == n

    with Session(schema_engine, expire_on_commit=False) as db:
        project = db.merge(project)
        # Fewer rows than BULK_ROWS: left to autovacuum.
        assert imports.run(import_answers(db, project, triplets[:500], [])) == (500, 0)
        assert _analysed(schema_engine)["answers"] == 1
        # An import of BULK_ROWS, a twelfth of the table: analysed all the same (the
        # statistics know nothing of the project's new rows).
        assert imports.run(import_answers(db, project, triplets[:1000], [])) == (1000, 0)
        assert _analysed(schema_engine)["answers"] == 2
        counted = _reltuples(schema_engine, "answers")
        assert counted == n + 1500
        # Any other bulk change: only past a tenth of the table.
        assert statistics.analyze_after_bulk(db, {"answers": int(counted // 10)}) == []
        assert _analysed(schema_engine)["answers"] == 2
        assert statistics.analyze_after_bulk(db, {"answers": int(counted // 10) + 1}) == ["answers"]
        assert _analysed(schema_engine)["answers"] == 3

        delete_project(db, db.merge(project), force=True)
    assert _analysed(schema_engine)["answers"] == 4  # emptied: analysed again
    assert _reltuples(schema_engine, "answers") == 0
    assert _analysed(schema_engine)["objects"] == 0  # 30 objects deleted: too few to matter


def test_sqlite_has_no_statistics_to_refresh_after_a_bulk_change(engine, db):
    if engine.dialect.name != "sqlite":
        return
    assert statistics.analyze_after_bulk(db, {"answers": 10**6}) == []

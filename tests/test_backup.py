"""`tripletlab backup` / `tripletlab restore`: a round trip gives back every table, row for row,
on SQLite and PostgreSQL; a backup taken while workers answer is consistent."""

from __future__ import annotations

import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, MetaData, func, select
from sqlalchemy.orm import Session

from app.db.migrate import upgrade
from app.db.models import Answer, Job, Model, Project, Query, WorkSession
from app.db.session import make_engine
from tests.factories import (
    answer_all,
    committed_requests,
    make_objects,
    make_project,
    open_session,
    random_triplets,
    set_plan,
)
from tests.servers import TRIPLETLAB, database_url


def tables(engine: Engine) -> dict[str, list[tuple]]:
    """Every row of every table (the schema's own tables included), in a stable order."""
    metadata = MetaData()
    metadata.reflect(engine)
    with engine.connect() as connection:
        return {
            name: sorted((tuple(row) for row in connection.execute(select(table))), key=repr)
            for name, table in metadata.tables.items()
        }


def cli(url: str, data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "TRIPLETLAB_DATABASE_URL": url,
        "TRIPLETLAB_DATA_DIR": str(data_dir),
    }
    return subprocess.run(
        [TRIPLETLAB, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def fill(app, engine: Engine) -> str:  # type: ignore[no-untyped-def]
    """A project with objects, crowd answers, imported answers, a job and a model."""
    slug = f"kept-{uuid.uuid4().hex[:8]}"
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        make_project(client, headers, slug, instructions="ünïcode ✓ and 'quotes'")
        make_objects(client, headers, slug, 8)
        set_plan(client, headers, slug, queries_per_session=4)
        for name in ("ann", "bob"):
            session_id, session_headers = open_session(client, slug, participant=name)
            answer_all(client, session_id, session_headers)
        imported = client.post(
            f"/api/projects/{slug}/answers", json={"triplets": random_triplets(8, 20)},
            headers=headers,
        )  # fmt: skip
        assert imported.status_code == 201, imported.text
    with Session(engine) as db:
        project_id = db.scalar(select(Project.id).where(Project.slug == slug))
        job = Job(project_id=project_id, kind="kernel", params={"k": 1}, status="succeeded")
        db.add(job)
        db.flush()
        db.add(
            Model(
                project_id=project_id, job_id=job.id, kind="kernel", version=1, n_answers=28,
                training_seconds=0.5, artifact=bytes(range(256)) * 4, metrics={"a": 0.5},
            )
        )  # fmt: skip
        db.commit()
    return slug


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request, tmp_path: Path) -> str:  # type: ignore[no-untyped-def]
    return database_url(request.param, tmp_path, "backup")


def test_backup_then_restore_gives_back_every_table(app, database: str, tmp_path: Path):
    engine = make_engine(database)
    try:
        upgrade(engine)
        fill(app, engine)
        before = tables(engine)
        assert sum(len(rows) for rows in before.values()) > 50

        made = cli(database, tmp_path / "data", "backup", str(tmp_path / "snapshot.bak"))
        assert made.returncode == 0, made.stderr
        assert "backed up to" in made.stdout

        # Life goes on after the backup: more answers, a project deleted, another created.
        fill(app, engine)
        with committed_requests(app, engine) as headers, TestClient(app) as client:
            slug = next(s for (_, s, *_) in before["projects"])
            assert client.delete(
                f"/api/projects/{slug}?force=true", headers=headers
            ).status_code in (204, 404)
        assert tables(engine) != before

        restored = cli(
            database, tmp_path / "data", "restore", "--yes", str(tmp_path / "snapshot.bak")
        )
        assert restored.returncode == 0, restored.stderr
        engine.dispose()
        assert tables(engine) == before
        # The restored database goes on working: ids carry on after the restored ones.
        fill(app, engine)
    finally:
        engine.dispose()


def test_backup_while_workers_answer_is_consistent(app, database: str, tmp_path: Path):
    engine = make_engine(database)
    try:
        upgrade(engine)
        slug = fill(app, engine)
        stop = threading.Event()

        def answer_on() -> None:
            with committed_requests(app, engine), TestClient(app) as client:
                while not stop.is_set():
                    session_id, session_headers = open_session(
                        client, slug, participant=uuid.uuid4().hex
                    )
                    answer_all(client, session_id, session_headers, ms=10)

        worker = threading.Thread(target=answer_on, daemon=True)
        worker.start()
        try:
            made = cli(database, tmp_path / "data", "backup", str(tmp_path / "busy.bak"))
        finally:
            stop.set()
            worker.join(timeout=60)
        assert made.returncode == 0, made.stderr

        copy_url = database_url(
            "sqlite" if database.startswith("sqlite") else "postgresql", tmp_path / "copy", "copy"
        )
        restored = cli(copy_url, tmp_path / "data", "restore", "--yes", str(tmp_path / "busy.bak"))
        assert restored.returncode == 0, restored.stderr
        copy = make_engine(copy_url)
        try:
            with Session(copy) as db:
                answered = db.scalar(
                    select(func.count()).select_from(Query).where(Query.status == "answered")
                )
                crowd = db.scalar(
                    select(func.count()).select_from(Answer).where(Answer.query_id.is_not(None))
                )
                counted = db.scalar(select(func.sum(WorkSession.answered)))
            assert answered == crowd == counted
        finally:
            copy.dispose()
    finally:
        engine.dispose()


def test_restore_refuses_what_is_not_a_backup(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    junk = tmp_path / "junk.bak"
    junk.write_bytes(b"hello, I am not a database")
    refused = cli(url, tmp_path, "restore", "--yes", str(junk))
    assert refused.returncode == 2
    assert "not a Triplet Lab backup" in refused.stderr
    missing = cli(url, tmp_path, "restore", "--yes", str(tmp_path / "nothing.bak"))
    assert missing.returncode == 2
    assert "no backup file" in missing.stderr

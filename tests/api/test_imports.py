"""Imports written in short transactions: invisible until they end, gone when they fail or die.

Real committed sessions on SQLite and PostgreSQL: a reader is another session, as another
request or a training job would be. Chunks of 3 rows make an import of a few rows take
several transactions.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.db.models import Answer, Import, Object, Project, utcnow
from app.errors import Conflict, NotFound
from app.schemas.objects import ObjectCreate
from app.schemas.projects import ProjectCreate
from app.services import answers, imports, objects, projects
from app.training.data import load_training_data
from tests.factories import committed_requests


@pytest.fixture
def chunked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(imports, "CHUNK_ROWS", 3)


@pytest.fixture
def sessions(engine) -> Iterator[tuple[Session, Session, Project]]:  # type: ignore[no-untyped-def]
    """A writer's and a reader's session (both really commit) and a project of 5 objects."""
    writer = Session(engine, expire_on_commit=False)
    reader = Session(engine, expire_on_commit=False)
    slug = f"imp-{uuid.uuid4().hex[:8]}"
    project = projects.create_project(writer, ProjectCreate(slug=slug, name=slug), None)
    objects.add_objects(writer, project, [ObjectCreate(name=f"o{i}") for i in range(5)])
    yield writer, reader, project
    reader.close()
    writer.rollback()
    projects.delete_project(writer, writer.merge(project), force=True)
    writer.close()


def stored(db: Session, model, project: Project) -> int:  # type: ignore[no-untyped-def]
    """Rows physically in the table, hidden or not."""
    db.rollback()
    return db.scalar(select(func.count()).select_from(model).where(model.project_id == project.id))


def steps_until_written(steps, db: Session, model, project: Project, at_least: int):  # type: ignore[no-untyped-def]
    """Advance an import until ``at_least`` more of its rows are committed."""
    before = stored(db, model, project)
    for _ in range(100):
        done, _ = imports.step(steps)
        assert not done, "the import ended before the rows were seen half-written"
        if stored(db, model, project) >= before + at_least:
            return
    raise AssertionError("the import wrote nothing")


def reader_view(db: Session, slug: str) -> dict:
    """What every reader path sees of the project."""
    db.rollback()
    project = projects.get_project(db, slug)
    data = load_training_data(db, project)
    exported = b"".join(answers.stream_json(db, project))
    return {
        "n_objects": project.n_objects,
        "listed": len(objects.list_objects(db, project, 0, 1000)),
        "training objects": data.n_objects,
        "training triplets": len(data.triplets),
        "training pairs": len(data.pairs),
        "counted": projects.count_answers(db, project),
        "exported": exported.count(b'"source": "import"'),
        "triplets.npy": len(answers.triplets_array(db, project)),
    }


def test_a_reader_during_an_import_sees_none_of_its_rows(sessions, chunked):  # type: ignore[no-untyped-def]
    writer, reader, project = sessions
    nothing = reader_view(reader, project.slug)
    none = {"triplet": 0, "pair": 0, "odd_one_out": 0, "rank": 0}
    assert nothing["listed"] == 5 and nothing["counted"] == none

    rows = [ObjectCreate(name=f"new {i}").model_dump() for i in range(10)]
    steps = objects.import_objects(writer, project, rows)
    steps_until_written(steps, reader, Object, project, at_least=6)
    assert reader_view(reader, project.slug) == nothing
    with pytest.raises(NotFound):
        objects.get_object(reader, projects.get_project(reader, project.slug), 7)
    assert imports.run(steps) == 10
    assert [r["index"] for r in rows] == list(range(5, 15))
    after = reader_view(reader, project.slug)
    assert after["n_objects"] == after["listed"] == after["training objects"] == 15

    triplets = [[i, (i + 1) % 15, (i + 2) % 15] for i in range(8)]
    steps = answers.import_answers(writer, project, triplets, [[0, 1, 0], [2, 3, -1]])
    steps_until_written(steps, reader, Answer, project, at_least=6)
    assert stored(reader, Answer, project) >= 6
    assert reader_view(reader, project.slug) == after
    assert imports.run(steps) == (8, 2)
    done = reader_view(reader, project.slug)
    assert done["counted"] == {"triplet": 8, "pair": 2, "odd_one_out": 0, "rank": 0}
    assert (done["training triplets"], done["training pairs"], done["exported"]) == (8, 2, 10)
    assert done["triplets.npy"] == 8
    assert reader.scalar(select(func.count()).select_from(Import)) == 0


def test_a_failed_import_leaves_nothing(sessions, chunked, monkeypatch):  # type: ignore[no-untyped-def]
    writer, reader, project = sessions
    real_insert = answers.insert_answers
    calls = []

    def failing(db, project_id, kind, rows_json, *args):  # type: ignore[no-untyped-def]
        calls.append(len(json.loads(rows_json)))
        if len(calls) == 3:
            raise RuntimeError("the disk is full")
        return real_insert(db, project_id, kind, rows_json, *args)

    monkeypatch.setattr(answers, "insert_answers", failing)
    with pytest.raises(RuntimeError, match="disk is full"):
        imports.run(answers.import_answers(writer, project, [[0, 1, 2]] * 9, []))
    assert calls == [3, 3, 3]
    assert stored(reader, Answer, project) == 0

    # The client goes away mid-upload: the route closes the unfinished import.
    rows = [ObjectCreate(name=f"n{i}").model_dump() for i in range(9)]
    steps = objects.import_objects(writer, project, rows)
    steps_until_written(steps, reader, Object, project, at_least=3)
    steps.close()
    assert stored(reader, Object, project) == 5
    assert reader.scalar(select(func.count()).select_from(Import)) == 0
    assert reader_view(reader, project.slug)["n_objects"] == 5


def test_an_import_whose_process_died_is_swept_and_cannot_resume(sessions, chunked):  # type: ignore[no-untyped-def]
    writer, reader, project = sessions
    steps = answers.import_answers(writer, project, [[0, 1, 2]] * 9, [[3, 4, 1]] * 3)
    steps_until_written(steps, reader, Answer, project, at_least=6)
    assert imports.sweep(reader) == 0  # alive: its heartbeat is fresh
    # As if its process had been killed three minutes ago:
    reader.execute(update(Import).values(heartbeat_at=utcnow() - timedelta(minutes=3)))
    reader.commit()
    assert imports.sweep(reader) == 1
    assert stored(reader, Answer, project) == 0
    assert reader.scalar(select(func.count()).select_from(Import)) == 0
    # Had it only stalled, its next chunk finds it gone and writes nothing.
    with pytest.raises(Conflict, match="interrupted"):
        imports.run(steps)
    assert stored(reader, Answer, project) == 0


def test_answers_that_arrive_during_an_import_keep_watermarks_true(sessions, chunked):  # type: ignore[no-untyped-def]
    """The import's ids interleave with answers that arrived meanwhile: a retraining
    policy's "counted up to" is lowered below the import's first id when it ends."""
    writer, reader, project = sessions
    steps = answers.import_answers(writer, project, [[0, 1, 2]] * 6, [])
    steps_until_written(steps, reader, Answer, project, at_least=3)
    crowd = Answer(project_id=project.id, kind="triplet", a=0, b=2, c=1, source="crowd")
    reader.add(crowd)
    reader.commit()
    policy = {"kind": "embedding", "last_answer_id": crowd.id, "last_scheduled_at": 0.0}
    reader.execute(
        update(Project).where(Project.id == project.id).values(retrain={"embedding": policy})
    )
    reader.commit()
    imports.run(steps)
    reader.rollback()
    first = reader.scalar(
        select(func.min(Answer.id)).where(
            Answer.project_id == project.id, Answer.source == "import"
        )
    )
    assert first < crowd.id
    watermark = projects.get_project(reader, project.slug).retrain["embedding"]["last_answer_id"]
    assert watermark == first - 1


def test_a_second_objects_upload_while_one_runs_is_409_until_the_first_dies(app, engine):  # type: ignore[no-untyped-def]
    from fastapi.testclient import TestClient

    slug = f"imp-{uuid.uuid4().hex[:8]}"
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        client.post("/api/projects", json={"slug": slug, "name": slug}, headers=headers)
        with Session(engine) as db:
            project = projects.get_project(db, slug)
            db.add(Import(project_id=project.id, kind="objects", n_rows=100, first_index=0))
            db.commit()
        refused = client.post(
            f"/api/projects/{slug}/objects", json=[{"name": "a"}], headers=headers
        )
        assert refused.status_code == 409
        assert "objects are being uploaded into project" in refused.json()["detail"]
        with Session(engine) as db:
            db.execute(update(Import).values(heartbeat_at=utcnow() - timedelta(minutes=5)))
            db.commit()
        accepted = client.post(
            f"/api/projects/{slug}/objects", json=[{"name": "a"}], headers=headers
        )
        assert accepted.status_code == 201, accepted.text
        assert accepted.json()["data"][0]["index"] == 0
        client.delete(f"/api/projects/{slug}?force=true", headers=headers)


def test_import_steps_and_rows_are_independent_of_chunk_size(sessions, monkeypatch):  # type: ignore[no-untyped-def]
    writer, reader, project = sessions
    rng = np.random.default_rng(0)
    triplets = np.array([rng.permutation(5)[:3] for _ in range(20)])
    for size in (1, 7, 5000):
        monkeypatch.setattr(imports, "CHUNK_ROWS", size)
        imports.run(answers.import_answers(writer, project, triplets, []))
    stored_rows = reader.execute(
        select(Answer.a, Answer.b, Answer.c)
        .where(Answer.project_id == project.id)
        .order_by(Answer.id)
    ).all()
    assert np.array_equal(np.array(stored_rows), np.concatenate([triplets] * 3))

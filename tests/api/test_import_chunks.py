"""Imports written a chunk per set-based INSERT from JSON text, and large uploads handed to
their parsing process by path: values arrive exactly, and the server never holds the upload.

Real SQLite and PostgreSQL (the ``db`` fixture), a real parsing process.
"""

from __future__ import annotations

import io
import json
import math
import tracemalloc

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db.models import Answer, Object
from app.schemas.objects import ObjectCreate, ObjectPublic
from app.schemas.projects import ProjectCreate
from app.services import answers, imports, objects, projects, upload_parsing
from app.services.import_chunks import ObjectChunk, answers_json
from tests.factories import make_project

TRICKY = [
    {
        "name": 'ünï "quoted" \\ back\nslash 名前 😀',
        "text": "line one\r\nline two, with a comma; 'single' and \"double\" quotes\t",
        "image_url": "/media/x/1.png",
        "features": [0.1, 1e-300, -2.5e10, 3.0, 5e-324, 1.7976931348623157e308],
        "label": "007",
        "target": 1e-7,
    },
    {"name": "plain", "text": None, "image_url": None, "features": None, "label": None},
    {
        "name": "zero",
        "text": "",
        "features": [0.0, -0.0, 0.5, -1.0, 2.0, 1e-5],
        "label": "",
        "target": 0.0,
    },
    {
        "name": "int-like",
        "features": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        "target": 12345678901234.0,
        "label": "1e5",
    },
]


def _project(db: Session, slug: str):  # type: ignore[no-untyped-def]
    return projects.create_project(db, ProjectCreate(slug=slug, name=slug), None)


def test_objects_arrive_exactly_and_the_reply_matches_object_public(db: Session) -> None:
    project = _project(db, "chunk-objects")
    objects.add_objects(db, project, [ObjectCreate(name="first")])
    rows = [ObjectCreate.model_validate(r).model_dump() for r in TRICKY]
    replies: list[bytes] = []
    steps = objects.import_objects(
        db, project, rows, stored=lambda first, chunk: replies.append(chunk.public_json(first))
    )
    assert imports.run(steps) == len(TRICKY)
    db.rollback()  # a new transaction: what the requests committed since
    stored = db.scalars(
        select(Object).where(Object.project_id == project.id).order_by(Object.index)
    ).all()
    assert [o.index for o in stored] == [0, 1, 2, 3, 4]
    for obj, row in zip(stored[1:], rows, strict=True):
        for key in ("name", "text", "image_url", "label", "target", "features"):
            assert getattr(obj, key) == row[key], key
        if row["features"]:  # the sign of -0.0 and the extremes survive
            assert [math.copysign(1, v) for v in obj.features] == [
                math.copysign(1, v) for v in row["features"]
            ]
    # The reply, spliced from fragments rendered without the index, is ObjectPublic's JSON.
    expected = [ObjectPublic.model_validate(o).model_dump(mode="json") for o in stored[1:]]
    assert json.loads(b"[" + b",".join(replies) + b"]") == expected


def test_an_object_chunk_renders_every_index() -> None:
    rows = [ObjectCreate.model_validate(r).model_dump() for r in TRICKY]
    chunk = ObjectChunk.of(rows)
    items = json.loads(b"[" + chunk.public_json(2**31 - 4) + b"]")
    assert [item["index"] for item in items] == [2**31 - 4, 2**31 - 3, 2**31 - 2, 2**31 - 1]
    assert [item["name"] for item in items] == [r["name"] for r in rows]
    assert json.loads(chunk.rows_json)[1] == {"name": "plain"}  # nulls left out


def test_answers_arrive_exactly_in_order(db: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(imports, "CHUNK_ROWS", 4)  # several chunks, a short last one
    project = _project(db, "chunk-answers")
    objects.add_objects(db, project, [ObjectCreate(name=f"o{i}") for i in range(30)])
    rng = np.random.default_rng(0)
    triplets = np.array([rng.permutation(30)[:3] for _ in range(11)])
    pairs = np.array([[*rng.permutation(30)[:2], rng.integers(-1, 2)] for _ in range(6)])
    assert imports.run(answers.import_answers(db, project, triplets, pairs)) == (11, 6)
    db.rollback()  # a new transaction: what the requests committed since
    stored = db.scalars(
        select(Answer).where(Answer.project_id == project.id).order_by(Answer.id)
    ).all()
    assert [(a.kind, a.a, a.b, a.c, a.outcome) for a in stored] == [
        ("triplet", a, b, c, None) for a, b, c in triplets.tolist()
    ] + [("pair", a, b, None, o) for a, b, o in pairs.tolist()]
    assert {(a.source, a.import_id) for a in stored} == {("import", stored[0].import_id)}


def test_answers_json_is_the_rows_as_json() -> None:
    rows = np.array([[0, 1, 2], [2**31 - 1, 5, -1]], dtype=np.int64)
    assert json.loads(answers_json(rows)) == rows.tolist()
    assert answers_json(np.empty((0, 3), dtype=np.int64)) == "[]"


def test_a_large_upload_reaches_its_parsing_process_by_path_and_is_never_held_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server hands the parsing process the file's path and reads its chunks back one at
    a time: its own peak memory (tracemalloc) stays far below the upload's size."""
    monkeypatch.setattr(get_settings(), "upload_process_mb", 0.0)
    handed: list[type] = []
    original = upload_parsing._run_in_process

    def spy(fn, content, is_json, *args):  # type: ignore[no-untyped-def]
        handed.append(type(content))
        return original(fn, content, is_json, *args)

    monkeypatch.setattr(upload_parsing, "_run_in_process", spy)
    lines = (f"object {i},a description of object {i},c{i % 7},{i / 3:.3f}\n" for i in range(10**5))
    body = ("name,text,label,target\n" + "".join(lines)).encode()
    assert len(body) > 5 * 2**20
    with io.BytesIO(body) as memory, upload_parsing.tempfile.TemporaryFile() as file:
        file.write(memory.getvalue())
        upload_parsing.objects_rows(file)  # starts the fork server, outside the measure
        tracemalloc.start()
        try:
            parsed = upload_parsing.objects_rows(file)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert handed == [str, str]
    assert peak < len(body) / 20, f"peak {peak} bytes for a {len(body)}-byte upload"
    assert isinstance(parsed, objects.ObjectRows) and len(parsed) == 10**5
    last = list(parsed.parts())[-1]
    assert json.loads(last.rows_json)[-1] == {
        "name": "object 99999",
        "text": "a description of object 99999",
        "label": "c4",
        "target": 33333.0,
    }


def test_the_reply_sent_in_pieces_is_one_json_document_of_its_length(
    client, auth_headers, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(imports, "CHUNK_ROWS", 7)  # a reply of several pieces
    make_project(client, auth_headers, "pieces")
    csv_text = b"name,label\n" + b"".join(b"o%d,l%d\n" % (i, i) for i in range(30))
    response = client.post(
        "/api/projects/pieces/objects",
        content=csv_text,
        headers={**auth_headers, "Content-Type": "text/csv"},
    )
    assert response.status_code == 201, response.text
    assert int(response.headers["content-length"]) == len(response.content)
    body = response.json()
    assert body["count"] == 30
    assert [o["name"] for o in body["data"]] == [f"o{i}" for i in range(30)]
    assert body["data"][29]["index"] == body["data"][0]["index"] + 29

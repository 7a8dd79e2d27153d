"""Researcher routes for a project's objects."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from pydantic import TypeAdapter

from app.api.deps import ObjectIndex, Offset, OwnedProject, SessionDep
from app.api.turns import run_import
from app.api.uploads import PiecesResponse, read_upload, upload_body
from app.errors import InvalidInput
from app.schemas.objects import (
    ObjectCreate,
    ObjectPublic,
    ObjectsCreated,
    ObjectsPublic,
    ObjectUpdate,
)
from app.services import image_zip, imports, upload_parsing
from app.services import objects as service

_PUBLIC_LIST = TypeAdapter(list[ObjectPublic])

router = APIRouter(prefix="/api/projects/{slug}/objects", tags=["objects"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ObjectsCreated,
    openapi_extra=upload_body(
        {"type": "array", "items": ObjectCreate.model_json_schema()},
        "A JSON list of objects, or a CSV (columns name, text, image_url, label, target, "
        "f0..fk) as the body or a multipart upload (field `file`), or a ZIP of images "
        "(optionally with an `objects.csv`: name, text, label, target, f0..fk).",
    ),
)
async def create_objects(project: OwnedProject, db: SessionDep, request: Request) -> Response:
    """Append objects; each gets the next ``index`` (0, 1, 2, … in upload order, forever)."""
    upload = await read_upload(request)
    # Parsing, unpacking and storing run in a worker thread, or a process of its own for a
    # large CSV or JSON: never on the event loop. A CSV or JSON is stored a chunk per
    # transaction, each in its turn with the workers' requests, hidden until the last.
    if upload.file is not None and (
        upload.filename.lower().endswith(".zip") or upload.head == b"PK\x03\x04"
    ):
        rows = await run_in_threadpool(image_zip.add_image_zip, db, project, upload.file)
        return await run_in_threadpool(lambda: _created(_created_json(rows), len(rows)))
    if upload.json_body is None and not (
        upload.filename.lower().endswith(".csv") or "csv" in upload.content_type
    ):
        raise InvalidInput("upload a .csv or a .zip of images (multipart field 'file')")
    parsed = await run_in_threadpool(upload_parsing.objects_rows, upload.file, upload.json_body)
    # The reply is made as the chunks are stored (from JSON the parsing process rendered):
    # the rows are never all alive at once.
    parts: list[bytes] = []
    steps = service.import_objects(
        db, project, parsed, stored=lambda first, chunk: parts.append(chunk.public_json(first))
    )
    count = await run_import(steps)
    return await run_in_threadpool(_created, parts, count)


def _json(rows: list[dict]) -> bytes:
    """Objects as the items of a JSON list (without its brackets)."""
    return _PUBLIC_LIST.dump_json([ObjectPublic.model_validate(r) for r in rows])[1:-1]


def _created_json(rows: list[dict]) -> list[bytes]:
    """The items of the ``ObjectsCreated`` list, serialised a chunk at a time (one call over
    many objects would hold the interpreter lock, and so the event loop, for the whole of it)."""
    step = imports.CHUNK_ROWS
    return [_json(rows[i : i + step]) for i in range(0, len(rows), step)]


def _created(parts: list[bytes], count: int) -> Response:
    """The reply, sent a part at a time (joined, 40 MiB held the event loop 0.2-0.4 s)."""
    pieces = [b'{"data":[']
    for part in parts:
        if part:
            pieces += [b",", part] if len(pieces) > 1 else [part]
    pieces.append(b'],"count":%d}' % count)
    return PiecesResponse(pieces, status.HTTP_201_CREATED, "application/json")


@router.get("", response_model=ObjectsPublic)
def read_objects(
    project: OwnedProject,
    db: SessionDep,
    offset: Offset = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> ObjectsPublic:
    objects = service.list_objects(db, project, offset, limit)
    return ObjectsPublic(
        data=[ObjectPublic.model_validate(o) for o in objects], count=project.n_objects
    )


@router.get("/{index}", response_model=ObjectPublic)
def read_object(project: OwnedProject, db: SessionDep, index: ObjectIndex) -> ObjectPublic:
    return ObjectPublic.model_validate(service.get_object(db, project, index))


@router.patch("/{index}", response_model=ObjectPublic)
def update_object(
    project: OwnedProject,
    db: SessionDep,
    index: Annotated[int, Path(ge=0, le=2**31 - 1)],
    data: ObjectUpdate,
) -> ObjectPublic:
    """Change an object's label, target and/or text (null clears one); its index, name, image
    and features stay."""
    return ObjectPublic.model_validate(service.update_object(db, project, index, data))

"""Researcher routes for a project's objects."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.concurrency import run_in_threadpool

from app.api.deps import OwnedProject, SessionDep
from app.api.uploads import read_upload, upload_body
from app.errors import InvalidInput
from app.schemas.objects import (
    ObjectCreate,
    ObjectPublic,
    ObjectsCreated,
    ObjectsPublic,
    ObjectUpdate,
)
from app.services import objects as service

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
async def create_objects(project: OwnedProject, db: SessionDep, request: Request) -> ObjectsCreated:
    """Append objects; each gets the next ``index`` (0, 1, 2, … in upload order, forever)."""
    upload = await read_upload(request, list[ObjectCreate])
    # Parsing, unpacking and storing run in a worker thread: never on the event loop.
    if upload.json is not None:
        objects = await run_in_threadpool(service.add_objects, db, project, upload.json)
    elif upload.filename.lower().endswith(".zip") or upload.head == b"PK\x03\x04":
        objects = await run_in_threadpool(service.add_image_zip, db, project, upload.file)
    elif upload.filename.lower().endswith(".csv") or "csv" in upload.content_type:
        parsed = await run_in_threadpool(service.parse_objects_csv, upload.file)
        objects = await run_in_threadpool(service.add_objects, db, project, parsed)
    else:
        raise InvalidInput("upload a .csv or a .zip of images (multipart field 'file')")
    data = [ObjectPublic.model_validate(o) for o in objects]
    return ObjectsCreated(data=data, count=len(data))


@router.get("", response_model=ObjectsPublic)
def read_objects(
    project: OwnedProject,
    db: SessionDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
) -> ObjectsPublic:
    objects = service.list_objects(db, project, offset, limit)
    return ObjectsPublic(
        data=[ObjectPublic.model_validate(o) for o in objects], count=project.n_objects
    )


@router.get("/{index}", response_model=ObjectPublic)
def read_object(project: OwnedProject, db: SessionDep, index: int) -> ObjectPublic:
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

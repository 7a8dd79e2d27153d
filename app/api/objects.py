"""Researcher routes for a project's objects."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.concurrency import run_in_threadpool

from app.api.deps import ObjectIndex, Offset, OwnedProject, SessionDep
from app.api.uploads import read_upload, upload_body
from app.errors import InvalidInput
from app.schemas.objects import ObjectCreate, ObjectPublic, ObjectsCreated, ObjectsPublic
from app.services import objects as service

router = APIRouter(prefix="/api/projects/{slug}/objects", tags=["objects"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ObjectsCreated,
    openapi_extra=upload_body(
        {"type": "array", "items": ObjectCreate.model_json_schema()},
        "A JSON list of objects, or a CSV (columns name, text, image_url, label, target, "
        "f0..fk) as the body or a multipart upload (field `file`), or a ZIP of images.",
    ),
)
async def create_objects(project: OwnedProject, db: SessionDep, request: Request) -> ObjectsCreated:
    """Append objects; each gets the next ``index`` (0, 1, 2, … in upload order, forever)."""
    upload = await read_upload(request, list[ObjectCreate])
    if upload.json is not None:
        objects = await run_in_threadpool(service.add_objects, db, project, upload.json)
    elif upload.filename.lower().endswith(".zip") or upload.content[:4] == b"PK\x03\x04":
        objects = await run_in_threadpool(service.add_image_zip, db, project, upload.content)
    elif upload.filename.lower().endswith(".csv") or "csv" in upload.content_type:
        parsed = service.parse_objects_csv(upload.content)
        objects = await run_in_threadpool(service.add_objects, db, project, parsed)
    else:
        raise InvalidInput("upload a .csv or a .zip of images (multipart field 'file')")
    data = [ObjectPublic.model_validate(o) for o in objects]
    return ObjectsCreated(data=data, count=len(data))


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

"""Researcher routes for the answer log: import comparisons, export every answer."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from app.api.deps import OwnedProject, SessionDep
from app.api.turns import run_import
from app.api.uploads import read_upload, upload_body
from app.schemas.answers import AnswersImport, AnswersImported
from app.services import answers as service
from app.services import upload_parsing
from app.services.pool import answers_arrived

router = APIRouter(prefix="/api/projects/{slug}/answers", tags=["answers"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=AnswersImported,
    openapi_extra=upload_body(
        AnswersImport.model_json_schema(),
        "Triplets [a, b, c] (a closer to b than to c) and pairs [a, b, outcome] as JSON, "
        "or a CSV with columns kind, a, b, c, outcome.",
    ),
)
async def import_answers(
    project: OwnedProject, db: SessionDep, request: Request
) -> AnswersImported:
    """Import comparisons collected elsewhere (source ``import``), all or nothing."""
    upload = await read_upload(request)
    # Parsed in a worker thread, or a process of its own when large: never on the event loop.
    triplets, pairs = await run_in_threadpool(
        upload_parsing.answer_arrays, upload.file, upload.json_body
    )
    # Stored a chunk per transaction, each in its turn with the workers' requests, and
    # hidden until the last.
    n_triplets, n_pairs = await run_import(service.import_answers(db, project, triplets, pairs))
    answers_arrived(db.get_bind(), project.id, project.plan)  # type: ignore[arg-type]
    return AnswersImported(triplets=n_triplets, pairs=n_pairs)


@router.get("", response_class=StreamingResponse)
def export_answers(
    project: OwnedProject,
    db: SessionDep,
    format: Annotated[Literal["json", "csv"], Query()] = "json",
) -> StreamingResponse:
    """Every answer with object indices and names, streamed (JSON array or CSV)."""
    if format == "csv":
        return StreamingResponse(
            service.stream_csv(db, project),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{project.slug}-answers.csv"'},
        )
    return StreamingResponse(service.stream_json(db, project), media_type="application/json")


@router.get("/triplets.npy", response_class=Response)
def export_triplets_npy(project: OwnedProject, db: SessionDep) -> Response:
    """The triplets as an int64 array (m, 3) of rows (a, b, c): a is closer to b than to c;
    an odd-one-out's and a ranked grid's answers give the triplets they imply (the rule of
    ``app.learning.shapes``)."""
    return Response(
        service.npy_bytes(service.triplets_array(db, project)),
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{project.slug}-triplets.npy"'},
    )


@router.get("/{shape}.npy", response_class=Response)
def export_shape_npy(project: OwnedProject, db: SessionDep, shape: str) -> Response:
    """The answers of one shape as given, for tools that model the shape: ``odd_one_out``
    (rows i, j, odd: the odd one last), ``{n}-rank-{k}`` such as ``8-rank-2`` (rows of the
    anchor, the k picks in order, the unpicked candidates) or ``triplet``; int64."""
    return Response(
        service.npy_bytes(service.shape_array(db, project, shape)),
        media_type="application/octet-stream",
        headers={"Content-Disposition": f'attachment; filename="{project.slug}-{shape}.npy"'},
    )

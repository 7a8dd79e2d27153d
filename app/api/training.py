"""Researcher routes to train models and follow their jobs, and retraining policies."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, status
from sqlalchemy import select

from app.api.deps import CurrentKey, OwnedProject, SessionDep
from app.db.models import Project
from app.schemas.models import (
    JobPublic,
    ModelKind,
    ModelPublic,
    ModelsPublic,
    RetrainPolicy,
    TrainRequest,
)
from app.services import models as model_service
from app.training import jobs as job_service
from app.training import retrain as retrain_service

router = APIRouter(tags=["training"])


@router.post(
    "/api/projects/{slug}/models", status_code=status.HTTP_202_ACCEPTED, response_model=JobPublic
)
def create_model(project: OwnedProject, data: TrainRequest, db: SessionDep) -> JobPublic:
    """Queue a training job; 422 says what is missing if it could not succeed."""
    return job_service.create_job(db, project, data.kind, data.params)


@router.get("/api/projects/{slug}/models", response_model=ModelsPublic)
def read_models(
    project: OwnedProject, db: SessionDep, kind: Annotated[ModelKind | None, Query()] = None
) -> ModelsPublic:
    """Every model of the project with its quality figures: the learning curve."""
    models = model_service.list_models(db, project, kind)
    return ModelsPublic(data=[ModelPublic.model_validate(m) for m in models], count=len(models))


@router.get("/api/projects/{slug}/models/latest", response_model=ModelPublic)
def read_latest_model(project: OwnedProject, db: SessionDep, kind: ModelKind) -> ModelPublic:
    return model_service.latest_model(db, project, kind)


@router.get("/api/projects/{slug}/jobs", response_model=list[JobPublic])
def read_jobs(
    project: OwnedProject,
    db: SessionDep,
    status: Annotated[
        str | None, Query(pattern="^(queued|running|succeeded|failed|cancelled)$")
    ] = None,
) -> list[JobPublic]:
    """The project's jobs, newest first (optionally of one status)."""
    return job_service.list_jobs(db, project, status)


def _owned_project_ids(db: SessionDep, key: CurrentKey) -> set[int] | None:
    if key.role == "admin":
        return None
    return set(db.scalars(select(Project.id).where(Project.owner_id == key.id)))


@router.get("/api/jobs/{job_id}", response_model=JobPublic)
def read_job(job_id: int, db: SessionDep, key: CurrentKey) -> JobPublic:
    return job_service.get_job(db, job_id, _owned_project_ids(db, key))


@router.delete("/api/jobs/{job_id}", response_model=JobPublic)
def cancel_job(job_id: int, db: SessionDep, key: CurrentKey) -> JobPublic:
    """Cancel a queued or running job (a finished one is returned unchanged)."""
    job = job_service.get_job(db, job_id, _owned_project_ids(db, key))
    return job_service.cancel_job(db, job)


@router.put("/api/projects/{slug}/retrain")
def update_retrain_policy(
    project: OwnedProject, policy: RetrainPolicy, db: SessionDep
) -> dict[str, Any]:
    """Retrain ``kind`` automatically after every ``every_n_answers`` new answers."""
    return retrain_service.set_policy(db, project, policy)


@router.get("/api/projects/{slug}/retrain")
def read_retrain_policies(project: OwnedProject) -> dict[str, Any]:
    return project.retrain or {}


@router.delete("/api/projects/{slug}/retrain/{kind}", status_code=status.HTTP_204_NO_CONTENT)
def delete_retrain_policy(project: OwnedProject, kind: ModelKind, db: SessionDep) -> None:
    retrain_service.remove_policy(db, project, kind)

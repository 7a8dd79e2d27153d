"""Researcher routes for projects."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from app.api.deps import CurrentKey, OwnedProject, SessionDep
from app.schemas.projects import (
    ProjectCreate,
    ProjectPublic,
    ProjectsPublic,
    ProjectStats,
    ProjectUpdate,
)
from app.services import projects as service

router = APIRouter(prefix="/api/projects", tags=["projects"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ProjectPublic)
def create_project(data: ProjectCreate, db: SessionDep, key: CurrentKey) -> ProjectPublic:
    return service.create_project(db, data, key)


@router.get("", response_model=ProjectsPublic)
def read_projects(db: SessionDep, key: CurrentKey) -> ProjectsPublic:
    projects = service.list_projects(db, key)
    return ProjectsPublic(
        data=[ProjectPublic.model_validate(p) for p in projects], count=len(projects)
    )


@router.get("/{slug}", response_model=ProjectStats)
def read_project(project: OwnedProject, db: SessionDep) -> ProjectStats:
    return service.project_stats(db, project)


@router.patch("/{slug}", response_model=ProjectPublic)
def update_project(project: OwnedProject, data: ProjectUpdate, db: SessionDep) -> ProjectPublic:
    return service.update_project(db, project, data)


@router.delete("/{slug}", status_code=status.HTTP_204_NO_CONTENT)
def delete_project(project: OwnedProject, db: SessionDep, force: bool = False) -> Response:
    service.delete_project(db, project, force=force)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

"""Projects: create, find (with ownership), update and delete."""

from __future__ import annotations

import shutil

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db.models import (
    Answer,
    ApiKey,
    Import,
    Job,
    Model,
    Object,
    Participant,
    Project,
    Query,
    Question,
    WorkSession,
)
from app.db.session import begin_write
from app.db.statistics import analyze_after_bulk
from app.errors import Conflict, NotFound
from app.learning.shapes import TYPES
from app.schemas.plans import Plan
from app.schemas.projects import ProjectCreate, ProjectStats, ProjectUpdate
from app.services.imports import visible_answers


def get_project(
    db: Session, slug: str, key: ApiKey | None = None, *, lock: bool = False
) -> Project:
    """The project ``slug`` as seen by ``key``; a researcher's others' projects do not exist."""
    statement = select(Project).where(Project.slug == slug)
    if lock:
        statement = statement.with_for_update(key_share=True)  # see lock_project
    project = db.scalar(statement)
    if project is None or (key is not None and key.role != "admin" and project.owner_id != key.id):
        raise NotFound(f"no project with slug {slug!r}")
    return project


def lock_project(db: Session, project: Project, *, durable: bool = False) -> Project:
    """Start a writing transaction holding ``project``'s row, refreshed, until commit
    (``durable``: see :func:`app.db.session.begin_write`).

    PostgreSQL: ``FOR NO KEY UPDATE``, which serialises the project's holders but not the
    rows that refer to it (a worker's answer checks its foreign key with ``FOR KEY SHARE``):
    the round trips go on while a project is held (see ``round_trip_sql``)."""
    begin_write(db, durable=durable)
    hold_project(db, project)
    return project


def hold_project(db: Session, project: Project) -> None:
    """Lock ``project``'s row for the rest of the current transaction (as
    :func:`lock_project` does), its values re-read as last committed."""
    db.refresh(project, with_for_update={"key_share": True})


def project_plan(project: Project) -> Plan | None:
    """The project's collection plan, or None before one is set."""
    return Plan.model_validate(project.plan) if project.plan else None


def list_projects(db: Session, key: ApiKey) -> list[Project]:
    statement = select(Project).order_by(Project.id)
    if key.role != "admin":
        statement = statement.where(Project.owner_id == key.id)
    return list(db.scalars(statement))


def create_project(db: Session, data: ProjectCreate, owner: ApiKey | None) -> Project:
    begin_write(db)
    if db.scalar(select(Project.id).where(Project.slug == data.slug)) is not None:
        raise Conflict(f"the slug {data.slug!r} is taken")
    values = data.model_dump(exclude_none=True)
    project = Project(**values, owner_id=owner.id if owner else None)
    db.add(project)
    db.commit()
    return project


def update_project(db: Session, project: Project, data: ProjectUpdate) -> Project:
    lock_project(db, project)
    for field, value in data.model_dump(exclude_unset=True).items():
        if value is not None:
            setattr(project, field, value)
    db.commit()
    return project


def count_answers(db: Session, project: Project) -> dict[str, int]:
    rows = db.execute(
        select(Answer.kind, func.count())
        .where(Answer.project_id == project.id, visible_answers())
        .group_by(Answer.kind)
    ).all()
    counts = {kind: n for kind, n in rows}
    return {kind: counts.get(kind, 0) for kind in TYPES}


def project_stats(db: Session, project: Project) -> ProjectStats:
    counts = count_answers(db, project)
    n_participants = db.scalar(
        select(func.count())
        .select_from(Participant)
        .where(Participant.project_id == project.id, Participant.platform != "preview")
    )
    return ProjectStats.model_validate(
        {
            **{k: getattr(project, k) for k in ProjectStats.model_fields if hasattr(project, k)},
            "n_answers": sum(counts.values()),
            "n_triplets": counts["triplet"],
            "n_pairs": counts["pair"],
            "n_odd_one_out": counts["odd_one_out"],
            "n_rank": counts["rank"],
            "n_participants": n_participants or 0,
        }
    )


def delete_project(db: Session, project: Project, *, force: bool) -> None:
    """Delete a project and everything in it; refuse while it holds answers unless forced.

    Safe while workers answer (issue 13, item 5). First the project stops issuing: its plan
    is removed in a transaction of its own, which waits for the requests issuing under the
    project's row lock, and every later one finds no plan and issues nothing. Then one
    transaction takes the rows a worker's request locks first, in the same order (the
    project's sessions, then the project's row), and deletes the project's rows table by
    table, so the deletion and a request wait for each other at most once and never in a
    cycle: on PostgreSQL, deleting the project's row first (cascading from it) deadlocked
    with answers under load. Workers then get 404 (no session, unknown
    token) instead of a lock error.
    """
    lock_project(db, project)
    counts = count_answers(db, project)
    n_answers = sum(counts.values())
    if n_answers and not force:
        raise Conflict(
            f"project {project.slug!r} holds {n_answers} answers; export them first, "
            "then delete with ?force=true"
        )
    slug, project_id = project.slug, project.id
    project.plan = None
    db.commit()

    begin_write(db)
    # A worker's transaction locks its session's row, then the project's (sessions.py):
    # take the same rows in the same order, so that the deletion waits for the requests in
    # flight and later ones wait for it, never in a cycle.
    sessions = WorkSession.__table__
    db.execute(
        select(sessions.c.id)
        .where(sessions.c.project_id == project_id)
        .order_by(sessions.c.id)
        .with_for_update()
    )
    db.execute(select(Project.id).where(Project.id == project_id).with_for_update())
    deleted = {
        table.name: db.execute(delete(table).where(table.c.project_id == project_id)).rowcount
        for table in DELETE_ORDER
    }
    db.execute(delete(Project.__table__).where(Project.__table__.c.id == project_id))
    db.commit()
    db.expunge(project)
    analyze_after_bulk(db, deleted)  # the tables may have lost most of their rows
    media = get_settings().data_dir / "media" / slug
    shutil.rmtree(media, ignore_errors=True)


# Answers (the big table, in bulk rather than by the ORM's cascade), then the tables in the
# order a worker's answer locks their rows; the project's own row goes last.
DELETE_ORDER = tuple(
    model.__table__
    for model in (Answer, Import, Query, Question, WorkSession, Participant, Model, Job, Object)
)

"""Automatic retraining: a policy per (project, kind), checked by the job runner."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.models import Answer, Job, Project
from app.errors import AppError, NotFound
from app.schemas.models import RetrainPolicy
from app.services.imports import visible_answers
from app.services.projects import lock_project
from app.training.jobs import ACTIVE, create_job, parse_params


def set_policy(db: Session, project: Project, policy: RetrainPolicy) -> dict[str, Any]:
    """Retrain ``policy.kind`` after every ``every_n_answers`` new answers (counted from now),
    at most once per ``min_interval_s`` and one job at a time."""
    parse_params(policy.kind, policy.params)
    lock_project(db, project)
    watermark = (
        db.scalar(
            select(func.max(Answer.id)).where(Answer.project_id == project.id, visible_answers())
        )
        or 0
    )
    policies = dict(project.retrain or {})
    policies[policy.kind] = {
        **policy.model_dump(mode="json"),
        "last_answer_id": watermark,
        "last_scheduled_at": 0.0,
        "last_skip_reason": "",
    }
    project.retrain = policies
    db.commit()
    return policies[policy.kind]


def remove_policy(db: Session, project: Project, kind: str) -> None:
    lock_project(db, project)
    policies = dict(project.retrain or {})
    if kind not in policies:
        raise NotFound(f"project {project.slug!r} has no retraining policy for {kind!r}")
    del policies[kind]
    project.retrain = policies or None
    db.commit()


def schedule_due(db: Session, now: float | None = None) -> list[int]:
    """Queue a job for every policy whose threshold of new answers was crossed; job ids."""
    now = time.time() if now is None else now
    created = []
    for project in db.scalars(select(Project).where(Project.retrain.is_not(None))).all():
        for kind, policy in (project.retrain or {}).items():
            job_id = _maybe_schedule(db, project, kind, policy, now)
            if job_id is not None:
                created.append(job_id)
    return created


def _maybe_schedule(
    db: Session, project: Project, kind: str, policy: dict, now: float
) -> int | None:
    if now - policy["last_scheduled_at"] < policy["min_interval_s"]:
        return None
    new_answers = db.scalar(
        select(func.count())
        .select_from(Answer)
        .where(Answer.project_id == project.id, Answer.id > policy["last_answer_id"])
        .where(visible_answers())
    )
    if (new_answers or 0) < policy["every_n_answers"]:
        return None
    active = db.scalar(
        select(Job.id).where(Job.project_id == project.id, Job.kind == kind, Job.status.in_(ACTIVE))
    )
    if active is not None:
        return None
    lock_project(db, project)
    policies = dict(project.retrain or {})
    current = policies.get(kind)
    if current is None or current["last_answer_id"] != policy["last_answer_id"]:
        db.rollback()  # another process scheduled it meanwhile
        return None
    watermark = db.scalar(
        select(func.max(Answer.id)).where(Answer.project_id == project.id, visible_answers())
    )
    job_id = None
    try:
        job = create_job(db, project, kind, current["params"], trigger="auto")
        job_id = job.id
        reason = ""
    except AppError as error:
        db.rollback()
        reason = error.detail
    lock_project(db, project)
    policies = dict(project.retrain or {})
    policies[kind] = {
        **policies[kind],
        "last_answer_id": watermark,
        "last_scheduled_at": now,
        "last_skip_reason": reason,
    }
    project.retrain = policies
    db.commit()
    return job_id

"""The crowd's reliability, kept current off the request path.

Two hooks, neither on a worker's request:

* :func:`schedule_reliability` (the job runner's tick, beside the retraining policies)
  queues a ``reliability`` job of a project once ``quality.reliability_every`` new answers
  from participants arrived since its last reliability model — or a tenth of the answers
  that model saw, if more: on a large project a recomputation costs more, and one answer
  in ten moves the estimates little;
* :func:`store_reliability` (the training job, right after it stored a reliability model)
  writes each participant's reliability and interval on their row and, with the plan's
  ``quality.min_reliability``, flags or clears them (never after a researcher decided by
  hand). The round trip's own review keeps such a flag
  (:func:`app.services.quality.kept_reliability_reasons`).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.db.models import Answer, Job, Model, Participant, Project, utcnow
from app.db.session import begin_write
from app.errors import AppError
from app.learning.shapes import TYPES
from app.schemas.plans import Plan
from app.services.imports import visible_answers
from app.services.quality import failures, kept_reliability_reasons, list_quality
from app.training.jobs import ACTIVE, create_job

log = logging.getLogger(__name__)
KIND = "reliability"
RETRY_FAILED_AFTER = timedelta(seconds=60)  # a failed recomputation is not retried sooner
GROWTH = 0.1  # recompute after this share of the answers the last model saw, if more


def schedule_reliability(db: Session) -> list[int]:
    """Queue the reliability jobs that projects are due; the new jobs' ids."""
    created = []
    for project in db.scalars(select(Project).where(Project.plan.is_not(None))).all():
        every = int(((project.plan or {}).get("quality") or {}).get("reliability_every", 50))
        if every <= 0:
            continue
        job_id = _maybe_schedule(db, project, every)
        if job_id is not None:
            created.append(job_id)
    db.rollback()  # end the read transaction (SQLite: it would hold back writers' view)
    return created


def _crowd_answers(project: Project):  # type: ignore[no-untyped-def]
    return (
        select(func.count())
        .select_from(Answer)
        .where(Answer.project_id == project.id, Answer.participant_id.is_not(None))
        .where(Answer.kind.in_(TYPES), visible_answers())  # every shape's answers count
        .where((Answer.strategy.is_(None)) | (Answer.strategy != "gold"))
    )


def _maybe_schedule(db: Session, project: Project, every: int) -> int | None:
    latest = db.execute(
        select(Model.last_answer_id, Model.n_answers)
        .where(Model.project_id == project.id, Model.kind == KIND)
        .order_by(Model.version.desc())
        .limit(1)
    ).first()
    watermark, seen = (latest.last_answer_id or 0, latest.n_answers) if latest else (0, 0)
    new = db.scalar(_crowd_answers(project).where(Answer.id > watermark)) or 0
    if new < max(every, int(GROWTH * seen)):
        return None
    job = db.scalars(
        select(Job)
        .where(Job.project_id == project.id, Job.kind == KIND)
        .order_by(Job.id.desc())
        .limit(1)
    ).first()
    if job is not None and job.status in ACTIVE:
        return None
    recent = utcnow() - RETRY_FAILED_AFTER
    if job is not None and job.status == "failed" and job.created_at > recent:
        return None
    try:
        return create_job(db, project, KIND, _params(project), trigger="reliability").id
    except AppError as error:  # not enough answers from participants yet
        db.rollback()
        log.debug("reliability of project %s not queued: %s", project.slug, error.detail)
        return None


def _params(project: Project) -> dict[str, Any]:
    """The job's params: the embedding's dimension is the plan's adaptive one, if any."""
    for spec in (project.plan or {}).get("strategies", []):
        params = spec.get("params") or {}
        if spec.get("kind") == "adaptive" and params.get("kind", "embedding") == "embedding":
            return {"dims": int(params.get("dims", 2))}
    return {}


def store_reliability(db: Session, project_id: int, model: Model, artifact: dict[str, Any]) -> int:
    """Write the reliabilities of ``model`` (a ``reliability`` model) on the participants'
    rows and review their flags by the plan's ``quality.min_reliability``; how many rows
    were written. Older reliability models lose their per-answer weights (the latest
    model's are the ones training reads), so the table does not grow with every rerun."""
    project = db.get(Project, project_id)
    if project is None:
        return 0
    workers = np.asarray(artifact["workers"], dtype=np.int64)
    reliability = np.asarray(artifact["reliability"], dtype=float)
    interval = np.asarray(artifact["interval"], dtype=float).reshape(-1, 2)
    begin_write(db)
    rows = [
        {"pid": int(w), "r": float(r), "low": float(lo), "high": float(hi)}
        for w, r, (lo, hi) in zip(workers, reliability, interval, strict=True)
    ]
    for row in rows:
        db.execute(
            update(Participant)
            .where(Participant.id == row["pid"], Participant.project_id == project_id)
            .values(reliability=row["r"], reliability_low=row["low"], reliability_high=row["high"])
        )
    if project.plan:
        _review_flags(db, project, Plan.model_validate(project.plan), set(workers.tolist()))
    db.execute(
        update(Model)
        .where(Model.project_id == project_id, Model.kind == KIND, Model.id < model.id)
        .where(Model.artifact != b"")
        .values(artifact=b"")
    )
    db.commit()
    return len(rows)


def _review_flags(db: Session, project: Project, plan: Plan, reviewed: set[int]) -> None:
    """The automatic flag of every participant the model judged, from all the checks."""
    participants = {
        p.id: p
        for p in db.scalars(select(Participant).where(Participant.project_id == project.id))
        if p.id in reviewed and not p.flag_manual
    }
    for quality in list_quality(db, project):
        participant = participants.get(quality.id)
        if participant is None:
            continue
        reasons = failures(quality, plan.quality)
        reasons += kept_reliability_reasons(quality, participant.flag_reason)
        flagged, reason = bool(reasons), "; ".join(reasons)
        if (flagged, reason) != (participant.flagged, participant.flag_reason):
            participant.flagged, participant.flag_reason = flagged, reason

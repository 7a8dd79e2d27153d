"""Training jobs as rows: create (after checking they can run), claim, cancel, re-queue."""

from __future__ import annotations

from datetime import timedelta

from pydantic import ValidationError
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.db.models import Job, Project, utcnow
from app.db.session import begin_write
from app.errors import InvalidInput, NotFound
from app.training.data import load_training_data
from app.training.kinds import get_kind

ACTIVE = ("queued", "running")
STALE_AFTER = timedelta(seconds=30)  # no heartbeat for this long: the job's process is gone


def parse_params(kind: str, params: dict):  # type: ignore[no-untyped-def]
    spec = get_kind(kind)
    try:
        return spec.params.model_validate(params)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise InvalidInput(f"params.{where}: {first['msg']}") from error


def check_trainable(db: Session, project: Project, kind: str, params: dict) -> None:
    """Refuse (422, saying what is missing) a job that could not succeed."""
    parsed = parse_params(kind, params)
    data = load_training_data(db, project, include_flagged=parsed.include_flagged)
    spec = get_kind(kind)
    if spec.load is not None:
        spec.load(db, project, data, parsed)
    missing = spec.requirements(data, parsed)
    if missing:
        raise InvalidInput("; ".join(missing))


def create_job(
    db: Session, project: Project, kind: str, params: dict, trigger: str = "request"
) -> Job:
    check_trainable(db, project, kind, params)
    begin_write(db)
    job = Job(project_id=project.id, kind=kind, params=params, status="queued", trigger=trigger)
    db.add(job)
    db.commit()
    return job


def get_job(db: Session, job_id: int, project_ids: set[int] | None = None) -> Job:
    job = db.get(Job, job_id)
    if job is None or (project_ids is not None and job.project_id not in project_ids):
        raise NotFound(f"no job {job_id}")
    return job


def list_jobs(
    db: Session, project: Project, status: str | None = None, limit: int = 200
) -> list[Job]:
    return find_jobs(db, {project.id}, status, 0, limit)[0]


def find_jobs(
    db: Session, project_ids: set[int] | None, status: str | None, offset: int, limit: int
) -> tuple[list[Job], int]:
    """One page of the jobs of ``project_ids`` (None: every project), newest first, and how
    many match in all."""
    where = []
    if project_ids is not None:
        where.append(Job.project_id.in_(project_ids))
    if status:
        where.append(Job.status == status)
    total = db.scalar(select(func.count()).select_from(Job).where(*where)) or 0
    page = db.scalars(select(Job).where(*where).order_by(Job.id.desc()).offset(offset).limit(limit))
    return list(page), total


def project_slugs(db: Session, jobs: list[Job]) -> dict[int, str]:
    """The slugs of the jobs' projects, by project id, in one query."""
    ids = {job.project_id for job in jobs}
    if not ids:
        return {}
    return dict(db.execute(select(Project.id, Project.slug).where(Project.id.in_(ids))).all())


def cancel_job(db: Session, job: Job) -> Job:
    """Cancel a queued or running job; a running one stops at its next progress report."""
    begin_write(db)
    db.refresh(job)
    if job.status in ACTIVE:
        job.status = "cancelled"
        job.finished_at = utcnow()
        db.commit()
    return job


def requeue_stale(db: Session) -> int:
    """Put back in the queue the running jobs whose process stopped beating (a restart)."""
    cutoff = utcnow() - STALE_AFTER
    begin_write(db)
    result = db.execute(
        update(Job)
        .where(Job.status == "running")
        .where((Job.heartbeat_at.is_(None)) | (Job.heartbeat_at < cutoff))
        .values(status="queued", progress=0.0, progress_text="re-queued after a restart")
    )
    db.commit()
    return result.rowcount or 0


def requeue(db: Session, job_ids: list[int], reason: str) -> int:
    """Put the running jobs ``job_ids`` back in the queue (their process was stopped)."""
    begin_write(db)
    result = db.execute(
        update(Job)
        .where(Job.id.in_(job_ids), Job.status == "running")
        .values(status="queued", progress=0.0, progress_text=reason)
    )
    db.commit()
    return result.rowcount or 0


def claim_next(db: Session) -> Job | None:
    """Take the oldest queued job for this process (safe with several app processes)."""
    candidate = db.scalar(select(Job.id).where(Job.status == "queued").order_by(Job.id).limit(1))
    if candidate is None:
        return None
    return claim_job(db, candidate)


def claim_job(db: Session, candidate: int) -> Job | None:
    """Mark job ``candidate`` running for this process, unless another process took it."""
    begin_write(db)
    claimed = db.execute(
        update(Job)
        .where(Job.id == candidate, Job.status == "queued")
        .values(
            status="running",
            started_at=utcnow(),
            heartbeat_at=utcnow(),
            attempts=Job.attempts + 1,
            progress_text="starting",
        )
    ).rowcount
    db.commit()
    return db.get(Job, candidate) if claimed else None


def mark_failed(db: Session, job_id: int, error: str) -> None:
    begin_write(db)
    db.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_(ACTIVE))
        .values(status="failed", error=error[-4000:], finished_at=utcnow())
    )
    db.commit()

"""Running one training job: load the answers, fit, measure, store the model."""

from __future__ import annotations

import io
import logging
import pickle
import time
import traceback
from collections.abc import Callable

import numpy as np
from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.db.models import Job, Model, Project, utcnow
from app.db.session import begin_write
from app.services.adaptive import refresh_batches
from app.services.reliability import store_reliability
from app.training.data import load_answer_weights, load_training_data
from app.training.jobs import claim_job, create_job, parse_params
from app.training.kinds import get_kind

PROGRESS_EVERY_S = 0.5
log = logging.getLogger(__name__)


class JobCancelled(Exception):
    """The job's row says it was cancelled while it ran."""


def dump_artifact(artifact: dict) -> bytes:
    buffer = io.BytesIO()
    pickle.dump(artifact, buffer, protocol=pickle.HIGHEST_PROTOCOL)
    return buffer.getvalue()


def load_artifact(blob: bytes) -> dict:
    # Artifacts are written only by this service's own training jobs.
    return pickle.loads(blob)


def progress_reporter(db: Session, job_id: int) -> Callable[[float, str], None]:
    """A ``(fraction, text)`` callback that writes the job's progress (at most twice a
    second) and raises :class:`JobCancelled` once the job was cancelled."""
    last = 0.0

    def report(fraction: float, text: str) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last < PROGRESS_EVERY_S and fraction < 1.0:
            return
        last = now
        begin_write(db)  # end any read transaction first: SQLite cannot upgrade a stale one
        updated = db.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == "running")
            .values(progress=min(max(fraction, 0.0), 1.0), progress_text=text[:200])
        ).rowcount
        db.commit()
        if not updated:
            raise JobCancelled(f"job {job_id} was cancelled")

    return report


def _after_model(
    db: Session,
    project_id: int,
    model: Model,
    artifact: dict,
    triplets: np.ndarray,
    pairs: np.ndarray | None = None,
) -> None:
    """Hooks on a stored model: adaptive strategies score their next questions with it; a
    reliability model's figures go to its participants. A failure here is logged; the model
    stays stored."""
    try:
        refresh_batches(db, project_id, model, artifact, triplets, pairs)
    except Exception:
        db.rollback()
        log.exception("scoring adaptive questions with model %s failed", model.id)
    if model.kind == "reliability":
        try:
            store_reliability(db, project_id, model, artifact)
        except Exception:
            db.rollback()
            log.exception("storing the participants' reliability of model %s failed", model.id)


def run_training(
    db: Session, job_id: int, extra_progress: Callable[[float, str], None] | None = None
) -> str:
    """Run job ``job_id`` (already claimed: status running) and return its final status."""
    job = db.get(Job, job_id)
    if job is None or job.status != "running":
        return job.status if job else "missing"
    project = db.get(Project, job.project_id)
    assert project is not None
    report = progress_reporter(db, job_id)

    def progress(fraction: float, text: str) -> None:
        report(fraction, text)
        if extra_progress is not None:
            extra_progress(fraction, text)

    started = time.perf_counter()
    try:
        params = parse_params(job.kind, job.params)
        progress(0.0, "loading answers")
        data = load_training_data(db, project, include_flagged=params.include_flagged)
        if params.weighting == "reliability":
            load_answer_weights(db, project, data)
        kind = get_kind(job.kind)
        if kind.load is not None:
            kind.load(db, project, data, params)
        missing = kind.requirements(data, params)
        if missing:
            raise ValueError("; ".join(missing))
        db.commit()  # hold no transaction (on SQLite: no lock) while fitting
        trained = kind.train(data, params, progress)
        seconds = time.perf_counter() - started
        begin_write(db)
        version = (
            db.scalar(
                select(func.max(Model.version)).where(
                    Model.project_id == project.id, Model.kind == job.kind
                )
            )
            or 0
        ) + 1
        model = Model(
            project_id=project.id,
            job_id=job.id,
            kind=job.kind,
            version=version,
            params=params.model_dump(mode="json"),
            n_answers=len(data.triplets) + len(data.pairs),
            first_answer_id=data.first_answer_id,
            last_answer_id=data.last_answer_id,
            metrics=trained.metrics,
            training_seconds=seconds,
            artifact=dump_artifact(trained.artifact),
        )
        db.add(model)
        db.flush()
        finished = db.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == "running")
            .values(
                status="succeeded",
                progress=1.0,
                progress_text=f"model {model.id} (version {version})",
                model_id=model.id,
                finished_at=utcnow(),
            )
        ).rowcount
        if not finished:  # cancelled at the very end: keep nothing
            db.rollback()
            return "cancelled"
        db.commit()
        _after_model(db, project.id, model, trained.artifact, data.triplets, data.pairs)
        if extra_progress is not None:
            extra_progress(1.0, "done")
        return "succeeded"
    except JobCancelled:
        db.rollback()
        return "cancelled"
    except Exception as error:  # a job's failure is recorded, never raised into serving
        db.rollback()
        begin_write(db)
        detail = f"{type(error).__name__}: {error}"
        db.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == "running")
            .values(
                status="failed",
                error=(detail + "\n" + traceback.format_exc(limit=5))[-4000:],
                finished_at=utcnow(),
            )
        )
        db.commit()
        return "failed"


def train_now(
    db: Session,
    project: Project,
    kind: str,
    params: dict,
    trigger: str = "cli",
    progress: Callable[[float, str], None] | None = None,
) -> Job:
    """Queue a job (422 if it could not succeed), run it in this process, and return it."""
    job = create_job(db, project, kind, params, trigger=trigger)
    claim_job(db, job.id)
    run_training(db, job.id, extra_progress=progress)
    db.expire_all()  # the job's row was updated by the training code's own statements
    finished = db.get(Job, job.id)
    assert finished is not None
    return finished

"""Keeping the ``adaptive`` strategy's batch of scored questions fresh, ahead of demand.

Two hooks, neither on a worker's request:

* :func:`schedule_refits` (the job runner's tick, beside the retraining policies) queues
  a training job of the model an adaptive strategy follows — an ``embedding`` of its
  ``method`` and ``dims``, a ``kernel`` k1/k2, or for pairs a ``bradley_terry`` (or
  ``svmcompare``) ranking — once ``refresh_every`` new answers of its kind arrived since
  the last such model;
* :func:`refresh_batches` (the training job, right after it stored a model) scores the
  next batch with that model and stores it in the strategy's state, under the project's
  lock. Issuing a question then only takes the next row of the batch.
"""

from __future__ import annotations

import copy
import logging
import time
from datetime import timedelta
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.active.adaptive import AdaptiveTriplets
from app.db.models import Answer, Job, Model, Project, utcnow
from app.errors import AppError
from app.learning.bradley_terry import calibrate_link
from app.schemas.plans import Plan
from app.services.imports import visible_answers
from app.services.pool import discard_unasked, planner_for
from app.services.projects import lock_project
from app.training.jobs import ACTIVE, create_job

log = logging.getLogger(__name__)
RETRY_FAILED_AFTER = timedelta(seconds=60)  # a failed refit is not retried sooner


def adaptive_strategies(project: Project) -> list[tuple[int, AdaptiveTriplets, dict]]:
    """``(position, strategy, spec)`` of every adaptive strategy in ``project``'s plan."""
    if not project.plan:
        return []
    plan = Plan.model_validate(project.plan)
    if not any(spec.kind == AdaptiveTriplets.kind for spec in plan.strategies):
        return []
    planner = planner_for(project, plan)
    return [
        (position, planned.strategy, plan.strategies[position].model_dump())
        for position, planned in enumerate(planner.planned)
        if isinstance(planned.strategy, AdaptiveTriplets)
    ]


def _latest_followed(db: Session, project: Project, strategy: AdaptiveTriplets) -> Model | None:
    models = db.scalars(
        select(Model)
        .where(Model.project_id == project.id, Model.kind == strategy.model_kind)
        .order_by(Model.version.desc())
        .limit(20)
    )
    return next((m for m in models if strategy.follows(m.kind, m.params)), None)


def schedule_refits(db: Session, now: float | None = None) -> list[int]:
    """Queue the refits that adaptive strategies are due; the new jobs' ids."""
    del now  # the threshold is in answers; kept for symmetry with schedule_due
    created = []
    projects = db.scalars(select(Project).where(Project.plan.is_not(None))).all()
    for project in projects:
        for _, strategy, _ in adaptive_strategies(project):
            job_id = _maybe_refit(db, project, strategy)
            if job_id is not None:
                created.append(job_id)
    db.rollback()  # end the read transaction: on SQLite it would hold back writers' view
    return created


def _maybe_refit(db: Session, project: Project, strategy: AdaptiveTriplets) -> int | None:
    latest = _latest_followed(db, project, strategy)
    watermark = (latest.last_answer_id or 0) if latest is not None else 0
    new_answers = db.scalar(
        select(func.count())
        .select_from(Answer)
        .where(Answer.project_id == project.id, Answer.id > watermark)
        .where(Answer.kind == strategy.answer_kind)
        .where(visible_answers())
    )
    if (new_answers or 0) < strategy.refresh_every:
        return None
    jobs = db.scalars(
        select(Job)
        .where(Job.project_id == project.id, Job.kind == strategy.model_kind)
        .order_by(Job.id.desc())
        .limit(20)
    ).all()
    params = strategy.model_params()
    for job in jobs:
        if any(job.params.get(key) != value for key, value in params.items()):
            continue  # a job for another model of the same kind
        if job.status in ACTIVE:
            return None
        if job.status == "failed" and job.created_at > utcnow() - RETRY_FAILED_AFTER:
            return None
        break
    try:
        return create_job(db, project, strategy.model_kind, params, trigger="adaptive").id
    except AppError as error:  # not trainable yet (too few triplets): try again later
        db.rollback()
        log.debug("adaptive refit of project %s not queued: %s", project.slug, error.detail)
        return None


def refresh_batches(
    db: Session,
    project_id: int,
    model: Model,
    artifact: dict[str, Any],
    triplets: np.ndarray,
    pairs: np.ndarray | None = None,
) -> int:
    """Score a new batch for every adaptive strategy of the project that follows ``model``;
    how many strategies were refreshed. Runs in the training job, after the model is stored.
    ``triplets`` and ``pairs`` are the answers the model saw."""
    project = db.get(Project, project_id)
    if project is None:
        return 0
    refreshed = 0
    for position, strategy, spec in adaptive_strategies(project):
        if not strategy.follows(model.kind, model.params):
            continue
        states = (project.plan_state or {}).get("strategies") or []
        old = states[position] if position < len(states) else {}
        started = time.perf_counter()
        embedding = artifact.get("embedding") if model.kind == "embedding" else None
        scores, tie = None, None
        if strategy.variant == "pairs":
            scores, tie = _ranking(model, artifact, pairs)
        new = strategy.refreshed_state(
            old or {},
            triplets,
            embedding=None if embedding is None else np.asarray(embedding),
            model_id=model.id,
            answer_id=model.last_answer_id,
            pairs=pairs,
            scores=scores,
            tie=tie,
        )
        new["seconds"] = round(time.perf_counter() - started, 4)
        lock_project(db, project)
        # The plan may have changed while the batch was scored: store it only where the
        # same strategy still stands.
        current = adaptive_strategies(project)
        if not any(p == position and s == spec for p, _, s in current):
            db.rollback()
            continue
        planner = planner_for(project)
        state = copy.deepcopy(project.plan_state) or planner.initial_state()
        if len(state["strategies"]) != len(planner.planned):  # not this plan's state
            state = planner.initial_state()
        state["strategies"][position] = new
        project.plan_state = state
        discard_unasked(db, project, position)  # the old batch's proposals, never asked
        db.commit()
        refreshed += 1
    return refreshed


def _ranking(
    model: Model, artifact: dict[str, Any], pairs: np.ndarray | None
) -> tuple[np.ndarray, float]:
    """Davidson scores and tie parameter of a ranking model: a Bradley–Terry–Davidson fit's
    own, or SVMcompare's ranking r(x) under a Davidson link fitted to the answers (its own
    comparison function is a hard threshold, which has no uncertainty to score)."""
    ranking = np.asarray(artifact["ranking"], dtype=float)
    if model.kind == "bradley_terry":
        return ranking, float(artifact["tie"])
    answered = np.empty((0, 3), dtype=np.intp) if pairs is None else pairs
    scale, tie = calibrate_link(ranking, answered)
    return scale * ranking, tie

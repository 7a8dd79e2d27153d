"""The budget adviser: how many more answers a model kind needs to reach a target figure."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.models import Answer, Model, Project
from app.errors import InvalidInput
from app.learning.learning_curve import MIN_POINTS, LearningCurveFit, fit_learning_curve
from app.schemas.advice import AdvicePublic, CurveFit, CurvePoint, FittedPoint, Reference
from app.services.imports import visible_answers
from app.training.kinds import KINDS, get_kind

# Points of the fitted curve returned (log-spaced from the first model's answer count on).
CURVE_POINTS = 40


@lru_cache(maxsize=128)
def _fit(
    n_answers: tuple[float, ...], values: tuple[float, ...], lower_is_better: bool
) -> LearningCurveFit:
    """The fit of these points (deterministic: a fixed bootstrap seed), computed once per
    process: the 200 bootstrap refits take about a second, and the dashboard asks for every
    kind's advice on each refresh while the models, and so the points, rarely change. An
    error is fitted negated (a rising curve below 0), see :func:`fit_learning_curve`."""
    if lower_is_better:
        return fit_learning_curve(
            np.array(n_answers), -np.array(values), ceiling=0.0, floor=-np.inf
        )
    return fit_learning_curve(np.array(n_answers), np.array(values))


def _main_metric(kind: str, models: list[Model]) -> str:
    """The kind's accuracy, or its error figure when the models report only that (a
    regression forest)."""
    spec = get_kind(kind)
    reported = {k for m in models for k in (m.metrics or {})}
    if spec.error_metric and spec.metric not in reported and spec.error_metric in reported:
        return spec.error_metric
    return spec.metric


# The kinds' error figures (lower is better); every other figure is an accuracy.
ERROR_METRICS = frozenset(spec.error_metric for spec in KINDS.values() if spec.error_metric)


def lower_is_better(metric: str) -> bool:
    return metric in ERROR_METRICS


def _answers_now(db: Session, project: Project) -> int:
    return int(
        db.scalar(
            select(func.count())
            .select_from(Answer)
            .where(Answer.project_id == project.id, visible_answers())
            .where((Answer.strategy.is_(None)) | (Answer.strategy != "gold"))
        )
        or 0
    )


def _comparable(models: list[Model]) -> tuple[list[Model], dict | None]:
    """The models trained with the same params as the latest one (one curve, one setup)."""
    if not models:
        return [], None
    params = models[-1].params
    return [m for m in models if m.params == params], params


def advise(
    db: Session, project: Project, kind: str, target: float, metric: str | None
) -> AdvicePublic:
    """Learning curve of ``kind`` on ``metric``, its power-law fit with a bootstrap band,
    and the further answers needed to reach ``target``."""
    models = list(
        db.scalars(
            select(Model)
            .where(Model.project_id == project.id, Model.kind == kind)
            .order_by(Model.version)
        )
    )
    models, params = _comparable(models)
    metric = metric or _main_metric(kind, models)
    lower = lower_is_better(metric)
    if not lower and target > 1:
        raise InvalidInput(f"target {target} is above 1, the best {metric} can be")
    sign = -1.0 if lower else 1.0  # the fit and the comparisons run on sign × figure
    better = "≤" if lower else "≥"
    if models and not any(metric in (m.metrics or {}) for m in models):
        known = sorted(
            {k for m in models for k, v in (m.metrics or {}).items() if isinstance(v, float)}
        )
        raise InvalidInput(
            f"metric {metric!r} is not among the {kind} models' figures: {', '.join(known)}"
        )
    points = [
        CurvePoint(model_id=m.id, version=m.version, n_answers=m.n_answers, value=v)
        for m in models
        if isinstance(v := (m.metrics or {}).get(metric), (int, float)) and math.isfinite(v)
    ]
    n_now = _answers_now(db, project)
    reference = _reference(kind, project)
    advice = AdvicePublic(
        kind=kind,
        metric=metric,
        target=target,
        params=params,
        n_answers=n_now,
        points=points,
        fit=None,
        curve=[],
        status="insufficient_data",
        answers_needed=None,
        further_answers=None,
        further_answers_low=None,
        further_answers_high=None,
        message="",
        reference=reference,
    )
    best = max((sign * p.value for p in points), default=None)
    distinct = len({p.n_answers for p in points})
    if distinct < MIN_POINTS:
        advice.message = (
            f"{len(points)} {kind} model(s) at {distinct} answer count(s); the curve needs "
            f"{MIN_POINTS} or more at different answer counts (train again as answers arrive, "
            f"or set a retraining policy)"
        )
        if best is not None and best >= sign * target:
            advice.status, advice.further_answers = "reached", 0
            advice.message = f"reached: {metric} {sign * best:.3f} {better} {target}"
        return advice
    n = np.array([p.n_answers for p in points], dtype=float)
    values = np.array([p.value for p in points])
    y = sign * values
    try:
        fitted = _fit(tuple(n.tolist()), tuple(values.tolist()), lower)
    except ValueError as error:
        advice.message = str(error)
        return advice
    draws = fitted.draws
    asymptote_range = sorted(sign * np.quantile(draws[:, 0], [0.05, 0.95]))
    advice.fit = CurveFit(
        asymptote=sign * fitted.a,
        scale=sign * fitted.b,
        exponent=fitted.c,
        asymptote_low=float(asymptote_range[0]),
        asymptote_high=float(asymptote_range[1]),
        residual_sd=fitted.residual_sd,
    )
    estimate, low, high = fitted.answers_needed(sign * target)
    top = max(n.max(), n_now) * 4
    if math.isfinite(estimate):
        top = max(top, min(estimate * 1.2, n.max() * 100))
    grid = np.unique(np.geomspace(n.min(), top, CURVE_POINTS).round().astype(int))
    lows, highs = fitted.band(grid)
    if lower:
        lows, highs = -highs, -lows
    advice.curve = [
        FittedPoint(n_answers=int(g), value=float(v), low=float(lo), high=float(hi))
        for g, v, lo, hi in zip(grid, sign * fitted.predict(grid), lows, highs, strict=True)
    ]
    if best is not None and best >= sign * target:
        advice.status, advice.further_answers = "reached", 0
        advice.further_answers_low = advice.further_answers_high = 0
        advice.answers_needed = int(n[np.argmax(y >= sign * target)])
        advice.message = f"reached: {metric} {sign * best:.3f} {better} {target}"
        return advice
    if not math.isfinite(estimate):
        advice.status = "not_reachable"
        advice.message = (
            f"not reachable at this rate: the fitted curve levels off at "
            f"{advice.fit.asymptote:.3f} (90% interval {advice.fit.asymptote_low:.3f}–"
            f"{advice.fit.asymptote_high:.3f}), {'above' if lower else 'below'} the target "
            f"{target}"
        )
        return advice
    advice.status = "reachable"
    advice.answers_needed = math.ceil(estimate)
    advice.further_answers = max(0, math.ceil(estimate) - n_now)
    advice.further_answers_low = max(0, math.floor(low) - n_now)
    advice.further_answers_high = max(0, math.ceil(high) - n_now) if math.isfinite(high) else None
    upper = f"{advice.further_answers_high}" if advice.further_answers_high is not None else "never"
    advice.message = (
        f"about {advice.further_answers} more answers (90% interval "
        f"{advice.further_answers_low}–{upper}) to reach {metric} {target}"
    )
    return advice


def _reference(kind: str, project: Project) -> Reference | None:
    """TripletBoost's sample-size order: Ω(n√n) random triplets, below which the learned
    classifier abstains on every example (Perrot & von Luxburg 2019, Example 1 and
    Theorem 5)."""
    if kind != "tripletboost":
        return None
    n = project.n_objects
    return Reference(
        name="n·√n random triplets (lower bound on the order needed)",
        n_answers=math.ceil(n * math.sqrt(n)),
        source="Perrot & von Luxburg (2019), Theorem 5 and Example 1",
    )

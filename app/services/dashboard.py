"""The dashboard's figures: counted and aggregated in SQL, one statement per figure."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Integer, case, cast, distinct, func, literal_column, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.db.models import Answer, ApiKey, Job, Model, Object, Project, Question, utcnow
from app.errors import AppError
from app.schemas.advice import AdvicePublic
from app.services import advice as advice_service
from app.services import models as model_service
from app.services.imports import visible_answers, visible_objects
from app.services.quality import ParticipantQuality, list_quality

ACTIVE_WINDOW = timedelta(minutes=10)
TIMELINE_SPAN = timedelta(hours=24)  # answers over time: at most the last day, per minute
CLIENT_EDGES_MS = (0, 500, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 12000, 20000, 30000)
SERVER_EDGES_MS = (0, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
GALLERY_LIMIT = 60
RANKING_LIMIT = 50
SCATTER_LIMIT = 400
PARTICIPANTS_LIMIT = 300
# Metrics plotted on learning curves: the held-out figures every trainer reports in [0, 1].
_CURVE_SKIP = ("n_", "cv_folds")


@dataclass
class ProjectRow:
    project: Project
    answers_total: int = 0
    answers_today: int = 0
    active_participants: int = 0
    jobs_running: int = 0
    jobs_queued: int = 0


def project_rows(db: Session, projects: list[Project]) -> list[ProjectRow]:
    """Answers today and in total, participants active in the last 10 minutes, and jobs,
    for each of ``projects`` (three grouped statements, whatever their number)."""
    rows = {p.id: ProjectRow(p) for p in projects}
    if not rows:
        return []
    now = utcnow()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    ids = list(rows)
    counted = db.execute(
        select(
            Answer.project_id,
            func.count(),
            func.sum(case((Answer.created_at >= midnight, 1), else_=0)),
            func.count(
                distinct(case((Answer.created_at >= now - ACTIVE_WINDOW, Answer.participant_id)))
            ),
        )
        .where(Answer.project_id.in_(ids), visible_answers())
        .group_by(Answer.project_id)
    )
    for project_id, total, today, active in counted:
        row = rows[project_id]
        row.answers_total, row.answers_today, row.active_participants = (
            total,
            int(today or 0),
            active,
        )
    jobs = db.execute(
        select(Job.project_id, Job.status, func.count())
        .where(Job.project_id.in_(ids), Job.status.in_(("queued", "running")))
        .group_by(Job.project_id, Job.status)
    )
    for project_id, status, n in jobs:
        if status == "running":
            rows[project_id].jobs_running = n
        else:
            rows[project_id].jobs_queued = n
    return list(rows.values())


def _minute(db: Session, column: Any) -> Any:
    """``column`` (a timestamp) as whole minutes since the epoch, in the database's SQL."""
    if db.get_bind().dialect.name == "sqlite":
        # Integer division by a literal (a bound 60 would be cast to NUMERIC and divide exactly).
        return cast(func.strftime("%s", column), Integer).op("/")(literal_column("60"))
    return cast(func.floor(func.extract("epoch", column) / 60), Integer)


def recent_minutes(db: Session, project_ids: list[int], minutes: int = 60) -> dict[int, list[int]]:
    """Answers per minute over the last ``minutes`` for each project (one statement)."""
    if not project_ids:
        return {}
    now = utcnow()
    final = int(now.timestamp() // 60)
    minute = _minute(db, Answer.created_at).label("minute")
    series = {project_id: [0] * minutes for project_id in project_ids}
    for project_id, m, n in db.execute(
        select(Answer.project_id, minute, func.count())
        .where(
            Answer.project_id.in_(project_ids),
            Answer.created_at >= now - timedelta(minutes=minutes),
            visible_answers(),
        )
        .group_by(Answer.project_id, minute)
    ):
        slot = minutes - 1 - (final - int(m))
        if 0 <= slot < minutes:
            series[project_id][slot] = n
    return series


def answers_timeline(db: Session, project: Project) -> list[tuple[datetime, int]]:
    """Answers per minute over the last day that has answers (zeros filled in)."""
    last = db.scalar(
        select(func.max(Answer.created_at)).where(
            Answer.project_id == project.id, visible_answers()
        )
    )
    if last is None:
        return []
    # The last day up to now; for a project quiet for longer, the day up to its last answer.
    end = utcnow()
    if last < end - TIMELINE_SPAN:
        end = last
    start = end - TIMELINE_SPAN
    minute = _minute(db, Answer.created_at).label("minute")
    counts = {
        int(m): n
        for m, n in db.execute(
            select(minute, func.count())
            .where(Answer.project_id == project.id, Answer.created_at >= start)
            .where(visible_answers())
            .group_by(minute)
        )
    }
    if not counts:
        return []
    first, final = min(counts), int(end.timestamp() // 60)
    first = min(first, final - 29)  # at least half an hour, so a fresh project reads well
    return [
        (datetime.fromtimestamp(m * 60, tz=end.tzinfo), int(counts.get(m, 0)))
        for m in range(int(first), final + 1)
    ]


def histogram(db: Session, project: Project, column: Any, edges: tuple[int, ...]) -> list[dict]:
    """Counts of ``column`` (milliseconds) in the bins ``edges`` (the last one open-ended)."""
    bucket = case(
        *[(column < edge, i) for i, edge in enumerate(edges[1:])], else_=len(edges) - 1
    ).label("bucket")
    counts = dict(
        db.execute(
            select(bucket, func.count())
            .where(Answer.project_id == project.id, column.is_not(None), visible_answers())
            .group_by(bucket)
        ).all()
    )
    bins = []
    for i, low in enumerate(edges):
        high = edges[i + 1] if i + 1 < len(edges) else None
        bins.append({"low": low, "high": high, "count": int(counts.get(i, 0))})
    return bins


def response_times(db: Session, project: Project, side: str) -> list[dict]:
    """Histogram of response times as the worker's browser measured them (``client``) or
    as the server spent them storing each answer (``server``)."""
    if side == "client":
        return histogram(db, project, Answer.client_ms, CLIENT_EDGES_MS)
    return histogram(db, project, Answer.server_ms, SERVER_EDGES_MS)


def strategy_progress(db: Session, project: Project) -> list[dict]:
    """Per strategy of the plan: questions created against its budget, answers against
    the answers wanted."""
    plan = project.plan or {}
    specs = plan.get("strategies", [])
    rows = db.execute(
        select(
            Question.strategy_position,
            Question.strategy,
            func.count(),
            func.sum(Question.answered),
            func.sum(Question.wanted),
        )
        .where(Question.project_id == project.id)
        .group_by(Question.strategy_position, Question.strategy)
    ).all()
    found = {position: (name, n, answered, wanted) for position, name, n, answered, wanted in rows}
    result = []
    for position, spec in enumerate(specs):
        name, n, answered, wanted = found.pop(position, (spec.get("kind"), 0, 0, 0))
        budget = spec.get("budget")
        result.append(
            {
                "kind": spec.get("kind", name),
                "weight": spec.get("weight"),
                "budget": budget,
                "questions": n,
                "answered": int(answered or 0),
                "wanted": int(wanted or 0),
                "share": min(1.0, n / budget) if budget else None,
            }
        )
    for _position, (name, n, answered, wanted) in sorted(found.items()):
        result.append(
            {"kind": name, "weight": None, "budget": None, "questions": n,
             "answered": int(answered or 0), "wanted": int(wanted or 0), "share": None}
        )  # fmt: skip
    return result


@dataclass
class Curve:
    kind: str
    metric: str
    points: list[tuple[int, float]] = field(default_factory=list)


def learning_curves(db: Session, project: Project) -> dict[str, list[Curve]]:
    """For each model kind, every model's figures in [0, 1] against the answers it used.

    Read generically from ``models.metrics``: any numeric figure that is not a count.
    """
    rows = db.execute(
        select(Model.kind, Model.version, Model.n_answers, Model.metrics)
        .where(Model.project_id == project.id)
        .order_by(Model.kind, Model.version)
    ).all()
    curves: dict[str, dict[str, Curve]] = {}
    for kind, _version, n_answers, metrics in rows:
        for name, value in (metrics or {}).items():
            if name.startswith(_CURVE_SKIP) or isinstance(value, bool):
                continue
            if isinstance(value, int | float) and math.isfinite(value) and 0 <= value <= 1:
                curve = curves.setdefault(kind, {}).setdefault(name, Curve(kind, name))
                curve.points.append((n_answers, float(value)))
    return {kind: list(by_name.values()) for kind, by_name in curves.items()}


def advice_by_kind(
    db: Session, project: Project, kinds: list[str], target: float
) -> dict[str, AdvicePublic | str]:
    """The budget adviser's answer for each of ``kinds`` on its main figure, or why it has
    none (e.g. a regression forest, whose figure is an error, not an accuracy)."""
    found: dict[str, AdvicePublic | str] = {}
    for kind in kinds:
        try:
            advice = advice_service.advise(db, project, kind, target, None)
        except AppError as error:
            found[kind] = error.detail
            continue
        if advice_service.lower_is_better(advice.metric):
            # The page's target is an accuracy; an error needs a target of its own scale.
            found[kind] = (
                f"{kind} models here report {advice.metric} (an error, lower is better): ask "
                f"GET /api/projects/{project.slug}/advice?kind={kind}&target=<{advice.metric}>"
            )
        else:
            found[kind] = advice
    return found


def model_summaries(db: Session, project: Project) -> list[dict]:
    """The latest model of each kind: version, answers, figures, when."""
    latest = (
        select(Model.kind, func.max(Model.version).label("version"))
        .where(Model.project_id == project.id)
        .group_by(Model.kind)
        .subquery()
    )
    rows = db.execute(
        select(Model.id, Model.kind, Model.version, Model.n_answers, Model.metrics,
               Model.training_seconds, Model.created_at)
        .join(latest, (Model.kind == latest.c.kind) & (Model.version == latest.c.version))
        .where(Model.project_id == project.id)
        .order_by(Model.kind)
    ).all()  # fmt: skip
    return [row._asdict() for row in rows]


def objects_of(db: Session, project: Project) -> list[Object]:
    return list(
        db.scalars(
            select(Object)
            .where(Object.project_id == project.id, visible_objects(project.id))
            .order_by(Object.index)
        )
    )


def _latest(db: Session, project: Project, kinds: tuple[str, ...]) -> Model | None:
    return db.scalar(
        select(Model)
        .where(Model.project_id == project.id, Model.kind.in_(kinds))
        .order_by(Model.created_at.desc(), Model.id.desc())
        .limit(1)
    )


_derived: dict[tuple[int, str], Any] = {}
_derived_lock = threading.Lock()


def _once(model: Model, what: str, compute: Any) -> Any:
    """A figure derived from a stored model, computed once per process (models never change)."""
    key = (model.id, f"{what}:{model.created_at}")
    with _derived_lock:
        if key in _derived:
            return _derived[key]
    value = compute()
    with _derived_lock:
        if len(_derived) > 64:
            _derived.clear()
        _derived[key] = value
    return value


def scatter(db: Session, project: Project, objects: list[Object]) -> dict | None:
    """The latest kernel's 2-d kernel PCA or the latest 2-d embedding, with the objects."""
    model = _latest(db, project, ("kernel", "embedding"))
    if model is None:
        return None
    try:
        points = _once(model, "xy", lambda: model_service.serve(db, model, "embedding", dims=2))
    except AppError as error:  # e.g. a 3-d embedding: say so instead of plotting
        return {"model": model, "points": [], "note": error.detail}
    limit = min(len(points), len(objects), SCATTER_LIMIT)
    rows = [
        {"x": float(points[i][0]), "y": float(points[i][1]), "object": objects[i]}
        for i in range(limit)
    ]
    return {"model": model, "points": rows, "note": ""}


def gallery(db: Session, project: Project) -> dict | None:
    """The latest TripletBoost model's predictions for the unlabelled objects."""
    model = _latest(db, project, ("tripletboost",))
    if model is None:
        return None
    try:
        predictions = _once(
            model, "predictions", lambda: model_service.serve(db, model, "predictions")
        )
    except (AppError, ValueError, IndexError):
        # Objects were added after this model was trained: it cannot speak for them.
        note = "objects were added since this model was trained: train it again"
        return {"model": model, "predictions": [], "total": 0, "note": note}
    return {
        "model": model, "predictions": predictions[:GALLERY_LIMIT], "total": len(predictions),
        "note": "",
    }  # fmt: skip


def ranking(db: Session, project: Project) -> dict | None:
    model = _latest(db, project, ("svmcompare",))
    if model is None:
        return None
    rows = _once(model, "ranking", lambda: model_service.serve(db, model, "ranking"))
    return {"model": model, "rows": rows[:RANKING_LIMIT], "total": len(rows)}


def jobs_of(db: Session, project: Project | None = None, limit: int = 20) -> list[Job]:
    """Queued and running jobs first, then the latest finished ones."""
    statement = select(Job)
    if project is not None:
        statement = statement.where(Job.project_id == project.id)
    active = case((Job.status.in_(("queued", "running")), 0), else_=1)
    return list(db.scalars(statement.order_by(active, Job.id.desc()).limit(limit)))


def participants(db: Session, project: Project) -> tuple[list[ParticipantQuality], int, int]:
    """Participants for the table (flagged first, then by answers), how many there are, and
    how many are flagged."""
    everyone = list_quality(db, project)
    everyone.sort(key=lambda q: (not q.flagged, -q.n_answers, q.id))
    return everyone[:PARTICIPANTS_LIMIT], len(everyone), sum(q.flagged for q in everyone)


def database_size(db: Session) -> int | None:
    """Bytes the database takes on disk (SQLite: the file with its WAL), or None if unknown."""
    bind = db.get_bind()
    if bind.dialect.name == "postgresql":
        return int(db.scalar(text("SELECT pg_database_size(current_database())")) or 0)
    database = make_url(str(bind.engine.url)).database
    if not database or database == ":memory:":
        return None
    return sum(
        path.stat().st_size for path in (Path(database), Path(database + "-wal")) if path.exists()
    )


def key_names(db: Session) -> dict[int, str]:
    return {k.id: k.name or f"key #{k.id}" for k in db.scalars(select(ApiKey))}

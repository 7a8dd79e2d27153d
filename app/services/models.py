"""Trained models: find them, load them once, and answer predictions from them.

Which kinds answer which prediction route, and how, is declared by the kinds themselves
(``app/training/kinds``); :func:`serve` dispatches a route to the model's kind.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import ApiKey, Model, Project
from app.errors import InvalidInput, NotFound
from app.training.kinds import KINDS, kinds_serving
from app.training.run import load_artifact

_CACHE_SIZE = 8
_cache: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
_cache_lock = threading.Lock()


def get_model(db: Session, model_id: int, key: ApiKey) -> Model:
    model = db.get(Model, model_id)
    if model is not None:
        project = db.get(Project, model.project_id)
        if project is not None and (key.role == "admin" or project.owner_id == key.id):
            return model
    raise NotFound(f"no model {model_id}")


def latest_model(db: Session, project: Project, kind: str) -> Model:
    model = db.scalar(
        select(Model)
        .where(Model.project_id == project.id, Model.kind == kind)
        .order_by(Model.version.desc())
        .limit(1)
    )
    if model is None:
        raise NotFound(f"project {project.slug!r} has no {kind} model yet")
    return model


def list_models(db: Session, project: Project, kind: str | None = None) -> list[Model]:
    statement = select(Model).where(Model.project_id == project.id)
    if kind:
        statement = statement.where(Model.kind == kind)
    return list(db.scalars(statement.order_by(Model.kind, Model.version)))


def loaded(model: Model) -> dict[str, Any]:
    """The model's artifact, unpickled once per process and kept for the next request."""
    # Models never change once stored; the key also tells apart databases that reuse ids.
    key = (model.id, model.project_id, model.kind, model.version, model.created_at)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    artifact = load_artifact(model.artifact)
    with _cache_lock:
        _cache[key] = artifact
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return artifact


def serve(db: Session, model: Model, route: str, **query: Any) -> Any:
    """Answer prediction route ``route`` with ``model``, or 422 if its kind does not serve it."""
    spec = KINDS.get(model.kind)
    handler = spec.routes.get(route) if spec is not None else None
    if handler is None:
        raise InvalidInput(
            f"model {model.id} is a {model.kind} model; "
            f"this route serves {' or '.join(kinds_serving(route))} models"
        )
    return handler(db, model, loaded(model), **query)

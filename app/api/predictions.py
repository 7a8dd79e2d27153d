"""Prediction routes of trained models.

Each route answers at ``/api/models/{model_id}/…`` for a named model and at
``/api/projects/{slug}/models/{kind}/latest/…`` for the latest model of a kind. A route is
named (``predictions``, ``neighbors``, …); which kinds answer it, and how, each kind declares
in its module of ``app/training/kinds`` (others get 422 naming the kinds that do).
"""

from __future__ import annotations

import io
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictInt

from app.api.deps import CurrentKey, SessionDep
from app.db.models import Model
from app.errors import InvalidInput
from app.services import models as service
from app.services.projects import get_project

router = APIRouter(tags=["predictions"])
BY_ID = "/api/models/{model_id}"
LATEST = "/api/projects/{slug}/models/{kind}/latest"


def resolve_model(request: Request, db: SessionDep, key: CurrentKey) -> Model:
    params = request.path_params
    if "model_id" in params:
        try:
            model_id = int(params["model_id"])
        except ValueError as error:
            raise InvalidInput(
                f"model id must be an integer, got {params['model_id']!r}"
            ) from error
        return service.get_model(db, model_id, key)
    project = get_project(db, params["slug"], key)
    return service.latest_model(db, project, params["kind"])


ModelDep = Annotated[Model, Depends(resolve_model)]


def routes(method: str, suffix: str, **kwargs: Any):  # type: ignore[no-untyped-def]
    """Register a handler under both the by-id and the latest-of-kind prefix."""

    def register(handler):  # type: ignore[no-untyped-def]
        for prefix in (BY_ID, LATEST):
            router.add_api_route(prefix + suffix, handler, methods=[method], **kwargs)
        return handler

    return register


class ObjectsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    objects: list[StrictInt] = Field(min_length=1, max_length=100_000)


class ClustersRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n_clusters: StrictInt
    random_state: StrictInt = 0


class TripletsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    triplets: list[Annotated[list[StrictInt], Field(min_length=3, max_length=3)]] = Field(
        min_length=1, max_length=1_000_000
    )


class PairsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pairs: list[Annotated[list[StrictInt], Field(min_length=2, max_length=2)]] = Field(
        min_length=1, max_length=1_000_000
    )


@routes("GET", "/predictions")
def read_predictions(
    model: ModelDep, db: SessionDep, k: Annotated[int, Query(ge=1)] = 1
) -> list[dict]:
    """TripletBoost: a label (or an abstention) per unlabelled object; MetricBoost and
    embeddings: k-NN labels of the unlabelled objects."""
    return service.serve(db, model, "predictions", k=k)


@routes("POST", "/predict")
def predict(model: ModelDep, data: ObjectsRequest, db: SessionDep) -> list[dict]:
    """TripletBoost labels for the given objects."""
    return service.serve(db, model, "predict", objects=data.objects)


@routes("GET", "/embedding")
def read_embedding(
    model: ModelDep, db: SessionDep, dims: Annotated[int, Query(ge=1, le=50)] = 2
) -> dict:
    """Coordinates of every object: kernel PCA (kernel) or the ordinal embedding."""
    points = service.serve(db, model, "embedding", dims=dims)
    return {"dims": points.shape[1], "coordinates": points.tolist()}


@routes("POST", "/clusters")
def create_clusters(model: ModelDep, data: ClustersRequest, db: SessionDep) -> dict:
    """Kernel k-means cluster labels of every object."""
    labels = service.serve(
        db, model, "clusters", n_clusters=data.n_clusters, random_state=data.random_state
    )
    return {"n_clusters": data.n_clusters, "labels": [int(v) for v in labels]}


@routes("GET", "/neighbors/{index}")
def read_neighbors(
    model: ModelDep, db: SessionDep, index: int, k: Annotated[int, Query(ge=1)] = 10
) -> list[dict]:
    """The k objects most similar to ``index``."""
    return service.serve(db, model, "neighbors", index=index, k=k)


@routes("GET", "/kernel", response_class=Response)
def read_kernel(
    model: ModelDep, db: SessionDep, format: Annotated[str, Query(pattern="^npy$")] = "npy"
) -> Response:
    """The kernel matrix K as a NumPy file (413 for projects too large to ship it)."""
    buffer = io.BytesIO()
    np.save(buffer, service.serve(db, model, "kernel"), allow_pickle=False)
    return Response(buffer.getvalue(), media_type="application/octet-stream")


@routes("GET", "/metric")
def read_metric(model: ModelDep, db: SessionDep) -> dict:
    """MetricBoost's learned dissimilarity: M (normalized) or the weak models (binary)."""
    return service.serve(db, model, "metric")


@routes("POST", "/triplets")
def predict_triplets(model: ModelDep, data: TripletsRequest, db: SessionDep) -> dict:
    """Whether the learned metric says a is closer to b than to c, per triplet."""
    return {"closer": service.serve(db, model, "triplets", triplets=data.triplets)}


@routes("GET", "/ranking")
def read_ranking(model: ModelDep, db: SessionDep) -> list[dict]:
    """Objects ordered by SVMcompare's ranking function r(x), best first."""
    return service.serve(db, model, "ranking")


@routes("POST", "/compare")
def compare_pairs(model: ModelDep, data: PairsRequest, db: SessionDep) -> dict:
    """SVMcompare's verdict per pair [a, b]: −1 a better, 0 about the same, 1 b better."""
    return {"outcomes": service.serve(db, model, "compare", pairs=data.pairs)}

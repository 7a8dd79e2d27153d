"""Trained models: find them, load them once, and answer predictions from them."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import ApiKey, Model, Object, Project
from app.errors import InvalidInput, NotFound, PayloadTooLarge
from app.learning.kernel_methods import kernel_kmeans, kernel_pca
from app.services.training import load_artifact

KERNEL_MATRIX_MAX_OBJECTS = 5000
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


def require_kind(model: Model, *kinds: str) -> None:
    if model.kind not in kinds:
        raise InvalidInput(
            f"model {model.id} is a {model.kind} model; "
            f"this route serves {' or '.join(kinds)} models"
        )


def _objects(db: Session, model: Model) -> list[Object]:
    return list(
        db.scalars(
            select(Object).where(Object.project_id == model.project_id).order_by(Object.index)
        )
    )


def check_indices(indices: list[int], n_objects: int) -> np.ndarray:
    array = np.asarray(indices, dtype=np.int64)
    if array.size and (array.min() < 0 or array.max() >= n_objects):
        bad = int(array[(array < 0) | (array >= n_objects)][0])
        raise InvalidInput(f"object index {bad} is out of range for {n_objects} objects")
    return array


def tripletboost_predictions(db: Session, model: Model, objects: list[int] | None) -> list[dict]:
    """Labels for ``objects`` (default: every unlabelled object), with votes and abstention."""
    require_kind(model, "tripletboost")
    artifact = loaded(model)
    estimator = artifact["estimator"]
    rows = _objects(db, model)
    if objects is None:
        wanted = np.array([o.index for o in rows if o.label is None], dtype=np.int64)
    else:
        wanted = check_indices(objects, estimator.n_objects_)
    votes = estimator.decision_function(artifact["triplets"], wanted)
    classes = [str(c) for c in estimator.classes_]
    result = []
    for index, row in zip(wanted.tolist(), votes, strict=True):
        total = float(row.sum())
        abstained = total <= 0
        result.append(
            {
                "index": index,
                "label": None if abstained else classes[int(np.argmax(row))],
                "scores": {
                    c: (float(v) / total if total > 0 else 0.0)
                    for c, v in zip(classes, row, strict=True)
                },
                "abstained": abstained,
            }
        )
    return result


def comprf_predictions(db: Session, model: Model) -> list[dict]:
    """Per object without a label (or target): the crowd-built forest's prediction."""
    require_kind(model, "comprf")
    names = {o.index: o.name for o in _objects(db, model)}
    rows = loaded(model)["predictions"]
    return [{**row, "name": names.get(row["index"])} for row in rows]


def kernel_embedding(model: Model, dims: int) -> np.ndarray:
    require_kind(model, "kernel", "embedding")
    artifact = loaded(model)
    if model.kind == "embedding":
        embedding = artifact["embedding"]
        if dims != embedding.shape[1]:
            raise InvalidInput(
                f"this embedding has {embedding.shape[1]} dimensions; "
                f"ask for dims={embedding.shape[1]}"
            )
        return embedding
    key = f"pca{dims}"
    if key not in artifact:
        estimator = artifact["estimator"]
        if not 1 <= dims <= min(estimator.features_.shape):
            raise InvalidInput(f"dims must be between 1 and {min(estimator.features_.shape)}")
        artifact[key] = kernel_pca(estimator, dims)
    return artifact[key]


def kernel_clusters(model: Model, n_clusters: int, random_state: int) -> np.ndarray:
    require_kind(model, "kernel")
    estimator = loaded(model)["estimator"]
    if not 2 <= n_clusters <= estimator.n_objects_:
        raise InvalidInput(f"n_clusters must be between 2 and {estimator.n_objects_}")
    return kernel_kmeans(estimator, n_clusters, random_state=random_state)


def neighbors(db: Session, model: Model, index: int, k: int) -> list[dict]:
    """The ``k`` objects most similar to ``index``: by kernel value, learned metric, or
    embedding distance."""
    require_kind(model, "kernel", "metricboost", "embedding")
    artifact = loaded(model)
    project = db.get(Project, model.project_id)
    assert project is not None  # a foreign key guarantees it
    n = project.n_objects
    check_indices([index], n)
    if not 1 <= k < n:
        raise InvalidInput(f"k must be between 1 and {n - 1}")
    if model.kind == "kernel":
        indices, similarities = artifact["estimator"].neighbors(index, k)
        return [
            {"index": int(i), "similarity": float(s)}
            for i, s in zip(indices, similarities, strict=True)
        ]
    if model.kind == "metricboost":
        # k-NN under the metric part H⁺ with MetricBoost's tie-break (not the full H,
        # whose similarity rounds can put far objects first); the object itself is dropped.
        X = _features(db, model)
        found, order = artifact["estimator"].kneighbors(X[index : index + 1], X, k + 1)
        keep = order[0] != index
        return [
            {"index": int(i), "distance": float(d)}
            for i, d in zip(order[0][keep][:k], found[0][keep][:k], strict=True)
        ]
    points = artifact["embedding"]
    distance = np.linalg.norm(points - points[index], axis=1)
    distance[index] = np.inf
    order = np.argsort(distance, kind="stable")[:k]
    return [{"index": int(i), "distance": float(distance[i])} for i in order]


def _features(db: Session, model: Model) -> np.ndarray:
    """The objects' feature vectors as the model saw them (standardised for MetricBoost)."""
    rows = _objects(db, model)
    if any(o.features is None for o in rows):
        raise InvalidInput("objects lack feature vectors")
    X = np.array([o.features for o in rows], dtype=float)
    artifact = loaded(model)
    if "scale" in artifact:
        X = (X - artifact["mean"]) / artifact["scale"]
    return X


def knn_labels(db: Session, model: Model, k: int = 1) -> list[dict]:
    """k-NN labels of the unlabelled objects, from the embedding or the learned metric."""
    require_kind(model, "metricboost", "embedding")
    rows = _objects(db, model)
    labelled = np.array([o.index for o in rows if o.label is not None], dtype=np.int64)
    unlabelled = np.array([o.index for o in rows if o.label is None], dtype=np.int64)
    if len(labelled) == 0:
        raise InvalidInput("no object has a label to learn from")
    if not 1 <= k <= len(labelled):
        raise InvalidInput(f"k must be between 1 and {len(labelled)}")
    if len(unlabelled) == 0:
        return []
    y = np.array([rows[i].label for i in labelled], dtype=object)
    artifact = loaded(model)
    if model.kind == "embedding":
        from sklearn.neighbors import KNeighborsClassifier

        points = artifact["embedding"]
        predicted = (
            KNeighborsClassifier(n_neighbors=k).fit(points[labelled], y).predict(points[unlabelled])
        )
    else:
        X = _features(db, model)
        predicted = artifact["estimator"].predict_knn(X[labelled], y, X[unlabelled], n_neighbors=k)
    return [{"index": int(i), "label": str(p)} for i, p in zip(unlabelled, predicted, strict=True)]


def metric_description(model: Model) -> dict[str, Any]:
    require_kind(model, "metricboost")
    estimator = loaded(model)["estimator"]
    description: dict[str, Any] = {
        "weak_learner": estimator.weak_learner,
        "n_estimators": len(estimator.alphas_),
        "alphas": [float(a) for a in estimator.alphas_],
    }
    metric = getattr(estimator, "metric_", None)
    description["metric"] = None if metric is None else np.asarray(metric).tolist()
    if estimator.weak_learner == "binary":
        description["note"] = (
            "binary MetricBoost learns H(x, y) = Σ α_t [(x − y)ᵀ U_t (x − y) ≥ β_t], "
            "which is not a Mahalanobis distance"
        )
    return description


def metric_triplets(db: Session, model: Model, triplets: list[list[int]]) -> list[bool]:
    require_kind(model, "metricboost")
    X = _features(db, model)
    array = check_indices([i for row in triplets for i in row], len(X)).reshape(-1, 3)
    try:
        return [bool(v) for v in loaded(model)["estimator"].predict_triplets(X, array)]
    except ValueError as error:
        raise InvalidInput(str(error)) from error


def ranking(db: Session, model: Model) -> list[dict]:
    require_kind(model, "svmcompare")
    scores = loaded(model)["ranking"]
    rows = _objects(db, model)
    order = np.argsort(-scores, kind="stable")
    return [{"index": int(i), "name": rows[i].name, "score": float(scores[i])} for i in order]


def compare(db: Session, model: Model, pairs: list[list[int]]) -> list[int]:
    require_kind(model, "svmcompare")
    X = _features(db, model)
    array = check_indices([i for row in pairs for i in row], len(X)).reshape(-1, 2)
    if len(array) == 0:
        return []
    predicted = loaded(model)["estimator"].predict(X[array[:, 0]], X[array[:, 1]])
    return [int(v) for v in predicted]


def kernel_matrix_npy(model: Model) -> np.ndarray:
    require_kind(model, "kernel")
    estimator = loaded(model)["estimator"]
    if estimator.n_objects_ > KERNEL_MATRIX_MAX_OBJECTS:
        raise PayloadTooLarge(
            f"the kernel matrix of {estimator.n_objects_} objects is too large to ship (limit "
            f"{KERNEL_MATRIX_MAX_OBJECTS}); use /embedding, /clusters or /neighbors instead"
        )
    return estimator.kernel_matrix()

"""Kind ``metricboost``: a metric over the objects' feature vectors (MetricBoost)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field
from sqlalchemy.orm import Session

from app.db.models import Model
from app.errors import InvalidInput
from app.learning.metricboost import MetricBoost
from app.training.data import TrainingData
from app.training.kinds._common import (
    ModelKindSpec,
    Params,
    Progress,
    Trained,
    check_indices,
    check_k,
    cv_label_accuracy,
    fraction_progress,
    heldout_split,
    labelled_split,
    model_features,
    need_features,
    need_triplets,
    standardizer,
    weights_of,
)


class MetricBoostParams(Params):
    n_estimators: int = Field(default=20, ge=1, le=1000)
    weak_learner: Literal["binary", "normalized"] = "normalized"
    standardize: bool = Field(
        default=True,
        description="z-score the features first: MetricBoost is not scale-invariant, and "
        "only standardised features reproduce the paper's results.",
    )


def requirements(data: TrainingData, params: MetricBoostParams) -> list[str]:
    return need_triplets("metricboost", data) + need_features("metricboost", data)


def train(data: TrainingData, params: MetricBoostParams, progress: Progress) -> Trained:
    assert data.features is not None
    mean, scale = standardizer(data.features) if params.standardize else (0.0, 1.0)
    X = (data.features - mean) / scale

    def fit(rows: np.ndarray | slice, start: float, span: float) -> MetricBoost:
        model = MetricBoost(
            n_estimators=params.n_estimators,
            weak_learner=params.weak_learner,
            random_state=params.random_state,
        )
        return model.fit(
            X,
            data.triplets[rows],
            sample_weight=weights_of(data.triplet_weights, rows),
            callback=fraction_progress(progress, start, span, "boosting"),
        )

    train_part, test = heldout_split(len(data.triplets), params.random_state)
    evaluated = fit(train_part, 0.0, 0.45)
    final = fit(slice(None), 0.45, 0.45)
    metrics: dict[str, Any] = {
        "n_triplets": len(data.triplets),
        "heldout_triplets": len(test),
        "heldout_triplet_accuracy": float(evaluated.score(X, data.triplets[test])),
    }
    accuracy = cv_label_accuracy(
        data.labels,
        params.random_state,
        lambda train, y_train, test: final.predict_knn(X[train], y_train, X[test]),
    )
    if accuracy is not None:
        metrics["cv_label_accuracy_1nn"] = accuracy
    return Trained({"estimator": final, "mean": mean, "scale": scale}, metrics)


def predictions(db: Session, model: Model, artifact: dict[str, Any], k: int = 1) -> list[dict]:
    """k-NN labels of the unlabelled objects under the learned metric."""
    labelled, y, unlabelled = labelled_split(db, model, k)
    if len(unlabelled) == 0:
        return []
    X = model_features(db, model, artifact)
    predicted = artifact["estimator"].predict_knn(X[labelled], y, X[unlabelled], n_neighbors=k)
    return [{"index": int(i), "label": str(p)} for i, p in zip(unlabelled, predicted, strict=True)]


def neighbors(
    db: Session, model: Model, artifact: dict[str, Any], index: int, k: int
) -> list[dict]:
    """k-NN under the metric part H⁺ with MetricBoost's tie-break (not the full H, whose
    similarity rounds can put far objects first); the object itself is dropped."""
    X = model_features(db, model, artifact)
    check_indices([index], len(X))
    check_k(k, len(X))
    found, order = artifact["estimator"].kneighbors(X[index : index + 1], X, k + 1)
    keep = order[0] != index
    return [
        {"index": int(i), "distance": float(d)}
        for i, d in zip(order[0][keep][:k], found[0][keep][:k], strict=True)
    ]


def metric(db: Session, model: Model, artifact: dict[str, Any]) -> dict[str, Any]:
    estimator = artifact["estimator"]
    description: dict[str, Any] = {
        "weak_learner": estimator.weak_learner,
        "n_estimators": len(estimator.alphas_),
        "alphas": [float(a) for a in estimator.alphas_],
    }
    learned = getattr(estimator, "metric_", None)
    description["metric"] = None if learned is None else np.asarray(learned).tolist()
    if estimator.weak_learner == "binary":
        description["note"] = (
            "binary MetricBoost learns H(x, y) = Σ α_t [(x − y)ᵀ U_t (x − y) ≥ β_t], "
            "which is not a Mahalanobis distance"
        )
    return description


def triplets(
    db: Session, model: Model, artifact: dict[str, Any], triplets: list[list[int]]
) -> list[bool]:
    X = model_features(db, model, artifact)
    array = check_indices([i for row in triplets for i in row], len(X)).reshape(-1, 3)
    try:
        return [bool(v) for v in artifact["estimator"].predict_triplets(X, array)]
    except ValueError as error:
        raise InvalidInput(str(error)) from error


KIND = ModelKindSpec(
    name="metricboost",
    learns="a metric over the objects' feature vectors (MetricBoost)",
    params=MetricBoostParams,
    requirements=requirements,
    train=train,
    routes={
        "predictions": predictions,
        "neighbors": neighbors,
        "metric": metric,
        "triplets": triplets,
    },
)

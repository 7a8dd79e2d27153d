"""Kind ``tripletboost``: labels of unlabelled objects from passive triplets (TripletBoost).

TripletBoost predicts labels, not comparisons, so its quality is its cross-validated label
accuracy alone (abstentions count as errors).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field
from sqlalchemy.orm import Session

from app.db.models import Model
from app.learning.tripletboost import TripletBoost, weighted_majority
from app.training.data import TrainingData
from app.training.kinds._common import (
    ModelKindSpec,
    Params,
    Progress,
    Trained,
    check_indices,
    label_folds,
    need_triplets,
    project_objects,
    sub_progress,
)


class TripletBoostParams(Params):
    n_estimators: int = Field(default=5000, ge=1, le=1_000_000)
    cv_folds: int = Field(default=5, ge=2, le=20)


def requirements(data: TrainingData, params: TripletBoostParams) -> list[str]:
    missing = need_triplets("tripletboost", data)
    classes = {label for label in data.labels if label is not None}
    if len(classes) < 2:
        missing.append(
            f"tripletboost needs labelled objects of at least 2 classes, found {len(classes)}"
        )
    return missing


def train(data: TrainingData, params: TripletBoostParams, progress: Progress) -> Trained:
    labelled, y, folds = label_folds(data.labels, params.cv_folds, params.random_state)
    # Weighted, repeats and contradictions are merged by weighted majority once, here, so
    # that the folds, the final fit and its predictions read the same triplets.
    triplets = data.triplets
    if data.triplet_weights is not None:
        triplets = weighted_majority(triplets, data.triplet_weights)
    steps = len(folds) + 1
    correct = abstained = 0
    for fold, (_train, test) in enumerate(folds):
        hidden = data.labels.copy()
        hidden[labelled[test]] = None
        model = TripletBoost(n_estimators=params.n_estimators, random_state=params.random_state)
        model.fit(
            triplets, hidden, progress=sub_progress(progress, fold, steps, "cross-validation")
        )
        predicted = model.predict(triplets, labelled[test])
        abstains = np.array([p is None for p in predicted])
        abstained += int(abstains.sum())
        correct += int(np.sum(np.array([str(p) for p in predicted]) == y[test]))
    final = TripletBoost(n_estimators=params.n_estimators, random_state=params.random_state)
    final.fit(triplets, data.labels, progress=sub_progress(progress, steps - 1, steps, "final fit"))
    metrics: dict[str, Any] = {"n_triplets": len(data.triplets), "n_labelled": len(labelled)}
    if folds:
        metrics["cv_label_accuracy"] = correct / len(labelled)
        metrics["cv_abstention_rate"] = abstained / len(labelled)
        answered = len(labelled) - abstained
        metrics["cv_accuracy_when_answered"] = correct / answered if answered else None
        metrics["cv_folds"] = len(folds)
        metrics["note"] = "abstentions count as errors in cv_label_accuracy"
    return Trained({"estimator": final, "triplets": triplets}, metrics)


def labels(
    db: Session, model: Model, artifact: dict[str, Any], objects: list[int] | None = None
) -> list[dict]:
    """Labels for ``objects`` (default: every unlabelled object), with votes and abstention."""
    estimator = artifact["estimator"]
    if objects is None:
        rows = project_objects(db, model)
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


def predictions(db: Session, model: Model, artifact: dict[str, Any], k: int = 1) -> list[dict]:
    """Every unlabelled object's label (``k`` is for the k-NN kinds and is not used here)."""
    return labels(db, model, artifact)


KIND = ModelKindSpec(
    name="tripletboost",
    metric="cv_label_accuracy",
    learns="labels of unlabelled objects from triplets (TripletBoost)",
    params=TripletBoostParams,
    requirements=requirements,
    train=train,
    routes={"predictions": predictions, "predict": labels},
)

"""Kind ``embedding``: an ordinal embedding of the objects (SOE, t-STE, CKL or GNMDS)."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field
from sklearn.neighbors import KNeighborsClassifier
from sqlalchemy.orm import Session

from app.db.models import Model, Project
from app.errors import InvalidInput
from app.learning.embedding import CKL, GNMDS, SOE, TSTE
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
    need_triplets,
    weights_of,
)

EMBEDDINGS = {"soe": SOE, "tste": TSTE, "ckl": CKL, "gnmds": GNMDS}


class EmbeddingParams(Params):
    method: Literal["soe", "tste", "ckl", "gnmds"] = "soe"
    dims: int = Field(default=2, ge=1, le=50)
    n_init: int = Field(
        default=3,
        ge=1,
        le=20,
        description="Random starts; the fit of lowest loss is kept (the objectives are not "
        "convex).",
    )
    likelihood: Literal["auto", "triplets", "shape"] = Field(
        default="auto",
        description="For odd-one-out and ranked-grid answers: 'shape' fits each answer's own "
        "likelihood (the odd-one-out softmax of SPoSE, the Plackett-Luce choices of psiz; "
        "method tste only), 'triplets' the triplets they imply, 'auto' the shape's own when "
        "every answer has one such shape and the method has one. Plain triplets: the same.",
    )


def requirements(data: TrainingData, params: EmbeddingParams) -> list[str]:
    reasons = need_triplets("embedding", data)
    if params.likelihood == "shape" and EMBEDDINGS[params.method]._shape_similarity is None:
        reasons.append(
            f"method {params.method!r} has no likelihood of its own for shaped answers (tste "
            "has one): use likelihood 'auto' or 'triplets'"
        )
    return reasons


def estimator(params: EmbeddingParams):  # type: ignore[no-untyped-def]
    """The unfitted estimator a job with ``params`` fits: the model ``adaptive`` follows.

    Several starts: one start landed in a poor stationary point now and then (t-STE on 480
    answers of 30 objects: loss 0.483 and held-out accuracy 0.845, where five other starts
    reached 0.463-0.466 and 0.955-0.968; tests/active/test_adaptive.py)."""
    return EMBEDDINGS[params.method](
        n_components=params.dims, n_init=params.n_init, random_state=params.random_state
    )


def train(data: TrainingData, params: EmbeddingParams, progress: Progress) -> Trained:
    if data.shaped_answers:
        return _train_shaped(data, params, progress)

    def fit(rows: np.ndarray | slice, start: float, span: float):  # type: ignore[no-untyped-def]
        return estimator(params).fit(
            data.triplets[rows],
            data.n_objects,
            sample_weight=weights_of(data.triplet_weights, rows),
            callback=fraction_progress(progress, start, span, params.method),
        )

    train_part, test = heldout_split(len(data.triplets), params.random_state)
    evaluated = fit(train_part, 0.0, 0.5)
    final = fit(slice(None), 0.5, 0.45)
    metrics: dict[str, Any] = {
        "n_triplets": len(data.triplets),
        "heldout_triplets": len(test),
        "heldout_triplet_accuracy": float(evaluated.score(data.triplets[test])),
        "likelihood": "triplets",
    }
    return _with_labels(data, params, final, metrics)


def _train_shaped(data: TrainingData, params: EmbeddingParams, progress: Progress) -> Trained:
    """Answers of other shapes than triplets: held out by answer (an answer's implied
    triplets all on one side), fitted by ``fit_answers`` with the params' likelihood."""
    answers = data.shaped_answers
    # An answer's weight: its implied triplets all carry it; take its first's.
    first = np.unique(data.triplet_answers, return_index=True)[1]
    weights = None if data.triplet_weights is None else data.triplet_weights[first]

    def fit(rows: np.ndarray, start: float, span: float):  # type: ignore[no-untyped-def]
        return estimator(params).fit_answers(
            [answers[i] for i in rows],
            data.n_objects,
            likelihood=params.likelihood,
            sample_weight=weights_of(weights, rows),
            callback=fraction_progress(progress, start, span, params.method),
        )

    train_part, test = heldout_split(len(answers), params.random_state)
    evaluated = fit(train_part, 0.0, 0.5)
    final = fit(np.arange(len(answers)), 0.5, 0.45)
    held_out = data.triplets[np.isin(data.triplet_answers, test)]
    metrics: dict[str, Any] = {
        "n_triplets": len(data.triplets),
        "n_shaped_answers": len(answers),
        "heldout_answers": len(test),
        "heldout_triplets": len(held_out),
        "heldout_triplet_accuracy": float(evaluated.score(held_out)),
        "likelihood": final.likelihood_,
    }
    return _with_labels(data, params, final, metrics)


def _with_labels(
    data: TrainingData, params: EmbeddingParams, final: Any, metrics: dict[str, Any]
) -> Trained:
    points = final.embedding_
    accuracy = cv_label_accuracy(
        data.labels,
        params.random_state,
        lambda train, y_train, test: (
            KNeighborsClassifier(n_neighbors=1).fit(points[train], y_train).predict(points[test])
        ),
    )
    if accuracy is not None:
        metrics["cv_label_accuracy_1nn"] = accuracy
    return Trained({"estimator": final, "embedding": points}, metrics)


def predictions(db: Session, model: Model, artifact: dict[str, Any], k: int = 1) -> list[dict]:
    """k-NN labels of the unlabelled objects in the embedding."""
    labelled, y, unlabelled = labelled_split(db, model, k)
    if len(unlabelled) == 0:
        return []
    points = artifact["embedding"]
    predicted = (
        KNeighborsClassifier(n_neighbors=k).fit(points[labelled], y).predict(points[unlabelled])
    )
    return [{"index": int(i), "label": str(p)} for i, p in zip(unlabelled, predicted, strict=True)]


def coordinates(db: Session, model: Model, artifact: dict[str, Any], dims: int) -> np.ndarray:
    points = artifact["embedding"]
    if dims != points.shape[1]:
        raise InvalidInput(
            f"this embedding has {points.shape[1]} dimensions; ask for dims={points.shape[1]}"
        )
    return points


def neighbors(
    db: Session, model: Model, artifact: dict[str, Any], index: int, k: int
) -> list[dict]:
    project = db.get(Project, model.project_id)
    assert project is not None  # a foreign key guarantees it
    check_indices([index], project.n_objects)
    check_k(k, project.n_objects)
    points = artifact["embedding"]
    distance = np.linalg.norm(points - points[index], axis=1)
    distance[index] = np.inf
    order = np.argsort(distance, kind="stable")[:k]
    return [{"index": int(i), "distance": float(distance[i])} for i in order]


KIND = ModelKindSpec(
    name="embedding",
    learns="an ordinal embedding: SOE, t-STE, CKL or GNMDS",
    params=EmbeddingParams,
    requirements=requirements,
    train=train,
    routes={"predictions": predictions, "embedding": coordinates, "neighbors": neighbors},
)

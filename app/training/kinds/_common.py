"""What every model kind is made of, and the helpers the kinds share.

A kind is one :class:`ModelKindSpec`: its params model, its requirements (the reasons a
request gets 422), its train function with its honest figures, and its prediction routes.

Quality is measured honestly: comparisons are split 90/10 with the job's seed, a model
fit on the 90% is scored on the held-out 10% (triplets, or pairs for SVMcompare), and
where objects have labels, label accuracy is cross-validated over the labelled objects.
The served model is then refit on every answer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from sklearn.model_selection import KFold, StratifiedKFold
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Model, Object
from app.errors import InvalidInput
from app.services.imports import visible_objects
from app.training.data import TrainingData

Progress = Callable[[float, str], None]  # (fraction done, text)
MIN_TRIPLETS = 20
MIN_PAIRS = 20
HELDOUT_SHARE = 0.1


class Params(BaseModel):
    """The parameters every kind takes; a kind's params model extends it."""

    model_config = ConfigDict(extra="forbid")

    include_flagged: bool = Field(
        default=False, description="Also learn from flagged participants' answers."
    )
    weighting: Literal["reliability", "none"] = Field(
        default="reliability",
        description="reliability: each answer counts by how likely it was given carefully, as "
        "the reliability model learned (1 until there is one); none: every answer counts once.",
    )
    random_state: int = Field(default=0, ge=0, lt=2**31)


@dataclass
class Trained:
    artifact: dict[str, Any]
    metrics: dict[str, Any]


Route = Callable[..., Any]  # route(db, model, artifact, **query) -> the response body


@dataclass(frozen=True)
class ModelKindSpec:
    """One model kind, declared once; schemas, jobs, serving, routers and the CLI read it.

    Attributes
    ----------
    name : str
        The ``kind`` of requests and models.
    learns : str
        One line for the kind table of docs/guide/models.md.
    params : type[Params]
        The pydantic model of the job's ``params`` (unknown keys are refused).
    requirements : callable ``(data, params) -> list[str]``
        What the project's answers and objects lack for this kind, in words (the 422 reasons);
        empty when a job could succeed.
    train : callable ``(data, params, progress) -> Trained``
        Fits the served model and measures its figures.
    load : callable ``(db, project, data, params) -> None``, optional
        Reads what the kind needs beyond the answers onto ``data`` (comprf: its forest).
    routes : mapping of route name to ``route(db, model, artifact, **query)``
        The prediction routes (``app/api/predictions.py``) this kind answers; ``artifact``
        is what ``train`` stored, loaded once per process.
    metric : str
        The figure of ``train``'s metrics that its learning curve follows (the dashboard's
        curves, the budget adviser's default); higher is better.
    error_metric : str, optional
        The figure the curve follows when the models report no ``metric`` (a regression
        forest's ``loo_rmse``); lower is better.
    """

    name: str
    learns: str
    params: type[Params]
    requirements: Callable[[TrainingData, Any], list[str]]
    train: Callable[[TrainingData, Any, Progress], Trained]
    routes: Mapping[str, Route] = field(default_factory=dict)
    metric: str = "heldout_triplet_accuracy"
    error_metric: str | None = None
    #: what the kind reads from the database beyond the answers, onto ``data`` (comprf: the
    #: forest the crowd built); ``load(db, project, data, params)``, before ``requirements``
    load: Callable[[Session, Any, TrainingData, Any], None] | None = None
    #: whether the dashboard draws its learning curve with the budget adviser (not for the
    #: crowd's reliability, whose figures describe the participants, not a model's accuracy)
    learning_curve: bool = True


def weights_of(weights: np.ndarray | None, rows: np.ndarray | slice) -> np.ndarray | None:
    """The weights of some of the answers (``rows``), or None when every answer counts once."""
    return None if weights is None else weights[rows]


# -- requirements shared by several kinds --------------------------------------------------


def need_triplets(kind: str, data: TrainingData) -> list[str]:
    n = len(data.triplets)
    if n < MIN_TRIPLETS:
        return [f"{kind} needs at least {MIN_TRIPLETS} triplet answers, the project has {n}"]
    return []


def need_features(kind: str, data: TrainingData) -> list[str]:
    if data.features is None:
        return [f"{kind} needs a feature vector on every object"]
    return []


# -- honest figures -------------------------------------------------------------------------


def heldout_split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng([seed, 90]).permutation(n)
    n_test = max(1, round(n * HELDOUT_SHARE))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def label_folds(labels: np.ndarray, folds: int, seed: int):  # type: ignore[no-untyped-def]
    """Folds over the labelled objects, stratified when every class has enough members."""
    labelled = np.flatnonzero(np.array([y is not None for y in labels], dtype=bool))
    y = np.array([str(v) for v in labels[labelled]])
    if len(labelled) < 2:
        return labelled, y, []
    counts = np.unique(y, return_counts=True)[1]
    folds = min(folds, len(labelled))
    if len(counts) > 1 and counts.min() >= folds:
        splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
        return labelled, y, list(splitter.split(labelled, y))
    return labelled, y, list(KFold(folds, shuffle=True, random_state=seed).split(labelled))


def cv_label_accuracy(
    labels: np.ndarray,
    seed: int,
    predict: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
) -> float | None:
    """Label accuracy cross-validated over the labelled objects, or None with < 2 classes.

    ``predict(train_objects, train_labels, test_objects)`` gives the test objects' labels;
    a fold whose training part holds one class predicts that class.
    """
    labelled, y, folds = label_folds(labels, 5, seed)
    if not folds or len(np.unique(y)) < 2:
        return None
    correct = 0
    for train, test in folds:
        if len(np.unique(y[train])) < 2:
            predicted = np.full(len(test), y[train][0])
        else:
            predicted = predict(labelled[train], y[train], labelled[test])
        correct += int(np.sum(np.asarray(predicted) == y[test]))
    return correct / len(labelled)


def standardizer(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and scale that z-score the columns of X (a constant column keeps scale 1)."""
    scale = X.std(axis=0)
    return X.mean(axis=0), np.where(scale > 0, scale, 1.0)


def sub_progress(
    progress: Progress, step: int, steps: int, text: str
) -> Callable[[int, int], None]:
    """A ``(done, total)`` callback reporting within step ``step`` of ``steps``."""

    def report(done: int, total: int) -> None:
        progress((step + done / max(total, 1)) / steps, f"{text}: {done}/{total}")

    return report


def fraction_progress(
    progress: Progress, start: float, span: float, text: str
) -> Callable[[int, int], None]:
    def report(done: int, total: int, *_: object) -> None:
        progress(start + span * done / max(total, 1), f"{text}: {done}/{total}")

    return report


# -- serving helpers ------------------------------------------------------------------------


def project_objects(db: Session, model: Model) -> list[Object]:
    return list(
        db.scalars(
            select(Object)
            .where(Object.project_id == model.project_id, visible_objects(model.project_id))
            .order_by(Object.index)
        )
    )


def check_indices(indices: list[int], n_objects: int) -> np.ndarray:
    array = np.asarray(indices, dtype=np.int64)
    if array.size and (array.min() < 0 or array.max() >= n_objects):
        bad = int(array[(array < 0) | (array >= n_objects)][0])
        raise InvalidInput(f"object index {bad} is out of range for {n_objects} objects")
    return array


def model_features(db: Session, model: Model, artifact: dict[str, Any]) -> np.ndarray:
    """The objects' feature vectors as the model saw them (z-scored when it was)."""
    rows = project_objects(db, model)
    if any(o.features is None for o in rows):
        raise InvalidInput("objects lack feature vectors")
    X = np.array([o.features for o in rows], dtype=float)
    if "scale" in artifact:
        X = (X - artifact["mean"]) / artifact["scale"]
    return X


def labelled_split(db: Session, model: Model, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(labelled indices, their labels, unlabelled indices) for k-NN label predictions."""
    rows = project_objects(db, model)
    labelled = np.array([o.index for o in rows if o.label is not None], dtype=np.int64)
    unlabelled = np.array([o.index for o in rows if o.label is None], dtype=np.int64)
    if len(labelled) == 0:
        raise InvalidInput("no object has a label to learn from")
    if not 1 <= k <= len(labelled):
        raise InvalidInput(f"k must be between 1 and {len(labelled)}")
    y = np.array([rows[i].label for i in labelled], dtype=object)
    return labelled, y, unlabelled


def check_k(k: int, n_objects: int) -> None:
    if not 1 <= k < n_objects:
        raise InvalidInput(f"k must be between 1 and {n_objects - 1}")

"""Kind ``comprf``: a snapshot of the comparison forest the crowd built (CompRF, Haghiri,
Garreau & von Luxburg 2018) through the plan's ``comprf`` strategy.

The forest is not fitted here: the workers' answers built it (``app/active/comprf.py``,
kept current by ``app/services/comprf.py``); a job reads it as it stands
(:func:`load`), predicts every object from its leaf-mates (or, in a forest still being
built, from the labelled objects of the deepest node it has reached) and measures the
figures.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field
from sqlalchemy.orm import Session

from app.active.comprf import Forest, forest_predictions
from app.db.models import Model, Project
from app.services.comprf import forest_snapshot
from app.training.data import TrainingData
from app.training.kinds._common import ModelKindSpec, Params, Progress, Trained, project_objects


class ComprfParams(Params):
    weighting: Literal["none"] = Field(
        default="none",
        description="none only: the forest's nodes count their votes as the answers arrive "
        "(app/services/comprf.py), before any reliability is known.",
    )
    position: int | None = Field(
        default=None,
        ge=0,
        description="Which strategy of the plan (its position) built the forest; default: "
        "the first comprf strategy.",
    )


def load(db: Session, project: Project, data: TrainingData, params: ComprfParams) -> None:
    """Attach the plan's current forest (and what it cost) to ``data``."""
    data.forest = forest_snapshot(db, project, params.position)


def requirements(data: TrainingData, params: ComprfParams) -> list[str]:
    if data.forest is None:
        return ["comprf needs a plan with a comprf strategy (at that position): PUT one first"]
    has_targets = bool(len(data.targets)) and bool(np.any(~np.isnan(data.targets)))
    if not (has_targets or any(label is not None for label in data.labels)):
        return ["comprf needs labelled objects (or numeric targets) to predict from"]
    return []


def train(data: TrainingData, params: ComprfParams, progress: Progress) -> Trained:
    """Predictions per object and honest figures: leave-one-out over the labelled objects
    (each predicted from its leaf-mates only), the questions asked and the answers used."""
    snap = data.forest
    forest: Forest = snap["forest"]
    progress(0.2, "predicting from the nodes each object has reached")
    targets = [None if np.isnan(t) else float(t) for t in data.targets]
    labels = list(data.labels)
    # Any time: an object still in an open node is predicted from the labelled objects of the
    # deepest node it has reached, so a forest being built predicts every object already.
    rows, figures = forest_predictions(forest, labels, targets, anytime=True)
    per_tree = forest.progress()
    metrics = {
        **figures,
        "strategy_position": snap["position"],
        "questions_asked": snap["questions_asked"],
        "answers_used": forest.n_answers,
        "n_trees": len(per_tree),
        "nodes_split": sum(t["nodes_split"] for t in per_tree),
        "nodes_waiting": sum(t["nodes_waiting"] for t in per_tree),
        "complete": not forest.pending(),
    }
    regression = figures["task"] == "regression"
    known = [
        (t is not None) if regression else (y is not None)
        for y, t in zip(labels, targets, strict=True)
    ]
    predictions = [row for row, is_known in zip(rows, known, strict=True) if not is_known]
    return Trained({"predictions": predictions, "task": figures["task"]}, metrics)


def predictions(db: Session, model: Model, artifact: dict[str, Any], k: int = 1) -> list[dict]:
    """Per object without a label (or target): the forest's prediction (``k`` is unused)."""
    names = {o.index: o.name for o in project_objects(db, model)}
    return [{**row, "name": names.get(row["index"])} for row in artifact["predictions"]]


KIND = ModelKindSpec(
    name="comprf",
    learns="labels (or targets) of unlabelled objects from the comparison forest the crowd "
    "built with the plan's `comprf` strategy (CompRF)",
    params=ComprfParams,
    requirements=requirements,
    train=train,
    routes={"predictions": predictions},
    # Leave-one-out accuracy over the labelled objects; a regression forest reports its
    # leave-one-out RMSE instead.
    metric="loo_accuracy",
    error_metric="loo_rmse",
    load=load,
)

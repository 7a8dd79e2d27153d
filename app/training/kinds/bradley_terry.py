"""Kind ``bradley_terry``: a ranking with ties from pair comparisons alone, no features
(Bradley–Terry scores with Davidson's ties, :class:`app.learning.bradley_terry`).

It is the model the ``adaptive`` strategy with ``params.kind: "pairs"`` follows by default.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import Field
from sqlalchemy.orm import Session

from app.db.models import Model
from app.learning.bradley_terry import BradleyTerryDavidson
from app.training.data import TrainingData
from app.training.kinds._common import (
    MIN_PAIRS,
    ModelKindSpec,
    Params,
    Progress,
    Trained,
    check_indices,
    heldout_split,
    project_objects,
    weights_of,
)


class BradleyTerryParams(Params):
    alpha: float = Field(
        default=0.1, gt=0, le=1e6, description="Prior strength on the scores (½ α Σ θ²)."
    )


def requirements(data: TrainingData, params: BradleyTerryParams) -> list[str]:
    n = len(data.pairs)
    if n < MIN_PAIRS:
        return [f"bradley_terry needs at least {MIN_PAIRS} pair answers, the project has {n}"]
    return []


def train(data: TrainingData, params: BradleyTerryParams, progress: Progress) -> Trained:
    def fit(rows: np.ndarray | slice) -> BradleyTerryDavidson:
        return BradleyTerryDavidson(alpha=params.alpha).fit(
            data.pairs[rows], data.n_objects, sample_weight=weights_of(data.pair_weights, rows)
        )

    train_part, test = heldout_split(len(data.pairs), params.random_state)
    progress(0.1, "held-out fit")
    evaluated = fit(train_part)
    progress(0.5, "final fit")
    final = fit(slice(None))
    metrics = {
        "n_pairs": len(data.pairs),
        "heldout_pairs": len(test),
        "heldout_pair_accuracy": float(evaluated.score(data.pairs[test])),
        "tie": final.tie_,
    }
    return Trained({"estimator": final, "ranking": final.scores_, "tie": final.tie_}, metrics)


def ranking(db: Session, model: Model, artifact: dict[str, Any]) -> list[dict]:
    scores = artifact["ranking"]
    rows = project_objects(db, model)
    order = np.argsort(-scores, kind="stable")
    return [{"index": int(i), "name": rows[i].name, "score": float(scores[i])} for i in order]


def compare(
    db: Session, model: Model, artifact: dict[str, Any], pairs: list[list[int]]
) -> list[int]:
    estimator = artifact["estimator"]
    array = check_indices([i for row in pairs for i in row], estimator.n_objects_).reshape(-1, 2)
    if len(array) == 0:
        return []
    return [int(v) for v in estimator.predict(array)]


KIND = ModelKindSpec(
    name="bradley_terry",
    metric="heldout_pair_accuracy",
    learns="a ranking with ties from pairs alone, no features (Bradley-Terry with Davidson's ties)",
    params=BradleyTerryParams,
    requirements=requirements,
    train=train,
    routes={"ranking": ranking, "compare": compare},
)

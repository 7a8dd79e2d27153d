"""Kind ``reliability``: each participant's probability of answering carefully, learned from
the answers jointly with their model (:class:`app.learning.reliability.CrowdReliability`).

The job runner queues one as answers arrive (``app/services/reliability.py``); the model's
figures go to the participants' rows, which the participants' list, the dashboard and the
exports show, and its per-answer weights are what ``weighting: "reliability"`` trains with.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import Field

from app.learning.reliability import CrowdReliability
from app.training.data import TrainingData
from app.training.kinds._common import ModelKindSpec, Params, Progress, Trained

MIN_CROWD_ANSWERS = 20


class ReliabilityParams(Params):
    include_flagged: bool = Field(
        default=True, description="Judge flagged participants too (their answers are data here)."
    )
    weighting: Literal["none"] = Field(
        default="none", description="none only: this model computes the weights."
    )
    dims: int = Field(
        default=2, ge=1, le=50, description="Dimension of the t-STE embedding of the triplets."
    )
    max_iter: int = Field(default=10, ge=1, le=100, description="EM rounds.")


def _crowd(data: TrainingData) -> int:
    return int((data.triplet_participants >= 0).sum() + (data.pair_participants >= 0).sum())


def requirements(data: TrainingData, params: ReliabilityParams) -> list[str]:
    n = _crowd(data)
    if n < MIN_CROWD_ANSWERS:
        return [
            f"reliability needs at least {MIN_CROWD_ANSWERS} triplet or pair answers from "
            f"participants, the project has {n}"
        ]
    return []


def train(data: TrainingData, params: ReliabilityParams, progress: Progress) -> Trained:
    progress(0.1, "EM: reliabilities and the answers' model")
    # Imported answers have no side shown; they are trusted (participant −1), so any side does.
    triplet_sides = np.where(data.triplet_sides == 1, 1, -1)
    has_triplets, has_pairs = len(data.triplets) > 0, len(data.pairs) > 0
    model = CrowdReliability(
        n_components=params.dims, max_iter=params.max_iter, random_state=params.random_state
    ).fit(
        data.triplets if has_triplets else None,
        data.triplet_participants if has_triplets else None,
        sides=triplet_sides if has_triplets else None,
        pairs=data.pairs if has_pairs else None,
        pair_workers=data.pair_participants if has_pairs else None,
        pair_sides=data.pair_sides if has_pairs else None,
        n_objects=data.n_objects,
    )
    reliability = model.reliability_
    metrics: dict[str, Any] = {
        "n_participants": len(model.workers_),
        "n_triplets": len(data.triplets),
        "n_pairs": len(data.pairs),
        "mean_reliability": float(reliability.mean()) if len(reliability) else None,
        "below_half": int(np.sum(reliability < 0.5)),
        "em_rounds": model.n_iter_,
    }
    artifact = {
        "workers": model.workers_,
        "reliability": reliability,
        "interval": model.reliability_interval_,
        "n_answers": model.n_answers_,
        "side_bias": model.side_bias_,
        "answer_ids": np.concatenate([data.triplet_ids, data.pair_ids]),
        "answer_weights": np.concatenate([model.triplet_weight_, model.pair_weight_]).astype(
            np.float32
        ),
    }
    return Trained(artifact, metrics)


KIND = ModelKindSpec(
    name="reliability",
    learns="each participant's reliability and each answer's weight (EM, Dawid & Skene / MACE)",
    params=ReliabilityParams,
    requirements=requirements,
    train=train,
    metric="mean_reliability",
    learning_curve=False,
)

"""Kinds called directly (no database): what a failed fit tells the researcher."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
from sklearn.datasets import load_digits

from app.training.data import TrainingData
from app.training.kinds import KINDS


def _pairs_study(tie_margin: float, n_pairs: int = 200, seed: int = 0) -> TrainingData:
    """Digits, pairs judged by the sum of pixels, ties within ``tie_margin`` sd, 10% flipped."""
    X = load_digits().data[:120]
    quality = X.sum(axis=1)
    rng = np.random.default_rng(seed)
    left, right = rng.choice(len(X), size=(2, n_pairs))
    keep = left != right
    left, right = left[keep], right[keep]
    difference = quality[right] - quality[left]
    outcome = np.where(np.abs(difference) < tie_margin * quality.std(), 0, np.sign(difference))
    flip = np.flatnonzero(rng.random(len(outcome)) < 0.1)
    outcome[flip] = [rng.choice([v for v in (-1, 0, 1) if v != outcome[i]]) for i in flip]
    n = len(X)
    return TrainingData(
        n_objects=n,
        triplets=np.empty((0, 3), dtype=np.int64),
        pairs=np.column_stack([left, right, outcome]).astype(np.int64),
        labels=np.full(n, None, dtype=object),
        targets=np.full(n, np.nan),
        features=X,
        n_answers=int(keep.sum()),
        first_answer_id=None,
        last_answer_id=None,
    )


def test_svmcompare_failing_on_few_ties_says_the_share_and_what_it_needs():
    spec = KINDS["svmcompare"]
    data = _pairs_study(tie_margin=0.1)
    ties = int(np.sum(data.pairs[:, 2] == 0))
    assert 0 < ties < 0.15 * len(data.pairs)
    assert spec.requirements(data, spec.params()) == []  # both outcomes exist: not a 422
    with pytest.raises(ValueError) as raised:
        spec.train(data, spec.params(), lambda fraction, text: None)
    message = str(raised.value)
    found = re.search(r"on (\d+) pair answers, (\d+) of them ties \((\d+)%\)", message)
    assert found is not None, message
    n_pairs, n_ties, share = map(int, found.groups())
    assert n_ties <= ties and share == round(100 * n_ties / n_pairs) and share < 15
    assert "ties" in message and "a quarter of the pairs" in message and "larger C" in message


def test_svmcompare_learns_from_ties_given_the_way_people_give_them():
    spec = KINDS["svmcompare"]
    trained = spec.train(_pairs_study(tie_margin=1.0), spec.params(), lambda f, t: None)
    assert trained.metrics["heldout_pair_accuracy"] > 0.5


@pytest.mark.parametrize(
    "kind", ["embedding", "kernel", "metricboost", "tripletboost", "svmcompare", "bradley_terry"]
)
def test_every_kind_trains_with_answer_weights(kind):
    """``weighting: "reliability"`` hands each kind per-answer weights; a kind trains with
    them, and weights that silence half the answers change what it learns."""
    from app.learning.triplets import make_random_triplets

    data = _pairs_study(tie_margin=1.0, n_pairs=300)
    data.labels = np.array([f"c{i % 2}" if i % 3 else None for i in range(data.n_objects)])
    data.triplets = make_random_triplets(data.features, n_triplets=600, random_state=0)
    rng = np.random.default_rng(0)
    data.triplet_weights = rng.uniform(0.5, 1.0, len(data.triplets))
    data.pair_weights = rng.uniform(0.5, 1.0, len(data.pairs))
    spec = KINDS[kind]
    params = spec.params(**({"n_estimators": 200} if kind == "tripletboost" else {}))
    weighted = spec.train(data, params, lambda fraction, text: None)
    assert weighted.metrics
    data.triplet_weights = np.r_[np.zeros(300), np.ones(300)]
    data.pair_weights = np.r_[np.zeros(150), np.ones(len(data.pairs) - 150)]
    halved = spec.train(data, params, lambda fraction, text: None)
    assert pickle.dumps(halved.artifact) != pickle.dumps(weighted.artifact)

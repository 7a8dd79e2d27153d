"""Tests of CrowdReliability, the Bradley–Terry–Davidson fit and the estimators' weights."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import check_grad

from app.learning.bradley_terry import (
    BradleyTerryDavidson,
    calibrate_link,
    outcome_probabilities,
)
from app.learning.embedding import SOE, TSTE
from app.learning.kernels import TripletKernel
from app.learning.metricboost import MetricBoost
from app.learning.reliability import CrowdReliability
from app.learning.svmcompare import SVMCompare
from app.learning.tripletboost import weighted_majority


def _points(n: int = 20, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 2))


def _crowd_triplets(X: np.ndarray, kinds: list[str], per_worker: int, seed: int = 0):  # type: ignore[no-untyped-def]
    """Random triplets answered by careful (3% flips), random and always-left workers."""
    rng = np.random.default_rng(seed)
    n = len(X)
    rows, workers, sides = [], [], []
    for w, kind in enumerate(kinds):
        for _ in range(per_worker):
            a, b, c = rng.choice(n, 3, replace=False)  # b shown left, c right
            near_left = ((X[a] - X[b]) ** 2).sum() < ((X[a] - X[c]) ** 2).sum()
            if kind == "careful":
                side = (-1 if near_left else 1) * (-1 if rng.random() < 0.03 else 1)
            elif kind == "random":
                side = int(rng.choice([-1, 1]))
            else:
                side = -1
            rows.append((a, b, c) if side == -1 else (a, c, b))
            workers.append(w)
            sides.append(side)
    return np.array(rows), np.array(workers), np.array(sides)


def _truth_pairs(scores: np.ndarray, m: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = len(scores)
    left = rng.integers(n, size=m)
    right = (left + 1 + rng.integers(n - 1, size=m)) % n
    p = outcome_probabilities(scores, 0.8, left, right)
    outcome = np.array([rng.choice([-1, 0, 1], p=row) for row in p])
    return np.column_stack([left, right, outcome])


# --- Bradley–Terry–Davidson ------------------------------------------------------------------


def test_davidson_recovers_the_order_and_the_ties() -> None:
    truth = np.linspace(-3, 3, 15)
    pairs = _truth_pairs(truth, 3000)
    model = BradleyTerryDavidson().fit(pairs, 15)
    assert np.corrcoef(model.scores_, truth)[0, 1] > 0.97
    assert 0.5 < model.tie_ < 1.2  # simulated with nu = 0.8
    proba = model.predict_proba(pairs[:5, :2])
    assert proba.shape == (5, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert set(np.unique(model.predict(pairs[:, :2]))) <= {-1, 0, 1}


def test_davidson_gradient_is_exact() -> None:
    pairs = _truth_pairs(np.linspace(-1, 1, 6), 60)
    model = BradleyTerryDavidson().fit(pairs, 6)
    # Reproduce the objective by fitting with one iteration from a point, via calibrate's link.
    rng = np.random.default_rng(3)
    x = rng.normal(size=7)

    def objective(x: np.ndarray) -> float:
        p = outcome_probabilities(x[:6], float(np.exp(x[6])), pairs[:, 0], pairs[:, 1])
        nll = -np.log(p[np.arange(len(pairs)), pairs[:, 2] + 1]).sum()
        return (nll + 0.05 * x[:6] @ x[:6]) / len(pairs)

    def gradient(x: np.ndarray) -> np.ndarray:
        eps, g = 1e-6, np.zeros(7)
        for i in range(7):
            step = np.zeros(7)
            step[i] = eps
            g[i] = (objective(x + step) - objective(x - step)) / (2 * eps)
        return g

    assert check_grad(objective, gradient, x) < 1e-5
    assert model.loss_ <= objective(np.concatenate([model.scores_, [np.log(model.tie_)]])) + 1e-6


def test_davidson_weights_count_like_repeats() -> None:
    pairs = _truth_pairs(np.linspace(-2, 2, 8), 200)
    doubled = BradleyTerryDavidson().fit(np.vstack([pairs, pairs[:50]]), 8)
    weighted = BradleyTerryDavidson().fit(pairs, 8, sample_weight=[2.0] * 50 + [1.0] * 150)
    np.testing.assert_allclose(doubled.scores_, weighted.scores_, atol=1e-4)


@pytest.mark.parametrize(
    ("pairs", "message"),
    [
        (np.array([[0, 0, 1]]), "with itself"),
        (np.array([[0, 1, 2]]), "outcomes must be"),
        (np.array([[0, 1]]), "rows"),
        (np.empty((0, 3), dtype=int), "empty"),
    ],
)
def test_davidson_refuses_bad_pairs(pairs: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BradleyTerryDavidson().fit(pairs, 3)


def test_calibrate_link_finds_the_scale_of_a_ranking() -> None:
    truth = np.linspace(-3, 3, 12)
    pairs = _truth_pairs(truth, 2000)
    scale, tie = calibrate_link(truth / 10.0, pairs)  # the ranking, 10 times too small
    assert 7.0 < scale < 13.0
    assert 0.5 < tie < 1.2


# --- CrowdReliability ------------------------------------------------------------------------


def test_reliability_separates_spammers_from_careful_workers() -> None:
    X = _points(20)
    kinds = ["careful"] * 8 + ["random"] * 2 + ["left"] * 2
    rows, workers, sides = _crowd_triplets(X, kinds, 40)
    model = CrowdReliability(random_state=0).fit(rows, workers + 100, sides=sides)
    np.testing.assert_array_equal(model.workers_, np.arange(12) + 100)
    careful, spam = model.reliability_[:8], model.reliability_[8:]
    assert careful.min() > spam.max()
    low, high = model.reliability_interval_.T
    assert np.all(low <= model.reliability_) and np.all(model.reliability_ <= high)
    assert np.all(model.side_bias_[10:] > 0.8)  # always left: the random mode is all left
    assert np.all(model.side_bias_[:8] < 0.7)
    # Each answer's weight is its posterior of being careful: spammers' weigh less.
    assert model.triplet_weight_[workers >= 8].mean() < model.triplet_weight_[workers < 8].mean()
    assert model.embedding_.shape == (20, 2)
    np.testing.assert_allclose(
        model.reliability_of([100, 111, 5]), [*model.reliability_[[0, 11]], np.nan]
    )


def test_reliability_of_pairs_with_ties() -> None:
    truth = np.linspace(-3, 3, 15)
    rng = np.random.default_rng(1)
    rows, workers, sides = [], [], []
    for w in range(10):
        spammer = w >= 7
        for _ in range(40):
            left, right = rng.choice(15, 2, replace=False)
            p = outcome_probabilities(truth, 0.8, np.array([left]), np.array([right]))[0]
            side = int(rng.choice([-1, 0, 1])) if spammer else int(rng.choice([-1, 0, 1], p=p))
            rows.append((left, right, side))
            workers.append(w)
            sides.append(side)
    model = CrowdReliability(random_state=0).fit(
        pairs=np.array(rows), pair_workers=np.array(workers), pair_sides=np.array(sides)
    )
    assert model.reliability_[:7].min() > model.reliability_[7:].max()
    assert model.scores_ is not None and model.embedding_ is None


def test_trusted_answers_have_no_reliability_and_count_fully() -> None:
    X = _points(15)
    rows, workers, sides = _crowd_triplets(X, ["careful", "random"], 30)
    workers = np.where(workers == 0, -1, workers)  # worker 0's answers were imported
    model = CrowdReliability(random_state=0).fit(rows, workers, sides=sides)
    np.testing.assert_array_equal(model.workers_, [1])
    np.testing.assert_allclose(model.triplet_weight_[workers < 0], 1.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "no answers"),
        ({"triplets": [[0, 1, 2]]}, "workers is required"),
        ({"triplets": [[0, 1, 2]], "workers": [0, 1]}, "must be 1 integer"),
        ({"triplets": [[0, 1, 2]], "workers": [0], "sides": [0]}, "sides must hold only"),
        ({"pairs": [[0, 1, 0]], "pair_workers": [0], "pair_sides": [2]}, "pair_sides"),
    ],
)
def test_reliability_refuses_bad_input(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CrowdReliability().fit(**kwargs)


# --- sample weights of the other estimators --------------------------------------------------


@pytest.mark.parametrize("estimator", [SOE, TSTE])
def test_embedding_weights_count_like_repeats(estimator: type) -> None:
    X = _points(12, 2)
    rows, _, _ = _crowd_triplets(X, ["careful"], 150)
    doubled = np.vstack([rows, rows[:40]])
    weight = np.r_[np.full(40, 2.0), np.ones(len(rows) - 40)]
    start = np.random.default_rng(0).normal(size=(12, 2))
    a = estimator(random_state=0).fit(doubled, 12, init=start)
    b = estimator(random_state=0).fit(rows, 12, sample_weight=weight, init=start)
    np.testing.assert_allclose(a.embedding_, b.embedding_, atol=1e-4)
    zero = estimator(random_state=0).fit(rows, 12, sample_weight=np.r_[np.zeros(40), weight[40:]])
    kept = estimator(random_state=0).fit(rows[40:], 12)
    np.testing.assert_allclose(zero.embedding_, kept.embedding_, atol=1e-4)


def test_embedding_refuses_bad_weights_and_init() -> None:
    rows = np.array([[0, 1, 2], [1, 0, 2]])
    with pytest.raises(ValueError, match="one weight per comparison"):
        TSTE().fit(rows, sample_weight=[1.0])
    with pytest.raises(ValueError, match="non-negative"):
        TSTE().fit(rows, sample_weight=[1.0, -1.0])
    with pytest.raises(ValueError, match="zero everywhere"):
        TSTE().fit(rows, sample_weight=[0, 0])
    with pytest.raises(ValueError, match="init must be"):
        TSTE().fit(rows, init=np.zeros((2, 2)))


def test_svmcompare_weight_scales_a_pairs_cost() -> None:
    rng = np.random.default_rng(0)
    X_left, X_right = rng.normal(size=(60, 2)), rng.normal(size=(60, 2))
    y = np.sign(X_right.sum(1) - X_left.sum(1)).astype(int)
    y[np.abs(X_right.sum(1) - X_left.sum(1)) < 0.7] = 0
    for solver in ("dual", "primal"):  # the primal's squared hinge: liblinear converges
        doubled = SVMCompare(kernel="linear", solver=solver).fit(
            np.vstack([X_left, X_left[:20]]), np.vstack([X_right, X_right[:20]]), np.r_[y, y[:20]]
        )
        weighted = SVMCompare(kernel="linear", solver=solver).fit(
            X_left, X_right, y, sample_weight=np.r_[np.full(20, 2.0), np.ones(40)]
        )
        np.testing.assert_allclose(doubled.rank(X_left), weighted.rank(X_left), atol=1e-2)


def test_metricboost_kernel_and_tripletboost_take_weights() -> None:
    X = _points(15, 4)
    rows, _, _ = _crowd_triplets(X, ["careful"], 200)
    plain = MetricBoost(n_estimators=5, weak_learner="normalized").fit(X, rows)
    ones = MetricBoost(n_estimators=5, weak_learner="normalized").fit(
        X, rows, sample_weight=np.ones(len(rows))
    )
    np.testing.assert_allclose(plain.metric_, ones.metric_)
    tilted = MetricBoost(n_estimators=5, weak_learner="normalized").fit(
        X, rows, sample_weight=np.r_[np.full(100, 10.0), np.ones(len(rows) - 100)]
    )
    assert not np.allclose(plain.metric_, tilted.metric_)
    kernel = TripletKernel().fit(rows, 15).features_
    weighted = TripletKernel().fit(rows, 15, sample_weight=np.ones(len(rows))).features_
    assert abs(kernel - weighted).max() < 1e-12
    merged = weighted_majority(np.array([[0, 1, 2], [0, 2, 1], [0, 1, 2]]), np.array([1, 3, 1.0]))
    np.testing.assert_array_equal(merged, [[0, 2, 1]])

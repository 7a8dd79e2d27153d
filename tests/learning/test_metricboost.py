"""Tests of app.learning.metricboost (Bi et al. 2011, MetricBoost)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from app.learning.metricboost import MetricBoost

VARIANTS = ["binary", "normalized"]


def label_triplets(y: np.ndarray) -> np.ndarray:
    """Every (i, j, k) with y_i = y_j != y_k and i != j, built explicitly."""
    n = len(y)
    rows = [
        (i, j, k)
        for i, j, k in itertools.product(range(n), repeat=3)
        if i != j and y[i] == y[j] and y[k] != y[i]
    ]
    return np.array(rows)


def signal_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Three classes; only feature 2 depends on the class, the rest is noise."""
    rng = np.random.default_rng(seed)
    y = np.repeat([0, 1, 2], 30)
    X = rng.normal(size=(90, 5))
    X[:, 2] = 2.0 * y + rng.normal(scale=0.3, size=90)
    return X, y


def hand_model() -> MetricBoost:
    """A binary model on one feature: H(x, y) = [(x - y)^2 >= 1], G = (x - y)^2."""
    model = MetricBoost(weak_learner="binary")
    model.n_features_in_ = 1
    model.directions_ = np.array([[1.0]])
    model.alphas_ = np.array([1.0])
    model.thresholds_ = np.array([1.0])
    return model


@pytest.mark.parametrize("weak_learner", VARIANTS)
def test_signal_feature_gets_the_weight(weak_learner):
    X, y = signal_data()
    model = MetricBoost(weak_learner=weak_learner).fit_from_labels(X, y)
    weight = np.abs(model.alphas_) @ np.square(model.directions_)
    assert np.argmax(weight) == 2
    assert weight[2] > 0.8 * weight.sum()
    if weak_learner == "normalized":
        assert np.argmax(np.diag(model.metric_)) == 2
        assert model.metric_[2, 2] > 0.8 * np.trace(model.metric_)
    # the learned dissimilarity separates the classes: 1-NN on held-out draws
    X_test, y_test = signal_data(seed=1)
    assert np.mean(model.predict_knn(X, y, X_test) == y_test) > 0.95


@pytest.mark.parametrize("weak_learner", VARIANTS)
def test_bipartite_equals_explicit_triplets(weak_learner):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(14, 3))
    y = np.array(list("aabbbccaabccab"))
    explicit = MetricBoost(n_estimators=8, weak_learner=weak_learner).fit(X, label_triplets(y))
    bipartite = MetricBoost(n_estimators=8, weak_learner=weak_learner).fit_from_labels(X, y)
    assert explicit.n_triplets_ == bipartite.n_triplets_ == len(label_triplets(y))
    assert explicit.n_estimators_ == bipartite.n_estimators_
    np.testing.assert_allclose(explicit.alphas_, bipartite.alphas_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(explicit.z_factors_, bipartite.z_factors_, rtol=1e-9)
    np.testing.assert_allclose(explicit.directions_, bipartite.directions_, atol=1e-9)
    if weak_learner == "normalized":
        np.testing.assert_allclose(explicit.metric_, bipartite.metric_, rtol=1e-9, atol=1e-12)
    else:
        np.testing.assert_allclose(explicit.thresholds_, bipartite.thresholds_, rtol=1e-9)
    np.testing.assert_allclose(explicit.pairwise_distances(X), bipartite.pairwise_distances(X))


@pytest.mark.parametrize("weak_learner", VARIANTS)
def test_score_is_fraction_satisfied_and_theorem_1_bound(weak_learner):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 4))
    triplets = np.array([rng.choice(30, 3, replace=False) for _ in range(400)])
    model = MetricBoost(n_estimators=10, weak_learner=weak_learner).fit(X, triplets)
    H = model.pairwise_distances(X)
    a, b, c = triplets.T
    by_hand = np.mean(H[a, b] < H[a, c])
    score = model.score(X, triplets)
    assert 0.0 <= score <= 1.0
    assert score == pytest.approx(by_hand, abs=1e-12)
    # Theorem 1: the training error, ties counted as errors, is at most prod Z_t
    assert 1.0 - score <= np.prod(model.z_factors_) + 1e-12
    assert np.all(model.z_factors_ <= 1.0 + 1e-12)


def test_normalized_pairwise_distances_and_transform_agree_with_metric():
    X, y = signal_data()
    model = MetricBoost(weak_learner="normalized").fit_from_labels(X, y)
    assert model.is_psd_
    diff = X[:, None, :] - X[None, :5, :]
    expected = np.einsum("ijk,kl,ijl->ij", diff, model.metric_, diff)
    np.testing.assert_allclose(model.pairwise_distances(X, X[:5]), expected, atol=1e-9)
    L = model.transform(X)
    sq = np.square(L[:, None, :] - L[None, :5, :]).sum(axis=-1)
    np.testing.assert_allclose(sq, expected, atol=1e-8)


def test_negative_alpha_gives_indefinite_metric():
    # Triplets say: the anchor is closer to the object FARTHER along feature 0.
    rng = np.random.default_rng(7)
    X = rng.normal(size=(40, 2))
    X[:, 1] *= 0.01
    cand = np.array([rng.choice(40, 3, replace=False) for _ in range(500)])
    a, b, c = cand.T
    swap = np.abs(X[a, 0] - X[b, 0]) < np.abs(X[a, 0] - X[c, 0])
    triplets = np.where(swap[:, None], cand[:, [0, 2, 1]], cand)
    model = MetricBoost(n_estimators=5, weak_learner="normalized").fit(X, triplets)
    assert model.alphas_[0] < 0
    assert not model.is_psd_
    assert np.linalg.eigvalsh(model.metric_)[0] < 0
    assert (model.pairwise_distances(X) < 0).any()
    assert model.score(X, triplets) > 0.9  # it learned the reversed order
    with pytest.raises(ValueError, match="indefinite"):
        model.transform(X)
    # neighbours and k-NN still work on a negative H
    _, ind = model.kneighbors(X[:3], X, n_neighbors=2)
    assert ind.shape == (3, 2)
    assert model.predict_knn(X, np.arange(40) % 2, X[:4]).shape == (4,)


def test_binary_has_no_metric_or_transform():
    X, y = signal_data()
    model = MetricBoost(weak_learner="binary").fit_from_labels(X, y)
    assert not hasattr(model, "metric_")
    assert not model.is_psd_
    H = model.pairwise_distances(X)
    levels = np.unique(H)
    assert len(levels) <= 2**model.n_estimators_
    with pytest.raises(ValueError, match="not a Mahalanobis"):
        model.transform(X)


def test_hand_checked_tie_break():
    model = hand_model()
    query = np.array([[0.0]])
    index = np.array([[0.5], [-0.2], [3.0], [0.9]])
    np.testing.assert_array_equal(model.pairwise_distances(query, index), [[0, 0, 1, 0]])
    dist, ind = model.kneighbors(query, index, n_neighbors=4)
    np.testing.assert_array_equal(ind, [[1, 0, 3, 2]])  # H ties broken by G = p / beta
    np.testing.assert_array_equal(dist, [[0, 0, 0, 1]])
    X = np.vstack([query, index])
    # (0, 1, 2): H ties at 0, G says 0.25 > 0.04, so object 2 is the closer one
    triplets = np.array([[0, 1, 2], [0, 2, 1], [0, 4, 3]])
    np.testing.assert_array_equal(model.predict_triplets(X, triplets), [False, True, True])
    assert model.score(X, triplets) == pytest.approx(1 / 3)  # score does not break ties
    y = np.array([7, 7, 9, 9, 9])
    # the nearest of 0.0 among the others is -0.2 (label 9), with exact H ties
    assert model.predict_knn(X[1:], y[1:], query)[0] == 9


def test_kneighbors_excludes_self_and_is_sorted():
    X, y = signal_data()
    model = MetricBoost(weak_learner="normalized").fit_from_labels(X, y)
    dist, ind = model.kneighbors(X, n_neighbors=4)
    assert not np.any(ind == np.arange(len(X))[:, None])
    assert np.all(np.diff(dist, axis=1) >= 0)
    H = model.pairwise_distances(X)
    np.fill_diagonal(H, np.inf)
    np.testing.assert_array_equal(ind[:, 0], np.argmin(H, axis=1))
    assert model.kneighbors(X[:2], X, n_neighbors=1, return_distance=False).shape == (2, 1)


def test_labels_of_any_type_and_callback():
    X, y = signal_data()
    calls = []
    names = np.array(["cat", "dog", "emu"])[y]
    a = MetricBoost(n_estimators=5).fit_from_labels(X, names, callback=lambda *c: calls.append(c))
    b = MetricBoost(n_estimators=5).fit_from_labels(X, y)
    np.testing.assert_allclose(a.alphas_, b.alphas_)
    assert calls[-1] == (5, 5)
    assert [c[0] for c in calls] == list(range(1, a.n_estimators_ + 1)) + (
        [5] if a.n_estimators_ < 5 else []
    )
    assert clone(a).get_params() == a.get_params()


def test_random_state_does_not_change_the_result():
    X, y = signal_data()
    a = MetricBoost(random_state=0).fit_from_labels(X, y)
    b = MetricBoost(random_state=1).fit_from_labels(X, y)
    np.testing.assert_array_equal(a.alphas_, b.alphas_)


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"n_estimators": 0}, "n_estimators"),
        ({"n_estimators": 2.5}, "n_estimators"),
        ({"weak_learner": "linear"}, "weak_learner"),
        ({"random_state": "seed"}, "random_state"),
    ],
)
def test_bad_parameters(params, match):
    X, y = signal_data()
    with pytest.raises(ValueError, match=match):
        MetricBoost(**params).fit_from_labels(X, y)


def test_fit_value_errors():
    X, y = signal_data()
    T = np.array([[0, 1, 50], [1, 2, 60]])
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        MetricBoost().fit(bad, T)
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="infinity"):
        MetricBoost().fit_from_labels(bad, y)
    with pytest.raises(ValueError, match="2D array"):
        MetricBoost().fit(X[:, 0], T)
    with pytest.raises(ValueError, match="shape"):
        MetricBoost().fit(X, T[:, :2])
    with pytest.raises(ValueError, match="out of range"):
        MetricBoost().fit(X, [[0, 1, 90]])
    with pytest.raises(ValueError, match="distinct"):
        MetricBoost().fit(X, [[0, 0, 1]])
    with pytest.raises(ValueError, match="empty"):
        MetricBoost().fit(X, np.empty((0, 3), dtype=int))
    with pytest.raises(ValueError, match="minimum of 3"):
        MetricBoost().fit_from_labels(X[:2], [0, 1])
    with pytest.raises(ValueError, match="identical"):
        MetricBoost().fit(np.ones((5, 2)), [[0, 1, 2]])
    with pytest.raises(ValueError, match="callable"):
        MetricBoost().fit(X, T, callback=3)
    with pytest.raises(ValueError, match=r"y must have shape \(90,\)"):
        MetricBoost().fit_from_labels(X, y[:-1])
    with pytest.raises(ValueError, match="NaN"):
        MetricBoost().fit_from_labels(X, np.where(y == 0, np.nan, y))
    with pytest.raises(ValueError, match="no triplet"):
        MetricBoost().fit_from_labels(X, np.zeros(90))
    with pytest.raises(ValueError, match="no triplet"):
        MetricBoost().fit_from_labels(X[:3], [0, 1, 2])


def test_predict_value_errors():
    X, y = signal_data()
    with pytest.raises(NotFittedError):
        MetricBoost().pairwise_distances(X)
    with pytest.raises(NotFittedError):
        MetricBoost().score(X, [[0, 1, 2]])
    model = MetricBoost(n_estimators=3, weak_learner="normalized").fit_from_labels(X, y)
    with pytest.raises(ValueError, match="4 features"):
        model.pairwise_distances(X[:, :4])
    with pytest.raises(ValueError, match="Y has 4 features"):
        model.pairwise_distances(X, X[:, :4])
    bad = X.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        model.transform(bad)
    with pytest.raises(ValueError, match="NaN"):
        model.predict_triplets(bad, [[0, 1, 2]])
    with pytest.raises(ValueError, match="out of range"):
        model.predict_triplets(X[:5], [[0, 1, 5]])
    with pytest.raises(ValueError, match="out of range"):
        model.score(X[:5], [[0, 1, 7]])
    with pytest.raises(ValueError, match="empty"):
        model.score(X, np.empty((0, 3), dtype=int))
    with pytest.raises(ValueError, match="n_neighbors"):
        model.kneighbors(X[:5], n_neighbors=5)  # only 4 others
    with pytest.raises(ValueError, match="n_neighbors"):
        model.predict_knn(X, y, X[:2], n_neighbors=0)
    with pytest.raises(ValueError, match="y_train"):
        model.predict_knn(X, y[:-1], X[:2])


@pytest.mark.parametrize("weak_learner", VARIANTS)
def test_contradictory_triplets_learn_nothing(weak_learner):
    X = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    with pytest.raises(ValueError, match="nothing was learned"):
        MetricBoost(weak_learner=weak_learner).fit(X, [[0, 1, 2], [0, 2, 1]])


def test_normalized_ties_go_to_the_lower_index():
    X = np.array([[0.0], [1.0], [-1.0], [5.0]])
    model = MetricBoost(weak_learner="normalized").fit(X, [[0, 1, 3], [0, 2, 3]])
    # objects 1 and 2 are equally far from 0 under any metric on this line
    np.testing.assert_array_equal(model.predict_triplets(X, [[0, 1, 2], [0, 2, 1]]), [True, False])
    assert model.score(X, [[0, 1, 2]]) == 0.0
    np.testing.assert_array_equal(
        model.kneighbors(X[:1], X[1:], 2, return_distance=False), [[0, 1]]
    )


def test_standardized_pipeline_with_triplets():
    # the documented way to scale features first: triplets travel as the pipeline's y
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    X, y = signal_data()
    X[:, 0] *= 1000.0  # a noise feature on a huge scale
    triplets = label_triplets(y[::6])
    rows = np.flatnonzero(np.arange(90) % 6 == 0)
    triplets = rows[triplets]
    pipe = make_pipeline(StandardScaler(), MetricBoost(weak_learner="normalized"))
    pipe.fit(X, triplets)
    assert pipe.score(X, triplets) > 0.9
    raw = MetricBoost(weak_learner="normalized").fit(X, triplets)
    assert raw.score(X, triplets) < pipe.score(X, triplets)


def test_knn_uses_the_metric_part_of_h():
    # Round 2 is a similarity measure (alpha < 0, Section 3.2): the full H puts B,
    # far along feature 1, below H(q, q) = 0; the metric part H+ keeps A nearest.
    model = MetricBoost(weak_learner="binary")
    model.n_features_in_ = 2
    model.directions_ = np.eye(2)
    model.alphas_ = np.array([1.0, -0.5])
    model.thresholds_ = np.array([1.0, 1.0])
    query = np.array([[0.0, 0.0]])
    index = np.array([[0.2, 3.0], [0.1, 0.0], [2.0, 0.0]])  # B, A, far on feature 0
    np.testing.assert_array_equal(model.pairwise_distances(query, index), [[-0.5, 0, 1]])
    dist, ind = model.kneighbors(query, index, n_neighbors=3)
    np.testing.assert_array_equal(ind, [[1, 0, 2]])  # H+ ties A and B at 0; G+ says A
    np.testing.assert_array_equal(dist, [[0, 0, 1]])
    assert model.predict_knn(index, np.array([5, 6, 7]), query)[0] == 6
    # triplet comparisons keep the full H: B is "closer" than A to the query
    X = np.vstack([query, index])
    np.testing.assert_array_equal(model.predict_triplets(X, [[0, 1, 2], [0, 2, 1]]), [True, False])
    # a query is its own nearest neighbour under H+, though some alpha_t < 0
    X, y = signal_data()
    fitted = MetricBoost(weak_learner="binary").fit_from_labels(X, y)
    assert (fitted.alphas_ < 0).any()
    dist, ind = fitted.kneighbors(X, X, n_neighbors=1)
    np.testing.assert_array_equal(ind[:, 0], np.arange(len(X)))
    assert np.all(dist == 0)

"""Tests of TripletBoost (Perrot & von Luxburg, 2019, Algorithm 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.learning.tripletboost import TripletBoost
from app.learning.triplets import make_random_triplets


def _two_clusters(n: int = 30, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = np.r_[rng.normal(0, 0.3, (n // 2, 2)), rng.normal(3, 0.3, (n - n // 2, 2))]
    y = np.r_[np.zeros(n // 2, int), np.ones(n - n // 2, int)]
    return X, y


def _reference_boost(triplets, y, pairs):
    """Algorithm 1 written out literally (dicts and loops), for given pairs.

    Returns the α_c and (o_j, o_k) of every round, with normalised weights.
    """
    labeled = [i for i in range(len(y)) if y[i] != -1]
    classes = sorted({y[i] for i in labeled})
    n = len(labeled)
    w = {(i, c): 1.0 / (n * len(classes)) for i in labeled for c in classes}
    side: dict[tuple[int, int, int], int] = {}  # (anchor, lo, hi) -> net vote for lo
    for a, b, c in triplets.tolist():
        lo, hi = min(b, c), max(b, c)
        side[(a, lo, hi)] = side.get((a, lo, hi), 0) + (1 if b == lo else -1)
    alphas, outs = [], []
    for lo, hi in pairs:

        def h(i, lo=lo, hi=hi):
            vote = side.get((i, lo, hi), 0)
            return None if vote == 0 else ("lo" if vote > 0 else "hi")

        def pm(cond):
            return 1.0 if cond else -1.0

        o = {}
        for half in ("lo", "hi"):  # Eq. (2)
            o[half] = {
                c
                for c in classes
                if sum(pm(c == y[i]) * w[i, c] for i in labeled if h(i) == half) > 0
            }
        w_plus = w_minus = 0.0  # Eq. (3)
        for i in labeled:
            if h(i) is None:
                continue
            for c in classes:
                right = (c == y[i]) == (c in o[h(i)])
                if right:
                    w_plus += w[i, c]
                else:
                    w_minus += w[i, c]
        alpha = 0.5 * math.log((w_plus + 1 / n) / (w_minus + 1 / n))
        for i in labeled:  # Eq. (4)
            if h(i) is None:
                continue
            for c in classes:
                w[i, c] *= math.exp(-alpha * pm(c == y[i]) * pm(c in o[h(i)]))
        z = sum(w.values())
        w = {key: value / z for key, value in w.items()}
        alphas.append(alpha)
        outs.append(([c in o["lo"] for c in classes], [c in o["hi"] for c in classes]))
    return np.array(alphas), np.array(outs)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_matches_a_literal_implementation_of_algorithm_1(n_classes: int) -> None:
    rng = np.random.default_rng(n_classes)
    X = rng.normal(size=(24, 2))
    y = rng.integers(0, n_classes, 24)
    y[[3, 7]] = -1
    T = make_random_triplets(X, fraction=0.3, noise=0.1, random_state=1)
    T = np.r_[T, T[:40], T[40:60, [0, 2, 1]]]  # repeats and contradictions
    model = TripletBoost(n_estimators=60, random_state=0).fit(T, y)
    alphas, outs = _reference_boost(T, y, model.references_.tolist())
    np.testing.assert_allclose(model.alphas_, alphas, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(model.outputs_[alphas != 0], outs[alphas != 0])
    assert np.all(model.alphas_ >= 0)  # Theorem 1: never worse than random
    lab = y[model.references_]
    assert np.all(lab[:, 0] != lab[:, 1]) and np.all(lab >= 0)


def test_zero_training_error_on_separable_data() -> None:
    X, y = _two_clusters(30)
    T = make_random_triplets(X, fraction=0.2, random_state=0)
    model = TripletBoost(n_estimators=2000, random_state=0).fit(T, y)
    assert model.score(T, np.arange(30), y) == 1.0


def test_predicts_unlabeled_objects_from_their_triplets() -> None:
    X, y = _two_clusters(40, seed=1)
    y_fit = y.copy()
    test = np.arange(0, 40, 4)
    y_fit[test] = -1
    T = make_random_triplets(X, fraction=0.3, random_state=0)
    model = TripletBoost(n_estimators=3000, random_state=0).fit(T, y_fit)
    np.testing.assert_array_equal(model.predict(T, test), y[test])
    proba = model.predict_proba(T, test)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert np.all(proba[np.arange(test.size), y[test]] > 0.5)


def test_string_labels_and_none_for_unlabeled() -> None:
    X, y = _two_clusters(30, seed=2)
    names = np.array(["cat", "dog"], dtype=object)[y]
    names[[0, 29]] = None
    T = make_random_triplets(X, fraction=0.3, random_state=0)
    model = TripletBoost(n_estimators=1000, random_state=0).fit(T, names)
    assert list(model.classes_) == ["cat", "dog"]
    assert list(model.predict(T, [0, 29])) == ["cat", "dog"]
    plain = TripletBoost(n_estimators=200, random_state=0).fit(T, np.array(["a", "b"])[y])
    assert plain.predict(T, [0]).dtype == object


def test_abstention_is_explicit() -> None:
    X, y = _two_clusters(20, seed=3)
    y_fit = y.copy()
    y_fit[[0, 19]] = -1
    T = make_random_triplets(X, fraction=0.3, random_state=0)
    T = T[T[:, 0] != 0]  # object 0 is never an anchor: nothing speaks for it
    model = TripletBoost(n_estimators=500, random_state=0).fit(T, y_fit)
    objects = np.array([0, 19])
    assert list(model.abstains(T, objects)) == [True, False]
    np.testing.assert_array_equal(model.decision_function(T, objects)[0], 0.0)
    assert np.isnan(model.predict_proba(T, objects)[0]).all()
    assert list(model.predict(T, objects)) == [-1, y[19]]
    names = np.array(["a", "b"], dtype=object)[y_fit.clip(0)]
    names[[0, 19]] = None
    model = TripletBoost(n_estimators=500, random_state=0).fit(T, names)
    assert model.predict(T, objects)[0] is None
    assert model.score(T, objects, np.array(["a", "b"], dtype=object)[y[objects]]) == 0.5


def test_multiclass_and_determinism() -> None:
    rng = np.random.default_rng(4)
    centers = np.array([[0, 0], [5, 0], [0, 5]])
    y = np.repeat(np.arange(3), 12)
    X = centers[y] + rng.normal(0, 0.5, (36, 2))
    T = make_random_triplets(X, fraction=0.2, random_state=0)
    a = TripletBoost(n_estimators=1500, random_state=3).fit(T, y)
    b = TripletBoost(n_estimators=1500, random_state=3).fit(T, y)
    np.testing.assert_array_equal(a.alphas_, b.alphas_)
    assert a.score(T, np.arange(36), y) == 1.0
    assert a.decision_function(T, np.arange(36)).shape == (36, 3)


def test_progress_hook_reports_rounds() -> None:
    X, y = _two_clusters(20, seed=5)
    T = make_random_triplets(X, fraction=0.3, random_state=0)
    seen: list[tuple[int, int]] = []
    TripletBoost(n_estimators=250, random_state=0).fit(
        T, y, progress=lambda d, t: seen.append((d, t))
    )
    assert seen[-1] == (250, 250)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert all(t == 250 for _, t in seen)


def test_triplets_referring_to_unlabeled_or_same_class_references_are_ignored() -> None:
    X, y = _two_clusters(20, seed=6)
    T = make_random_triplets(X, fraction=0.3, random_state=0)
    same = y[T[:, 1]] == y[T[:, 2]]
    a = TripletBoost(n_estimators=300, random_state=0).fit(T, y)
    b = TripletBoost(n_estimators=300, random_state=0).fit(T[~same], y)
    np.testing.assert_array_equal(a.alphas_, b.alphas_)


def test_value_errors() -> None:
    X, y = _two_clusters(20, seed=7)
    T = make_random_triplets(X, fraction=0.3, random_state=0)
    with pytest.raises(ValueError, match="n_estimators"):
        TripletBoost(n_estimators=0).fit(T, y)
    with pytest.raises(ValueError, match="random_state"):
        TripletBoost(random_state="x").fit(T, y)
    with pytest.raises(ValueError, match="at least 2 classes"):
        TripletBoost(n_estimators=5).fit(T, np.zeros(20, int))
    with pytest.raises(ValueError, match="1-d"):
        TripletBoost(n_estimators=5).fit(T, y[:, None])
    with pytest.raises(ValueError, match="NaN"):
        TripletBoost(n_estimators=5).fit(T, np.where(y == 0, np.nan, 1.0))
    with pytest.raises(ValueError, match="out of range"):
        TripletBoost(n_estimators=5).fit(T, np.r_[y[:5], y[-5:]])
    with pytest.raises(ValueError, match="shape"):
        TripletBoost(n_estimators=5).fit(T[:, :2], y)
    with pytest.raises(ValueError, match="no usable training triplet"):
        TripletBoost(n_estimators=5).fit(T[y[T[:, 1]] == y[T[:, 2]]], y)
    model = TripletBoost(n_estimators=5, random_state=0).fit(T, y)
    with pytest.raises(ValueError, match="objects"):
        model.predict(T, [25])
    with pytest.raises(ValueError, match="objects"):
        model.predict(T, [[0]])
    with pytest.raises(ValueError, match="out of range"):
        model.predict([[0, 1, 30]], [0])
    with pytest.raises(ValueError, match="one label per object"):
        model.score(T, [0, 1], y)
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        TripletBoost().predict(T, [0])


def test_sparse_index_and_binary_search_match_the_dense_paths() -> None:
    from app.learning import _tripletboost_numba as kernels
    from app.learning.tripletboost import _index_sparse

    rng = np.random.default_rng(8)
    X = rng.normal(size=(40, 2))
    y = rng.integers(0, 3, 40)
    y[:4] = -1
    T = make_random_triplets(X, fraction=0.2, random_state=0)
    T = np.r_[T, T[:300], T[300:600, [0, 2, 1]]]
    position = np.full(40, -1)
    position[y >= 0] = np.arange(36)
    label = np.where(y >= 0, y, -1)
    dense = kernels.index_dense(T, position, label, 40)
    sparse = _index_sparse(T, position, label, 40)
    np.testing.assert_array_equal(dense[2], sparse[2])
    np.testing.assert_array_equal(dense[3], sparse[3])
    for p in range(dense[3].size):  # same entries per pair, order aside
        lo, hi = dense[2][p], dense[2][p + 1]
        a = sorted(zip(dense[0][lo:hi].tolist(), dense[1][lo:hi].tolist(), strict=True))
        b = sorted(zip(sparse[0][lo:hi].tolist(), sparse[1][lo:hi].tolist(), strict=True))
        assert a == b
    model = TripletBoost(n_estimators=300, random_state=0).fit(T, y)
    scores = np.zeros((40, 3))
    empty = np.empty(0, dtype=np.int64)
    wanted = np.ones(40, dtype=bool)
    kernels.vote(T, wanted, 40, model.pairs_, empty, model.votes_, scores)
    np.testing.assert_allclose(scores, model.decision_function(T, np.arange(40)))

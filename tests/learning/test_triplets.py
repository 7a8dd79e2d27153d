"""Tests of the triplet toolkit: generators, agreement and oracle."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest
from sklearn.metrics import pairwise_distances

from app.learning.triplets import (
    check_triplets,
    make_landmark_triplets,
    make_oracle,
    make_random_triplets,
    triplet_agreement,
)


def _questions(triplets: np.ndarray) -> set[tuple[int, int, int]]:
    return {(a, min(b, c), max(b, c)) for a, b, c in triplets.tolist()}


@pytest.fixture
def points() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(7, 2))


# ---------------------------------------------------------------- check_triplets


def test_check_triplets_accepts_and_rejects() -> None:
    assert check_triplets([[0, 1, 2]], 3).dtype == np.intp
    assert check_triplets(np.empty((0, 3))).shape == (0, 3)
    for bad, n in [([[0, 1]], None), ([[0, 1, 1]], None), ([[-1, 1, 2]], None), ([[0, 1, 3]], 3)]:
        with pytest.raises(ValueError):
            check_triplets(bad, n)
    with pytest.raises(ValueError, match="non-integer"):
        check_triplets([[0.5, 1, 2]])


# ---------------------------------------------------------- make_random_triplets


def test_full_fraction_enumerates_every_question_once_and_correctly(points: np.ndarray) -> None:
    n = points.shape[0]
    T = make_random_triplets(points, fraction=1.0, random_state=0)
    assert T.shape == (n * comb(n - 1, 2), 3)
    assert len(_questions(T)) == T.shape[0]
    assert triplet_agreement(T, pairwise_distances(points)) == 1.0
    check_triplets(T, n)


def test_noise_one_flips_every_answer(points: np.ndarray) -> None:
    T = make_random_triplets(points, fraction=1.0, noise=1.0, random_state=0)
    assert triplet_agreement(T, pairwise_distances(points)) == 0.0


def test_noise_rate_is_respected() -> None:
    X = np.random.default_rng(1).normal(size=(60, 3))
    T = make_random_triplets(X, n_triplets=20_000, noise=0.2, random_state=1)
    flipped = 1.0 - triplet_agreement(T, pairwise_distances(X))
    assert abs(flipped - 0.2) < 0.015  # sd of the rate is 0.003


def test_sampling_is_without_replacement_and_uniform() -> None:
    n = 8  # 168 questions; draw half of them many times
    X = np.random.default_rng(2).normal(size=(n, 2))
    total = n * comb(n - 1, 2)
    counts: dict[tuple[int, int, int], int] = {}
    for seed in range(300):
        T = make_random_triplets(X, n_triplets=total // 2, random_state=seed)
        q = _questions(T)
        assert len(q) == total // 2
        for key in q:
            counts[key] = counts.get(key, 0) + 1
    assert len(counts) == total
    freq = np.array(list(counts.values())) / 300
    assert abs(freq.mean() - 0.5) < 1e-12
    assert freq.std() < 1.3 * 0.5 / np.sqrt(300)  # binomial sd 0.029
    assert freq.min() > 0.35 and freq.max() < 0.65


def test_anchor_coverage_is_uniform() -> None:
    X = np.random.default_rng(3).normal(size=(50, 2))
    T = make_random_triplets(X, n_triplets=50_000, random_state=3)
    per_anchor = np.bincount(T[:, 0], minlength=50)
    assert abs(per_anchor - 1000).max() < 150  # sd about 31
    per_reference = np.bincount(T[:, 1:].ravel(), minlength=50)
    assert abs(per_reference - 2000).max() < 250


def test_fraction_counts_proper_questions(points: np.ndarray) -> None:
    T = make_random_triplets(points, fraction=0.1, random_state=0)
    assert T.shape[0] == round(0.1 * (7 * comb(6, 2)))


def test_anchors_and_references_restrict_the_design() -> None:
    X = np.random.default_rng(4).normal(size=(12, 2))
    anchors, refs = np.array([0, 1, 2, 5]), np.array([2, 3, 4, 5, 6])
    T = make_random_triplets(X, fraction=1.0, anchors=anchors, references=refs, random_state=0)
    # anchors 0 and 1 have C(5, 2) pairs; 2 and 5 are references, C(4, 2)
    assert T.shape[0] == 2 * 10 + 2 * 6
    assert set(T[:, 0]) == set(anchors.tolist())
    assert set(T[:, 1:].ravel()) <= set(refs.tolist())
    assert len(_questions(T)) == T.shape[0]
    check_triplets(T)


@pytest.mark.parametrize("metric", ["cosine", "cityblock", "chebyshev", "correlation"])
def test_metrics_and_precomputed_agree(metric: str) -> None:
    X = np.random.default_rng(5).normal(size=(30, 4))
    D = pairwise_distances(X, metric=metric)
    T = make_random_triplets(X, n_triplets=2000, metric=metric, random_state=0)
    assert triplet_agreement(T, D) == 1.0
    T = make_random_triplets(D, n_triplets=2000, metric="precomputed", random_state=0)
    assert triplet_agreement(T, D) == 1.0


def test_same_seed_same_triplets(points: np.ndarray) -> None:
    a = make_random_triplets(points, n_triplets=50, noise=0.1, random_state=7)
    b = make_random_triplets(points, n_triplets=50, noise=0.1, random_state=7)
    np.testing.assert_array_equal(a, b)
    c = make_random_triplets(points, n_triplets=50, shuffle=False, random_state=7)
    assert np.all(np.diff(c[:, 0]) >= 0)  # grouped by anchor


def test_million_triplets_from_ten_thousand_objects() -> None:
    X = np.random.default_rng(6).normal(size=(10_000, 3))
    T = make_random_triplets(X, n_triplets=1_000_000, random_state=0)
    assert T.shape == (1_000_000, 3)
    sample = T[:5000]
    assert triplet_agreement(sample, lambda a, b: np.linalg.norm(X[a] - X[b], axis=1)) == 1.0


def test_make_random_triplets_errors(points: np.ndarray) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        make_random_triplets(points)
    with pytest.raises(ValueError, match="exactly one"):
        make_random_triplets(points, fraction=0.5, n_triplets=3)
    with pytest.raises(ValueError, match="fraction"):
        make_random_triplets(points, fraction=1.5)
    with pytest.raises(ValueError, match="exceeds"):
        make_random_triplets(points, n_triplets=10**6)
    with pytest.raises(ValueError, match="non-negative"):
        make_random_triplets(points, n_triplets=-1)
    with pytest.raises(ValueError, match="integer"):
        make_random_triplets(points, n_triplets=2.5)
    with pytest.raises(ValueError, match="noise"):
        make_random_triplets(points, n_triplets=3, noise=1.5)
    with pytest.raises(ValueError, match="unknown metric"):
        make_random_triplets(points, n_triplets=3, metric="nope")
    with pytest.raises(ValueError, match="square"):
        make_random_triplets(points, n_triplets=3, metric="precomputed")
    with pytest.raises(ValueError, match="out of range"):
        make_random_triplets(points, n_triplets=3, anchors=[0, 9])
    with pytest.raises(ValueError, match="repeats"):
        make_random_triplets(points, n_triplets=3, references=[1, 1, 2])
    with pytest.raises(ValueError, match="no question"):
        make_random_triplets(points, n_triplets=1, anchors=[0], references=[0, 1])
    with pytest.raises(ValueError, match="random_state"):
        make_random_triplets(points, n_triplets=3, random_state="x")


# -------------------------------------------------------- make_landmark_triplets


def test_k1_landmark_design(points: np.ndarray) -> None:
    L = [1, 3, 4]
    total = 4 * comb(3, 2) + 3 * comb(2, 2)
    T = make_landmark_triplets(points, L, n_triplets=total, kind="k1", random_state=0)
    assert len(_questions(T)) == total
    assert set(T[:, 1:].ravel()) == set(L)  # candidates are landmarks
    assert set(T[:, 0]) == set(range(7))  # any anchor
    assert triplet_agreement(T, pairwise_distances(points)) == 1.0


def test_k2_landmark_design(points: np.ndarray) -> None:
    L = [1, 3, 4]
    n, n_l = 7, 3
    total = n_l * (comb(n_l - 1, 2) + (n_l - 1) * (n - n_l))
    T = make_landmark_triplets(points, L, n_triplets=total, kind="k2", random_state=0)
    assert len(_questions(T)) == total  # landmark-landmark pairs not counted twice
    assert set(T[:, 0]) == set(L)  # anchors are landmarks
    assert np.all(np.isin(T[:, 1], L) | np.isin(T[:, 2], L))  # one candidate a landmark
    assert set(T[:, 1:].ravel()) == set(range(n))  # every object is a candidate
    assert triplet_agreement(T, pairwise_distances(points)) == 1.0
    check_triplets(T)


def test_landmark_count_draws_landmarks() -> None:
    X = np.random.default_rng(8).normal(size=(40, 2))
    T = make_landmark_triplets(X, 5, n_triplets=300, kind="k1", random_state=0)
    assert len(set(T[:, 1:].ravel())) == 5
    T = make_landmark_triplets(X, 5, n_triplets=300, kind="k2", noise=0.0, random_state=0)
    assert len(set(T[:, 0])) == 5


def test_make_landmark_triplets_errors(points: np.ndarray) -> None:
    with pytest.raises(ValueError, match="kind"):
        make_landmark_triplets(points, 3, n_triplets=1, kind="k3")
    with pytest.raises(ValueError, match="between 2"):
        make_landmark_triplets(points, 1, n_triplets=1)
    with pytest.raises(ValueError, match="at least 2"):
        make_landmark_triplets(points, [2], n_triplets=1)
    with pytest.raises(ValueError, match="exceeds"):
        make_landmark_triplets(points, [1, 2], n_triplets=100, kind="k2")


# ------------------------------------------------------------ triplet_agreement


def test_triplet_agreement_matrix_and_callable() -> None:
    D = np.array([[0, 1, 2], [1, 0, 1], [2, 1, 0]], dtype=float)
    T = np.array([[0, 1, 2], [0, 2, 1], [1, 0, 2]])  # true, false, tie
    assert triplet_agreement(T, D) == pytest.approx(1 / 3)
    assert triplet_agreement(T, lambda a, b: D[a, b]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="square"):
        triplet_agreement(T, D[:2])
    with pytest.raises(ValueError, match="at least one"):
        triplet_agreement(np.empty((0, 3), int), D)
    with pytest.raises(ValueError, match="one distance per"):
        triplet_agreement(T, lambda a, b: 1.0)


# ------------------------------------------------------------------ make_oracle


def test_oracle_answers_like_the_metric() -> None:
    X = np.random.default_rng(9).normal(size=(50, 3))
    rng = np.random.default_rng(0)
    a, b, c = (rng.integers(0, 50, 500) for _ in range(3))
    keep = (a != b) & (a != c) & (b != c)
    a, b, c = a[keep], b[keep], c[keep]
    for metric in ["euclidean", "cosine", "cityblock", "chebyshev", "correlation"]:
        D = pairwise_distances(X, metric=metric)
        oracle = make_oracle(X, metric=metric, random_state=0)
        np.testing.assert_array_equal(oracle(a, b, c), D[a, b] < D[a, c])
        oracle = make_oracle(D, metric="precomputed")
        np.testing.assert_array_equal(oracle(a, b, c), D[a, b] < D[a, c])
    assert make_oracle(X)(0, 1, 2).shape == ()


def test_oracle_noise_fresh_and_persistent() -> None:
    X = np.random.default_rng(10).normal(size=(100, 2))
    D = pairwise_distances(X)
    a, b, c = np.zeros(20_000, int), np.ones(20_000, int), np.full(20_000, 2)
    truth = D[0, 1] < D[0, 2]
    fresh = make_oracle(X, noise=0.3, random_state=0)
    assert abs(np.mean(fresh(a, b, c) != truth) - 0.3) < 0.02
    persistent = make_oracle(X, noise=0.3, persistent=True, random_state=0)
    assert len(set(persistent(a, b, c).tolist())) == 1  # one fixed answer
    rng = np.random.default_rng(1)
    a, b, c = (rng.integers(0, 100, 20_000) for _ in range(3))
    keep = (a != b) & (a != c) & (b != c)
    a, b, c = a[keep], b[keep], c[keep]
    answer = persistent(a, b, c)
    np.testing.assert_array_equal(persistent(a, c, b), ~answer)  # either orientation
    np.testing.assert_array_equal(persistent(a, b, c), answer)
    assert abs(np.mean(answer != (D[a, b] < D[a, c])) - 0.3) < 0.02
    again = make_oracle(X, noise=0.3, persistent=True, random_state=0)
    np.testing.assert_array_equal(again(a, b, c), answer)  # same seed, same answers
    assert persistent.n_asks == 20_000 + 3 * a.size


def test_oracle_ties_are_a_coin_consistent_when_persistent() -> None:
    X = np.array([[0.0], [1.0], [-1.0], [5.0]])
    a, b, c = np.zeros(4000, int), np.ones(4000, int), np.full(4000, 2)
    fresh = make_oracle(X, random_state=0)(a, b, c)
    assert 0.4 < fresh.mean() < 0.6
    oracle = make_oracle(X, persistent=True, random_state=0)
    assert oracle(0, 1, 2) == ~oracle(0, 2, 1)


def test_make_oracle_errors() -> None:
    X = np.random.default_rng(11).normal(size=(5, 2))
    with pytest.raises(ValueError, match="noise"):
        make_oracle(X, noise=-0.1)
    with pytest.raises(ValueError, match="unknown metric"):
        make_oracle(X, metric="bogus")
    oracle = make_oracle(X)
    with pytest.raises(ValueError, match="out of range"):
        oracle([0], [1], [5])
    with pytest.raises(ValueError, match="integer"):
        oracle([0.5], [1], [2])

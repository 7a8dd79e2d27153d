"""Tests of the compiled oracle paths: exact answers, cheap ties, the noise stream."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import pairwise_distances

from app.learning.triplets import make_oracle


@pytest.fixture
def grid() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Points on a small integer grid (many exact distance ties) and random questions."""
    X = np.random.default_rng(3).integers(-2, 3, size=(40, 3)).astype(float)
    rng = np.random.default_rng(4)
    a, b, c = (rng.integers(0, 40, 40_000) for _ in range(3))
    keep = (a != b) & (a != c) & (b != c)
    return X, a[keep], b[keep], c[keep]


# metric name -> exact distance on integer coordinates (squared for euclidean: no rounding)
REFERENCE = {
    "euclidean": lambda d: (d**2).sum(-1),
    "l2": lambda d: (d**2).sum(-1),
    "sqeuclidean": lambda d: (d**2).sum(-1),
    "cityblock": lambda d: np.abs(d).sum(-1),
    "manhattan": lambda d: np.abs(d).sum(-1),
    "chebyshev": lambda d: np.abs(d).max(-1),
}


@pytest.mark.parametrize("metric", [*REFERENCE, "precomputed"])
def test_exact_answers_and_ties_are_a_coin(grid, metric: str) -> None:
    X, a, b, c = grid
    if metric == "precomputed":
        data, d_b, d_c = (D := pairwise_distances(X)), D[a, b], D[a, c]
    else:
        data = X
        d_b, d_c = REFERENCE[metric](X[a] - X[b]), REFERENCE[metric](X[a] - X[c])
    ties = d_b == d_c
    assert ties.sum() > 1000  # the grid makes ties common enough to see the coin
    answer = make_oracle(data, metric=metric, random_state=0)(a, b, c)
    np.testing.assert_array_equal(answer[~ties], (d_b < d_c)[~ties])
    assert 0.45 < answer[ties].mean() < 0.55
    persistent = make_oracle(data, metric=metric, persistent=True, random_state=0)
    first = persistent(a, b, c)
    np.testing.assert_array_equal(first[~ties], (d_b < d_c)[~ties])
    np.testing.assert_array_equal(persistent(a, c, b)[ties], ~first[ties])  # either orientation
    np.testing.assert_array_equal(persistent(a, b, c), first)
    assert 0.45 < first[ties].mean() < 0.55


def test_fresh_noise_flips_are_the_documented_stream() -> None:
    """No ties: the flips are the first draws of the oracle's generator, one per answer."""
    X = np.random.default_rng(5).normal(size=(200, 4))
    rng = np.random.default_rng(6)
    a, b, c = (rng.integers(0, 200, 5000) for _ in range(3))
    keep = (a != b) & (a != c) & (b != c)
    a, b, c = a[keep], b[keep], c[keep]
    D = pairwise_distances(X)
    oracle = make_oracle(X, noise=0.2, random_state=7)
    seed = int(np.random.default_rng(7).integers(0, 2**63 - 1))
    flips = np.random.default_rng(seed).random(a.size) < 0.2
    np.testing.assert_array_equal(oracle(a, b, c), (D[a, b] < D[a, c]) ^ flips)


def test_broadcast_and_any_integer_dtype() -> None:
    X = np.random.default_rng(8).normal(size=(30, 2))
    D = pairwise_distances(X)
    oracle = make_oracle(X)
    b = np.arange(1, 29, dtype=np.int32).reshape(4, 7)
    answer = oracle(np.uint8(0), b, 29)
    assert answer.shape == (4, 7)
    np.testing.assert_array_equal(answer, D[0, b] < D[0, 29])
    assert oracle.n_asks == 28

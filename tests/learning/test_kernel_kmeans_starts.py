"""KernelKMeans' spectral start (issue 12): never a worse objective than k-means++ alone,
and at least the purity of the spectral reference on the issue's digits case."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits

from app.learning.kernel_methods import KernelKMeans, spectral_labels
from app.learning.kernels import TripletKernel
from app.learning.triplets import make_landmark_triplets


def purity(y: np.ndarray, labels: np.ndarray) -> float:
    return sum(np.bincount(y[labels == c]).max() for c in np.unique(labels)) / len(y)


@pytest.fixture(scope="module")
def digits_k2():
    digits = load_digits()
    keep = np.isin(digits.target, [1, 2, 3])
    X, y = digits.data[keep], digits.target[keep]
    landmarks = np.sort(np.random.default_rng(0).choice(len(X), 15, replace=False))
    triplets = make_landmark_triplets(
        X, landmarks, n_triplets=30_000, kind="k2", noise=0.3, random_state=0
    )
    K = TripletKernel("k2", landmarks=landmarks).fit(triplets, len(X)).kernel_matrix()
    return K, y


def test_the_spectral_start_never_raises_the_inertia(digits_k2):
    K, _ = digits_k2
    for seed in range(3):
        both = KernelKMeans(3, random_state=seed).fit(K)
        alone = KernelKMeans(3, random_state=seed, init="k-means++").fit(K)
        assert both.inertia_ <= alone.inertia_ + 1e-9


def test_at_least_the_spectral_reference_on_noisy_k2_digits(digits_k2):
    K, y = digits_k2
    ours = purity(y, KernelKMeans(3, random_state=0).fit(K).labels_)
    reference = purity(y, spectral_labels(K, 3, 0))
    assert ours >= reference - 1e-9


def test_bad_init_is_refused():
    with pytest.raises(ValueError, match="init"):
        KernelKMeans(2, init="random").fit(np.eye(4))

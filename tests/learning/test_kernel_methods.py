"""Tests for kernel k-means, kernel PCA, kernel SVM and complete linkage on triplet kernels."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.cluster.hierarchy import fcluster, linkage
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs
from sklearn.decomposition import PCA
from sklearn.metrics import adjusted_rand_score

from app.learning import kernel_methods
from app.learning.kernel_methods import (
    KernelKMeans,
    complete_linkage,
    kernel_kmeans,
    kernel_pca,
    kernel_svm,
)
from app.learning.kernels import TripletKernel


def blobs(n: int = 150, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    return make_blobs(n, centers=3, n_features=4, cluster_std=0.6, random_state=seed)


def k1_landmark_kernel(X: np.ndarray, n_landmarks: int, m: int, seed: int) -> TripletKernel:
    """k1 on Euclidean landmark triplets (anchor any object, near / far landmarks)."""
    rng = np.random.default_rng(seed)
    n = len(X)
    landmarks = rng.choice(n, n_landmarks, replace=False)
    anchor = rng.integers(0, n, m)
    pair = rng.integers(0, n_landmarks, (m, 2))
    b, c = landmarks[pair[:, 0]], landmarks[pair[:, 1]]
    ok = (anchor != b) & (anchor != c) & (b != c)
    anchor, b, c = anchor[ok], b[ok], c[ok]
    swap = ((X[anchor] - X[b]) ** 2).sum(1) > ((X[anchor] - X[c]) ** 2).sum(1)
    triplets = np.column_stack([anchor, np.where(swap, c, b), np.where(swap, b, c)])
    return TripletKernel("k1", landmarks=landmarks).fit(triplets, n)


# ------------------------------------------------------------- kernel k-means


def test_kernel_kmeans_recovers_blobs_and_matches_kmeans_inertia() -> None:
    X, y = blobs()
    model = KernelKMeans(3, random_state=0).fit(X @ X.T)  # linear kernel
    assert adjusted_rand_score(y, model.labels_) == 1.0
    reference = KMeans(3, n_init=5, random_state=0).fit(X)
    assert model.inertia_ == pytest.approx(reference.inertia_, rel=1e-9)
    assert 1 <= model.n_iter_ <= 100
    linear = KernelKMeans(3, random_state=0, kernel="linear").fit(X)
    assert adjusted_rand_score(y, linear.labels_) == 1.0
    assert linear.inertia_ == pytest.approx(reference.inertia_, rel=1e-9)


def kernel_kmeans_objective(K: np.ndarray, labels: np.ndarray) -> float:
    """Σ_i K_ii - Σ_c (1/|c|) Σ_{j,l∈c} K_jl: feature-space squared distances to the means."""
    total = np.trace(K)
    for cluster in np.unique(labels):
        members = labels == cluster
        total -= K[np.ix_(members, members)].sum() / members.sum()
    return float(total)


def test_kernel_kmeans_reaches_brute_force_optimum_with_rbf_kernel() -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((9, 2))
    K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))
    best = min(
        kernel_kmeans_objective(K, np.array([0, *bits]))
        for bits in np.ndindex(*(2,) * 8)
        if 0 < sum(bits) < 9
    )
    model = KernelKMeans(2, n_init=20, random_state=0).fit(K)
    assert model.inertia_ == pytest.approx(kernel_kmeans_objective(K, model.labels_))
    assert model.inertia_ == pytest.approx(best)


def test_kernel_kmeans_is_deterministic_and_refills_empty_clusters() -> None:
    X, _ = blobs(60)
    K = X @ X.T
    first = KernelKMeans(4, random_state=3).fit(K).labels_
    np.testing.assert_array_equal(first, KernelKMeans(4, random_state=3).fit(K).labels_)
    # As many clusters as objects: every object alone, inertia 0.
    full = KernelKMeans(60, n_init=1, random_state=0).fit(K)
    assert np.unique(full.labels_).size == 60
    assert full.inertia_ == pytest.approx(0.0, abs=1e-8)
    # Identical objects: seeding and Lloyd still give non-empty clusters.
    twins = KernelKMeans(3, n_init=2, random_state=0).fit(np.ones((5, 5)))
    assert np.unique(twins.labels_).size == 3


def test_kernel_kmeans_on_triplet_kernel_both_routes() -> None:
    X, y = blobs(300, seed=2)
    tk = k1_landmark_kernel(X, 10, 20_000, seed=3)
    for route in ("precomputed", "features"):
        labels = kernel_kmeans(tk, 3, random_state=0, route=route)
        assert adjusted_rand_score(y, labels) > 0.95
    np.testing.assert_array_equal(
        kernel_kmeans(tk.features_, 3, random_state=0),
        kernel_kmeans(tk, 3, random_state=0, route="features"),
    )


def test_kernel_kmeans_clone_and_errors() -> None:
    assert clone(KernelKMeans(2, kernel="linear")).get_params()["kernel"] == "linear"
    K = np.eye(4)
    for params in ({"n_clusters": 0}, {"n_init": 0}, {"max_iter": 0}, {"kernel": "rbf"}):
        with pytest.raises(ValueError):
            KernelKMeans(**{"n_clusters": 2, **params}).fit(K)
    with pytest.raises(ValueError, match="at most the number of objects"):
        KernelKMeans(5).fit(K)
    with pytest.raises(ValueError, match="at most the number of objects"):
        KernelKMeans(5, kernel="linear").fit(np.ones((4, 2)))
    with pytest.raises(ValueError, match="square"):
        KernelKMeans(2).fit(np.ones((4, 3)))
    with pytest.raises(ValueError):
        KernelKMeans(2).fit(np.full((3, 3), np.nan))


# ------------------------------------------------------------------ kernel PCA


def test_kernel_pca_routes_agree_with_pca_on_features(monkeypatch: pytest.MonkeyPatch) -> None:
    X, _ = blobs(200, seed=4)
    tk = k1_landmark_kernel(X, 8, 8_000, seed=5)
    assert tk.diagonal_shift() == 0.0  # 28 features < 200 objects
    dense = kernel_pca(tk, 3, route="precomputed")
    covariance = kernel_pca(tk, 3, route="features")
    reference = kernel_methods._flip_signs(PCA(3).fit_transform(tk.features_.toarray()))
    assert np.allclose(dense, reference, atol=1e-8)
    assert np.allclose(covariance, reference, atol=1e-8)
    monkeypatch.setattr(kernel_methods, "_COVARIANCE_MAX_FEATURES", 0)  # the sparse-SVD branch
    assert np.allclose(kernel_pca(tk, 3, route="features"), reference, atol=1e-6)
    assert np.allclose(kernel_pca(tk.features_, 3), reference, atol=1e-6)
    monkeypatch.setattr(kernel_methods, "_DENSE_FEATURES_MIN_DENSITY", 2.0)  # keep Φ sparse
    assert np.allclose(kernel_pca(tk, 3, route="features"), reference, atol=1e-6)
    monkeypatch.setattr(kernel_methods, "_COVARIANCE_MAX_FEATURES", 2048)
    assert np.allclose(kernel_pca(tk, 3, route="features"), reference, atol=1e-8)
    assert np.allclose(kernel_pca(tk.kernel_matrix(), 3), reference, atol=1e-8)
    assert np.allclose(kernel_pca(tk, 3), dense)  # auto: small n is precomputed


def test_kernel_pca_auto_uses_features_for_large_n(monkeypatch: pytest.MonkeyPatch) -> None:
    X, _ = blobs(120, seed=6)
    tk = k1_landmark_kernel(X, 6, 3_000, seed=7)
    monkeypatch.setattr(kernel_methods, "AUTO_PRECOMPUTED_MAX_N", 50)
    monkeypatch.setattr(TripletKernel, "kernel_matrix", lambda self: pytest.fail("formed K"))
    assert kernel_pca(tk, 2).shape == (120, 2)
    assert kernel_kmeans(tk, 3, random_state=0).shape == (120,)


def test_kernel_pca_errors() -> None:
    with pytest.raises(ValueError, match="n_components"):
        kernel_pca(np.eye(3), 3)
    with pytest.raises(ValueError, match="n_components"):
        kernel_pca(np.eye(3), 0)
    with pytest.raises(ValueError, match="n_components"):
        kernel_pca(np.eye(3), 1.5)
    with pytest.raises(ValueError, match="route"):
        kernel_pca(np.eye(3), 1, route="dense")
    with pytest.raises(ValueError, match="square"):
        kernel_pca(np.ones((4, 3)), 1)
    with pytest.raises(ValueError, match="sparse"):
        kernel_pca(sp.eye(4, format="csr"), 1, route="precomputed")
    with pytest.raises(ValueError, match="not fitted"):
        kernel_pca(TripletKernel(), 1)


# ------------------------------------------------------------------ kernel SVM


def test_kernel_svm_from_triplet_kernel_and_matrix() -> None:
    X, y = blobs(200, seed=8)
    tk = k1_landmark_kernel(X, 10, 15_000, seed=9)
    train, test = np.arange(0, 200, 2), np.arange(1, 200, 2)
    predicted = kernel_svm(tk, train, y[train], test)
    assert (predicted == y[test]).mean() > 0.95
    np.testing.assert_array_equal(predicted, kernel_svm(tk.kernel_matrix(), train, y[train], test))
    with pytest.raises(ValueError, match="y_train"):
        kernel_svm(tk, train, y[:3], test)
    with pytest.raises(ValueError, match="not fitted"):
        kernel_svm(TripletKernel(), train, y[train], test)


# ------------------------------------------------------------ complete linkage


def test_complete_linkage_matches_scipy_on_linear_kernel() -> None:
    X, y = blobs(80, seed=10)
    Z = complete_linkage(X @ X.T)
    reference = linkage(X, method="complete", metric="euclidean")
    assert np.allclose(Z[:, 2], reference[:, 2], atol=1e-6)
    labels = fcluster(Z, 3, criterion="maxclust")
    assert adjusted_rand_score(y, labels) == 1.0


def test_complete_linkage_on_triplet_kernel() -> None:
    X, y = blobs(150, seed=11)
    tk = k1_landmark_kernel(X, 10, 12_000, seed=12)
    labels = fcluster(complete_linkage(tk), 3, criterion="maxclust")
    assert adjusted_rand_score(y, labels) > 0.9


def test_kernel_methods_import_from_kernels_too() -> None:
    from app.learning import kernels

    assert kernels.KernelKMeans is KernelKMeans
    assert kernels.kernel_pca is kernel_methods.kernel_pca
    with pytest.raises(AttributeError, match="no attribute 'KernelPCA'"):
        kernels.KernelPCA  # noqa: B018

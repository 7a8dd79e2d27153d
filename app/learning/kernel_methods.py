"""Kernel methods on the triplet kernels k1 / k2 of :mod:`app.learning.kernels`.

Every function takes a *source*: a fitted :class:`~app.learning.kernels.TripletKernel`,
a precomputed dense kernel matrix (ndarray, n × n), or a sparse feature matrix Φ
(one row per object). Two routes, chosen by ``route``:

==============  ==========================================  ====================
route           how                                         scales to
==============  ==========================================  ====================
"precomputed"   the n × n kernel matrix K - λ_min I (§2.1)  n ≲ 5·10^3 (K: n^2
                                                            floats, O(n^2)-O(n^3)
                                                            work)
"features"      the rows of Φ, never an n × n matrix: K =   n ≳ 10^5 with a
                Φ Φᵀ is the linear kernel on those rows     landmark design
==============  ==========================================  ====================

``route="auto"`` picks "precomputed" for a TripletKernel with at most 5,000
objects, "features" above it; an ndarray is a kernel, a sparse matrix is Φ.
The features route ignores the §2.1 shift λ_min. That is exact whenever
λ_min = 0, which holds in every landmark design with fewer features than
objects (C(|L|, 2) < n for k1); with general triplets and λ_min > 0 kernel
k-means optimises the same objective up to a constant (the shift adds
λ (k - n) to it; Dhillon et al. 2004) and kernel PCA keeps the same
components, with scores scaled by sqrt(1 - λ_min / eigenvalue).

Complete linkage and the SVM need kernel values between many pairs and are
O(n^2) whatever the route (n ≲ 10^4).

References: Kleindessner & von Luxburg (2017), Kernel functions based on
triplet comparisons, NIPS (§4: kernel k-means, kernel PCA, complete linkage);
Dhillon, Guan & Kulis (2001, 2004), kernel k-means.
"""

from __future__ import annotations

from numbers import Integral
from typing import ClassVar

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from numpy.typing import ArrayLike
from scipy.cluster.hierarchy import linkage
from scipy.sparse.linalg import LinearOperator, svds
from scipy.spatial.distance import squareform
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.cluster import KMeans
from sklearn.decomposition import KernelPCA
from sklearn.svm import SVC
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array

from app.learning.kernels import TripletKernel

__all__ = [
    "KernelKMeans",
    "complete_linkage",
    "kernel_kmeans",
    "kernel_pca",
    "kernel_svm",
]

# route="auto" uses the dense kernel matrix up to this many objects.
AUTO_PRECOMPUTED_MAX_N = 5_000
# The features route of kernel PCA diagonalises the n_features × n_features
# covariance up to this many features, and runs a sparse SVD (ARPACK) above.
_COVARIANCE_MAX_FEATURES = 2_048
# The features route densifies Φ when at least this share of it is non-zero (landmark
# designs: ~1/3) and the dense copy takes at most this many bytes: BLAS beats sparse
# products there (2-4x for k-means and PCA at n = 3·10^4, 435 features).
_DENSE_FEATURES_MIN_DENSITY = 0.05
_DENSE_FEATURES_MAX_BYTES = 2 * 2**30


def _resolve(source: object, route: str) -> tuple[str, np.ndarray | sp.csr_matrix]:
    """Return (route, K or Φ) for a TripletKernel, an ndarray kernel or a sparse Φ."""
    if route not in ("auto", "precomputed", "features"):
        raise ValueError(f"route must be 'auto', 'precomputed' or 'features', got {route!r}")
    if isinstance(source, TripletKernel):
        if not hasattr(source, "features_"):
            raise ValueError("the TripletKernel is not fitted; call fit(triplets, n_objects)")
        if route == "auto":
            small = source.n_objects_ <= AUTO_PRECOMPUTED_MAX_N
            route = "precomputed" if small else "features"
        if route == "precomputed":
            return route, source.kernel_matrix()
        return route, source.features_
    if sp.issparse(source):
        if route == "precomputed":
            raise ValueError("a sparse source is a feature matrix Φ; use route='features'")
        return "features", sp.csr_matrix(source, dtype=np.float64)
    array = check_array(source, dtype=np.float64)
    if route == "features":
        return route, array
    if array.shape[0] != array.shape[1]:
        raise ValueError(
            f"a precomputed kernel must be square, got shape {array.shape}; "
            "pass features as a sparse matrix or with route='features'"
        )
    return "precomputed", array


def _dense_if_worth(phi: np.ndarray | sp.csr_matrix) -> np.ndarray | sp.csr_matrix:
    """Φ as a dense array when it is dense enough for BLAS to win and fits the budget."""
    if not sp.issparse(phi):
        return phi
    n, m = phi.shape
    dense_enough = phi.nnz >= _DENSE_FEATURES_MIN_DENSITY * n * m
    if dense_enough and n * m * 8 <= _DENSE_FEATURES_MAX_BYTES:
        return phi.toarray()
    return phi


def _flip_signs(scores: np.ndarray) -> np.ndarray:
    """Deterministic signs: the largest-magnitude score of each component is positive."""
    if scores.size == 0:
        return scores
    rows = np.argmax(np.abs(scores), axis=0)
    signs = np.sign(scores[rows, np.arange(scores.shape[1])])
    signs[signs == 0] = 1.0
    return scores * signs


# --------------------------------------------------------------- kernel k-means
class KernelKMeans(ClusterMixin, BaseEstimator):
    """Kernel k-means [2]_, as used in §4.2 of [1]_, started from spectral clustering [3]_.

    Lloyd iterations in the feature space of a kernel: the squared distance of
    object i to the mean of cluster c is
    K_ii - 2/|c| Σ_{j∈c} K_ij + 1/|c|^2 Σ_{j,l∈c} K_jl
    (Eq. (1) of [2]_ with unit weights). Each iteration moves every object to its
    nearest mean, so the inertia never rises; an emptied cluster takes the object
    farthest from its centre.

    Starts (``init``):

    - ``"spectral"`` (default): the spectral clustering of Ng, Jordan & Weiss [3]_
      on K as affinity: the top ``n_clusters`` eigenvectors of K, each row scaled
      to unit length, clustered by k-means (``n_init`` starts, the lowest inertia
      in that embedding wins), then refined by Lloyd iterations on K. Dhillon,
      Guan & Kulis [4]_ (§4) start kernel k-means this way: the eigenvectors solve
      the relaxed problem, Lloyd iterations then lower the exact objective.
    - ``"k-means++"``: ``n_init`` k-means++ seedings in the feature space [5]_;
      the run with the lowest inertia is kept.
    - ``"spectral+k-means++"``: both, the lowest inertia wins (the default
      before issue 12).

    Why the spectral start alone by default (issue 12; ``bench/kernel_clustering.py``,
    digits 1/2/3, 15 landmarks, k1 and k2 triplets, 22 settings × 3 seeds, results in
    ``bench/results/kernel_clustering_starts.txt``): on these noisy kernels the true
    partition has a *higher* kernel k-means inertia than the partitions Lloyd reaches,
    so the lowest-inertia start is often the less pure one (k1, no noise, 30,000
    triplets, seed 1: k-means++ 0.677 at inertia 413.7 against 0.838 at 414.6 from the
    spectral start). Choosing by inertia among k-means++ starts and an unnormalised
    spectral start (the previous default) left the mean purity below the spectral
    reference (unnormalised eigenvectors, k-means with 10 starts) on 10 of the 22
    settings; the refined Ng-Jordan-Weiss start is below it on 3, and in 14 of the 66
    (setting, seed) cases, by 0.002 to 0.017. In a side run on the same kernels, row
    normalisation mattered (the unnormalised start refined by Lloyd: 20 cases below) and
    more eigenvectors did not help (4 or 6 instead of 3, unrefined: 27 and 17 cases);
    Lloyd iterations started from the reference's own labels lowered its purity in 20
    of the 66 cases: no local optimum of the kernel k-means objective is guaranteed at
    least the reference's purity.

    Parameters
    ----------
    n_clusters : int, default=8
    n_init : int, default=5
        k-means starts in the spectral embedding (``"spectral"``), or k-means++
        seedings in the feature space (``"k-means++"``); both for
        ``"spectral+k-means++"``.
    init : {"spectral", "k-means++", "spectral+k-means++"}, default="spectral"
        How runs start ("precomputed" only; with ``n_clusters`` 1 or equal to the
        number of objects the spectral start is skipped for k-means++).
    max_iter : int, default=100
        Lloyd iterations per run (stops earlier when no label changes).
    random_state : int, RandomState instance or None, default=None
    kernel : {"precomputed", "linear"}, default="precomputed"
        "precomputed": ``fit(K)`` with an n × n kernel matrix; O(n^2) memory and
        O(n^2 k) per iteration, for n ≲ 5·10^3. "linear": ``fit(Φ)`` with one
        feature row per object (sparse or dense); kernel k-means with the linear
        kernel is exactly k-means on the rows, run by scikit-learn's ``KMeans``
        (same ``n_init``, ``max_iter``, k-means++; ``init`` does not apply),
        O(nnz(Φ) k) per iteration, for n up to 10^5 and beyond.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
    inertia_ : float
        Sum of squared feature-space distances to the cluster means.
    n_iter_ : int
        Lloyd iterations of the kept run.

    References
    ----------
    .. [1] Kleindessner & von Luxburg (2017). Kernel functions based on triplet
       comparisons. NIPS.
    .. [2] Dhillon, Guan & Kulis (2004). A unified view of kernel k-means,
       spectral clustering and graph cuts. Tech. report TR-04-25, UT Austin.
    .. [3] Ng, Jordan & Weiss (2002). On spectral clustering: analysis and an
       algorithm. NIPS 14 (the algorithm of §2, steps 3-5).
    .. [4] Dhillon, Guan & Kulis (2004). Kernel k-means, spectral clustering and
       normalized cuts. KDD.
    .. [5] Arthur & Vassilvitskii (2007). k-means++: the advantages of careful
       seeding. SODA.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [0.1], [5.0], [5.1]])
    >>> labels = KernelKMeans(2, random_state=0).fit(X @ X.T).labels_
    >>> bool(labels[0] == labels[1] != labels[2] == labels[3])
    True
    """

    _parameter_constraints: ClassVar[dict] = {
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "kernel": [StrOptions({"precomputed", "linear"})],
        "init": [StrOptions({"spectral", "k-means++", "spectral+k-means++"})],
    }

    def __init__(
        self,
        n_clusters: int = 8,
        n_init: int = 5,
        max_iter: int = 100,
        random_state: int | np.random.RandomState | None = None,
        kernel: str = "precomputed",
        init: str = "spectral",
    ) -> None:
        self.n_clusters = n_clusters
        self.n_init = n_init
        self.max_iter = max_iter
        self.random_state = random_state
        self.kernel = kernel
        self.init = init

    def fit(self, X: ArrayLike, y: None = None) -> KernelKMeans:
        """Cluster the objects of a kernel matrix (or of feature rows, kernel="linear")."""
        self._validate_params()
        if self.kernel == "linear":
            X = check_array(X, accept_sparse="csr", dtype=np.float64)
            self._check_n_clusters(X.shape[0])
            kmeans = KMeans(
                n_clusters=self.n_clusters,
                n_init=self.n_init,
                max_iter=self.max_iter,
                random_state=self.random_state,
            ).fit(X)
            self.labels_ = kmeans.labels_
            self.inertia_ = float(kmeans.inertia_)
            self.n_iter_ = int(kmeans.n_iter_)
            return self
        K = check_array(X, dtype=np.float64)
        if K.shape[0] != K.shape[1]:
            raise ValueError(f"a precomputed kernel must be square, got shape {K.shape}")
        self._check_n_clusters(K.shape[0])
        rng = check_random_state(self.random_state)
        spectral = self.init != "k-means++" and 1 < self.n_clusters < K.shape[0]
        starts = []
        if spectral:
            starts.append(njw_labels(K, self.n_clusters, n_init=self.n_init, random_state=rng))
        if not spectral or self.init == "spectral+k-means++":
            starts += [self._seed(K, rng) for _ in range(self.n_init)]
        best = None
        for labels in starts:
            run = self._lloyd(K, labels)
            if best is None or run[1] < best[1]:
                best = run
        self.labels_, self.inertia_, self.n_iter_ = best
        return self

    def _check_n_clusters(self, n_samples: int) -> None:
        if self.n_clusters > n_samples:
            raise ValueError(
                f"n_clusters={self.n_clusters} must be at most the number of objects, {n_samples}"
            )

    def _seed(self, K: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
        """k-means++ in feature space; returns the labels of the nearest seed."""
        n, k = K.shape[0], self.n_clusters
        diag = np.diag(K)
        seeds = [int(rng.randint(n))]
        closest = np.maximum(diag + diag[seeds[0]] - 2 * K[:, seeds[0]], 0.0)
        for _ in range(1, k):
            total = closest.sum()
            if total > 0:
                seed = int(rng.choice(n, p=closest / total))
            else:  # all remaining objects coincide with a seed
                seed = int(rng.choice(np.setdiff1d(np.arange(n), seeds)))
            seeds.append(seed)
            closest = np.minimum(closest, np.maximum(diag + diag[seed] - 2 * K[:, seed], 0.0))
        distances = diag[:, None] + diag[seeds][None, :] - 2 * K[:, seeds]
        labels = np.argmin(distances, axis=1)
        labels[seeds] = np.arange(k)  # each seed founds its own cluster
        return labels

    def _distances(self, K: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Squared distance of every object to every cluster mean (n × k)."""
        n, k = K.shape[0], self.n_clusters
        onehot = np.zeros((n, k))
        onehot[np.arange(n), labels] = 1.0
        sizes = np.maximum(onehot.sum(axis=0), 1.0)
        k_onehot = K @ onehot  # Σ_{j∈c} K_ij
        within = (onehot * k_onehot).sum(axis=0)  # Σ_{j,l∈c} K_jl
        return np.diag(K)[:, None] - 2 * k_onehot / sizes + within / sizes**2

    def _lloyd(self, K: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, float, int]:
        n_iter, converged = 0, False
        for n_iter in range(1, self.max_iter + 1):  # noqa: B007 (n_iter is reported)
            distances = self._distances(K, labels)
            new = np.argmin(distances, axis=1)
            new = self._refill_empty(new, distances[np.arange(len(new)), new])
            converged = np.array_equal(new, labels)
            if converged:
                break
            labels = new
        if not converged:  # distances belong to the previous labels
            distances = self._distances(K, labels)
        inertia = float(np.maximum(distances[np.arange(len(labels)), labels], 0.0).sum())
        return labels, inertia, n_iter

    def _refill_empty(self, labels: np.ndarray, own: np.ndarray) -> np.ndarray:
        """Give each empty cluster the object farthest from its own cluster mean."""
        counts = np.bincount(labels, minlength=self.n_clusters)
        if counts.min() > 0:
            return labels
        labels = labels.copy()
        order = np.argsort(-own, kind="stable")
        position = 0
        for cluster in np.flatnonzero(counts == 0):
            while counts[labels[order[position]]] <= 1:
                position += 1
            donor = order[position]
            counts[labels[donor]] -= 1
            labels[donor] = cluster
            counts[cluster] = 1
            position += 1
        return labels


def spectral_labels(
    K: np.ndarray, n_clusters: int, random_state: int | np.random.RandomState | None = None
) -> np.ndarray:
    """k-means (10 starts) on the top ``n_clusters`` eigenvectors of the symmetric K: the
    spectral relaxation of kernel k-means (Ding & He 2004, Theorem 3.3). The reference
    issue 12 measures :class:`KernelKMeans` against."""
    n = K.shape[0]
    _, vectors = scipy.linalg.eigh(K, subset_by_index=[n - n_clusters, n - 1])
    kmeans = KMeans(n_clusters, n_init=10, random_state=check_random_state(random_state))
    return kmeans.fit_predict(vectors)


def njw_labels(
    K: np.ndarray,
    n_clusters: int,
    *,
    n_init: int = 10,
    random_state: int | np.random.RandomState | None = None,
) -> np.ndarray:
    """Spectral clustering of Ng, Jordan & Weiss (2002) with K as the affinity matrix.

    Step 3: X = the top ``n_clusters`` eigenvectors of K as columns; step 4: each
    row of X scaled to unit length (Y_ij = X_ij / ||X_i||); step 5: k-means on the
    rows of Y (``n_init`` starts). The affinity is used as it is: the normalisation
    D^{-1/2} A D^{-1/2} of their step 2 needs positive degrees, which a triplet
    kernel does not promise.
    """
    n = K.shape[0]
    _, vectors = scipy.linalg.eigh(K, subset_by_index=[n - n_clusters, n - 1])
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    rows = vectors / np.where(norms > 0, norms, 1.0)  # NJW step 4
    kmeans = KMeans(n_clusters, n_init=n_init, random_state=check_random_state(random_state))
    return kmeans.fit_predict(rows)


def kernel_kmeans(
    source: object,
    n_clusters: int,
    *,
    n_init: int = 5,
    max_iter: int = 100,
    random_state: int | np.random.RandomState | None = None,
    route: str = "auto",
) -> np.ndarray:
    """Cluster labels from kernel k-means on a triplet kernel (§4.2 of the paper).

    "precomputed" runs :class:`KernelKMeans` on K - λ_min I (n ≲ 5·10^3);
    "features" runs k-means on the rows of Φ (exact kernel k-means for the
    linear kernel on Φ; n up to 10^5+ with landmarks; Φ is densified when at
    least 5% full and under 2 GB, as in landmark designs). See the module notes.
    """
    route, data = _resolve(source, route)
    kernel = "precomputed" if route == "precomputed" else "linear"
    if kernel == "linear":
        data = _dense_if_worth(data)
    model = KernelKMeans(
        n_clusters=n_clusters,
        n_init=n_init,
        max_iter=max_iter,
        random_state=random_state,
        kernel=kernel,
    )
    return model.fit(data).labels_


# ------------------------------------------------------------------ kernel PCA
def kernel_pca(source: object, n_components: int = 2, *, route: str = "auto") -> np.ndarray:
    """Kernel PCA scores (n_objects × n_components), as in §4.1 of the paper.

    "precomputed": scikit-learn's ``KernelPCA(kernel="precomputed")`` on
    K - λ_min I, n ≲ 5·10^3. "features": PCA of the centred rows of Φ without
    an n × n matrix: the n_features × n_features covariance is diagonalised
    when there are at most 2,048 features (landmark designs: any n), otherwise
    a truncated SVD (ARPACK) of the implicitly centred Φ. Both routes give the
    same scores when λ_min = 0. Signs are fixed so that each component's
    largest-magnitude score is positive.
    """
    if isinstance(n_components, bool) or not isinstance(n_components, Integral):
        raise ValueError(f"n_components must be a positive integer, got {n_components!r}")
    route, data = _resolve(source, route)
    n = data.shape[0]
    if not 1 <= n_components < n:
        raise ValueError(
            f"n_components must be in [1, {n - 1}] for {n} objects, got {n_components}"
        )
    if route == "precomputed":
        # ARPACK for the few top eigenvectors; scikit-learn's "auto" would run a full
        # dense eigendecomposition (O(n^3)) from 10 components on.
        solver = "dense" if n <= 500 else "arpack"
        model = KernelPCA(
            n_components=n_components, kernel="precomputed", eigen_solver=solver, random_state=0
        )
        return _flip_signs(model.fit_transform(data))
    return _flip_signs(_feature_pca(_dense_if_worth(data), n_components))


def _feature_pca(phi: np.ndarray | sp.csr_matrix, n_components: int) -> np.ndarray:
    n, m = phi.shape
    mean = np.asarray(phi.mean(axis=0)).ravel()
    if m <= _COVARIANCE_MAX_FEATURES:
        # Σ = Φ_cᵀ Φ_c = Φᵀ Φ - n μ μᵀ; scores = Φ_c V = Φ V - 1 (μᵀ V).
        gram = phi.T @ phi
        gram = gram.toarray() if sp.issparse(gram) else gram
        covariance = gram - n * np.outer(mean, mean)
        eigenvalues, vectors = np.linalg.eigh(covariance)
        top = np.argsort(eigenvalues)[::-1][:n_components]
        vectors = vectors[:, top]
        if vectors.shape[1] < n_components:  # fewer features than components
            vectors = np.pad(vectors, ((0, 0), (0, n_components - vectors.shape[1])))
        return np.asarray(phi @ vectors) - mean @ vectors
    phi_t = phi.T.tocsr() if sp.issparse(phi) else phi.T
    ones = np.ones(n)
    centred = LinearOperator(
        (n, m),
        matvec=lambda v: phi @ np.ravel(v) - ones * (mean @ np.ravel(v)),
        rmatvec=lambda u: phi_t @ np.ravel(u) - mean * np.ravel(u).sum(),
        dtype=np.float64,
    )
    v0 = np.random.default_rng(0).standard_normal(min(n, m))
    u, s, _ = svds(centred, k=n_components, v0=v0)
    order = np.argsort(s)[::-1]
    return u[:, order] * s[order]


# ------------------------------------------------------------------ kernel SVM
def kernel_svm(
    source: object,
    train: ArrayLike,
    y_train: ArrayLike,
    test: ArrayLike,
    *,
    C: float = 1.0,
) -> np.ndarray:
    """Predicted labels of ``test`` objects from ``SVC(kernel="precomputed")``.

    With a TripletKernel only the blocks K[train, train] and K[test, train]
    are formed from Φ (the §2.1 shift on the diagonal of the first), so memory
    is O(n_train (n_train + n_test)); SVC itself is O(n_train^2), n_train ≲ 10^4.
    A dense kernel matrix source is sliced instead.
    """
    train = np.asarray(train, dtype=np.intp)
    test = np.asarray(test, dtype=np.intp)
    y_train = np.asarray(y_train)
    if train.ndim != 1 or test.ndim != 1 or y_train.shape != train.shape:
        raise ValueError("train and test must be 1-D index arrays and y_train match train")
    if isinstance(source, TripletKernel):
        if not hasattr(source, "features_"):
            raise ValueError("the TripletKernel is not fitted; call fit(triplets, n_objects)")
        k_train = source.kernel_block(train, train)
        k_test = source.kernel_block(test, train)
    else:
        _, K = _resolve(source, "precomputed")
        k_train, k_test = K[np.ix_(train, train)], K[np.ix_(test, train)]
    model = SVC(kernel="precomputed", C=C).fit(k_train, y_train)
    return model.predict(k_test)


# ------------------------------------------------------- complete linkage
def complete_linkage(source: object) -> np.ndarray:
    """Complete-linkage dendrogram from kernel distances (§4.1, food data set).

    d(i, j)^2 = K_ii + K_jj - 2 K_ij (clipped at 0), then
    ``scipy.cluster.hierarchy.linkage(method="complete")``. Returns the
    linkage matrix Z; cut it with ``fcluster(Z, k, criterion="maxclust")``.
    Always forms K (from a TripletKernel, with the §2.1 shift): O(n^2)
    memory, n ≲ 10^4. The shift lowers every squared distance by 2 λ_min,
    a monotone change: the merge order is the same, the heights differ.
    """
    _, K = _resolve(source, "precomputed")
    diag = np.diag(K)
    squared = np.maximum(diag[:, None] + diag[None, :] - 2 * K, 0.0)
    np.fill_diagonal(squared, 0.0)
    return linkage(squareform(np.sqrt(squared), checks=False), method="complete")

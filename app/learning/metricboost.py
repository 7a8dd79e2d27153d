"""MetricBoost: AdaBoost over rank-one PSD weak metrics learned from triplets.

Implements Bi et al. (2011): Algorithm 1 with the weak direction of matrix (8),
the binary weak model of Eq. (3) (α by option 2 of §3.1) and the normalized weak
model of Eq. (9) (α by option 3, Eqs. (4)-(5)), plus the bipartite speed-up of §4
for triplets derived from class labels.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator
from sklearn.neighbors import KNeighborsClassifier
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_array, check_is_fitted

from app.learning.triplets import check_sample_weight, check_triplets

__all__ = ["MetricBoost"]

Callback = Callable[[int, int], object]
_CHUNK = 1 << 21  # entries of one (queries x index) block in neighbour searches
# |α_t| at or below this is no edge: a weak model stuck at ε₊ ≈ ε₋ gives α_t that decay
# geometrically to rounding noise, where an exact `== 0` test stops at a round that
# depends on summation order (fit and fit_from_labels then disagree on n_estimators_)
_NO_EDGE = 1e-10


class MetricBoost(BaseEstimator):
    """Boosted metric learning from triplets [1]_.

    Algorithm 1 of [1]_: at round t the weak direction u_t is the eigenvector with
    the largest |λ| of matrix (8), Σ D_t (x_i−x_k)(x_i−x_k)ᵀ − (x_i−x_j)(x_i−x_j)ᵀ,
    the weak model is built on p_t(x, y) = (uᵀ(x − y))², α_t minimises Z_t, and the
    triplet weights follow Eq. (2). The two variants learn different things:

    - ``"normalized"``: h_t = p_t / C² (Eq. (9)), α_t = ½ ln((1+r)/(1−r)) with r of
      Eq. (5) (option 3 of §3.1). The result is the Mahalanobis matrix
      ``metric_`` M = Σ α_t u_t u_tᵀ, and H(x, y) = (x − y)ᵀ M (x − y).
    - ``"binary"``: h_t = [p_t ≥ β_t] (Eq. (3)), α_t = ½ ln(ε₋/ε₊) (option 2). The
      result is H(x, y) = Σ α_t [p_t(x, y) ≥ β_t] (end of §3.2), a step function
      that is *not* a Mahalanobis distance: there is no ``metric_`` and no
      ``transform``.

    Parameters
    ----------
    n_estimators : int, default=20
        Boosting rounds T (the paper uses T = 20).
    weak_learner : {"binary", "normalized"}, default="binary"
        Weak model of §3.2, see above.
    random_state : int, RandomState instance or None, default=None
        Accepted for API uniformity; unused, since every step of MetricBoost is
        closed-form and deterministic.

    Attributes
    ----------
    n_features_in_ : int
    n_estimators_ : int
        Rounds kept; boosting stops early when a weak model has no edge (|α_t| ≤ 1e-10).
    n_triplets_ : int
        Number of training triplets m (label-derived ones are counted, not built).
    directions_ : ndarray of shape (n_estimators_, n_features_in_)
        Unit vectors u_t.
    alphas_ : ndarray of shape (n_estimators_,)
        α_t; negative where the weak model served as a similarity (λ < 0, §3.2).
    eigenvalues_ : ndarray of shape (n_estimators_,)
        λ_t of matrix (8) for u_t.
    z_factors_ : ndarray of shape (n_estimators_,)
        Z_t of Eq. (2); Π Z_t bounds the weighted training error (Theorem 1).
    thresholds_ : ndarray of shape (n_estimators_,)
        β_t, ``"binary"`` only.
    normalizer_ : float
        C² of Eq. (9): the squared largest Euclidean distance between two rows of X.
    metric_ : ndarray of shape (n_features_in_, n_features_in_)
        M = Σ α_t u_t u_tᵀ, ``"normalized"`` only. Indefinite when some α_t < 0.
    is_psd_ : bool
        Whether M is positive semi-definite (always False for ``"binary"``).

    Notes
    -----
    ========================  =====================================
    paper                     here
    ========================  =====================================
    T                         ``n_estimators``
    u_t, U_t = u_t u_tᵀ       ``directions_[t]``
    α_t, β_t, λ, Z_t          ``alphas_``, ``thresholds_``, ``eigenvalues_``, ``z_factors_``
    C²                        ``normalizer_``
    M = Σ α_t U_t             ``metric_``
    μ_t((i, j)), μ_t((i, k))  ``_LabelWeights.mu`` (S₁ where ``same``, S₂ elsewhere)
    ========================  =====================================

    Choices where the paper is silent, as its authors would make them:

    - β_t (§3.2): p_t over the "similar" pairs (i, j) and over the "dissimilar"
      pairs (i, k) of the triplets are each fitted by a Gaussian, weighted by the
      current D_t; β_t is where the two densities cross between the two means
      (the σ-weighted midpoint if they do not cross there).
    - α_t of option 2 is smoothed as in Schapire & Singer (1999), the paper's [15]:
      α_t = ½ ln((ε₋ + δ)/(ε₊ + δ)) with δ = 1/(2m), so a perfect weak model keeps
      a finite weight.
    - ``metric_`` drops the constant 1/C² of Eq. (9), as the paper does ("the final
      hypothesis can still be represented as (x − y)ᵀ(Σ α_t U_t)(x − y)"); it
      changes no comparison.
    - A triplet is satisfied when H(a, b) < H(a, c) strictly; ties are errors, as
      in Eq. (1). The binary H takes few distinct values, so ``kneighbors``,
      ``predict_knn`` and ``predict_triplets`` break its ties by the unthresholded
      G(x, y) = Σ α_t p_t(x, y) / β_t (over the same rounds as H), then by the
      lower index; ``score`` does not break ties (it is the paper's measure). The
      normalized H ties by index only.
    - Features are used as given, and MetricBoost is not scale-invariant: on raw
      features the top eigenvector of matrix (8) follows the feature of largest
      variance (Wine's proline) and 20 rounds learn little more than the Euclidean
      metric. The paper does not say how it scaled features; ``bench/metricboost.py``
      finds that raw features reproduce its Euclidean column and z-scored ones
      (training-set mean and sd) its MetricBoost columns. Standardize first, e.g.
      ``make_pipeline(StandardScaler(), MetricBoost()).fit(X, triplets)``.
    - Negative α_t (§3.2: λ < 0) are kept, as the paper does for comparing
      distances. M is then indefinite and H can be negative: ``pairwise_distances``
      still returns H, ``is_psd_`` is False and ``transform`` raises ``ValueError``.
    - k-NN uses the metric part of H. §3.2 combines the similarity measures
      (α_t < 0) with the distance measures "if the task is to compare the relative
      distance between object pairs instead of forming a metric"; a k-NN search
      needs the metric, so ``kneighbors`` and ``predict_knn`` use
      H⁺ = Σ_{α_t > 0} α_t h_t (all rounds if no α_t is positive), while
      ``pairwise_distances``, ``score`` and ``predict_triplets`` use the full H.
      With the similarity terms the binary H(x, y) is negative, below
      H(x, x) = 0, for objects beyond β_t along a similarity direction, and those
      become the "nearest": on z-scored Breast Cancer the minimum of H over the
      other training objects is negative for 99% of them, and 1-NN with the full
      H is 5 points worse than with H⁺ (``bench/results/metricboost.txt``). In
      practice only ``"binary"`` is affected: the normalized α_t (sign of λ,
      Eq. (5)) were positive in every fold of the benchmark on Wine and Breast
      Cancer.

    References
    ----------
    .. [1] Bi, Wu, Lu, Liu, Tao & Wolf (2011). AdaBoost on low-rank PSD matrices for
       metric learning. CVPR.

    Examples
    --------
    >>> from sklearn.datasets import load_wine
    >>> X, y = load_wine(return_X_y=True)
    >>> model = MetricBoost(weak_learner="normalized").fit_from_labels(X, y)
    >>> model.metric_.shape
    (13, 13)
    """

    _parameter_constraints: dict = {
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        "weak_learner": [StrOptions({"binary", "normalized"})],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_estimators: int = 20,
        weak_learner: str = "binary",
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_estimators = n_estimators
        self.weak_learner = weak_learner
        self.random_state = random_state

    # ------------------------------------------------------------------ fitting
    def fit(
        self,
        X: ArrayLike,
        triplets: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        callback: Callback | None = None,
    ):  # type: ignore[no-untyped-def]
        """Boost from explicit triplets (Algorithm 1 of [1]_).

        Costs O(m + n_pairs·d + d³) per round for m triplets over n_pairs
        distinct pairs in d features.

        Parameters
        ----------
        X : array-like of shape (n_objects, n_features)
            Feature vectors; triplet indices refer to its rows.
        triplets : array-like of shape (n_triplets, 3)
            Rows (anchor, near, far): d(anchor, near) < d(anchor, far).
        sample_weight : array-like of shape (n_triplets,), default=None
            The boosting distribution's start: D_1 proportional to the weights instead of
            the uniform 1/m of Algorithm 1 (AdaBoost's usual way to weight examples).
        callback : callable, default=None
            For background jobs: called as ``callback(rounds_done, n_estimators)``
            after every round (and once more with ``n_estimators`` if boosting
            stops early, so progress ends at 100%); its return value is ignored
            and an exception it raises aborts the fit (a way to cancel a job).

        Returns
        -------
        self : MetricBoost
        """
        self._validate_params()
        X = self._check_fit_x(X)
        triplets = check_triplets(triplets, X.shape[0])
        if len(triplets) == 0:
            raise ValueError("triplets is empty: MetricBoost needs at least one triplet")
        weight = check_sample_weight(sample_weight, len(triplets))
        return self._boost(X, _TripletWeights(X, triplets, weight), callback)

    def fit_from_labels(self, X: ArrayLike, y: ArrayLike, *, callback: Callback | None = None):
        """Boost from all label-derived triplets with the bipartite strategy of §4.

        The triplets are every (i, j, k) with y_i = y_j ≠ y_k and i ≠ j. They are
        never built: D_t((i, j, k)) = μ_t((i, j)) μ_t((i, k)) (Eq. (10)) is kept as
        two weight vectors over pairs, so a round costs O(n²·d + d³) time and
        O(n²) memory instead of O(m) with m ≈ n³ (n = 569 objects, m = 4.3·10⁷
        triplets: well under a second). The result equals ``fit`` on the
        explicit list of those triplets. Multi-class labels are handled like the
        two-class case of §4: same-class pairs form S₁, different-class pairs S₂.

        Parameters
        ----------
        X : array-like of shape (n_objects, n_features)
        y : array-like of shape (n_objects,)
            Class labels (any hashable values).
        callback : callable, default=None
            As in :meth:`fit`.

        Returns
        -------
        self : MetricBoost
        """
        self._validate_params()
        X = self._check_fit_x(X)
        y = check_array(y, ensure_2d=False, dtype=None, input_name="y")
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(f"y must have shape ({X.shape[0]},), got shape {y.shape}")
        classes, codes = np.unique(y, return_inverse=True)
        counts = np.bincount(codes)
        if len(classes) < 2 or counts.max() < 2:
            raise ValueError(
                "y derives no triplet: it needs two classes and a class with two objects, "
                f"got class sizes {counts.tolist()}"
            )
        return self._boost(X, _LabelWeights(X, codes), callback)

    def _check_fit_x(self, X: ArrayLike) -> np.ndarray:
        X = check_array(X, dtype=np.float64, ensure_min_samples=3)
        self.n_features_in_ = X.shape[1]
        return X

    def _boost(self, X: np.ndarray, weights: _TripletWeights | _LabelWeights, callback):
        if callback is not None and not callable(callback):
            raise ValueError(f"callback must be callable or None, got {callback!r}")
        if np.all(X[0] == X):
            raise ValueError("all rows of X are identical: there is no distance to learn")
        C2 = _max_squared_distance(X)
        binary = self.weak_learner == "binary"
        delta = 0.5 / weights.n_triplets
        rounds: list[tuple[np.ndarray, float, float, float, float]] = []
        for t in range(self.n_estimators):
            # Alg. 1, "train a weak learner": top-|λ| eigenvector of matrix (8)
            eigvals, eigvecs = np.linalg.eigh(weights.matrix8())
            top = int(np.argmax(np.abs(eigvals)))
            lam, u = float(eigvals[top]), eigvecs[:, top]
            u = u if u[np.argmax(np.abs(u))] >= 0 else -u
            z = X @ u
            if binary:
                beta = _gaussian_threshold(*weights.moments(z))
                eps_plus, eps_minus = weights.binary_errors(z, beta)
                alpha = 0.5 * np.log((eps_minus + delta) / (eps_plus + delta))  # option 2
                scale, cut = 1.0, beta
            else:
                r = float(np.clip(lam / C2, -1.0 + 1e-12, 1.0 - 1e-12))  # Eq. (5)
                alpha = 0.5 * np.log((1.0 + r) / (1.0 - r))  # option 3, minimiser of Eq. (4)
                scale, cut = C2, np.nan
            if not np.isfinite(alpha) or abs(alpha) <= _NO_EDGE:
                break  # the weak model has no edge: AdaBoost stops
            Z = weights.update(z, alpha, scale, cut)  # Eq. (2)
            rounds.append((u, float(alpha), lam, Z, float(cut)))
            if callback is not None:
                callback(t + 1, self.n_estimators)
        if not rounds:
            raise ValueError("no weak model beat chance on these triplets: nothing was learned")
        if len(rounds) < self.n_estimators and callback is not None:
            callback(self.n_estimators, self.n_estimators)
        self.n_estimators_ = len(rounds)
        self.n_triplets_ = int(weights.n_triplets)
        self.directions_ = np.array([r[0] for r in rounds])
        self.alphas_ = np.array([r[1] for r in rounds])
        self.eigenvalues_ = np.array([r[2] for r in rounds])
        self.z_factors_ = np.array([r[3] for r in rounds])
        self.normalizer_ = C2
        for name in ("thresholds_", "metric_"):
            self.__dict__.pop(name, None)
        if binary:
            self.thresholds_ = np.array([r[4] for r in rounds])
            self.is_psd_ = False
        else:
            self.metric_ = (self.directions_.T * self.alphas_) @ self.directions_
            eig = np.linalg.eigvalsh(self.metric_)
            self.is_psd_ = bool(eig.min() >= -1e-10 * max(np.abs(eig).max(), 1e-300))
        return self

    # ------------------------------------------------------------ the metric
    def pairwise_distances(self, X: ArrayLike, Y: ArrayLike | None = None) -> np.ndarray:
        """Learned dissimilarity H between the rows of X and of Y (default: X).

        Normalized: H = (x − y)ᵀ M (x − y), the squared Mahalanobis distance (its
        square root is the distance d = √H of §2 when M is PSD). Binary:
        H = Σ α_t [p_t(x, y) ≥ β_t]. H may be negative when some α_t < 0.

        Returns
        -------
        H : ndarray of shape (n_samples_X, n_samples_Y)
        """
        check_is_fitted(self, "alphas_")
        ZX, ZY = self._project(X, Y)
        return self._dissimilarity(ZX, ZY)[0]

    def transform(self, X: ArrayLike) -> np.ndarray:
        """Map X by L with Lᵀ L = M, so that Euclidean distances become √H.

        Only for ``weak_learner="normalized"`` with a PSD ``metric_``; otherwise
        raises ``ValueError`` (the binary H and an indefinite M have no such L).

        Returns
        -------
        X_new : ndarray of shape (n_samples, rank of M)
        """
        check_is_fitted(self, "alphas_")
        if self.weak_learner != "normalized":
            raise ValueError(
                "binary MetricBoost learns H(x, y) = Σ α_t [p_t ≥ β_t], which is not a "
                "Mahalanobis distance: it has no linear transform; use weak_learner='normalized'"
            )
        if not self.is_psd_:
            raise ValueError(
                "metric_ is indefinite (some α_t < 0, §3.2 of Bi et al.): no real L with "
                f"LᵀL = M exists; smallest eigenvalue {np.linalg.eigvalsh(self.metric_)[0]:.3g}"
            )
        eigvals, eigvecs = np.linalg.eigh(self.metric_)
        keep = eigvals > 1e-10 * eigvals.max()
        L = np.sqrt(eigvals[keep])[:, None] * eigvecs[:, keep].T
        return self._check_x(X) @ L.T

    def score(self, X: ArrayLike, triplets: ArrayLike) -> float:
        """Fraction of triplets with H(a, b) < H(a, c): one minus Eq. (1), ties as errors."""
        check_is_fitted(self, "alphas_")
        Z = self._project(X)[0]
        triplets = check_triplets(triplets, Z.shape[0])
        if len(triplets) == 0:
            raise ValueError("triplets is empty: there is nothing to score")
        return float(np.mean(self._compare(Z, triplets, tie_break=False)))

    def predict_triplets(self, X: ArrayLike, triplets: ArrayLike) -> np.ndarray:
        """Whether each anchor is closer to near than to far under H (ties broken).

        Parameters
        ----------
        X : array-like of shape (n_objects, n_features)
            Features of the objects the triplets index (new objects welcome).
        triplets : array-like of shape (n_triplets, 3)

        Returns
        -------
        closer : ndarray of shape (n_triplets,), dtype bool
            True where H(a, b) < H(a, c); ties in H are broken as in the class
            Notes (binary: by G, then by index). This is the full H, similarity
            terms (α_t < 0) included, so it may disagree with ``kneighbors``,
            which orders by the metric part H⁺ (class Notes).
        """
        check_is_fitted(self, "alphas_")
        Z = self._project(X)[0]
        return self._compare(Z, check_triplets(triplets, Z.shape[0]), tie_break=True)

    def kneighbors(
        self,
        X: ArrayLike,
        X_index: ArrayLike | None = None,
        n_neighbors: int = 5,
        *,
        return_distance: bool = True,
    ):
        """Nearest objects of X's rows among X_index's under H⁺, ties broken.

        H⁺ = Σ_{α_t > 0} α_t h_t is the metric part of H (§3.2, class Notes): the
        rounds with α_t < 0 compare distances but do not form a metric. With
        ``X_index=None`` the neighbours of each row of X are searched among the
        other rows of X (the row itself is excluded).

        Returns
        -------
        distances : ndarray of shape (n_queries, n_neighbors)
            H⁺ to each neighbour, nearest first (only if ``return_distance``).
        indices : ndarray of shape (n_queries, n_neighbors)
            Rows of X_index (or X).
        """
        check_is_fitted(self, "alphas_")
        ZX, ZY = self._project(X, X_index)
        n_index = ZY.shape[0] - (X_index is None)
        if not isinstance(n_neighbors, Integral) or not 1 <= n_neighbors <= n_index:
            raise ValueError(f"n_neighbors must be an integer in [1, {n_index}], got {n_neighbors}")
        dist, ind = [], []
        rounds = self._metric_rounds()
        for _, order, H in self._orders(ZX, ZY, rounds, exclude_self=X_index is None):
            top = order[:, :n_neighbors]
            ind.append(top)
            dist.append(np.take_along_axis(H, top, axis=1))
        ind, dist = np.vstack(ind), np.vstack(dist)
        return (dist, ind) if return_distance else ind

    def predict_knn(
        self, X_train: ArrayLike, y_train: ArrayLike, X_query: ArrayLike, n_neighbors: int = 1
    ) -> np.ndarray:
        """k-NN labels of X_query under H⁺ with scikit-learn's KNeighborsClassifier.

        The neighbours are those of :meth:`kneighbors`: by the metric part
        H⁺ = Σ_{α_t > 0} α_t h_t of H (§3.2, class Notes), ties broken.
        ``KNeighborsClassifier(metric="precomputed")`` receives each query's rank
        of every training object in that order (ranks are non-negative and
        distinct, so its choice of neighbours is exactly that order even where H⁺
        ties). A tied vote goes to the smallest label, as in scikit-learn.

        Returns
        -------
        y_pred : ndarray of shape (n_queries,)
        """
        check_is_fitted(self, "alphas_")
        Ztr = self._project(X_train)[0]
        y_train = check_array(y_train, ensure_2d=False, dtype=None, input_name="y_train")
        if y_train.ndim != 1 or y_train.shape[0] != Ztr.shape[0]:
            raise ValueError(f"y_train must have shape ({Ztr.shape[0]},), got {y_train.shape}")
        if not isinstance(n_neighbors, Integral) or not 1 <= n_neighbors <= Ztr.shape[0]:
            raise ValueError(
                f"n_neighbors must be an integer in [1, {Ztr.shape[0]}], got {n_neighbors}"
            )
        Zq = self._project(X_query)[0]
        knn = KNeighborsClassifier(n_neighbors=n_neighbors, metric="precomputed")
        knn.fit(self._ranks(Ztr, Ztr), y_train)
        return knn.predict(self._ranks(Zq, Ztr))

    # --------------------------------------------------------------- helpers
    def _check_x(self, X: ArrayLike, name: str = "X") -> np.ndarray:
        X = check_array(X, dtype=np.float64, input_name=name)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"{name} has {X.shape[1]} features, but MetricBoost was fitted with "
                f"{self.n_features_in_}"
            )
        return X

    def _project(self, X: ArrayLike, Y: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Coordinates uᵀx along every weak direction: arrays (n, T)."""
        ZX = self._check_x(X) @ self.directions_.T
        ZY = ZX if Y is None else self._check_x(Y, "Y") @ self.directions_.T
        return ZX, ZY

    def _metric_rounds(self) -> np.ndarray:
        """Rounds of the metric part H⁺ used by k-NN: α_t > 0 (§3.2), or all if none is."""
        positive = np.flatnonzero(self.alphas_ > 0)
        return positive if positive.size else np.arange(len(self.alphas_))

    def _dissimilarity(self, ZX: np.ndarray, ZY: np.ndarray, rounds: np.ndarray | None = None):
        """H (and, for binary, the tie-break G) between projected rows, summed over
        ``rounds`` (default: all, the full H)."""
        H = np.zeros((ZX.shape[0], ZY.shape[0]))
        G = np.zeros_like(H) if self.weak_learner == "binary" else None
        for t in range(len(self.alphas_)) if rounds is None else rounds:
            alpha = self.alphas_[t]
            P = np.square(ZX[:, t, None] - ZY[None, :, t])
            if G is None:
                H += alpha * P
            else:
                H += alpha * (self.thresholds_[t] <= P)
                G += alpha / max(self.thresholds_[t], 1e-300) * P
        return H, G

    def _compare(self, Z: np.ndarray, triplets: np.ndarray, *, tie_break: bool) -> np.ndarray:
        a, b, c = triplets.T
        out = np.empty(len(triplets), dtype=bool)
        for s in range(0, len(triplets), 1 << 16):
            sl = slice(s, s + (1 << 16))
            Pb = np.square(Z[a[sl]] - Z[b[sl]])
            Pc = np.square(Z[a[sl]] - Z[c[sl]])
            if self.weak_learner == "binary":
                Hb = (Pb >= self.thresholds_) @ self.alphas_
                Hc = (Pc >= self.thresholds_) @ self.alphas_
                closer = Hb < Hc
                if tie_break:
                    w = self.alphas_ / np.maximum(self.thresholds_, 1e-300)
                    Gb, Gc = Pb @ w, Pc @ w
                    tied = Hb == Hc
                    closer |= tied & ((Gb < Gc) | ((Gb == Gc) & (b[sl] < c[sl])))
            else:
                Hb, Hc = Pb @ self.alphas_, Pc @ self.alphas_
                closer = (Hb < Hc) | (tie_break & (Hb == Hc) & (b[sl] < c[sl]))
            out[sl] = closer
        return out

    def _orders(
        self, ZX: np.ndarray, ZY: np.ndarray, rounds: np.ndarray, *, exclude_self: bool = False
    ):
        """Yield (first row, tie-broken order of ZY's rows, H over ``rounds``) for
        blocks of ZX's rows."""
        step = max(1, _CHUNK // max(ZY.shape[0], 1))
        for start in range(0, ZX.shape[0], step):
            H, G = self._dissimilarity(ZX[start : start + step], ZY, rounds)
            if exclude_self:
                rows = np.arange(H.shape[0])
                H[rows, start + rows] = np.inf
                if G is not None:
                    G[rows, start + rows] = np.inf
            order = np.argsort(H, axis=1, kind="stable") if G is None else np.lexsort((G, H))
            yield start, order, H

    def _ranks(self, ZX: np.ndarray, ZY: np.ndarray) -> np.ndarray:
        ranks = np.empty((ZX.shape[0], ZY.shape[0]))
        arange = np.arange(ZY.shape[0], dtype=np.float64)
        for start, order, _ in self._orders(ZX, ZY, self._metric_rounds()):
            block = ranks[start : start + order.shape[0]]
            np.put_along_axis(block, order, np.broadcast_to(arange, order.shape), axis=1)
        return ranks


# ---------------------------------------------------------------- weight states
class _TripletWeights:
    """D_t over an explicit triplet list (Algorithm 1), aggregated over distinct pairs."""

    def __init__(
        self, X: np.ndarray, triplets: np.ndarray, weight: np.ndarray | None = None
    ) -> None:
        self.X, self.n_triplets = X, len(triplets)
        n = X.shape[0]
        a, b, c = triplets.T
        keys = np.concatenate([a * n + b, a * n + c])
        pairs, self.inverse = np.unique(keys, return_inverse=True)
        self.rows, self.cols = pairs // n, pairs % n
        self.n_pairs = len(pairs)
        # D_1 = 1/m (Alg. 1, line 1), or proportional to the triplets' weights
        uniform = np.full(self.n_triplets, 1.0 / self.n_triplets)
        self.D = uniform if weight is None else weight / weight.sum()
        self.near, self.far = self.inverse[: self.n_triplets], self.inverse[self.n_triplets :]
        self.W = _csr_pattern(self.rows, self.cols, n)  # pairs are sorted by (row, col)
        self._z: np.ndarray | None = None

    def _pair_values(self, z: np.ndarray) -> np.ndarray:
        if self._z is not z:
            self._z, self._p = z, np.square(z[self.rows] - z[self.cols])
        return self._p

    def matrix8(self) -> np.ndarray:
        w = np.bincount(self.far, self.D, self.n_pairs) - np.bincount(
            self.near, self.D, self.n_pairs
        )
        return _pair_scatter(self.X, self.W, self.rows, self.cols, w)

    def moments(self, z: np.ndarray) -> tuple[float, float, float, float]:
        p = self._pair_values(z)
        return (*_weighted_moments(p[self.near], self.D), *_weighted_moments(p[self.far], self.D))

    def binary_errors(self, z: np.ndarray, beta: float) -> tuple[float, float]:
        h = self._pair_values(z) >= beta
        diff = h[self.near].astype(np.int8) - h[self.far]
        return float(self.D[diff == 1].sum()), float(self.D[diff == -1].sum())

    def update(self, z: np.ndarray, alpha: float, scale: float, cut: float) -> float:
        p = self._pair_values(z)
        h = p / scale if np.isnan(cut) else (p >= cut).astype(np.float64)
        self.D *= np.exp(alpha * (h[self.near] - h[self.far]))  # Eq. (2)
        Z = float(self.D.sum())
        self.D /= Z
        return Z


class _LabelWeights:
    """Bipartite weights of §4: D_t((i, j, k)) = μ_t((i, j)) μ_t((i, k)), Eq. (10).

    μ is symmetric (h is), so it is kept once per unordered pair {i, j}, i < j,
    in ``mu``: μ over S₁ where ``same`` (same-class pairs), over S₂ elsewhere.
    Every quantity of a round is a few passes over these n(n−1)/2 pairs plus a
    sparse (n, n) @ (n, d) product for matrix (8).
    """

    def __init__(self, X: np.ndarray, codes: np.ndarray) -> None:
        self.X, n = X, X.shape[0]
        r, c = np.triu_indices(n, k=1)
        self.r, self.c, self.same = r, c, codes[r] == codes[c]
        self.sign = np.where(self.same, 1.0, -1.0)  # μ((i, j)) gets +α h, μ((i, k)) gets −α h
        other = n * ~self.same
        self.sum_keys = (r + other, c + other)  # endpoint, shifted by n in S₂
        self.partner_keys = (r + n - other, c + n - other)  # S₁ reads w, S₂ reads s
        self.W = _csr_pattern(r, c, n)  # triu_indices are sorted by (row, col)
        counts = np.bincount(codes)[codes]
        self.n_triplets = int(np.sum((counts - 1) * (n - counts)))
        self.mu = np.full(len(r), 1.0 / np.sqrt(self.n_triplets))  # μ_1 = 1/√m: D_1 = 1/m
        self.sw = self._sums(self.mu)
        self._cache: dict[str, object] = {}

    def _sums(self, v: np.ndarray) -> np.ndarray:
        """[s | w]: s(i) = Σ_j v((i, j)) over S₁ and w(i) = Σ_k v((i, k)) over S₂ (§4)."""
        n2 = 2 * self.X.shape[0]
        return np.bincount(self.sum_keys[0], v, n2) + np.bincount(self.sum_keys[1], v, n2)

    def _values(self, z: np.ndarray) -> np.ndarray:
        if self._cache.get("z") is not z:
            self._cache.update(z=z, p=np.square(z[self.r] - z[self.c]))
        return self._cache["p"]

    def _marginals(self) -> np.ndarray:
        """Weight of each pair as the (i, j) part (S₁) or the (i, k) part (S₂) of
        triplets, both orientations: μ((i, j)) (w(i) + w(j)), μ((i, k)) (s(i) + s(k))."""
        if "marginals" not in self._cache:
            partner = self.sw[self.partner_keys[0]] + self.sw[self.partner_keys[1]]
            self._cache["marginals"] = self.mu * partner
        return self._cache["marginals"]

    def matrix8(self) -> np.ndarray:
        # §4: the four components of matrix (8), folded into one pair scatter
        return _pair_scatter(self.X, self.W, self.r, self.c, -self.sign * self._marginals())

    def moments(self, z: np.ndarray) -> tuple[float, float, float, float]:
        p, marginals = self._values(z), self._marginals()
        near = np.where(self.same, marginals, 0.0)
        return (*_weighted_moments(p, near), *_weighted_moments(p, marginals - near))

    def binary_errors(self, z: np.ndarray, beta: float) -> tuple[float, float]:
        n = self.X.shape[0]
        on = self._sums(self.mu * (self._values(z) >= beta))
        near_on, far_on = on[:n], on[n:]
        near_off, far_off = self.sw[:n] - near_on, self.sw[n:] - far_on
        return float(near_on @ far_off), float(near_off @ far_on)

    def update(self, z: np.ndarray, alpha: float, scale: float, cut: float) -> float:
        p = self._values(z)
        h = p / scale if np.isnan(cut) else (p >= cut).astype(np.float64)
        self.mu *= np.exp(alpha * self.sign * h)  # μ̃_{t+1}((i, j)) and μ̃_{t+1}((i, k)), §4
        self.sw = self._sums(self.mu)
        n = self.X.shape[0]
        Z = float(self.sw[:n] @ self.sw[n:])  # Σ_i s̃(i) w̃(i) = Σ over triplets
        self.mu /= np.sqrt(Z)
        self.sw /= np.sqrt(Z)
        self._cache = {}
        return Z


# ------------------------------------------------------------------ numerics
def _csr_pattern(rows: np.ndarray, cols: np.ndarray, n: int) -> sp.csr_matrix:
    """An (n, n) CSR matrix with one stored entry per pair, pairs sorted by (row, col)."""
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
    return sp.csr_matrix((np.zeros(len(rows)), cols, indptr), shape=(n, n))


def _pair_scatter(
    X: np.ndarray, W: sp.csr_matrix, rows: np.ndarray, cols: np.ndarray, w: np.ndarray
) -> np.ndarray:
    """Σ_e w_e (x_r − x_c)(x_r − x_c)ᵀ over pairs e = (r, c), in O(n_pairs·d + n·d²).

    ``W`` is the pairs' CSR pattern (``_csr_pattern``); its data are overwritten by w.
    """
    n = X.shape[0]
    deg = np.bincount(rows, w, n) + np.bincount(cols, w, n)
    W.data = w
    G = X.T @ (W @ X)
    return (X.T * deg) @ X - G - G.T


def _weighted_moments(values: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    total = weights.sum()
    mean = float(weights @ values / total)
    return mean, float(weights @ np.square(values - mean) / total)


def _gaussian_threshold(m1: float, v1: float, m2: float, v2: float) -> float:
    """β where the densities N(m1, v1) and N(m2, v2) cross between the means (§3.2)."""
    lo, hi = min(m1, m2), max(m1, m2)
    floor = 1e-12 * max(hi * hi, v1, v2, 1e-300)
    v1, v2 = max(v1, floor), max(v2, floor)
    s1, s2 = np.sqrt(v1), np.sqrt(v2)
    fallback = (m1 * s2 + m2 * s1) / (s1 + s2)
    # (x − m1)²/v1 − (x − m2)²/v2 + ln(v1/v2) = 0, i.e. a x² + b x + c = 0
    a = 1.0 / v1 - 1.0 / v2
    b = -2.0 * (m1 / v1 - m2 / v2)
    c = m1 * m1 / v1 - m2 * m2 / v2 + np.log(v1 / v2)
    if abs(a) <= 1e-12 * (abs(1.0 / v1) + abs(1.0 / v2)):
        roots = np.array([-c / b]) if b != 0 else np.array([])
    else:
        disc = b * b - 4 * a * c
        if disc < 0:
            return float(fallback)
        roots = (-b + np.array([-1.0, 1.0]) * np.sqrt(disc)) / (2 * a)
    inside = roots[(roots >= lo) & (roots <= hi)]
    if inside.size == 0:
        return float(fallback)
    return float(inside[np.argmin(np.abs(inside - fallback))])


def _max_squared_distance(X: np.ndarray) -> float:
    """C² of Eq. (9): max ‖x − y‖² over pairs of rows, in blocks of rows."""
    X = X - X.mean(axis=0)
    sq = np.einsum("ij,ij->i", X, X)
    best = 0.0
    step = max(1, _CHUNK // X.shape[0])
    for s in range(0, X.shape[0], step):
        block = sq[s : s + step, None] + sq[None, :] - 2.0 * X[s : s + step] @ X.T
        best = max(best, float(block.max()))
    return max(best, 0.0)

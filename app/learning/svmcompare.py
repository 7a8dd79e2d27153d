"""SVMcompare: learning a ranking function from pair comparisons with ties.

Implements the support vector comparison machine of Venuto, Hocking,
Spanurattana & Sugiyama, "Support vector comparison machines" [1]_.

A pair comparison is a row of ``X_left``, the same row of ``X_right`` and an
outcome ``y`` in {-1, 0, 1}:

====  ======================================  ===========================
 y    meaning                                 Eq. (1) of [1]_
====  ======================================  ===========================
 -1   the left object is better               r(x) > r(x')
  0   both are about the same (a tie)         r(x) = r(x')
  1   the right object is better              r(x) < r(x')
====  ======================================  ===========================

Our ``X_left`` is the paper's x and ``X_right`` its x', so our outcome is the
paper's label y_i unchanged (Eq. (1): y_i = -1 when x_i is better, 1 when
x'_i is better). A larger rank r(x) means a better object.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator
from sklearn.kernel_approximation import Nystroem
from sklearn.metrics.pairwise import pairwise_kernels
from sklearn.svm import SVC, LinearSVC
from sklearn.utils import check_array
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from app.learning.triplets import check_sample_weight

__all__ = ["SVMCompare", "flip_pairs", "threshold"]

# liblinear regularises the intercept as the weight w_0 of a constant feature
# s, beta = s w_0, adding (beta / s)^2 / 2 to the objective, while the bias of
# the QP (15) of [1] is free. We take s = this factor times the root mean
# square norm of the difference rows: large enough that the penalty hardly
# moves beta, small enough that liblinear's coordinate descent converges
# (measured against the dual: 3-10 agree, 30 and more stall).
_INTERCEPT_SCALING = 10.0


def threshold(values: ArrayLike, tau: float = 1.0) -> np.ndarray:
    """Eq. (4) of Venuto et al.: t_tau(x) = -1 if x < -tau, 0 if |x| <= tau, 1 if x > tau.

    Parameters
    ----------
    values : array-like of float
        Rank differences r(x') - r(x).
    tau : float, default=1.0
        Threshold; SVMcompare uses tau = 1 (its comparison function c_1, Eq. (5)).

    Returns
    -------
    outcomes : ndarray of int8, same shape as ``values``, in {-1, 0, 1}
    """
    values = np.asarray(values, dtype=float)
    out = np.zeros(values.shape, dtype=np.int8)
    out[values > tau] = 1
    out[values < -tau] = -1
    return out


def flip_pairs(
    X_left: np.ndarray, X_right: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Eq. (8) of Venuto et al.: the "flipped" data set of m = |I_1| + |I_-1| + 2|I_0| pairs.

    Returns ``(X_tilde, X_tilde_prime, y_tilde)`` with rows ordered as in Eq. (8):
    pairs with y = 1 unchanged, pairs with y = -1 swapped (so that x~' is always
    the better object of an inequality pair), then every tie twice, in both
    orders. ``y_tilde`` is 1 for inequality pairs and -1 for ties.
    """
    up, down, tie = y == 1, y == -1, y == 0
    X_tilde = np.concatenate([X_left[up], X_right[down], X_left[tie], X_right[tie]])
    X_tilde_prime = np.concatenate([X_right[up], X_left[down], X_right[tie], X_left[tie]])
    n_ineq = int(up.sum() + down.sum())
    n_tie = int(tie.sum())
    y_tilde = np.concatenate([np.ones(n_ineq), -np.ones(2 * n_tie)])
    return X_tilde, X_tilde_prime, y_tilde


def _check_outcomes(y: ArrayLike, n_pairs: int) -> np.ndarray:
    """Validate pair outcomes: a 1-d array of n_pairs values in {-1, 0, 1}."""
    y = np.asarray(y)
    if y.dtype == object or y.dtype.kind not in "biuf":
        raise ValueError(f"y must hold numeric outcomes -1, 0 or 1, got dtype {y.dtype}")
    if y.ndim != 1:
        raise ValueError(f"y must be one-dimensional, got shape {y.shape}")
    if y.shape[0] != n_pairs:
        raise ValueError(f"y has {y.shape[0]} outcomes but X_left and X_right have {n_pairs} pairs")
    bad = ~np.isin(y, (-1, 0, 1))
    if bad.any():
        values = np.unique(y[bad])[:5].tolist()
        raise ValueError(f"y must hold outcomes -1, 0 or 1 only, got {values}")
    return y.astype(np.int8)


class SVMCompare(BaseEstimator):
    """Support vector comparison machine [1]_: a ranking function from pairs with ties.

    Learns a ranking function r(x) from labelled pairs (x, x', y) with
    y in {-1, 0, 1} (see the module docstring for the sign convention) and
    compares pairs with c_1(x, x') = t_1(r(x') - r(x)) (Eqs. (4)-(5) of [1]_):
    rank differences of at most 1 are "about the same".

    ``solver="dual"`` is Algorithm 1 of [1]_: the flipped data set of Eq. (8),
    the 2m x 2m kernel matrix K of Eq. (14), the SVM dual (18) with kernel
    M^T K M solved by scikit-learn's ``SVC(kernel="precomputed")`` (libsvm, as
    the authors' kernlab), and the ranking function of Eq. (19).

    ``solver="primal"`` solves the soft-margin problem in the primal over
    explicit features Phi(x), with liblinear (``LinearSVC``) on the flipped
    differences Phi(x~') - Phi(x~): for ``kernel="linear"`` Phi(x) = x; for the
    other kernels Phi is scikit-learn's ``Nystroem`` approximation with
    ``n_components`` landmarks. With ``loss="hinge"`` this is the QP (15) of
    [1]_ itself (liblinear's dual coordinate descent); the default
    ``loss="squared_hinge"`` replaces the slacks xi_i by xi_i^2 (the L2-SVM,
    liblinear's primal Newton method): the paper's hinge stalls in liblinear at
    the large C the simulations choose (at C = 10^5 it stopped at 10^4
    iterations, far from the optimum, on 2,000 pairs, and took 443 s without
    converging on 20,000), while the squared hinge converges in a few dozen
    Newton steps. Both tend to the same
    hard-margin model as C grows.

    Parameters
    ----------
    C : float, default=1.0
        Cost C of the soft-margin QP (15) of [1]_.
    kernel : {"rbf", "linear", "poly"}, default="rbf"
        Positive definite kernel kappa (Section 3.2 of [1]_).
    gamma : {"scale", "auto"} or float, default="scale"
        Kernel coefficient of "rbf" (exp(-gamma ||x - y||^2), the paper's and
        kernlab's "kernel width") and "poly", as in ``SVC``: "scale" is
        1 / (n_features * variance of all training points), "auto" is 1 / n_features.
    degree : int, default=3
        Degree of the "poly" kernel (gamma <x, y> + coef0)^degree.
    coef0 : float, default=0.0
        Independent term of the "poly" kernel.
    solver : {"dual", "primal"}, default="dual"
        "dual": the exact kernel algorithm; memory O(m^2) for m flipped pairs,
        about 3 m^2 doubles while building M^T K M, and libsvm time between
        O(m^2) and O(m^3): practical up to a few thousand pairs (4,000 pairs,
        m = 6,000: 0.9 GB and 27 s on a shared 2-core machine; 10^5 pairs would
        need 540 GB). "primal": memory O(m * n_components), time about linear
        in m: 10^5 pairs in about 3 minutes with 100 landmarks on the same
        machine (``bench/results/svmcompare_scale.txt``).
    n_components : int, default=100
        Nystroem landmarks for ``solver="primal"`` with a non-linear kernel.
    loss : {"squared_hinge", "hinge"}, default="squared_hinge"
        Slack penalty of ``solver="primal"``: "hinge" is the paper's C sum xi_i,
        "squared_hinge" C sum xi_i^2. Ignored by ``solver="dual"`` (always hinge).
    max_iter : int, default=10_000
        Iteration limit of liblinear for ``solver="primal"``.
    random_state : int, RandomState instance or None, default=None
        Seeds the choice of Nystroem landmarks.

    Attributes
    ----------
    n_features_in_ : int
    gamma_ : float
        The kernel coefficient used (``gamma`` resolved).
    bias_ : float
        beta of the SVM (9)/(15); negative for a valid comparison model.
    margin_ : float
        mu = -1 / beta of Lemma 3.1 of [1]_.
    n_flipped_pairs_ : int
        m = |I_1| + |I_-1| + 2 |I_0|, the rows of the flipped data set (8).
    support_x_, support_x_prime_ : ndarray of shape (n_support, n_features)
        ``solver="dual"``: the support vector pairs (x~_i, x~'_i), i in sv.
    rank_coef_ : ndarray
        ``solver="dual"``: y~_i v_i / (-beta) for i in sv, so that
        r(x) = sum_i rank_coef_i [kappa(x~'_i, x) - kappa(x~_i, x)] (Eq. (19)).
        ``solver="primal"``: u / (-beta), so that r(x) = Phi(x) . rank_coef_.
    nystroem_ : Nystroem or None
        ``solver="primal"``: the fitted feature map (None for the linear kernel).

    Notes
    -----
    ====================  ==============================================
    paper [1]_            here
    ====================  ==============================================
    x_i, x'_i             ``X_left[i]``, ``X_right[i]``
    y_i (Eq. (1))         ``y[i]`` (same values, same meaning)
    x~, x~', y~ (Eq. (8)) ``flip_pairs(X_left, X_right, y)``
    M^T K M (Alg. 1)      the precomputed kernel passed to ``SVC``
    y~_i v_i              ``SVC.dual_coef_`` (scikit-learn's sign: its
                          decision function is positive for y~ = 1)
    beta                  ``bias_`` (``SVC.intercept_``)
    r(x) (Eq. (19))       ``rank(x)``
    c_1(x, x') (Eq. (5))  ``predict(x, x')``
    ====================  ==============================================

    The paper is silent on three details; we do what its authors' code
    (the R package rankSVMcompare) does or would do:

    * Features are not scaled inside the estimator. The authors centre and
      scale all points of the training pairs before fitting (Section 3.1: "when
      the input variables are scaled in a pre-processing step"); do the same
      with a ``StandardScaler`` fitted on ``np.vstack([X_left, X_right])``.
    * A fit with beta >= 0 has no comparison function c_1 (Lemma 3.1 needs
      mu = -1/beta > 0); the authors' code divides by beta regardless. We raise
      a ``ValueError`` naming the cause instead of returning a model whose
      ranks are reversed or infinite.
    * Training needs both ties and inequality pairs: otherwise the flipped set
      (8) holds one class only and the SVM is undefined.

    References
    ----------
    .. [1] Venuto, D., Hocking, T. D., Spanurattana, L. & Sugiyama, M.
       Support vector comparison machines. arXiv:1401.8008.

    Examples
    --------
    >>> import numpy as np
    >>> X_left = np.array([[0.0], [0.0], [1.0], [3.0]])
    >>> X_right = np.array([[3.0], [0.5], [4.0], [0.0]])
    >>> y = np.array([1, 0, 1, -1])
    >>> model = SVMCompare(kernel="linear", C=100.0).fit(X_left, X_right, y)
    >>> model.predict(X_left, X_right).tolist()
    [1, 0, 1, -1]
    """

    _parameter_constraints: dict = {
        "C": [Interval(Real, 0, None, closed="neither")],
        "kernel": [StrOptions({"rbf", "linear", "poly"})],
        "gamma": [StrOptions({"scale", "auto"}), Interval(Real, 0, None, closed="neither")],
        "degree": [Interval(Integral, 1, None, closed="left")],
        "coef0": [Interval(Real, None, None, closed="neither")],
        "solver": [StrOptions({"dual", "primal"})],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "loss": [StrOptions({"squared_hinge", "hinge"})],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        C: float = 1.0,
        kernel: str = "rbf",
        gamma: str | float = "scale",
        degree: int = 3,
        coef0: float = 0.0,
        solver: str = "dual",
        n_components: int = 100,
        loss: str = "squared_hinge",
        max_iter: int = 10_000,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.C = C
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.solver = solver
        self.n_components = n_components
        self.loss = loss
        self.max_iter = max_iter
        self.random_state = random_state

    # ------------------------------------------------------------------ input
    def _check_pairs(
        self, X_left: ArrayLike, X_right: ArrayLike, *, reset: bool
    ) -> tuple[np.ndarray, np.ndarray]:
        X_left = check_array(X_left, dtype=np.float64, input_name="X_left")
        X_right = check_array(X_right, dtype=np.float64, input_name="X_right")
        if X_left.shape != X_right.shape:
            raise ValueError(
                "X_left and X_right must have the same shape (one row per pair), got "
                f"{X_left.shape} and {X_right.shape}"
            )
        self._check_n_features(X_left, reset=reset)
        return X_left, X_right

    def _check_n_features(self, X: np.ndarray, *, reset: bool) -> None:
        if reset:
            self.n_features_in_ = X.shape[1]
        elif X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but SVMCompare was fitted with "
                f"{self.n_features_in_} features"
            )

    def _kernel_params(self) -> dict:
        if self.kernel == "rbf":
            return {"gamma": self.gamma_}
        if self.kernel == "poly":
            return {"gamma": self.gamma_, "degree": self.degree, "coef0": self.coef0}
        return {}

    def _kernel(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        return pairwise_kernels(A, B, metric=self.kernel, **self._kernel_params())

    # -------------------------------------------------------------------- fit
    def fit(
        self,
        X_left: ArrayLike,
        X_right: ArrayLike,
        y: ArrayLike,
        sample_weight: ArrayLike | None = None,
    ) -> SVMCompare:
        """Learn the ranking function from labelled pairs (Algorithm 1 of [1]_).

        Parameters
        ----------
        X_left, X_right : array-like of shape (n_pairs, n_features)
            Feature vectors of the two objects of each pair (x and x').
        y : array-like of shape (n_pairs,)
            -1: left better, 0: about the same, 1: right better (Eq. (1)).
            Both ties and inequality pairs must occur.
        sample_weight : array-like of shape (n_pairs,), default=None
            How much each pair counts: its slack's cost is ``C * weight`` (libsvm's and
            liblinear's per-sample C); a tie's weight goes to both of its flipped copies.
            Pairs of weight 0 are left out.

        Returns
        -------
        self : SVMCompare
        """
        self._validate_params()
        X_left, X_right = self._check_pairs(X_left, X_right, reset=True)
        y = _check_outcomes(y, X_left.shape[0])
        weight = check_sample_weight(sample_weight, X_left.shape[0])
        if weight is not None and np.any(weight == 0):
            keep = weight > 0
            X_left, X_right, y, weight = X_left[keep], X_right[keep], y[keep], weight[keep]
        n_tie = int((y == 0).sum())
        if n_tie == 0 or n_tie == y.shape[0]:
            kind = "ties (y = 0)" if n_tie == 0 else "inequality pairs (y = -1 or 1)"
            raise ValueError(
                f"y holds a single class of labels: SVMCompare needs both ties and "
                f"inequality pairs, and there are no {kind}"
            )
        points = np.vstack([X_left, X_right])
        if self.gamma == "scale":
            variance = points.var()
            self.gamma_ = 1.0 / (points.shape[1] * variance) if variance > 0 else 1.0
        elif self.gamma == "auto":
            self.gamma_ = 1.0 / points.shape[1]
        else:
            self.gamma_ = float(self.gamma)
        if self.solver == "dual":
            self._fit_dual(X_left, X_right, y, weight)
        else:
            self._fit_primal(X_left, X_right, y, points, weight)
        return self

    @staticmethod
    def _flipped_weight(y: np.ndarray, weight: np.ndarray | None) -> np.ndarray | None:
        """The weights of the flipped set (8), in its row order: y = 1, y = -1, ties twice."""
        if weight is None:
            return None
        tie = y == 0
        return np.concatenate([weight[y == 1], weight[y == -1], weight[tie], weight[tie]])

    def _set_bias(self, beta: float) -> None:
        if not beta < 0:
            raise ValueError(
                f"the SVM bias beta = {beta:.3g} is not negative, so no comparison function "
                "exists for this fit (Lemma 3.1 of Venuto et al. needs mu = -1/beta > 0); "
                "try a larger C or a different kernel"
            )
        self.bias_ = beta
        self.margin_ = -1.0 / beta

    def _fit_dual(
        self, X_left: np.ndarray, X_right: np.ndarray, y: np.ndarray, weight: np.ndarray | None
    ) -> None:
        X_t, X_tp, y_t = flip_pairs(X_left, X_right, y)  # Eq. (8)
        self.n_flipped_pairs_ = y_t.shape[0]
        # Alg. 1: K~ = M^T K M with M = [-I I]^T, K over [X~; X~'] (Eq. (14)), i.e.
        # K~ = K(X~', X~') + K(X~, X~) - K(X~', X~) - K(X~, X~'), built block by block.
        gram = self._kernel(X_tp, X_tp)
        gram += self._kernel(X_t, X_t)
        cross = self._kernel(X_tp, X_t)
        gram -= cross
        gram -= cross.T
        del cross
        svc = SVC(C=self.C, kernel="precomputed").fit(
            gram, y_t, sample_weight=self._flipped_weight(y, weight)
        )  # SVMdual, Eq. (18); a weight scales its pair's C
        del gram
        coef = svc.dual_coef_[0]  # y~_i v_i for i in sv, decision-function sign
        self._set_bias(float(svc.intercept_[0]))
        sv = svc.support_
        self.support_x_ = X_t[sv]
        self.support_x_prime_ = X_tp[sv]
        self.rank_coef_ = coef / -self.bias_  # Eq. (19)
        self.nystroem_ = None

    def _features(self, X: np.ndarray) -> np.ndarray:
        return X if self.nystroem_ is None else self.nystroem_.transform(X)

    def _fit_primal(
        self,
        X_left: np.ndarray,
        X_right: np.ndarray,
        y: np.ndarray,
        points: np.ndarray,
        weight: np.ndarray | None = None,
    ) -> None:
        if self.kernel == "linear":
            self.nystroem_ = None
        else:
            self.nystroem_ = Nystroem(
                kernel=self.kernel,
                n_components=min(self.n_components, points.shape[0]),
                random_state=self.random_state,
                **self._kernel_params(),
            ).fit(points)
        # Eq. (8) in feature space: the rows are the differences Phi(x~') - Phi(x~).
        diff = self._features(X_right) - self._features(X_left)
        tie = y == 0
        ineq = ~tie
        D = np.concatenate([diff[ineq] * y[ineq, None], diff[tie], -diff[tie]])
        y_t = np.concatenate([np.ones(ineq.sum()), -np.ones(2 * tie.sum())])
        flipped_weight = (
            None if weight is None else np.concatenate([weight[ineq], weight[tie], weight[tie]])
        )
        self.n_flipped_pairs_ = y_t.shape[0]
        rms_norm = float(np.sqrt(np.mean(np.einsum("ij,ij->i", D, D))))
        svm = LinearSVC(
            C=self.C,
            loss=self.loss,
            dual=self.loss == "hinge",
            intercept_scaling=_INTERCEPT_SCALING * max(rms_norm, 1e-12),
            max_iter=self.max_iter,
        ).fit(D, y_t, sample_weight=flipped_weight)  # QP (15) (or its L2 variant), explicit map
        self._set_bias(float(svm.intercept_[0]))
        self.rank_coef_ = svm.coef_[0] / -self.bias_  # Lemma 3.1: w = -u / beta

    # ---------------------------------------------------------------- predict
    def rank(self, X: ArrayLike) -> np.ndarray:
        """Ranking function r(x) of Eq. (19) of [1]_; larger is better.

        Parameters
        ----------
        X : array-like of shape (n_objects, n_features)

        Returns
        -------
        ranks : ndarray of shape (n_objects,)
        """
        check_is_fitted(self, "rank_coef_")
        X = check_array(X, dtype=np.float64)
        self._check_n_features(X, reset=False)
        if self.solver == "primal":
            return self._features(X) @ self.rank_coef_
        return (
            self._kernel(X, self.support_x_prime_) - self._kernel(X, self.support_x_)
        ) @ self.rank_coef_

    def decision_function(self, X_left: ArrayLike, X_right: ArrayLike) -> np.ndarray:
        """Rank differences r(x') - r(x) of each pair (the argument of c_1, Eq. (5)).

        Returns
        -------
        differences : ndarray of shape (n_pairs,)
            Above 1: right better; below -1: left better; otherwise about the same.
        """
        check_is_fitted(self, "rank_coef_")
        X_left, X_right = self._check_pairs(X_left, X_right, reset=False)
        both = self.rank(np.vstack([X_left, X_right]))
        n = X_left.shape[0]
        return both[n:] - both[:n]

    def predict(self, X_left: ArrayLike, X_right: ArrayLike) -> np.ndarray:
        """Compare pairs: c_1(x, x') = t_1(r(x') - r(x)), Eqs. (4)-(5) of [1]_.

        Returns
        -------
        outcomes : ndarray of int8 of shape (n_pairs,)
            -1: left better, 0: about the same, 1: right better.
        """
        return threshold(self.decision_function(X_left, X_right), 1.0)

    def score(self, X_left: ArrayLike, X_right: ArrayLike, y: ArrayLike) -> float:
        """Fraction of pairs compared correctly (1 - the zero-one loss of Eq. (2))."""
        prediction = self.predict(X_left, X_right)
        y = _check_outcomes(y, prediction.shape[0])
        return float(np.mean(prediction == y))

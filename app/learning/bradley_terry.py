"""A ranking with ties from pair comparisons: Bradley–Terry with Davidson's ties.

Each object i has a score :math:`\\theta_i` (a log-strength, larger is better). A pair
``(left, right)`` is answered "left better", "about the same" or "right better" with
the probabilities of Davidson (1970), Eq. (2.1)–(2.2):

.. math:: P(\\text{left}) = \\pi_l / D,\\quad P(\\text{same}) = \\nu\\sqrt{\\pi_l \\pi_r} / D,
          \\quad D = \\pi_l + \\pi_r + \\nu\\sqrt{\\pi_l \\pi_r},\\quad \\pi_i = e^{\\theta_i},

i.e. with :math:`\\delta = (\\theta_r - \\theta_l)/2`:
:math:`P(\\text{left}) \\propto e^{-\\delta}`, :math:`P(\\text{right}) \\propto e^{\\delta}`,
:math:`P(\\text{same}) \\propto \\nu`. Rao & Kupper
(1967) tie a pair by a threshold on the difference instead; Davidson's link keeps the
likelihood smooth and concave in θ (for fixed ν), which is all an EM loop and an adaptive
scorer need. Pairs follow the service's format: rows ``(left, right, outcome)`` with outcome
−1 (left better), 0 (about the same), 1 (right better), as :class:`SVMCompare`'s ``y``.

No features are needed: this learns one score per object from the answers alone (SVMcompare
learns a function of the features). The scores get a Gaussian prior
(``alpha / 2 · Σ θ²``), which fixes their free shift and keeps an object that won every
comparison finite.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import minimize
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

from app.learning.triplets import check_sample_weight

__all__ = ["BradleyTerryDavidson", "check_pairs", "outcome_entropy", "outcome_probabilities"]

OUTCOMES = np.array([-1, 0, 1])  # columns of every probability array here


def check_pairs(pairs: ArrayLike, n_objects: int | None = None, *, outcomes: bool = True):  # type: ignore[no-untyped-def]
    """Validate pairs: an int array (m, 3) of rows ``(left, right, outcome)`` (or (m, 2)
    without outcomes), two distinct objects per row, outcomes in {−1, 0, 1}."""
    width = 3 if outcomes else 2
    array = np.asarray(pairs)
    if array.size == 0:
        return np.empty((0, width), dtype=np.intp)
    if array.ndim != 2 or array.shape[1] != width or array.dtype.kind not in "iu":
        layout = "(left, right, outcome)" if outcomes else "(left, right)"
        raise ValueError(f"pairs must be an integer array of rows {layout}, got {array.shape}")
    array = np.ascontiguousarray(array, dtype=np.intp)
    if array[:, :2].min() < 0 or (n_objects is not None and array[:, :2].max() >= n_objects):
        raise ValueError(f"pairs hold an object index out of range for {n_objects} objects")
    if np.any(array[:, 0] == array[:, 1]):
        row = int(np.argmax(array[:, 0] == array[:, 1]))
        raise ValueError(f"pair row {row} compares object {array[row, 0]} with itself")
    if outcomes and not np.isin(array[:, 2], OUTCOMES).all():
        raise ValueError("pair outcomes must be -1 (left better), 0 (about the same) or 1")
    return array


def outcome_probabilities(
    scores: np.ndarray, tie: float, left: np.ndarray, right: np.ndarray
) -> np.ndarray:
    """Davidson's (1970) probabilities of (left better, same, right better): (m, 3)."""
    delta = (scores[right] - scores[left]) / 2.0
    logits = np.stack([-delta, np.full_like(delta, np.log(max(tie, 1e-300))), delta], axis=1)
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


def outcome_entropy(p: np.ndarray) -> np.ndarray:
    """Entropy (nats) of each row of outcome probabilities."""
    q = np.clip(p, 1e-12, 1.0)
    return -(q * np.log(q)).sum(axis=1)


class BradleyTerryDavidson(BaseEstimator):
    """Bradley–Terry scores with Davidson's ties [1]_, by penalised maximum likelihood.

    Parameters
    ----------
    alpha : float, default=0.1
        Strength of the Gaussian prior on the scores (``alpha / 2 · Σ θ²`` is added to the
        negative log-likelihood summed over the answers, weighted).
    max_iter : int, default=500
        L-BFGS-B iterations.
    tol : float, default=1e-8
        ``tol`` of :func:`scipy.optimize.minimize`.

    Attributes
    ----------
    scores_ : ndarray of shape (n_objects,)
        θ, larger is better.
    tie_ : float
        Davidson's ν ≥ 0: the larger, the more "about the same".
    n_objects_ : int
    loss_ : float
        The final penalised negative log-likelihood, per unit of weight.

    Notes
    -----
    ==========================  =====================
    [1]_                        here
    ==========================  =====================
    :math:`\\log \\pi_i`          ``scores_[i]``
    :math:`\\nu`                  ``tie_``
    ==========================  =====================

    References
    ----------
    .. [1] Davidson, R. R. (1970). On extending the Bradley-Terry model to accommodate
       ties in paired comparison experiments. JASA 65(329), 317–328.
    .. [2] Rao, P. V. & Kupper, L. L. (1967). Ties in paired-comparison experiments: a
       generalization of the Bradley-Terry model. JASA 62(317), 194–204.

    Examples
    --------
    >>> import numpy as np
    >>> pairs = np.array([[0, 1, 1], [1, 2, 1], [0, 2, 1], [1, 0, -1], [2, 1, -1]])
    >>> model = BradleyTerryDavidson().fit(pairs, 3)
    >>> [int(i) for i in np.argsort(-model.scores_)]
    [2, 1, 0]
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, alpha: float = 0.1, *, max_iter: int = 500, tol: float = 1e-8) -> None:
        self.alpha = alpha
        self.max_iter = max_iter
        self.tol = tol

    def fit(
        self,
        pairs: ArrayLike,
        n_objects: int | None = None,
        *,
        sample_weight: ArrayLike | None = None,
        init: ArrayLike | None = None,
    ) -> BradleyTerryDavidson:
        """Fit the scores and the tie parameter.

        Parameters
        ----------
        pairs : array-like of shape (n_pairs, 3)
            Rows ``(left, right, outcome)``, outcome −1 / 0 / 1.
        n_objects : int, default=None
            Default: the largest index plus one.
        sample_weight : array-like of shape (n_pairs,), default=None
            How much each answer counts in the likelihood.
        init : array-like of shape (n_objects,), default=None
            Starting scores (a warm start).
        """
        self._validate_params()
        P = check_pairs(pairs, n_objects)
        if len(P) == 0:
            raise ValueError("pairs is empty: need at least one pair answer")
        n = int(P[:, :2].max()) + 1 if n_objects is None else int(n_objects)
        w = check_sample_weight(sample_weight, len(P))
        w = np.ones(len(P)) if w is None else w
        x0 = np.zeros(n + 1)
        if init is not None:
            start = np.asarray(init, dtype=float)
            if start.shape != (n,) or not np.all(np.isfinite(start)):
                raise ValueError(f"init must be {n} finite scores, got shape {start.shape}")
            x0[:n] = start
        left, right, y = P[:, 0], P[:, 1], P[:, 2] + 1  # column of the observed outcome
        total = w.sum()

        def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
            theta, log_nu = x[:n], x[n]
            p = outcome_probabilities(theta, float(np.exp(log_nu)), left, right)
            observed = p[np.arange(len(P)), y]
            nll = -float(w @ np.log(np.maximum(observed, 1e-300)))
            # d(-log p_y)/d(delta) = E[s] - s_y with s = (-1, 0, 1); d(delta)/d(theta_r) = 1/2
            s = OUTCOMES[y]
            g_delta = w * (p[:, 2] - p[:, 0] - s) / 2.0
            grad = np.bincount(right, g_delta, n) - np.bincount(left, g_delta, n)
            g_nu = float(w @ (p[:, 1] - (y == 1)))  # d/d(log nu)
            penalty = 0.5 * self.alpha * float(theta @ theta)
            value = (nll + penalty) / total
            return value, np.concatenate([grad + self.alpha * theta, [g_nu]]) / total

        # L-BFGS-B's tiny BLAS calls with threads on a busy machine: 8 ms per iteration of
        # 61 variables here, measured (as in app.learning._embedding_base); one thread.
        with threadpool_limits(limits=1, user_api="blas"):
            result = minimize(
                objective, x0, jac=True, method="L-BFGS-B", tol=self.tol,
                options={"maxiter": self.max_iter},
            )  # fmt: skip
        self.scores_ = result.x[:n].copy()
        self.tie_ = float(np.exp(result.x[n]))
        self.n_objects_ = n
        self.loss_ = float(result.fun)
        self.n_iter_ = int(result.nit)
        return self

    def _check_pairs(self, pairs: ArrayLike, outcomes: bool) -> np.ndarray:
        check_is_fitted(self, "scores_")
        return check_pairs(pairs, self.n_objects_, outcomes=outcomes)

    def predict_proba(self, pairs: ArrayLike) -> np.ndarray:
        """P(left better), P(same), P(right better) of each pair ``(left, right)``: (m, 3)."""
        P = self._check_pairs(np.asarray(pairs)[:, :2] if np.size(pairs) else pairs, False)
        return outcome_probabilities(self.scores_, self.tie_, P[:, 0], P[:, 1])

    def predict(self, pairs: ArrayLike) -> np.ndarray:
        """The most probable outcome (−1, 0, 1) of each pair ``(left, right)``."""
        return OUTCOMES[np.argmax(self.predict_proba(pairs), axis=1)]

    def score(self, pairs: ArrayLike) -> float:
        """Share of pairs ``(left, right, outcome)`` whose outcome :meth:`predict` gives."""
        P = self._check_pairs(pairs, True)
        if len(P) == 0:
            raise ValueError("pairs is empty: cannot score on no pairs")
        return float(np.mean(self.predict(P[:, :2]) == P[:, 2]))


def calibrate_link(
    rank: np.ndarray, pairs: np.ndarray, sample_weight: np.ndarray | None = None
) -> tuple[float, float]:
    """A Davidson link for another model's ranking: the scale κ and tie ν maximising the
    likelihood of the answered ``pairs`` under θ = κ · ``rank`` (e.g. SVMcompare's r(x),
    whose own comparison function is a hard threshold, not a probability)."""
    P = check_pairs(pairs, len(rank))
    if len(P) == 0:
        return 1.0, 1.0
    w = np.ones(len(P)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    y = P[:, 2] + 1

    def nll(x: np.ndarray) -> float:
        p = outcome_probabilities(np.exp(x[0]) * rank, float(np.exp(x[1])), P[:, 0], P[:, 1])
        return -float(w @ np.log(np.maximum(p[np.arange(len(P)), y], 1e-300)))

    spread = float(np.std(rank)) or 1.0
    result = minimize(nll, [np.log(1.0 / spread), 0.0], method="Nelder-Mead")
    return float(np.exp(result.x[0])), float(np.exp(result.x[1]))

"""The baselines of Venuto et al., Section 4: ``rank`` and ``rank2`` (SVMrank + threshold).

``rank`` learns SVMrank (the QP (3), Joachims 2002) from the inequality pairs only;
``rank2`` turns every tie into two opposite inequality pairs and duplicates every
inequality pair (2n pairs, Table 2). Both then pick the threshold tau of
c_tau (Eqs. (4)-(6)) by grid search on the training pairs, as the authors' script
``svmlight.R`` (tdhock/compare-paper) does: ranks normalised to mean 0, sd 1 over
the training points; 100 log-spaced thresholds between the smallest and largest
absolute rank difference plus the differences themselves; ties among the best
thresholds broken by their ``pick.best.index`` (middle of the minimisers, or the
inner end when the minimisers touch an end of the grid).

The authors ran SVMlight (``svm_learn -z p -t 2``). Here SVMrank is solved by
scikit-learn's ``SVC(kernel="precomputed")`` on the pair kernel M^T K M of the
difference vectors, with every pair written in both directions (d, +1) and
(-d, -1): the data are then symmetric, so the optimal SVC bias is 0 and its
weight vector is exactly SVMrank's (the bias-free QP (3)), at cost C/2 for a
pair set written twice; rank2's multiplicities go in as sample weights.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.svm import SVC

from app.learning.svmcompare import threshold


def pick_best_index(err: np.ndarray) -> int:
    """The authors' ``pick.best.index`` (svmlight.R), 0-based."""
    n = err.shape[0]
    candidates = np.flatnonzero(err == err.min())
    if n == 1:
        return int(candidates[0])
    middle = int(candidates[np.argmin(np.abs(np.median(candidates) - candidates))])
    if np.all(np.diff(err) == 0):
        return middle
    first, last = 0 in candidates, (n - 1) in candidates
    if first and last:
        gaps = np.flatnonzero(np.diff(candidates) > 1)
        return int(candidates[gaps[0]]) if gaps.size else middle
    if first:
        return int(candidates.max())
    if last:
        return int(candidates.min())
    return middle


class SVMRankThreshold:
    """SVMrank with an RBF kernel plus a threshold tau chosen on the training pairs.

    Parameters
    ----------
    C : float
        SVMrank cost (QP (3)).
    gamma : float
        RBF kernel exp(-gamma ||x - y||^2) (SVMlight's ``-g``).
    equality : {"nopairs", "bothpairs"}
        "nopairs" is the paper's ``rank``, "bothpairs" its ``rank2``.
    """

    def __init__(self, C: float, gamma: float, equality: str = "nopairs") -> None:
        self.C = C
        self.gamma = gamma
        self.equality = equality

    def fit(self, X_left: np.ndarray, X_right: np.ndarray, y: np.ndarray) -> SVMRankThreshold:
        ineq = y != 0
        # orient every inequality pair so that the better object comes second
        worse = np.where((y[ineq] == 1)[:, None], X_left[ineq], X_right[ineq])
        better = np.where((y[ineq] == 1)[:, None], X_right[ineq], X_left[ineq])
        # directed preference pairs (from -> to: "to" is better) with their multiplicity
        if self.equality == "nopairs":  # rank: the inequality pairs once
            first, second = worse, better
            weight = np.ones(len(worse))
        else:  # rank2: inequality pairs twice, every tie once in each direction (Table 2)
            first = np.vstack([worse, X_left[~ineq], X_right[~ineq]])
            second = np.vstack([better, X_right[~ineq], X_left[~ineq]])
            weight = np.concatenate([np.full(len(worse), 2.0), np.ones(2 * int((~ineq).sum()))])
        # each directed pair written (from -> to, +1) and (to -> from, -1) at cost C/2
        A = np.vstack([first, second])
        B = np.vstack([second, first])
        labels = np.concatenate([np.ones(len(first)), -np.ones(len(first))])
        weights = np.concatenate([weight, weight])
        gram = rbf_kernel(B, B, gamma=self.gamma) + rbf_kernel(A, A, gamma=self.gamma)
        cross = rbf_kernel(B, A, gamma=self.gamma)
        gram -= cross + cross.T
        svc = SVC(C=self.C / 2, kernel="precomputed").fit(gram, labels, sample_weight=weights)
        self.sv_from_ = A[svc.support_]
        self.sv_to_ = B[svc.support_]
        self.coef_ = svc.dual_coef_[0]  # the SVC bias is 0 by symmetry: ignored
        points = np.vstack([X_left, X_right])
        values = self._raw_rank(points)
        self.mean_, self.sd_ = values.mean(), values.std(ddof=1)
        if self.sd_ == 0:
            self.sd_ = 1.0
        self.threshold_ = self._choose_threshold(self.decision_function(X_left, X_right), y)
        return self

    def _raw_rank(self, X: np.ndarray) -> np.ndarray:
        return (
            rbf_kernel(X, self.sv_to_, gamma=self.gamma)
            - rbf_kernel(X, self.sv_from_, gamma=self.gamma)
        ) @ self.coef_

    def rank(self, X: np.ndarray) -> np.ndarray:
        return (self._raw_rank(X) - self.mean_) / self.sd_

    def decision_function(self, X_left: np.ndarray, X_right: np.ndarray) -> np.ndarray:
        both = self.rank(np.vstack([X_left, X_right]))
        return both[len(X_left) :] - both[: len(X_left)]

    @staticmethod
    def _choose_threshold(diff: np.ndarray, y: np.ndarray) -> float:
        adiff = np.abs(diff)
        low, high = adiff.min(), adiff.max()
        if high == 0:
            return 1.0
        low = max(low, 1e-6)
        grid = np.unique(np.concatenate([np.geomspace(low, high, 100), adiff]))  # Eq. (6)
        prediction = np.sign(diff)[None, :] * (adiff[None, :] > grid[:, None])
        err = (prediction != y[None, :]).mean(axis=1)
        return float(grid[pick_best_index(err)])

    def predict(self, X_left: np.ndarray, X_right: np.ndarray) -> np.ndarray:
        return threshold(self.decision_function(X_left, X_right), self.threshold_)

"""How reliable each participant is, learned from the answers jointly with their model.

The model is the spammer–hammer mixture of Dawid & Skene (1979) and MACE (Hovy et al.
2013), with the truth of each comparison replaced by a comparison model of the objects
(Raykar et al. 2010 learn a classifier jointly with the annotators' reliabilities the same
way). Participant w answers each question

- *carefully* with probability :math:`r_w`: the answer follows the comparison model — for a
  triplet the t-STE probability of the embedding (van der Maaten & Weinberger 2012), for a
  pair with ties Davidson's (1970) Bradley–Terry probability
  (:class:`~app.learning.bradley_terry.BradleyTerryDavidson`);
- *at random* with probability :math:`1 - r_w`: the side clicked is drawn from the
  participant's own distribution :math:`\\xi_w` over the sides shown (left / right, or
  left / same / right), which is uniform for a coin-flipper and all on one side for someone
  who always clicks the left option (MACE's spamming distribution).

EM alternates the posterior probability that each answer was careful (its weight), the
:math:`r_w` and :math:`\\xi_w` given those weights (MAP under a Beta and a Dirichlet prior),
and a weighted refit of the comparison model, warm-started. A participant's reliability is
the posterior mean of :math:`r_w` under Beta(``prior_careful`` + Σ weights,
``prior_random`` + Σ (1 − weights)) and its interval that Beta's central interval — an
approximation that treats the expected counts as observed.

Assumptions (as in the papers): participants answer independently of each other given the
objects; a participant's skill is the same for every question and does not change over
time; the comparison model is right about the careful answers. Odd-one-out and grid answers
enter through the triplets they imply; those triplets share their answer's reliability but
are counted as independent answers.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import beta as beta_distribution
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from app.learning.bradley_terry import BradleyTerryDavidson, check_pairs, outcome_probabilities
from app.learning.embedding import TSTE
from app.learning.triplets import check_triplets

__all__ = ["CrowdReliability", "tste_probabilities"]

_FLOOR = 1e-9  # probabilities below this are taken as this (an answer a model rules out)


def tste_probabilities(embedding: np.ndarray, triplets: np.ndarray) -> np.ndarray:
    """t-STE's probability (van der Maaten & Weinberger 2012, Sec. 4) that the anchor of each
    triplet ``(anchor, near, far)`` calls ``near`` the closer one, α = max(d − 1, 1)."""
    X = embedding
    alpha = float(max(X.shape[1] - 1, 1))
    power = (alpha + 1.0) / 2.0
    sq_near = ((X[triplets[:, 0]] - X[triplets[:, 1]]) ** 2).sum(1)
    sq_far = ((X[triplets[:, 0]] - X[triplets[:, 2]]) ** 2).sum(1)
    z = power * (np.log1p(sq_near / alpha) - np.log1p(sq_far / alpha))
    return 1.0 / (1.0 + np.exp(np.clip(z, -50, 50)))


def _side_codes(sides: ArrayLike | None, n: int, values: tuple[int, ...], what: str):  # type: ignore[no-untyped-def]
    """Column of each answer's side in ``values`` (or None when sides are not given)."""
    if sides is None:
        return None
    array = np.asarray(sides)
    if array.shape != (n,) or array.dtype.kind not in "iu":
        raise ValueError(f"{what} must be {n} integers (one per answer), got shape {array.shape}")
    if not np.isin(array, values).all():
        raise ValueError(f"{what} must hold only {', '.join(map(str, values))}")
    return np.searchsorted(np.asarray(values), array)


def _check_workers(workers: ArrayLike | None, n: int, what: str) -> np.ndarray:
    if workers is None:
        raise ValueError(f"{what} is required with its answers: one participant id per answer")
    array = np.asarray(workers)
    if array.shape != (n,) or (n and array.dtype.kind not in "iu"):
        raise ValueError(f"{what} must be {n} integer participant ids, got shape {array.shape}")
    return array.astype(np.int64)


class CrowdReliability(BaseEstimator):
    """Each participant's probability of answering carefully, by EM [1]_ [2]_ [3]_.

    See the module notes for the model. Answers of participant id < 0 (imported answers,
    say) are trusted: always careful, no reliability of their own.

    Parameters
    ----------
    n_components : int, default=2
        Dimension of the t-STE embedding that models the triplets.
    prior_careful, prior_random : float, default=2.0, 1.0
        Beta prior of :math:`r_w` (pseudo-answers careful / at random): a participant with
        no answers has reliability 2/3, and one answer moves it little.
    side_prior : float, default=2.0
        Dirichlet pseudo-counts per side of :math:`\\xi_w`.
    alpha_ties : float, default=0.1
        Prior strength of the Bradley–Terry–Davidson scores (pairs).
    max_iter : int, default=10
        EM rounds (each refits the comparison models once).
    tol : float, default=1e-3
        Stop when no reliability moved more than this in a round.
    confidence : float, default=0.9
        Coverage of ``reliability_interval_``.
    n_folds : int, default=5
        Cross-fitting: each answer's careful-mode probability comes from a model fitted
        without it (the other folds' answers); 1 fits one model on every answer. A model
        fitted on an answer partly agrees with it, a coin-flipper's included: on 20 objects
        with 25 answers per participant, coin-flippers kept a reliability of ~0.7 with one
        fold (0.70 and 0.72, one run) and 0.26–0.54 with five (five runs;
        tests/training/test_reliability.py's crowd, which now gives 40 answers each).
    n_init : int, default=3
        t-STE restarts of the first fit (later fits start from the previous one).
    random_state : int, RandomState instance or None, default=None

    Attributes
    ----------
    workers_ : ndarray of shape (n_workers,)
        The participant ids (≥ 0), sorted.
    reliability_ : ndarray of shape (n_workers,)
        Posterior mean of :math:`r_w`, in [0, 1].
    reliability_interval_ : ndarray of shape (n_workers, 2)
    n_answers_ : ndarray of shape (n_workers,)
    side_bias_ : ndarray of shape (n_workers,)
        The random mode's largest share of one side, ξ's maximum (½ or ⅓: no preference).
    triplet_weight_, pair_weight_ : ndarray
        Each answer's posterior probability of being careful: the weight to train with.
    embedding_ : ndarray of shape (n_objects, n_components) or None
    scores_, tie_ : ndarray, float or None
        The Bradley–Terry–Davidson fit of the pairs.
    n_iter_ : int
    log_likelihood_ : float

    Notes
    -----
    ====================================  =======================
    [1]_ / [3]_                           here
    ====================================  =======================
    annotator reliability, 1 − spamming   ``reliability_``
    spamming distribution ξ               ``side_bias_`` (its max)
    posterior of the true label           ``triplet_weight_`` (careful or not)
    ====================================  =======================

    References
    ----------
    .. [1] Dawid, A. P. & Skene, A. M. (1979). Maximum likelihood estimation of observer
       error-rates using the EM algorithm. Applied Statistics 28(1), 20–28.
    .. [2] Raykar, V. C., Yu, S., Zhao, L. H., Valadez, G. H., Florin, C., Bogoni, L. &
       Moy, L. (2010). Learning from crowds. JMLR 11, 1297–1322.
    .. [3] Hovy, D., Berg-Kirkpatrick, T., Vaswani, A. & Hovy, E. (2013). Learning whom to
       trust with MACE. NAACL-HLT.
    .. [4] Davidson, R. R. (1970). On extending the Bradley-Terry model to accommodate ties
       in paired comparison experiments. JASA 65(329), 317–328.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "prior_careful": [Interval(Real, 0, None, closed="neither")],
        "prior_random": [Interval(Real, 0, None, closed="neither")],
        "side_prior": [Interval(Real, 0, None, closed="neither")],
        "alpha_ties": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "confidence": [Interval(Real, 0, 1, closed="neither")],
        "n_folds": [Interval(Integral, 1, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    def __init__(
        self,
        n_components: int = 2,
        *,
        prior_careful: float = 2.0,
        prior_random: float = 1.0,
        side_prior: float = 2.0,
        alpha_ties: float = 0.1,
        max_iter: int = 10,
        tol: float = 1e-3,
        confidence: float = 0.9,
        n_folds: int = 5,
        n_init: int = 3,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_components = n_components
        self.prior_careful = prior_careful
        self.prior_random = prior_random
        self.side_prior = side_prior
        self.alpha_ties = alpha_ties
        self.max_iter = max_iter
        self.tol = tol
        self.confidence = confidence
        self.n_folds = n_folds
        self.n_init = n_init
        self.random_state = random_state

    def fit(
        self,
        triplets: ArrayLike | None = None,
        workers: ArrayLike | None = None,
        *,
        sides: ArrayLike | None = None,
        pairs: ArrayLike | None = None,
        pair_workers: ArrayLike | None = None,
        pair_sides: ArrayLike | None = None,
        n_objects: int | None = None,
    ) -> CrowdReliability:
        """Learn every participant's reliability and every answer's weight.

        Parameters
        ----------
        triplets : array-like of shape (n_triplets, 3), default=None
            Triplet answers ``(anchor, chosen, other)``.
        workers : array-like of shape (n_triplets,)
            The participant of each triplet answer (< 0: trusted, see above).
        sides : array-like of shape (n_triplets,), default=None
            The side the participant clicked, −1 left or 1 right; without it the random
            mode is a fair coin.
        pairs : array-like of shape (n_pairs, 3), default=None
            Pair answers ``(left, right, outcome)``, outcome −1 / 0 / 1.
        pair_workers : array-like of shape (n_pairs,)
        pair_sides : array-like of shape (n_pairs,), default=None
            −1 left, 0 "about the same", 1 right, as clicked; default: uniform random mode.
        n_objects : int, default=None
        """
        self._validate_params()
        T = check_triplets(np.empty((0, 3)) if triplets is None else triplets, n_objects)
        P = check_pairs(np.empty((0, 3)) if pairs is None else pairs, n_objects)
        if len(T) == 0 and len(P) == 0:
            raise ValueError("no answers: give triplets or pairs (with their participants)")
        wt = _check_workers(workers if len(T) else np.empty(0, int), len(T), "workers")
        wp = _check_workers(pair_workers if len(P) else np.empty(0, int), len(P), "pair_workers")
        st = _side_codes(sides, len(T), (-1, 1), "sides")
        sp = _side_codes(pair_sides, len(P), (-1, 0, 1), "pair_sides")
        seen = [int(T.max()) + 1 if len(T) else 0, int(P[:, :2].max()) + 1 if len(P) else 0]
        n = int(max(seen)) if n_objects is None else int(n_objects)
        ids = np.unique(np.concatenate([wt[wt >= 0], wp[wp >= 0]]))
        it = np.where(wt >= 0, np.searchsorted(ids, wt), -1)
        ip = np.where(wp >= 0, np.searchsorted(ids, wp), -1)
        n_workers = len(ids)
        a, b = float(self.prior_careful), float(self.prior_random)
        r = np.full(n_workers, a / (a + b))
        xi_t = np.full((n_workers, 2), 0.5)
        xi_p = np.full((n_workers, 3), 1.0 / 3.0)
        gamma_t, gamma_p = np.ones(len(T)), np.ones(len(P))
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(2**31 - 1))
        folds_t = rng.permutation(len(T)) % self.n_folds if self.n_folds > 1 else None
        folds_p = rng.permutation(len(P)) % self.n_folds if self.n_folds > 1 else None
        fits_t: dict[int, np.ndarray] = {}  # per fold (-1: every answer), the embedding
        fits_p: dict[int, np.ndarray] = {}  # per fold, Bradley–Terry–Davidson scores and tie

        def fit_triplets(rows: np.ndarray, key: int) -> None:
            previous = fits_t.get(key)
            model = TSTE(
                self.n_components, n_init=self.n_init if previous is None else 1, random_state=seed
            )
            fits_t[key] = model.fit(
                T[rows], n, sample_weight=np.maximum(gamma_t[rows], 1e-6), init=previous
            ).embedding_

        def fit_pairs(rows: np.ndarray, key: int) -> None:
            previous = fits_p.get(key)
            model = BradleyTerryDavidson(alpha=self.alpha_ties).fit(
                P[rows], n, sample_weight=np.maximum(gamma_p[rows], 1e-6),
                init=None if previous is None else previous[:n],
            )  # fmt: skip
            fits_p[key] = np.append(model.scores_, model.tie_)

        def careful_probabilities() -> tuple[np.ndarray, np.ndarray]:
            """Refit, and each answer's probability under the careful mode: cross-fitted
            (from the folds without it) when ``n_folds`` > 1."""
            careful_t, careful_p = np.empty(len(T)), np.empty(len(P))
            for key in range(self.n_folds) if self.n_folds > 1 else [-1]:
                if len(T):
                    held = folds_t == key if key >= 0 else np.ones(len(T), bool)
                    train = ~held if key >= 0 else held
                    fit_triplets(np.flatnonzero(train), key)
                    careful_t[held] = tste_probabilities(fits_t[key], T[held])
                if len(P):
                    held = folds_p == key if key >= 0 else np.ones(len(P), bool)
                    train = ~held if key >= 0 else held
                    fit_pairs(np.flatnonzero(train), key)
                    theta, nu = fits_p[key][:n], float(fits_p[key][n])
                    p = outcome_probabilities(theta, nu, P[held, 0], P[held, 1])
                    careful_p[held] = p[np.arange(int(held.sum())), P[held, 2] + 1]
            return careful_t, careful_p

        self.n_iter_ = 0
        for iteration in range(1, self.max_iter + 1):
            self.n_iter_ = iteration
            # E-step: posterior of "careful" for each answer (Dawid & Skene's E-step, with the
            # comparison model in place of the unknown truth), the model refit first with the
            # weights of the last M-step.
            careful_t, careful_p = careful_probabilities()
            random_t = xi_t[np.maximum(it, 0), st] if st is not None else np.full(len(T), 0.5)
            random_p = xi_p[np.maximum(ip, 0), sp] if sp is not None else np.full(len(P), 1 / 3)
            like_t = self._mixture(r, it, np.maximum(careful_t, _FLOOR), random_t)
            like_p = self._mixture(r, ip, np.maximum(careful_p, _FLOOR), random_p)
            gamma_t, gamma_p = like_t[0], like_p[0]
            self.log_likelihood_ = float(np.log(like_t[1]).sum() + np.log(like_p[1]).sum())
            # M-step: r_w and xi_w, MAP under Beta(a, b) and Dirichlet(side_prior).
            careful = np.bincount(it[it >= 0], gamma_t[it >= 0], n_workers) + np.bincount(
                ip[ip >= 0], gamma_p[ip >= 0], n_workers
            )
            answered = np.bincount(it[it >= 0], minlength=n_workers) + np.bincount(
                ip[ip >= 0], minlength=n_workers
            )
            new_r = (careful + a - 1.0) / np.maximum(answered + a + b - 2.0, 1e-12)
            new_r = np.clip(new_r, 1e-3, 1 - 1e-3)
            if st is not None:
                xi_t = self._sides(it, st, 1.0 - gamma_t, n_workers, 2)
            if sp is not None:
                xi_p = self._sides(ip, sp, 1.0 - gamma_p, n_workers, 3)
            moved = float(np.max(np.abs(new_r - r))) if n_workers else 0.0
            r = new_r
            if moved < self.tol:
                break

        shape_a, shape_b = a + careful, b + (answered - careful)
        tail = (1.0 - self.confidence) / 2.0
        self.workers_ = ids
        self.reliability_ = shape_a / (shape_a + shape_b)
        self.reliability_interval_ = np.column_stack(
            [beta_distribution.ppf(tail, shape_a, shape_b),
             beta_distribution.ppf(1.0 - tail, shape_a, shape_b)]
        )  # fmt: skip
        self.n_answers_ = answered
        bias = np.zeros(n_workers)
        if st is not None:
            bias = np.maximum(bias, xi_t.max(axis=1))
        if sp is not None:
            bias = np.maximum(bias, xi_p.max(axis=1))
        self.side_bias_ = bias
        self.careful_share_ = r
        self.triplet_weight_, self.pair_weight_ = gamma_t, gamma_p
        # The comparison models of every answer, with the final weights.
        if len(T):
            fit_triplets(np.arange(len(T)), -1)
        if len(P):
            fit_pairs(np.arange(len(P)), -1)
        self.embedding_ = fits_t[-1] if len(T) else None
        self.scores_ = fits_p[-1][:n] if len(P) else None
        self.tie_ = float(fits_p[-1][n]) if len(P) else None
        self.n_objects_ = n
        return self

    @staticmethod
    def _mixture(
        r: np.ndarray, index: np.ndarray, careful: np.ndarray, random: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Each answer's posterior of "careful" and its likelihood under the mixture."""
        share = np.where(index >= 0, r[np.maximum(index, 0)] if len(r) else 1.0, 1.0)
        joint = share * careful
        total = joint + (1.0 - share) * random
        return joint / total, total

    def _sides(
        self, index: np.ndarray, codes: np.ndarray, weight: np.ndarray, n_workers: int, k: int
    ) -> np.ndarray:
        """ξ_w: the random mode's share of each side, from the answers' random weights."""
        counts = np.zeros((n_workers, k))
        known = index >= 0
        np.add.at(counts, (index[known], codes[known]), weight[known])
        counts += self.side_prior
        return counts / counts.sum(axis=1, keepdims=True)

    def reliability_of(self, workers: ArrayLike) -> np.ndarray:
        """The reliability of each id in ``workers`` (NaN for an id not seen in ``fit``)."""
        check_is_fitted(self, "reliability_")
        ids = np.asarray(workers, dtype=np.int64)
        position = np.searchsorted(self.workers_, ids)
        position = np.minimum(position, max(len(self.workers_) - 1, 0))
        found = len(self.workers_) > 0
        known = found & (self.workers_[position] == ids) if found else np.zeros(len(ids), bool)
        return np.where(known, self.reliability_[position] if found else np.nan, np.nan)

"""Comparison-based random forests (CompRF) for classification and regression.

A forest of comparison trees (:mod:`app.learning.comparison_tree`) built by
asking an oracle triplet questions, following Haghiri, Garreau & von Luxburg
(2018). The oracle is any callable ``oracle(anchors, b, c)`` taking three
equal-length integer arrays and returning a boolean array, True where
d(anchor, b) < d(anchor, c) -- for example the one from
``app.learning.triplets.make_oracle``.
"""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from app.learning.comparison_tree import (
    ComparisonTreeBuilder,
    ComparisonTreeRouter,
    Oracle,
    _segment_positions,
    drive,
)

__all__ = ["ComparisonForestClassifier", "ComparisonForestRegressor"]


_BATCH = 250_000  # slots (objects x trees) per batch of trees driven together


def _batches(sizes: list[int]) -> list[slice]:
    """Consecutive groups of trees holding about ``_BATCH`` slots each."""
    groups, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        if total and total + size > _BATCH:
            groups.append(slice(start, i))
            start, total = i, 0
        total += size
    groups.append(slice(start, len(sizes)))
    return groups


def _build_trees(
    oracle: Oracle,
    samples: list[np.ndarray],
    labels: np.ndarray | None,
    seeds: list[int],
    params: dict[str, Any],
) -> list[ComparisonTreeBuilder]:
    """Build one chunk of trees (Alg. 2, lines 3-4), driven to completion by the oracle.

    Trees go in batches: each level of a batch of trees is one oracle call and
    one round of vectorised bookkeeping. Each tree is the one
    ``ComparisonTreeBuilder(sample, labels[sample], seed=seed, **params)`` builds.
    """
    trees: list[ComparisonTreeBuilder] = []
    for group in _batches([len(s) for s in samples]):
        chunk = samples[group]
        batch = ComparisonTreeBuilder._batch(
            chunk, None if labels is None else [labels[s] for s in chunk], seeds[group], **params
        )
        drive(batch, oracle)
        trees.extend(batch._unbatch())
    return trees


def _route(
    oracle: Oracle, trees: list[ComparisonTreeBuilder], objects: np.ndarray, redundancy: int
) -> tuple[list[np.ndarray], int, int]:
    """Route ``objects`` down each tree (Alg. 2, line 5); leaf per object, questions, asks."""
    leaves: list[np.ndarray] = []
    n_queries = n_asks = 0
    for group in _batches([len(objects)] * len(trees)):
        router, offsets = ComparisonTreeRouter._batch(trees[group], objects, redundancy)
        drive(router, oracle)
        leaves.extend(router.node.reshape(len(offsets), -1) - offsets[:, None])
        n_queries += router.n_queries_
        n_asks += router.n_asks_
    return leaves, n_queries, n_asks


def _chunks(items: list[Any], n_jobs: int) -> list[list[Any]]:
    n = min(n_jobs, len(items))
    bounds = np.linspace(0, len(items), n + 1).astype(int)
    return [items[bounds[i] : bounds[i + 1]] for i in range(n)]


class _BaseComparisonForest(BaseEstimator):
    """Shared fitting and routing of CompRF forests (Algorithm 2 of [1]_)."""

    _parameter_constraints: dict = {
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        "leaf_size": [Interval(Integral, 1, None, closed="left")],
        "subsample": [Interval(Real, 0, 1, closed="right")],
        "redundancy": [Interval(Integral, 1, None, closed="left")],
        "n_jobs": [Integral, None],
        "random_state": ["random_state"],
    }

    def _fit_trees(
        self, oracle: Oracle, labelled: np.ndarray, codes: np.ndarray | None, params: dict
    ) -> None:
        if not callable(oracle):
            raise TypeError(f"oracle must be callable as oracle(anchors, b, c), got {oracle!r}")
        rs = check_random_state(self.random_state)
        seeds = [int(s) for s in rs.randint(np.iinfo(np.int64).max, size=self.n_estimators)]
        size = max(1, round(self.subsample * len(labelled)))
        samples = [
            labelled
            if size == len(labelled)
            else np.sort(np.random.default_rng([seed, 1]).choice(labelled, size, replace=False))
            for seed in seeds
        ]
        n_jobs = effective_n_jobs(self.n_jobs)
        params = {"leaf_size": self.leaf_size, "redundancy": self.redundancy, **params}
        jobs = zip(_chunks(samples, n_jobs), _chunks(seeds, n_jobs), strict=True)
        chunks = Parallel(n_jobs=n_jobs)(
            delayed(_build_trees)(oracle, s, codes, k, params) for s, k in jobs
        )
        self.estimators_ = [tree for chunk in chunks for tree in chunk]
        self.n_queries_ = sum(t.n_queries_ for t in self.estimators_)
        self.n_asks_ = sum(t.n_asks_ for t in self.estimators_)

    def _leaf_items(
        self, oracle: Oracle, objects: ArrayLike
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Pooled leaf items C (Alg. 2, lines 5-6) of the distinct requested objects.

        Returns (row, item, weight, inverse): training object ``item`` is in C of
        distinct object ``row`` with vote ``weight`` (1 but in unsplit pure leaves);
        ``inverse`` maps the requested objects to distinct rows.
        """
        check_is_fitted(self)
        if not callable(oracle):
            raise TypeError(f"oracle must be callable as oracle(anchors, b, c), got {oracle!r}")
        objects = np.asarray(objects)
        if objects.ndim != 1 or (objects.size and objects.dtype.kind not in "iu"):
            raise ValueError(
                f"objects must be a 1-D array of integer object indices, got shape "
                f"{objects.shape} and dtype {objects.dtype}"
            )
        if objects.size and objects.min() < 0:
            raise ValueError("objects must be non-negative object indices")
        unique, inverse = np.unique(objects.astype(np.int64), return_inverse=True)
        n_jobs = effective_n_jobs(self.n_jobs)
        results = Parallel(n_jobs=n_jobs, prefer="threads")(
            delayed(_route)(oracle, trees, unique, self.redundancy)
            for trees in _chunks(self.estimators_, n_jobs)
        )
        self.n_predict_queries_ = sum(r[1] for r in results)
        self.n_predict_asks_ = sum(r[2] for r in results)
        rows, items, weights = [], [], []
        leaves = [leaf for r in results for leaf in r[0]]
        for tree, leaf in zip(self.estimators_, leaves, strict=True):
            sizes = tree.end[leaf] - tree.start[leaf]
            pos, seg = _segment_positions(tree.start[leaf], tree.end[leaf])
            rows.append(seg)
            items.append(tree.order[pos])
            # a leaf larger than leaf_size is a pure node left unsplit (split_pure=False):
            # it votes as the leaf of at most leaf_size items it stands for
            weights.append((np.minimum(sizes, self.leaf_size) / np.maximum(sizes, 1))[seg])
        return np.concatenate(rows), np.concatenate(items), np.concatenate(weights), inverse


class ComparisonForestClassifier(ClassifierMixin, _BaseComparisonForest):
    """Comparison-based random forest classifier (CompRF, Algorithm 2 of [1]_).

    Builds ``n_estimators`` supervised comparison trees (Algorithm 1) on the
    labelled objects by asking an oracle "is x closer to pivot p1 or to p2?", then
    classifies an object by routing it down every tree with the same questions
    and taking the majority label of the pooled leaf items.

    Parameters
    ----------
    n_estimators : int, default=100
        Number of trees M.
    leaf_size : int, default=1
        Maximum leaf size n0 (the paper's best value for classification).
    supervised : bool, default=True
        Pivots with different labels (Alg. 1, line 3); False draws them
        uniformly ("unsupervised CompRF" of §4.1).
    subsample : float, default=1.0
        Fraction r of the labelled objects each tree is built on, drawn without
        replacement (Alg. 2, line 3); the paper's experiments use 1.0.
    redundancy : int, default=1
        Each question is asked this many times and the majority answer taken;
        a tie asks again.
    split_pure : bool, default=True
        Split nodes whose objects share one label, as the paper does. False
        makes them leaves and saves their questions. Not in the paper: such a
        leaf of k > n0 items votes with weight n0 / k per item, as the leaf of
        at most n0 items the full split would reach; for n0 = 1 the forest then
        predicts exactly as with ``split_pure=True`` (noise-free oracle).
    n_jobs : int, default=None
        Trees are built (joblib processes) and routed (joblib threads) in
        parallel; None means 1, -1 all cores. The oracle must pickle
        (cloudpickle) for ``n_jobs > 1``; a noisy oracle's generator is then
        copied into each worker.
    random_state : int, RandomState instance or None, default=None
        Seeds of the trees and subsamples.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    n_objects_ : int
        Length of ``y`` in :meth:`fit`.
    estimators_ : list of ComparisonTreeBuilder
        The complete trees.
    n_queries_ : int
        Distinct questions asked while fitting, summed over trees (a question
        that recurs in two trees counts twice: each tree asks it).
    n_asks_ : int
        Oracle calls per question summed, repeats of ``redundancy`` included.
    n_predict_queries_, n_predict_asks_ : int
        The same for the last :meth:`predict` / :meth:`predict_proba` call.

    Notes
    -----
    ==========  ======================
    paper [1]_  here
    ==========  ======================
    M           ``n_estimators``
    n0          ``leaf_size``
    r           ``subsample``
    C           pooled leaf items
    ==========  ======================

    The pooled set C is a multiset: an item in the leaves of k trees votes k
    times. For several classes the paper votes one-vs-one over C; the pairwise
    majorities of label counts are won by the most frequent label, so this is
    the plurality of C (ties go to the first class in ``classes_``).
    ``predict_proba`` is the label frequencies in C.

    References
    ----------
    .. [1] Haghiri, Garreau & von Luxburg (2018). Comparison-based random
       forests. ICML.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.r_[np.zeros((20, 2)), np.ones((20, 2))] + np.random.default_rng(0).normal(
    ...     scale=0.1, size=(40, 2))
    >>> oracle = lambda a, b, c: (((X[a] - X[b]) ** 2).sum(1) < ((X[a] - X[c]) ** 2).sum(1))
    >>> y = np.r_[np.zeros(20, int), np.ones(20, int)]
    >>> y_train = y.copy(); y_train[::4] = -1
    >>> clf = ComparisonForestClassifier(n_estimators=10, random_state=0).fit(oracle, y_train)
    >>> bool((clf.predict(oracle, np.arange(0, 40, 4)) == y[::4]).all())
    True
    """

    _parameter_constraints: dict = {
        **_BaseComparisonForest._parameter_constraints,
        "supervised": ["boolean"],
        "split_pure": ["boolean"],
    }

    def __init__(
        self,
        n_estimators: int = 100,
        leaf_size: int = 1,
        supervised: bool = True,
        subsample: float = 1.0,
        redundancy: int = 1,
        split_pure: bool = True,
        n_jobs: int | None = None,
        random_state: Any = None,
    ) -> None:
        self.n_estimators = n_estimators
        self.leaf_size = leaf_size
        self.supervised = supervised
        self.subsample = subsample
        self.redundancy = redundancy
        self.split_pure = split_pure
        self.n_jobs = n_jobs
        self.random_state = random_state

    def fit(self, oracle: Oracle, y: ArrayLike) -> ComparisonForestClassifier:
        """Build the forest on the labelled objects by asking ``oracle``.

        Parameters
        ----------
        oracle : callable
            ``oracle(anchors, b, c)`` -> bool array, True where d(a, b) < d(a, c).
        y : array-like of shape (n_objects,)
            Label of object i; ``-1`` or ``None`` marks an unlabelled object
            (the convention of ``TripletBoost``). Unlabelled objects take no
            part in the trees.

        Returns
        -------
        self : ComparisonForestClassifier
        """
        self._validate_params()
        y = np.asarray(y, dtype=object if _has_none(y) else None)
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D, got shape {y.shape}")
        missing = np.array([v is None or (isinstance(v, float) and np.isnan(v)) for v in y])
        with np.errstate(invalid="ignore"):
            missing |= np.array([_is_minus_one(v) for v in y], dtype=bool)
        labelled = np.flatnonzero(~missing) if y.size else np.zeros(0, dtype=np.intp)
        try:
            self.classes_, codes = np.unique(y[labelled], return_inverse=True)
        except TypeError as error:
            raise ValueError(f"labels in y must be mutually comparable: {error}") from error
        if len(self.classes_) < 2:
            raise ValueError(
                f"y must hold labelled objects of at least two classes, got "
                f"{len(self.classes_)} class(es) among {len(labelled)} labelled objects"
            )
        self.n_objects_ = len(y)
        self._codes = np.full(len(y), -1, dtype=np.int64)
        self._codes[labelled] = codes
        params = {"supervised": self.supervised, "split_pure": self.split_pure}
        self._fit_trees(oracle, labelled, self._codes, params)
        return self

    def predict_proba(self, oracle: Oracle, objects: ArrayLike) -> np.ndarray:
        """Label frequencies among the pooled leaf items of each object (Alg. 2).

        Parameters
        ----------
        oracle : callable
            As in :meth:`fit`; answers the routing questions.
        objects : array-like of int, shape (k,)
            Objects to classify (any index the oracle knows).

        Returns
        -------
        proba : ndarray of shape (k, n_classes)
        """
        row, item, weight, inverse = self._leaf_items(oracle, objects)
        k, n_classes = int(inverse.max(initial=-1)) + 1, len(self.classes_)
        cell = row * n_classes + self._codes[item]
        counts = np.bincount(cell, weights=weight, minlength=k * n_classes).reshape(k, n_classes)
        return (counts / np.maximum(counts.sum(axis=1, keepdims=True), 1))[inverse]

    def predict(self, oracle: Oracle, objects: ArrayLike) -> np.ndarray:
        """Majority label of the pooled leaf items (Alg. 2, line 8); shape (k,)."""
        proba = self.predict_proba(oracle, objects)
        return self.classes_[np.argmax(proba, axis=1)]

    def score(self, oracle: Oracle, objects: ArrayLike, y: ArrayLike) -> float:  # type: ignore[override]
        """Accuracy of :meth:`predict` on ``objects`` with true labels ``y``."""
        return float(np.mean(self.predict(oracle, objects) == np.asarray(y)))


class ComparisonForestRegressor(RegressorMixin, _BaseComparisonForest):
    """Comparison-based random forest regressor (unsupervised CompRF, §2 of [1]_).

    Pivots are drawn without looking at the targets ("it is not obvious how the
    pivot selection should depend on the output values", §2); the prediction is
    the mean target of the pooled leaf items of all trees.

    Parameters
    ----------
    n_estimators : int, default=100
        Number of trees M.
    leaf_size : int, default=5
        Maximum leaf size n0. The paper's rule of thumb for regression forests
        is n0 = 5 (§2); its cross-validation picks 1 on Boston and larger values
        elsewhere (§4.1.2).
    subsample : float, default=1.0
        Fraction r of the labelled objects per tree (Alg. 2, line 3).
    redundancy : int, default=1
        Asks per question, majority taken; ties ask again.
    n_jobs : int, default=None
        As in :class:`ComparisonForestClassifier`.
    random_state : int, RandomState instance or None, default=None

    Attributes
    ----------
    n_objects_ : int
    estimators_ : list of ComparisonTreeBuilder
    n_queries_, n_asks_, n_predict_queries_, n_predict_asks_ : int
        As in :class:`ComparisonForestClassifier`.

    References
    ----------
    .. [1] Haghiri, Garreau & von Luxburg (2018). Comparison-based random
       forests. ICML.
    """

    def __init__(
        self,
        n_estimators: int = 100,
        leaf_size: int = 5,
        subsample: float = 1.0,
        redundancy: int = 1,
        n_jobs: int | None = None,
        random_state: Any = None,
    ) -> None:
        self.n_estimators = n_estimators
        self.leaf_size = leaf_size
        self.subsample = subsample
        self.redundancy = redundancy
        self.n_jobs = n_jobs
        self.random_state = random_state

    def fit(self, oracle: Oracle, y: ArrayLike) -> ComparisonForestRegressor:
        """Build the forest on the objects with a finite target.

        Parameters
        ----------
        oracle : callable
            ``oracle(anchors, b, c)`` -> bool array, True where d(a, b) < d(a, c).
        y : array-like of float, shape (n_objects,)
            Target of object i; ``NaN`` marks an unlabelled object.

        Returns
        -------
        self : ComparisonForestRegressor
        """
        self._validate_params()
        try:
            y = np.asarray(y, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise ValueError(f"y must hold numbers (NaN for unlabelled): {error}") from error
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D, got shape {y.shape}")
        if np.any(np.isinf(y)):
            raise ValueError("y holds an infinite target; use NaN for unlabelled objects")
        labelled = np.flatnonzero(~np.isnan(y))
        if len(labelled) == 0:
            raise ValueError("y holds no labelled object (all NaN)")
        self.n_objects_ = len(y)
        self._y = y
        self._fit_trees(oracle, labelled, None, {"supervised": False, "split_pure": True})
        return self

    def predict(self, oracle: Oracle, objects: ArrayLike) -> np.ndarray:
        """Mean target of the pooled leaf items (Alg. 2 with the mean, §2); shape (k,)."""
        row, item, _, inverse = self._leaf_items(oracle, objects)
        k = int(inverse.max(initial=-1)) + 1
        total = np.bincount(row, weights=self._y[item], minlength=k)
        return (total / np.maximum(np.bincount(row, minlength=k), 1))[inverse]

    def score(self, oracle: Oracle, objects: ArrayLike, y: ArrayLike) -> float:  # type: ignore[override]
        """R² of :meth:`predict` on ``objects`` with true targets ``y``."""
        from sklearn.metrics import r2_score

        return float(r2_score(np.asarray(y, dtype=float), self.predict(oracle, objects)))


def _has_none(y: ArrayLike) -> bool:
    return any(v is None for v in np.asarray(y, dtype=object).ravel())


def _is_minus_one(value: Any) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and value == -1

"""Shared machinery of the ordinal embeddings in :mod:`app.learning.embedding`.

The base estimator (validation, L-BFGS-B restarts, progress, scoring), the
vectorised gradient scatter, and two helpers the service uses on any
embedding: held-out triplet accuracy and k-NN labels.
"""

from __future__ import annotations

from collections.abc import Callable
from numbers import Integral, Real
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import OptimizeResult, minimize
from sklearn.base import BaseEstimator
from sklearn.neighbors import KNeighborsClassifier
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted
from threadpoolctl import threadpool_limits  # a dependency of scikit-learn

from app.learning._shape_likelihood import _ChoiceIndex
from app.learning.shape_answers import answer_triplets, check_answers
from app.learning.triplets import check_sample_weight, check_triplets

__all__ = ["ProgressCallback", "embedding_knn_predict", "triplet_accuracy"]

ProgressCallback = Callable[[int, int, float], None]
"""``callback(iterations_done, iterations_total, loss)``, see ``fit``."""

_DENSE_MAX_OBJECTS = 2000  # a few n x n float temporaries of at most 32 MB each
_EPS = 1e-12  # floor for distances and probabilities before division or log


def triplet_accuracy(embedding: ArrayLike, triplets: ArrayLike) -> float:
    """Fraction of triplets an embedding satisfies.

    A triplet ``(a, b, c)`` is satisfied when ``||x_a - x_b|| < ||x_a - x_c||``
    strictly; a tie counts as a miss.

    Parameters
    ----------
    embedding : array-like of shape (n_objects, n_components)
    triplets : array-like of shape (n_triplets, 3)

    Returns
    -------
    accuracy : float in [0, 1]
    """
    X = np.asarray(embedding, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"embedding must be 2-D (n_objects, n_components), got shape {X.shape}")
    T = check_triplets(triplets, X.shape[0])
    if len(T) == 0:
        raise ValueError("triplets is empty: cannot score an embedding on no triplets")
    _, _, sq_near, sq_far = _differences(X, T)
    return float(np.mean(sq_near < sq_far))


def embedding_knn_predict(
    embedding: ArrayLike,
    labelled_idx: ArrayLike,
    labels: ArrayLike,
    query_idx: ArrayLike,
    k: int = 1,
) -> np.ndarray:
    """Label objects by a k-nearest-neighbour vote in an embedding.

    Parameters
    ----------
    embedding : array-like of shape (n_objects, n_components)
    labelled_idx : array-like of shape (n_labelled,)
        Indices of the objects whose label is known.
    labels : array-like of shape (n_labelled,)
        Their labels, any type scikit-learn accepts as class labels.
    query_idx : array-like of shape (n_queries,)
        Indices of the objects to label.
    k : int, default=1
        Number of neighbours; at most ``n_labelled``. Ties go to the
        nearest neighbours' order as in
        :class:`sklearn.neighbors.KNeighborsClassifier`.

    Returns
    -------
    predicted : ndarray of shape (n_queries,)
    """
    X = np.asarray(embedding, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"embedding must be 2-D (n_objects, n_components), got shape {X.shape}")
    labelled = _check_indices(labelled_idx, X.shape[0], "labelled_idx")
    queries = _check_indices(query_idx, X.shape[0], "query_idx")
    y = np.asarray(labels)
    if y.shape != labelled.shape:
        raise ValueError(
            f"labels must have one entry per labelled object: got {y.shape[0] if y.ndim else 0} "
            f"labels for {len(labelled)} objects"
        )
    if len(labelled) == 0:
        raise ValueError("labelled_idx is empty: need at least one labelled object")
    if isinstance(k, bool) or not isinstance(k, Integral) or not 1 <= k <= len(labelled):
        raise ValueError(
            f"k must be an integer in [1, {len(labelled)}] (the labelled objects), got {k}"
        )
    if len(queries) == 0:
        return y[:0].copy()
    knn = KNeighborsClassifier(n_neighbors=int(k)).fit(X[labelled], y)
    return knn.predict(X[queries])


def _check_indices(indices: ArrayLike, n_objects: int, name: str) -> np.ndarray:
    array = np.asarray(indices)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise ValueError(f"{name} must be a 1-D array of integer object indices")
    array = array.astype(np.intp)
    if array.size and (array.min() < 0 or array.max() >= n_objects):
        raise ValueError(f"{name} holds an index out of range for {n_objects} objects")
    return array


def _differences(
    X: np.ndarray, T: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per triplet: x_a - x_b, x_a - x_c and their squared norms."""
    diff_near = X[T[:, 0]] - X[T[:, 1]]
    diff_far = X[T[:, 0]] - X[T[:, 2]]
    sq_near = np.einsum("ij,ij->i", diff_near, diff_near)
    sq_far = np.einsum("ij,ij->i", diff_far, diff_far)
    return diff_near, diff_far, sq_near, sq_far


def _scatter_gradient(
    shape: tuple[int, int],
    T: np.ndarray,
    diff_near: np.ndarray,
    diff_far: np.ndarray,
    g_near: np.ndarray,
    g_far: np.ndarray,
) -> np.ndarray:
    """Gradient w.r.t. X of sum_t l_t, given g = dl_t/d(squared distance).

    d||x_a - x_b||^2 / dx_a = 2 (x_a - x_b) = -d/dx_b, so triplet t adds
    2 (g_near u + g_far v) to row a, -2 g_near u to row b and -2 g_far v to
    row c, with u = x_a - x_b and v = x_a - x_c. One bincount scatters all.
    """
    n, d = shape
    u = (2.0 * g_near)[:, None] * diff_near
    v = (2.0 * g_far)[:, None] * diff_far
    rows = np.concatenate([T[:, 0], T[:, 1], T[:, 2]])
    values = np.concatenate([u + v, -u, -v])
    flat = (rows[:, None] * d + np.arange(d)).ravel()
    return np.bincount(flat, weights=values.ravel(), minlength=n * d).reshape(n, d)


class _TripletIndex:
    """Triplets prepared for repeated loss and gradient evaluations.

    Two equivalent paths. Dense, when the n x n matrices cost less than the
    per-triplet ones (``n^2 <= 8 m``) and fit in memory: squared distances
    from the Gram matrix of the centred embedding, and the gradient as
    ``2 L X`` with L the Laplacian of the n x n matrix of summed per-pair
    derivatives (two bincounts of m entries). Otherwise per-triplet
    differences and one bincount of 3 m d entries. ``gradient`` must follow
    ``squared_distances`` of the same X.
    """

    def __init__(
        self,
        T: np.ndarray,
        n: int,
        dense: bool | None = None,
        weight: np.ndarray | None = None,
    ) -> None:
        self.T = T
        self.n = n
        # Each triplet's share of the mean loss: 1/m, or its weight over the weights' sum.
        self.share = (
            np.full(len(T), 1.0 / max(len(T), 1)) if weight is None else weight / weight.sum()
        )
        self.dense = (n * n <= 8 * len(T) and n <= _DENSE_MAX_OBJECTS) if dense is None else dense
        if self.dense:
            self.near = T[:, 0] * n + T[:, 1]
            self.far = T[:, 0] * n + T[:, 2]
        self._diffs: tuple[np.ndarray, np.ndarray] | None = None

    def squared_distances(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.dense:
            Xc = X - X.mean(axis=0)
            gram = Xc @ Xc.T
            norms = np.diag(gram).copy()
            sq = np.maximum(norms[:, None] + norms[None, :] - 2.0 * gram, 0.0).ravel()
            return sq[self.near], sq[self.far]
        diff_near, diff_far, sq_near, sq_far = _differences(X, self.T)
        self._diffs = (diff_near, diff_far)
        return sq_near, sq_far

    def gradient(self, X: np.ndarray, g_near: np.ndarray, g_far: np.ndarray) -> np.ndarray:
        n = self.n
        if self.dense:
            W = np.bincount(self.near, weights=g_near, minlength=n * n)
            W += np.bincount(self.far, weights=g_far, minlength=n * n)
            W = W.reshape(n, n)
            S = W + W.T
            return 2.0 * (S.sum(axis=1)[:, None] * X - S @ X)
        assert self._diffs is not None
        return _scatter_gradient(X.shape, self.T, *self._diffs, g_near, g_far)


class _OrdinalEmbedding(BaseEstimator):
    """Shared fit / score machinery; subclasses define ``_loss_terms``."""

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_init": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    # "distance" (logits from squared distances) or "dot" when the estimator has shape
    # likelihoods (see fit_answers); None when it has only its triplet loss.
    _shape_similarity: ClassVar[str | None] = None

    def _loss_terms(
        self, sq_near: np.ndarray, sq_far: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-triplet loss and its derivatives w.r.t. both squared distances."""
        raise NotImplementedError

    def _penalty(self, X: np.ndarray) -> tuple[float, np.ndarray]:
        """Regulariser added to the mean triplet loss, and its gradient."""
        return 0.0, np.zeros_like(X)

    def _objective(self, x: np.ndarray, shape: tuple[int, int], index: _TripletIndex) -> tuple:
        X = x.reshape(shape)
        sq_near, sq_far = index.squared_distances(X)
        loss, g_near, g_far = self._loss_terms(sq_near, sq_far)
        # The (weighted) mean of the per-triplet losses; unweighted, share = 1/m.
        share = index.share
        grad = index.gradient(X, g_near * share, g_far * share)
        penalty, penalty_grad = self._penalty(X)
        return float(loss @ share) + penalty, (grad + penalty_grad).ravel()

    def _embed(self, x: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        """Map the optimised variables to the embedding (identity by default)."""
        return x.reshape(shape).copy()

    def fit(
        self,
        triplets: ArrayLike,
        n_objects: int | None = None,
        *,
        sample_weight: ArrayLike | None = None,
        init: ArrayLike | None = None,
        callback: ProgressCallback | None = None,
    ) -> _OrdinalEmbedding:
        """Embed the objects from triplets.

        Parameters
        ----------
        triplets : array-like of shape (n_triplets, 3)
            Rows ``(anchor, near, far)`` meaning d(anchor, near) < d(anchor, far).
        n_objects : int, default=None
            Number of objects; defaults to the largest index in ``triplets``
            plus one. Objects in no triplet are placed where the random
            initialisation put them (CKL, SOE, t-STE) or pulled to the origin
            by the regulariser (GNMDS).
        sample_weight : array-like of shape (n_triplets,), default=None
            How much each triplet counts: the loss is the weighted mean of the
            per-triplet losses (None: every triplet counts once). Weights are
            relative; a weight of 0 leaves the triplet out.
        init : array-like of shape (n_objects, n_components), default=None
            Start of the first restart (a warm start, e.g. the previous fit of
            an EM loop or of an adaptive refit); the other ``n_init - 1``
            restarts start at random as without it.
        callback : callable, default=None
            ``callback(iterations_done, iterations_total, loss)`` after every
            L-BFGS-B iteration, for progress bars of background jobs.
            ``iterations_total = n_init * max_iter`` is an upper bound: a
            restart that converges early jumps ``iterations_done`` to the end
            of its share. Raising :class:`StopIteration` stops the fit early
            (no further restarts; the best embedding so far is kept, e.g. for
            a job cancelled politely); any other exception propagates out of
            ``fit``.

        Returns
        -------
        self : object
            The fitted estimator.

        Notes
        -----
        BLAS runs single-threaded during ``fit`` (restored afterwards):
        L-BFGS-B's many tiny BLAS calls are far slower with threads on a
        loaded machine. Run several fits in parallel processes instead.
        """
        self._validate_params()
        _check_n_objects(n_objects)
        T = check_triplets(triplets, n_objects)
        if len(T) == 0:
            raise ValueError("triplets is empty: need at least one triplet to fit an embedding")
        n = int(T.max()) + 1 if n_objects is None else int(n_objects)
        shape = (n, self.n_components)
        weight = check_sample_weight(sample_weight, len(T))
        start = _check_init(init, shape)
        index = _TripletIndex(T, n, weight=weight)
        self._minimise(self._objective, index, shape, start, callback)
        self.likelihood_ = "triplets"
        return self

    def fit_answers(
        self,
        answers: Any,
        n_objects: int | None = None,
        *,
        likelihood: str = "auto",
        sample_weight: ArrayLike | None = None,
        init: ArrayLike | None = None,
        callback: ProgressCallback | None = None,
    ) -> _OrdinalEmbedding:
        """Embed the objects from answers of any triplet-like shape.

        Parameters
        ----------
        answers : sequence of (shape, objects, choice), or mapping {shape: rows}
            Triplet, odd-one-out and ranked-grid answers in a form
            :func:`app.learning.shape_answers.check_answers` accepts.
        n_objects : int, default=None
            As in ``fit``.
        likelihood : {"auto", "shape", "triplets"}, default="auto"
            ``"triplets"``: fit the triplets the answers imply
            (:func:`app.learning.shapes.implied_triplets`) with the estimator's
            triplet loss, each weighted by its answer's weight. ``"shape"``: each
            answer's own likelihood, the softmax choices of
            :mod:`app.learning._shape_likelihood` (odd-one-out as in SPoSE, Zheng et al.
            2019; ranked grids by Plackett–Luce as in psiz, Roads & Mozer 2019); only
            estimators with a similarity kernel have one (:class:`TSTE`,
            :class:`~app.learning.spose.SPoSE`). ``"auto"``: the shape's own likelihood
            when every answer has the same odd-one-out or rank shape and the estimator
            has one, else the implied triplets.
        sample_weight : array-like of shape (n_answers,), default=None
            One weight per answer, in the order of ``answers``.
        init, callback
            As in ``fit``.

        Returns
        -------
        self : object
            The fitted estimator; ``likelihood_`` says which likelihood was used.
        """
        self._validate_params()
        if likelihood not in ("auto", "shape", "triplets"):
            raise ValueError(
                f"likelihood must be 'auto', 'shape' or 'triplets', got {likelihood!r}"
            )
        _check_n_objects(n_objects)
        groups = check_answers(answers, n_objects)
        n_answers = sum(len(g.rows) for g in groups)
        weight = check_sample_weight(sample_weight, n_answers)
        n = max(int(g.rows.max()) for g in groups) + 1 if n_objects is None else int(n_objects)
        has_own = self._shape_similarity is not None
        if likelihood == "shape" and not has_own:
            raise ValueError(
                f"{type(self).__name__} has no shape likelihood (TSTE and SPoSE have one); "
                "use likelihood='triplets'"
            )
        own = likelihood == "shape" or (
            likelihood == "auto"
            and has_own
            and len(groups) == 1
            and groups[0].shape.type != "triplet"
        )
        if own:
            shape = (n, self.n_components)
            index = _ChoiceIndex(groups, n, str(self._shape_similarity), weight)
            self._minimise(self._shape_objective, index, shape, _check_init(init, shape), callback)
            self.likelihood_ = "shape"
            return self
        triplets, owner = answer_triplets(groups)
        self._fit_triplets(triplets, n, None if weight is None else weight[owner], init, callback)
        self.likelihood_ = "triplets"
        return self

    def _fit_triplets(
        self,
        triplets: np.ndarray,
        n: int,
        weight: np.ndarray | None,
        init: ArrayLike | None,
        callback: ProgressCallback | None,
    ) -> None:
        """Fit implied triplets with the estimator's triplet likelihood."""
        self.fit(triplets, n, sample_weight=weight, init=init, callback=callback)

    def _log_kernel(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Log-similarity of pairs from ``v`` (see ``_shape_similarity``), and d/dv."""
        raise NotImplementedError

    def _shape_objective(
        self, x: np.ndarray, shape: tuple[int, int], index: _ChoiceIndex
    ) -> tuple[float, np.ndarray]:
        X = x.reshape(shape)
        loss, grad = index.loss(X, self._log_kernel)
        penalty, penalty_grad = self._penalty(X)
        return loss + penalty, (grad + penalty_grad).ravel()

    def _start(self, rng: np.random.RandomState, size: int) -> np.ndarray:
        """A random start of the optimised variables."""
        return rng.standard_normal(size)

    def _bounds(self, size: int) -> list[tuple[float | None, float | None]] | None:
        """Bounds of the optimised variables for L-BFGS-B (None: unbounded)."""
        return None

    def _minimise(
        self,
        objective: Callable[..., tuple],
        index: Any,
        shape: tuple[int, int],
        start: np.ndarray | None,
        callback: ProgressCallback | None,
    ) -> _OrdinalEmbedding:
        """The ``n_init`` L-BFGS-B restarts of ``objective(x, shape, index)``; keeps the best."""
        n = shape[0]
        rng = check_random_state(self.random_state)
        total = self.n_init * self.max_iter
        progress = _Progress(callback, total)
        best: OptimizeResult | None = None
        for restart in range(self.n_init):
            x0 = self._start(rng, n * self.n_components)
            if restart == 0 and start is not None:
                x0 = start.ravel().copy()
            progress.done = restart * self.max_iter
            # L-BFGS-B makes many tiny BLAS calls; with BLAS threads on a busy
            # machine they ran 15x slower in bench/embedding.py. Parallelise
            # across processes (jobs) instead.
            with threadpool_limits(limits=1, user_api="blas"):
                result = minimize(
                    objective,
                    x0,
                    args=(shape, index),
                    jac=True,
                    method="L-BFGS-B",
                    bounds=self._bounds(x0.size),
                    tol=self.tol,
                    options={"maxiter": self.max_iter},
                    callback=progress if callback is not None else None,
                )
            if best is None or result.fun < best.fun:
                best = result
            if progress.stopped:
                break
            progress.report((restart + 1) * self.max_iter, float(result.fun))
            if progress.stopped:
                break
        assert best is not None
        self.embedding_ = self._embed(best.x, shape)
        self.loss_ = float(best.fun)
        self.n_iter_ = int(best.nit)
        self.n_objects_ = n
        return self
        return self

    def fit_transform(
        self,
        triplets: ArrayLike,
        n_objects: int | None = None,
        *,
        sample_weight: ArrayLike | None = None,
        init: ArrayLike | None = None,
        callback: ProgressCallback | None = None,
    ) -> np.ndarray:
        """Fit and return ``embedding_`` of shape (n_objects, n_components)."""
        return self.fit(
            triplets, n_objects, sample_weight=sample_weight, init=init, callback=callback
        ).embedding_

    def predict(self, triplets: ArrayLike) -> np.ndarray:
        """Whether the embedding says d(anchor, near) < d(anchor, far), per row.

        Returns
        -------
        holds : ndarray of shape (n_triplets,), dtype bool
        """
        check_is_fitted(self)
        T = check_triplets(triplets, self.n_objects_)
        _, _, sq_near, sq_far = _differences(self.embedding_, T)
        return sq_near < sq_far

    def score(self, triplets: ArrayLike) -> float:
        """Fraction of ``triplets`` the embedding satisfies (held-out accuracy)."""
        check_is_fitted(self)
        return triplet_accuracy(self.embedding_, check_triplets(triplets, self.n_objects_))


def _check_n_objects(n_objects: object) -> None:
    if n_objects is not None and (
        isinstance(n_objects, bool) or not isinstance(n_objects, Integral)
    ):
        raise ValueError(f"n_objects must be an integer, got {n_objects!r}")


def _check_init(init: ArrayLike | None, shape: tuple[int, int]) -> np.ndarray | None:
    if init is None:
        return None
    start = np.asarray(init, dtype=float)
    if start.shape != shape or not np.all(np.isfinite(start)):
        raise ValueError(
            f"init must be a finite array of shape {shape} (n_objects, n_components), "
            f"got shape {start.shape}"
        )
    return start


class _Progress:
    """Adapts a :data:`ProgressCallback` to scipy's per-iteration callback."""

    def __init__(self, callback: ProgressCallback | None, total: int) -> None:
        self.callback = callback
        self.total = total
        self.done = 0
        self.stopped = False

    def report(self, done: int, loss: float) -> None:
        """Call the user's callback; remember a StopIteration instead of raising it."""
        self.done = done
        if self.callback is None or self.stopped:
            return
        try:
            self.callback(done, self.total, loss)
        except StopIteration:
            self.stopped = True

    def __call__(self, intermediate_result: OptimizeResult) -> None:
        self.report(self.done + 1, float(intermediate_result.fun))
        if self.stopped:
            raise StopIteration  # scipy >= 1.11 ends the minimisation cleanly

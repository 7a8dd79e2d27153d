"""A vectorised triplet oracle on data, with fresh or persistent answer noise.

Public through :mod:`app.learning.triplets`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from sklearn.metrics.pairwise import pairwise_distances

from app.learning import _triplet_oracle_numba as _kernels
from app.learning._triplet_data import (
    _CHUNK_DISTANCES,
    _PAIRED,
    RandomState,
    _check_data,
    _check_noise,
    _generator,
    _paired_distances,
)
from app.learning.shapes import Shape

# Metrics the compiled loop answers (by its ``kind``); euclidean is compared squared.
_COMPILED = {
    "euclidean": _kernels.SQEUCLIDEAN,
    "sqeuclidean": _kernels.SQEUCLIDEAN,
    "cityblock": _kernels.CITYBLOCK,
    "chebyshev": _kernels.CHEBYSHEV,
}

# ---------------------------------------------------------------------------
# Oracle answering arbitrary questions
# ---------------------------------------------------------------------------


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser on uint64 arrays (wrapping arithmetic)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class TripletOracle:
    """Answers "is d(a, b) < d(a, c)?" from data, with optional answer noise.

    Built by :func:`make_oracle`; call it as ``oracle(anchors, b, c)`` with
    equal-length integer arrays (or scalars). Returns a boolean array, True
    where d(a, b) < d(a, c), each answer flipped with probability ``noise``.
    :meth:`answer` answers questions of every triplet-like shape with the same
    noise model.
    Exact ties are answered by a fair coin. With ``persistent=True`` both the
    flip and the tie coin are a hash of (seed, a, min(b, c), max(b, c)), so a
    question gets the same answer at every ask and in either orientation
    (``oracle(a, b, c) == ~oracle(a, c, b)``); otherwise they are drawn afresh
    at every ask.

    Attributes
    ----------
    n_objects : int
    n_asks : int
        Questions answered so far (counting repeats).
    """

    def __init__(
        self, X: np.ndarray, metric: str, noise: float, persistent: bool, seed: int
    ) -> None:
        self._kind = _COMPILED.get(_PAIRED.get(metric, ""), -1)
        self.X = np.ascontiguousarray(X)  # the compiled loops read rows
        self.metric = metric
        self.noise = noise
        self.persistent = persistent
        self.n_objects = X.shape[0]
        self.n_asks = 0
        self._seed = np.uint64(seed)
        self._rng = np.random.default_rng(seed)

    def _paired(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        X, metric = self.X, self.metric
        if metric == "precomputed" or metric in _PAIRED:
            return _paired_distances(X, metric, a, b)
        out = np.empty(a.size)  # any other metric: one row block per distinct anchor
        order = np.argsort(a, kind="stable")
        uniq, first = np.unique(a[order], return_index=True)
        for s in range(0, uniq.size, max(1, _CHUNK_DISTANCES // self.n_objects)):
            block = uniq[s : s + max(1, _CHUNK_DISTANCES // self.n_objects)]
            rows = pairwise_distances(X[block], X, metric=metric)
            lo = first[s]
            hi = first[s + block.size] if s + block.size < uniq.size else a.size
            idx = order[lo:hi]
            out[idx] = rows[np.searchsorted(block, a[idx]), b[idx]]
        return out

    def _coins(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, salt: int) -> np.ndarray:
        """Uniform [0, 1) numbers, one per unordered question, fixed by the seed."""
        lo = np.minimum(b, c).astype(np.uint64)
        hi = np.maximum(b, c).astype(np.uint64)
        with np.errstate(over="ignore"):  # wrapping uint64 arithmetic is the point
            h = _splitmix64(self._seed ^ np.uint64(salt))
            h = _splitmix64(h ^ a.astype(np.uint64))
            h = _splitmix64(h ^ lo)
            h = _splitmix64(h ^ hi)
        return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53

    def _compare(
        self, a: np.ndarray, b: np.ndarray, c: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``d(a, b) < d(a, c)`` per question, and the positions of exact ties."""
        if self._kind >= 0 or self.metric == "precomputed":
            closer = np.empty(a.size, dtype=bool)
            ties = np.empty(a.size, dtype=np.intp)  # only its first n_ties entries are written
            if self._kind >= 0:
                n_ties = _kernels.compare_paired(self.X, a, b, c, self._kind, closer, ties)
            else:
                n_ties = _kernels.compare_precomputed(self.X, a, b, c, closer, ties)
            return closer, ties[:n_ties]
        d_b, d_c = self._paired(a, b), self._paired(a, c)
        return d_b < d_c, np.flatnonzero(d_b == d_c)

    def __call__(self, anchors: ArrayLike, b: ArrayLike, c: ArrayLike) -> np.ndarray:
        a_, b_, c_ = (np.asarray(v) for v in (anchors, b, c))
        shape = np.broadcast_shapes(a_.shape, b_.shape, c_.shape)
        for name, value in (("anchors", a_), ("b", b_), ("c", c_)):
            if value.dtype.kind not in "iu":
                raise ValueError(f"{name} must hold integer object indices, got {value.dtype}")
            if value.size and (value.min() < 0 or value.max() >= self.n_objects):
                raise ValueError(f"{name} holds an index out of range for {self.n_objects} objects")
        a_, b_, c_ = (
            np.ascontiguousarray(np.broadcast_to(v, shape).ravel(), dtype=np.intp)
            for v in (a_, b_, c_)
        )
        closer, ties = self._compare(a_, b_, c_)
        # exact ties are rare: the coins (and the hash) are computed for them only
        if self.persistent:
            if ties.size:
                at = (a_[ties], b_[ties], c_[ties])
                # the hash is of the unordered pair: it answers for (a, lo, hi)
                closer[ties] = (self._coins(*at, 1) < 0.5) ^ (at[1] > at[2])
            if self.noise > 0.0:
                closer ^= self._coins(a_, b_, c_, 2) < self.noise
        else:
            if ties.size:
                closer[ties] = self._rng.random(ties.size) < 0.5
            if self.noise > 0.0:
                closer ^= self._rng.random(closer.size) < self.noise
        self.n_asks += closer.size
        return closer.reshape(shape)

    def answer(self, shape: Shape | str | dict, objects: ArrayLike) -> np.ndarray:
        """Answer questions of one shape (:mod:`app.learning.shapes`) from the data.

        The true answer: a triplet's nearer candidate; odd-one-out's object left out
        of the closest pair of the three; a rank grid's ``k`` candidates nearest the
        anchor, nearest first. Exact ties are broken at random. With probability
        ``noise`` the answer is replaced by one drawn uniformly among the *other*
        possible answers (the other candidate of a triplet: exactly the flip of
        ``oracle(a, b, c)``; one of the two other objects of an odd-one-out; another
        ordered choice of ``k`` of the grid's candidates), drawn afresh at every ask.

        Parameters
        ----------
        shape : Shape, or its name or JSON form
            ``triplet``, ``odd_one_out`` or ``rank`` (pairs are not distance questions).
        objects : array-like of shape (n_questions, shape.size)
            The objects shown, in the shape's order: the anchor first for a triplet or a
            grid, the three objects for odd-one-out.

        Returns
        -------
        choice : ndarray of shape (n_questions,) or, for rank, (n_questions, k)
            The chosen objects' indices (for odd-one-out the odd one; for rank the ``k``
            chosen candidates in order), ready for
            :func:`app.learning.shapes.implied_triplets`.
        """
        shape = Shape.of(shape)
        if shape.type == "pair":
            raise ValueError("the oracle answers distance questions; a pair is not one")
        if self.persistent:
            raise ValueError(
                "persistent noise is defined for triplets only (oracle(a, b, c)); "
                "build the oracle with persistent=False to answer other shapes"
            )
        Q = np.asarray(objects)
        if Q.ndim != 2 or Q.shape[1] != shape.size or (Q.size and Q.dtype.kind not in "iu"):
            raise ValueError(
                f"objects must be an integer array of shape (n_questions, {shape.size}) "
                f"for a {shape.type}, got {Q.dtype} of shape {Q.shape}"
            )
        Q = Q.astype(np.intp)
        if Q.size and (Q.min() < 0 or Q.max() >= self.n_objects):
            raise ValueError(f"objects holds an index out of range for {self.n_objects} objects")
        ordered = np.sort(Q, axis=1)
        if np.any(ordered[:, 1:] == ordered[:, :-1]):
            raise ValueError("objects repeats an object within a question")
        m, rng = len(Q), self._rng
        self.n_asks += m
        if shape.type == "odd_one_out":
            # pair t leaves out object 2 - t: (0, 1) -> 2, (0, 2) -> 1, (1, 2) -> 0
            D = np.stack(
                [self._paired(Q[:, i], Q[:, j]) for i, j in ((0, 1), (0, 2), (1, 2))], axis=1
            )
            closest = np.lexsort((rng.random(D.shape), D), axis=-1)[:, 0]
            odd = 2 - closest
            flip = rng.random(m) < self.noise
            odd[flip] = (odd[flip] + rng.integers(1, 3, size=int(flip.sum()))) % 3
            return Q[np.arange(m), odd]
        anchors, candidates = Q[:, 0], Q[:, 1:]
        n, k = candidates.shape[1], shape.k
        D = self._paired(np.repeat(anchors, n), candidates.ravel()).reshape(m, n)
        picked = np.lexsort((rng.random(D.shape), D), axis=-1)[:, :k]
        flip = np.flatnonzero(rng.random(m) < self.noise)
        while flip.size:  # another ordered choice, uniform by rejection of the true one
            draw = np.argsort(rng.random((flip.size, n)), axis=1)[:, :k]
            same = np.all(draw == picked[flip], axis=1)
            picked[flip[~same]] = draw[~same]
            flip = flip[same]
        chosen = np.take_along_axis(candidates, picked, axis=1)
        return chosen[:, 0] if shape.type == "triplet" else chosen


def make_oracle(
    X: ArrayLike,
    metric: str = "euclidean",
    noise: float = 0.0,
    persistent: bool = False,
    random_state: RandomState = None,
) -> TripletOracle:
    """A vectorised triplet oracle on data: ``oracle(anchors, b, c) -> bool array``.

    Parameters
    ----------
    X : array-like of shape (n_objects, n_features) or (n_objects, n_objects)
        Features, or a distance matrix when ``metric="precomputed"``. No n×n
        matrix is built from features: distances are computed per question.
    metric : str, default="euclidean"
        Any scikit-learn metric name, or ``"precomputed"``. Euclidean
        (compared squared), squared Euclidean, city-block, Chebyshev and
        precomputed answers come from one compiled loop per call; cosine is
        computed pairwise with numpy; other names by blocks of distance rows.
    noise : float in [0, 1], default=0.0
        Probability that an answer is flipped.
    persistent : bool, default=False
        False: flips drawn afresh at every ask (a crowd of independent workers).
        True: each unordered question (a, {b, c}) has one fixed answer, the
        same whichever way round it is asked (a single stubborn worker).
    random_state : int, Generator, RandomState or None, default=None
        Seeds the flips (and the hash when ``persistent``).

    Returns
    -------
    oracle : TripletOracle
        Callable ``oracle(anchors, b, c)`` returning True where d(a, b) < d(a, c).
    """
    noise = _check_noise(noise)
    X = _check_data(X, metric)
    seed = int(_generator(random_state).integers(0, 2**63 - 1))
    return TripletOracle(X, metric, noise, bool(persistent), seed)

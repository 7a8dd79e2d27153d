"""Triplet format, validation and synthetic oracles.

A triplet is a row ``(anchor, near, far)`` of an integer array of shape
``(n_triplets, 3)`` meaning d(anchor, near) < d(anchor, far): "the anchor is
closer to near than to far". Objects are the indices ``0 .. n_objects - 1``.
Every estimator of :mod:`app.learning` converts its input with
:func:`check_triplets`, the one checker of this format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import ArrayLike
from sklearn.metrics.pairwise import _VALID_METRICS, PAIRWISE_DISTANCE_FUNCTIONS, pairwise_distances
from sklearn.utils import check_array

__all__ = [
    "TripletOracle",
    "check_triplets",
    "make_landmark_triplets",
    "make_oracle",
    "make_random_triplets",
    "triplet_agreement",
]


def check_triplets(triplets: ArrayLike, n_objects: int | None = None) -> np.ndarray:
    """Validate triplets and return them as a C-contiguous ``intp`` array.

    Parameters
    ----------
    triplets : array-like of shape (n_triplets, 3)
        Rows ``(anchor, near, far)`` of object indices.
    n_objects : int, default=None
        Number of objects; when given, every index must be below it.

    Returns
    -------
    triplets : ndarray of shape (n_triplets, 3), dtype intp

    Raises
    ------
    ValueError
        For a wrong shape, non-integer values, negative or out-of-range
        indices, or an index repeated within a row.
    """
    try:
        array = np.asarray(triplets)
    except ValueError as error:
        raise ValueError(
            "triplets must be a rectangular array of integers, got a ragged sequence"
        ) from error
    if array.dtype == object:
        raise ValueError("triplets must be a rectangular array of integers, got a ragged sequence")
    if array.ndim != 2 or array.shape[1] != 3:
        if array.size == 0 and array.ndim <= 2:
            return np.empty((0, 3), dtype=np.intp)
        raise ValueError(f"triplets must have shape (n_triplets, 3), got shape {array.shape}")
    if array.dtype.kind == "b" or array.dtype.kind not in "iuf":
        raise ValueError(f"triplets must hold integer object indices, got dtype {array.dtype}")
    if array.dtype.kind == "f" and (
        not np.all(np.isfinite(array)) or np.any(array != np.round(array))
    ):
        raise ValueError("triplets must hold integer object indices, got non-integer values")
    array = np.ascontiguousarray(array, dtype=np.intp)
    if array.size and array.min() < 0:
        row = int(np.argmax((array < 0).any(axis=1)))
        raise ValueError(f"triplets hold a negative index in row {row}: {array[row].tolist()}")
    if n_objects is not None:
        if n_objects < 0:
            raise ValueError(f"n_objects must be non-negative, got {n_objects}")
        if array.size and array.max() >= n_objects:
            row = int(np.argmax((array >= n_objects).any(axis=1)))
            raise ValueError(
                f"triplets hold an index out of range for {n_objects} objects in row {row}: "
                f"{array[row].tolist()}"
            )
    repeated = (
        (array[:, 0] == array[:, 1]) | (array[:, 0] == array[:, 2]) | (array[:, 1] == array[:, 2])
    )
    if repeated.any():
        row = int(np.argmax(repeated))
        raise ValueError(
            f"triplets repeat an object within row {row}: {array[row].tolist()}; "
            "anchor, near and far must be three distinct objects"
        )
    return array


# ---------------------------------------------------------------------------
# Random number generators and distances
# ---------------------------------------------------------------------------

RandomState = int | np.random.Generator | np.random.RandomState | None

# Budget of one chunk: rows of a distance block (floats) and questions sampled.
_CHUNK_DISTANCES = 1 << 22
_CHUNK_QUESTIONS = 1 << 20


def _generator(random_state: RandomState) -> np.random.Generator:
    """Turn any accepted ``random_state`` into a numpy ``Generator``."""
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(np.iinfo(np.int32).max))
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None or isinstance(random_state, int | np.integer):
        return np.random.default_rng(random_state)
    raise ValueError(
        "random_state must be None, an int, a numpy Generator or RandomState, "
        f"got {type(random_state).__name__}"
    )


def _check_noise(noise: float) -> float:
    if not isinstance(noise, int | float | np.floating) or not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise must be a probability in [0, 1], got {noise!r}")
    return float(noise)


def _check_data(X: ArrayLike, metric: str) -> np.ndarray:
    """Validate features, or a square distance matrix when ``metric="precomputed"``."""
    if not isinstance(metric, str):
        raise ValueError(f"metric must be a scikit-learn metric name, got {metric!r}")
    X = check_array(X, dtype=np.float64, ensure_min_samples=3, input_name="X")
    if metric == "precomputed":
        if X.shape[0] != X.shape[1]:
            raise ValueError(
                f"with metric='precomputed' X must be a square distance matrix, got shape {X.shape}"
            )
    elif metric not in PAIRWISE_DISTANCE_FUNCTIONS and metric not in _VALID_METRICS:
        raise ValueError(f"unknown metric {metric!r}; use a scikit-learn metric name")
    return X


_PAIRED = {
    "euclidean": "euclidean",
    "l2": "euclidean",
    "sqeuclidean": "sqeuclidean",
    "manhattan": "cityblock",
    "cityblock": "cityblock",
    "l1": "cityblock",
    "chebyshev": "chebyshev",
    "cosine": "cosine",
}


def _paired_distances(X: np.ndarray, metric: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """d(a[t], b[t]) elementwise for a metric of ``_PAIRED`` or ``"precomputed"``."""
    if metric == "precomputed":
        return X[a, b]
    kind = _PAIRED[metric]
    if kind == "cosine":
        xa, xb = X[a], X[b]
        norms = np.linalg.norm(xa, axis=1) * np.linalg.norm(xb, axis=1)
        return 1.0 - np.einsum("ij,ij->i", xa, xb) / np.where(norms == 0, 1.0, norms)
    diff = X[a] - X[b]
    if kind == "euclidean":
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))
    if kind == "sqeuclidean":
        return np.einsum("ij,ij->i", diff, diff)
    if kind == "cityblock":
        return np.abs(diff).sum(axis=1)
    return np.abs(diff).max(axis=1)


def _distance_rows(X: np.ndarray, metric: str, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Block ``d(rows[i], cols[j])`` of the distance matrix, never the whole of it."""
    if metric == "precomputed":
        return X[np.ix_(rows, cols)]
    return pairwise_distances(X[rows], X[cols], metric=metric)


def _check_index_set(values: ArrayLike | None, n_objects: int, name: str) -> np.ndarray:
    if values is None:
        return np.arange(n_objects)
    array = np.asarray(values)
    if array.ndim != 1 or array.size == 0 or array.dtype.kind not in "iu":
        raise ValueError(f"{name} must be a non-empty 1-d array of object indices")
    if array.min() < 0 or array.max() >= n_objects:
        raise ValueError(f"{name} holds an index out of range for {n_objects} objects")
    unique = np.unique(array)
    if unique.size != array.size:
        raise ValueError(f"{name} repeats an object index")
    return unique.astype(np.intp)


# ---------------------------------------------------------------------------
# Sampling distinct questions
# ---------------------------------------------------------------------------


def _triangle(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decode ``p = j (j - 1) / 2 + i`` with ``0 <= i < j`` into ``(i, j)``."""
    j = np.floor((1.0 + np.sqrt(1.0 + 8.0 * codes)) / 2.0).astype(np.int64)
    j -= j * (j - 1) // 2 > codes  # correct float rounding either way
    j += (j + 1) * j // 2 <= codes
    return codes - j * (j - 1) // 2, j


def _sample_distinct(rng: np.random.Generator, size: int, k: int) -> np.ndarray:
    """``k`` distinct sorted integers drawn uniformly from ``range(size)``."""
    if 4 * k >= size:
        codes = rng.choice(size, k, replace=False)
        codes.sort()
        return codes
    # Oversample with replacement so that about 5% more than k values are
    # distinct, dedupe by sorting, then keep a uniform k-subset of them.
    draws = int(-size * np.log1p(-k / size) * 1.05) + 16
    while True:
        codes = rng.integers(0, size, draws)
        codes.sort()
        codes = codes[np.concatenate(([True], codes[1:] != codes[:-1]))]
        if codes.size >= k:
            break
        draws = int(draws * 1.1) + 16
    if codes.size > k:
        codes = codes[np.sort(rng.choice(codes.size, k, replace=False))]
    return codes


def _question_chunks(
    rng: np.random.Generator, counts: np.ndarray, m: int, row_width: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Draw ``m`` distinct questions, grouped by anchor, chunk by chunk.

    ``counts[a]`` is the number of questions with anchor position ``a``. Yields
    ``(anchor_positions, codes)`` with ``0 <= codes < counts[anchor_positions]``.
    The number drawn in each chunk is hypergeometric (exact sampling without
    replacement); numpy's hypergeometric needs populations below 10^9, above
    that the binomial, which differs only by the finite-population factor, is used.
    """
    ends = np.cumsum(counts, dtype=np.int64)
    starts = ends - counts
    total = int(ends[-1])
    per_chunk = max(1, total * _CHUNK_QUESTIONS // max(m, 1))
    max_anchors = max(1, _CHUNK_DISTANCES // max(row_width, 1))
    left, start = m, 0
    while start < counts.size and left > 0:
        stop = int(np.searchsorted(ends, starts[start] + per_chunk, side="right"))
        stop = min(max(stop, start + 1), start + max_anchors, counts.size)
        size = int(ends[stop - 1] - starts[start])
        rest = total - int(starts[start])
        if size == rest:
            k = left
        elif size < 10**9 and rest - size < 10**9:
            k = int(rng.hypergeometric(size, rest - size, left))
        else:
            k = min(int(rng.binomial(left, size / rest)), size)
            k = max(k, left - (rest - size))
        if k:
            codes = _sample_distinct(rng, size, k) + starts[start]
            anchors = np.searchsorted(ends, codes, side="right")
            yield anchors, codes - starts[anchors]
        left -= k
        start = stop


def _answer(
    rng: np.random.Generator, d_near: np.ndarray, d_far: np.ndarray, noise: float
) -> np.ndarray:
    """True where the first candidate is closer; ties by a fair coin; noise flips."""
    closer = d_near < d_far
    ties = d_near == d_far
    if ties.any():
        closer[ties] = rng.random(int(ties.sum())) < 0.5
    if noise > 0.0:
        closer ^= rng.random(closer.size) < noise
    return closer


def _n_requested(fraction: float | None, n_triplets: int | None, total: int) -> int:
    if (fraction is None) == (n_triplets is None):
        raise ValueError("give exactly one of fraction and n_triplets")
    if fraction is not None:
        if not isinstance(fraction, int | float | np.floating) or not 0.0 < fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
        return round(float(fraction) * total)
    if isinstance(n_triplets, bool) or not isinstance(n_triplets, int | np.integer):
        raise ValueError(f"n_triplets must be an integer, got {n_triplets!r}")
    if n_triplets < 0:
        raise ValueError(f"n_triplets must be non-negative, got {n_triplets}")
    if n_triplets > total:
        raise ValueError(
            f"n_triplets={n_triplets} exceeds the {total} distinct questions of this design"
        )
    return int(n_triplets)


def _fill(
    out: np.ndarray,
    rng: np.random.Generator,
    X: np.ndarray,
    metric: str,
    noise: float,
    anchors: np.ndarray,
    counts: np.ndarray,
    cols: np.ndarray,
    decode: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
) -> None:
    """Sample ``len(out)`` questions, answer them chunk by chunk, write them oriented."""
    offset = 0
    for positions, codes in _question_chunks(rng, counts, out.shape[0], cols.size):
        first, last = positions[0], positions[-1] + 1
        b, c = decode(positions, codes)  # column positions of the two candidates
        few = 16 * positions.size < (last - first) * cols.size
        if metric == "precomputed" or (few and metric in _PAIRED):
            a = anchors[positions]
            d_b = _paired_distances(X, metric, a, cols[b])
            d_c = _paired_distances(X, metric, a, cols[c])
        else:  # many questions per anchor: one block of distance rows
            rows = _distance_rows(X, metric, anchors[first:last], cols)
            local = positions - first
            d_b, d_c = rows[local, b], rows[local, c]
        closer = _answer(rng, d_b, d_c, noise)
        stop = offset + positions.size
        out[offset:stop, 0] = anchors[positions]
        out[offset:stop, 1] = np.where(closer, cols[b], cols[c])
        out[offset:stop, 2] = np.where(closer, cols[c], cols[b])
        offset = stop


def make_random_triplets(
    X: ArrayLike,
    *,
    fraction: float | None = None,
    n_triplets: int | None = None,
    noise: float = 0.0,
    metric: str = "euclidean",
    anchors: ArrayLike | None = None,
    references: ArrayLike | None = None,
    shuffle: bool = True,
    random_state: RandomState = None,
) -> np.ndarray:
    """Passive triplets: random questions answered by a metric, with answer noise.

    The passive oracle of Perrot & von Luxburg (2019) §2 and Kleindessner &
    von Luxburg (2017) §2: a *question* is an anchor ``a`` and an unordered pair
    ``{b, c}`` of two other objects; questions are drawn uniformly, each is
    answered by whether d(a, b) < d(a, c), the answer is flipped with
    probability ``noise``, and the triplet is returned oriented as
    ``(anchor, near, far)``.

    Sampling is **without replacement**: the result holds distinct questions,
    a uniformly random subset of the given size, as the papers' triplet set
    ``T`` (a set) is, and as "10% of all triplets" means. The number in each
    chunk of anchors is hypergeometric; above 10^9 questions numpy's
    hypergeometric is unavailable and the binomial is used, which differs only
    in the finite-population variance factor (1 − m/N).

    Parameters
    ----------
    X : array-like of shape (n_objects, n_features) or (n_objects, n_objects)
        Features, or a distance matrix when ``metric="precomputed"``.
    fraction : float in (0, 1], default=None
        Share of all questions of the design to draw (see Notes).
    n_triplets : int, default=None
        Number of questions to draw. Give exactly one of ``fraction`` and
        ``n_triplets``.
    noise : float in [0, 1], default=0.0
        Probability that an answer is flipped, independently per triplet.
    metric : str, default="euclidean"
        Any scikit-learn metric name (``pairwise_distances``), or
        ``"precomputed"``.
    anchors, references : array-like of int, default=None (all objects)
        Draw only questions with the anchor in ``anchors`` and both candidates
        in ``references`` (e.g. test anchors against training references).
    shuffle : bool, default=True
        Return rows in random order. With ``False`` rows come grouped by
        anchor, which saves one copy of the output for huge draws.
    random_state : int, Generator, RandomState or None, default=None

    Returns
    -------
    triplets : ndarray of shape (n_triplets, 3), dtype intp

    Notes
    -----
    The design has N = Σ_a C(r_a, 2) questions, where r_a is the number of
    references other than the anchor a; with all objects N = n(n − 1)(n − 2)/2.
    The TripletBoost paper counts n²(n − 1)/2, which also includes degenerate
    triplets whose anchor is one of the references; ``fraction`` counts only
    proper questions (the two counts differ by a factor n / (n − 2)).
    Exact distance ties, rare with real data, are answered by a fair coin.
    Distances are computed one block of anchor rows at a time: memory is
    O(n_triplets + chunk × n), never n² for features nor n³.
    """
    rng = _generator(random_state)
    noise = _check_noise(noise)
    X = _check_data(X, metric)
    n = X.shape[0]
    anchor_set = _check_index_set(anchors, n, "anchors")
    refs = _check_index_set(references, n, "references")
    position = np.full(n, -1, dtype=np.int64)
    position[refs] = np.arange(refs.size)
    anchor_pos = position[anchor_set]  # where each anchor sits among the references
    r_a = refs.size - (anchor_pos >= 0)
    counts = (r_a * (r_a - 1) // 2).astype(np.int64)
    total = int(counts.sum())
    if total == 0:
        raise ValueError("the design has no question: give at least 2 references per anchor")
    m = _n_requested(fraction, n_triplets, total)

    def decode(positions: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        i, j = _triangle(codes)
        skip = anchor_pos[positions]
        i += (skip >= 0) & (i >= skip)
        j += (skip >= 0) & (j >= skip)
        return i, j

    out = np.empty((m, 3), dtype=np.intp)
    _fill(out, rng, X, metric, noise, anchor_set, counts, refs, decode)
    return np.take(out, rng.permutation(m), axis=0) if shuffle else out


def make_landmark_triplets(
    X: ArrayLike,
    landmarks: int | ArrayLike,
    *,
    n_triplets: int,
    kind: str = "k1",
    noise: float = 0.0,
    metric: str = "euclidean",
    random_state: RandomState = None,
) -> np.ndarray:
    """Triplets of the landmark design of Kleindessner & von Luxburg (2017) §2.3.

    With landmarks L ⊆ D:

    - ``kind="k1"``: questions d(x_i, x_j) <? d(x_i, x_k) with any anchor
      x_i ∈ D and two landmarks x_j, x_k ∈ L as candidates;
    - ``kind="k2"``: questions d(x_j, x_i) <? d(x_j, x_k) with a landmark anchor
      x_j ∈ L and candidates x_i ∈ D and another landmark x_k ∈ L.

    The paper leaves the sampling open; questions are drawn uniformly from the
    design's distinct questions, without replacement, as in
    :func:`make_random_triplets`. The three objects are always distinct. In the
    k2 design a question whose two candidates are both landmarks is one
    question, not two.

    Parameters
    ----------
    X : array-like of shape (n_objects, n_features) or (n_objects, n_objects)
        Features, or a distance matrix when ``metric="precomputed"``.
    landmarks : int or array-like of int
        A number of landmarks to choose uniformly at random, or their indices.
        At least 2.
    n_triplets : int
        Number of distinct questions, at most the size of the design, with
        ℓ = |L|: Σ_i C(ℓ − [x_i ∈ L], 2) = (n − ℓ)·C(ℓ, 2) + ℓ·C(ℓ − 1, 2) for k1
        and ℓ·(C(ℓ − 1, 2) + (ℓ − 1)(n − ℓ)) for k2.
    kind : {"k1", "k2"}, default="k1"
    noise : float in [0, 1], default=0.0
        Probability that an answer is flipped.
    metric : str, default="euclidean"
        Any scikit-learn metric name, or ``"precomputed"``.
    random_state : int, Generator, RandomState or None, default=None

    Returns
    -------
    triplets : ndarray of shape (n_triplets, 3), dtype intp
        Rows (anchor, near, far), in random order.
    """
    if kind not in ("k1", "k2"):
        raise ValueError(f"kind must be 'k1' or 'k2', got {kind!r}")
    rng = _generator(random_state)
    noise = _check_noise(noise)
    X = _check_data(X, metric)
    n = X.shape[0]
    if isinstance(landmarks, int | np.integer) and not isinstance(landmarks, bool):
        if not 2 <= landmarks <= n:
            raise ValueError(f"landmarks must be between 2 and {n} objects, got {landmarks}")
        L = np.sort(rng.choice(n, int(landmarks), replace=False)).astype(np.intp)
    else:
        L = _check_index_set(landmarks, n, "landmarks")
        if L.size < 2:
            raise ValueError("the landmark design needs at least 2 landmarks")
    if kind == "k1":
        return make_random_triplets(
            X,
            n_triplets=n_triplets,
            noise=noise,
            metric=metric,
            references=L,
            random_state=rng,
        )
    # k2: anchor j ∈ L; pair {i, k} of D \ {j} with k ∈ L; per anchor
    # C(l - 1, 2) landmark pairs first, then (l - 1)(n - l) (landmark, other) pairs.
    n_l = L.size
    both = (n_l - 1) * (n_l - 2) // 2
    others = np.setdiff1d(np.arange(n), L)
    counts = np.full(n_l, both + (n_l - 1) * others.size, dtype=np.int64)
    m = _n_requested(None, n_triplets, int(counts.sum()))

    def decode(positions: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        is_pair = codes < both
        i, j = _triangle(np.where(is_pair, codes, 0))
        rest = np.where(is_pair, 0, codes - both)
        k = np.where(is_pair, j, rest // max(others.size, 1))
        i = np.where(is_pair, i, 0)
        i += i >= positions
        k += k >= positions
        first = L[i]
        if others.size:
            first = np.where(is_pair, first, others[rest % others.size])
        return first, L[k]  # columns are all objects: positions are indices

    out = np.empty((m, 3), dtype=np.intp)
    _fill(out, rng, X, metric, noise, L, counts, np.arange(n), decode)
    return np.take(out, rng.permutation(m), axis=0)


def triplet_agreement(
    triplets: ArrayLike,
    distances: ArrayLike | Callable[[np.ndarray, np.ndarray], ArrayLike],
) -> float:
    """Fraction of triplets a dissimilarity satisfies.

    Parameters
    ----------
    triplets : array-like of shape (n_triplets, 3)
        Rows (anchor, near, far).
    distances : array-like of shape (n_objects, n_objects) or callable
        A distance matrix, or a function ``f(a_idx, b_idx)`` returning the
        distances d(a_idx[t], b_idx[t]) elementwise (e.g. a learned metric).

    Returns
    -------
    agreement : float
        Share of rows with d(anchor, near) < d(anchor, far) strictly; a tie
        counts as not satisfied.
    """
    if callable(distances):
        triplets = check_triplets(triplets)
        if triplets.shape[0] == 0:
            raise ValueError("triplet_agreement needs at least one triplet")
        d_near = np.asarray(distances(triplets[:, 0], triplets[:, 1]), dtype=float)
        d_far = np.asarray(distances(triplets[:, 0], triplets[:, 2]), dtype=float)
        if d_near.shape != (triplets.shape[0],) or d_far.shape != d_near.shape:
            raise ValueError(
                "the distance callable must return one distance per index pair, "
                f"got shape {d_near.shape} for {triplets.shape[0]} pairs"
            )
    else:
        D = np.asarray(distances, dtype=float)
        if D.ndim != 2 or D.shape[0] != D.shape[1]:
            raise ValueError(f"distances must be a square matrix, got shape {D.shape}")
        triplets = check_triplets(triplets, D.shape[0])
        if triplets.shape[0] == 0:
            raise ValueError("triplet_agreement needs at least one triplet")
        d_near = D[triplets[:, 0], triplets[:, 1]]
        d_far = D[triplets[:, 0], triplets[:, 2]]
    return float(np.mean(d_near < d_far))


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
        self.X = X
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
        h = _splitmix64(self._seed ^ np.uint64(salt))
        h = _splitmix64(h ^ a.astype(np.uint64))
        h = _splitmix64(h ^ lo)
        h = _splitmix64(h ^ hi)
        return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53

    def __call__(self, anchors: ArrayLike, b: ArrayLike, c: ArrayLike) -> np.ndarray:
        a_, b_, c_ = (np.asarray(v) for v in (anchors, b, c))
        shape = np.broadcast_shapes(a_.shape, b_.shape, c_.shape)
        for name, value in (("anchors", a_), ("b", b_), ("c", c_)):
            if value.dtype.kind not in "iu":
                raise ValueError(f"{name} must hold integer object indices, got {value.dtype}")
            if value.size and (value.min() < 0 or value.max() >= self.n_objects):
                raise ValueError(f"{name} holds an index out of range for {self.n_objects} objects")
        a_, b_, c_ = (np.broadcast_to(v, shape).ravel().astype(np.intp) for v in (a_, b_, c_))
        with np.errstate(over="ignore"):
            d_b, d_c = self._paired(a_, b_), self._paired(a_, c_)
            ties = d_b == d_c
            closer = d_b < d_c
            swapped = b_ > c_  # the hash is of the unordered pair: answer for (a, lo, hi)
            if self.persistent:
                if ties.any():
                    closer[ties] = (self._coins(a_, b_, c_, 1)[ties] < 0.5) ^ swapped[ties]
                if self.noise > 0.0:
                    closer ^= self._coins(a_, b_, c_, 2) < self.noise
            else:
                if ties.any():
                    closer[ties] = self._rng.random(int(ties.sum())) < 0.5
                if self.noise > 0.0:
                    closer ^= self._rng.random(closer.size) < self.noise
        self.n_asks += closer.size
        return closer.reshape(shape)


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
        Any scikit-learn metric name, or ``"precomputed"``. Euclidean,
        squared Euclidean, city-block, Chebyshev and cosine are computed
        pairwise directly; other names by blocks of distance rows.
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

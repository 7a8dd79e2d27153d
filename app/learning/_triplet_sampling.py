"""Passive triplets drawn without replacement: uniform random and landmark designs.

Public through :mod:`app.learning.triplets`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import ArrayLike

from app.learning._triplet_data import (
    _CHUNK_DISTANCES,
    _CHUNK_QUESTIONS,
    _PAIRED,
    RandomState,
    _check_data,
    _check_index_set,
    _check_noise,
    _distance_rows,
    _generator,
    _paired_distances,
)

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

"""Shared helpers of the synthetic triplet sources: seeds, data checks, distances."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from sklearn.metrics.pairwise import _VALID_METRICS, PAIRWISE_DISTANCE_FUNCTIONS, pairwise_distances
from sklearn.utils import check_array

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

"""Triplet format, validation and synthetic oracles.

A triplet is a row ``(anchor, near, far)`` of an integer array of shape
``(n_triplets, 3)`` meaning d(anchor, near) < d(anchor, far): "the anchor is
closer to near than to far". Objects are the indices ``0 .. n_objects - 1``.
Every estimator of :mod:`app.learning` converts its input with
:func:`check_triplets`, the one checker of this format.

Synthetic sources of triplets live in private modules and are public here:
:func:`make_random_triplets` and :func:`make_landmark_triplets`
(``_triplet_sampling``), :func:`make_oracle` (``_triplet_oracle``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from app.learning._triplet_oracle import TripletOracle, make_oracle
from app.learning._triplet_sampling import make_landmark_triplets, make_random_triplets
from app.learning._triplets_numba import scan_triplets

_INDEX_MAX = int(np.iinfo(np.intp).max)

__all__ = [
    "TripletOracle",
    "check_sample_weight",
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
        if array.ndim == 2 and all(isinstance(v, (int, np.integer)) for v in array.flat):
            # Rectangular, but integers beyond 64 bits: numpy keeps them as objects.
            row = next(i for i, r in enumerate(array) if any(abs(int(v)) > _INDEX_MAX for v in r))
            if any(int(v) < 0 for v in array[row]):
                raise ValueError(
                    f"triplets hold a negative index in row {row}: {array[row].tolist()}"
                )
            raise ValueError(
                f"triplets hold an index too large in row {row}: {array[row].tolist()} "
                f"(an index is at most {_INDEX_MAX})"
            )
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
    if array.dtype.kind in "uf" and array.size:
        # Casting would wrap such a value round to a negative index (2**63 -> -2**63).
        large = array >= 2.0**63 if array.dtype.kind == "f" else array > _INDEX_MAX
        if large.any():
            row = int(np.argmax(large.any(axis=1)))
            raise ValueError(
                f"triplets hold an index too large in row {row}: "
                f"{[int(v) for v in array[row]]} (an index is at most {_INDEX_MAX})"
            )
    array = np.ascontiguousarray(array, dtype=np.intp)
    # One compiled pass finds what the checks below need; numpy only looks for
    # the offending row once a check has failed.
    smallest, largest, first_repeat = scan_triplets(array)
    if array.size and smallest < 0:
        row = int(np.argmax((array < 0).any(axis=1)))
        raise ValueError(f"triplets hold a negative index in row {row}: {array[row].tolist()}")
    if n_objects is not None:
        if n_objects < 0:
            raise ValueError(f"n_objects must be non-negative, got {n_objects}")
        if array.size and largest >= n_objects:
            row = int(np.argmax((array >= n_objects).any(axis=1)))
            raise ValueError(
                f"triplets hold an index out of range for {n_objects} objects in row {row}: "
                f"{array[row].tolist()}"
            )
    if first_repeat >= 0:
        row = first_repeat
        raise ValueError(
            f"triplets repeat an object within row {row}: {array[row].tolist()}; "
            "anchor, near and far must be three distinct objects"
        )
    return array


def check_sample_weight(sample_weight: ArrayLike | None, n_samples: int) -> np.ndarray | None:
    """Validate per-comparison weights: ``None`` (every comparison counts once) or a 1-d
    array of ``n_samples`` finite, non-negative floats that are not all zero.

    A weight is how much a comparison counts in the fit, e.g. the reliability of the
    participant who answered it (:class:`app.learning.reliability.CrowdReliability`).

    Returns
    -------
    sample_weight : ndarray of shape (n_samples,), dtype float64, or None
    """
    if sample_weight is None:
        return None
    array = np.asarray(sample_weight)
    if array.dtype == object or array.dtype.kind not in "biuf":
        raise ValueError(f"sample_weight must hold numbers, got dtype {array.dtype}")
    array = array.astype(np.float64)
    if array.ndim != 1 or array.shape[0] != n_samples:
        raise ValueError(
            f"sample_weight must have shape ({n_samples},), one weight per comparison, "
            f"got shape {array.shape}"
        )
    if not np.all(np.isfinite(array)) or np.any(array < 0):
        raise ValueError("sample_weight must hold finite, non-negative weights")
    if n_samples and not np.any(array > 0):
        raise ValueError("sample_weight is zero everywhere: no comparison would count")
    return array


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

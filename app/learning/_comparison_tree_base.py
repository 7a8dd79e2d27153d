"""Shared parts of the comparison-tree state machines: hashing, segments, checks, votes.

Public through :mod:`app.learning.comparison_tree`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

Oracle = Callable[[np.ndarray, np.ndarray, np.ndarray], ArrayLike]

OPEN, SPLIT, LEAF = 0, 1, 2
_FORMAT = 1
_MASK64 = (1 << 64) - 1


def _splitmix64(z: np.ndarray) -> np.ndarray:
    """Vectorised splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _uniform(keys: np.ndarray, stream: int) -> np.ndarray:
    """A uniform draw in [0, 1) per node key, independent per ``stream``."""
    bits = _splitmix64(keys ^ np.uint64(stream * 0xD1B54A32D192ED03 & _MASK64))
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _child_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with np.errstate(over="ignore"):
        doubled = keys * np.uint64(2)
    return _splitmix64(doubled), _splitmix64(doubled + np.uint64(1))


def _segment_positions(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate ``range(s, e)`` over segments; also return each entry's segment number."""
    lengths = (ends - starts).astype(np.intp)
    seg = np.repeat(np.arange(len(starts), dtype=np.intp), lengths)
    offsets = np.cumsum(lengths) - lengths
    pos = np.arange(lengths.sum(), dtype=np.intp) - offsets[seg] + starts[seg]
    return pos, seg


def _check_answers(answers: ArrayLike, m: int, what: str = "answers") -> np.ndarray:
    arr = np.asarray(answers)
    if arr.shape != (m,):
        raise ValueError(f"{what} must have shape ({m},), got shape {arr.shape}")
    if arr.dtype.kind == "b":
        return arr
    if arr.dtype.kind in "iuf" and np.all((arr == 0) | (arr == 1)):
        return arr.astype(bool)
    raise ValueError(f"{what} must be booleans (True where closer to p1), got dtype {arr.dtype}")


def _check_queries(queries: ArrayLike) -> np.ndarray:
    arr = np.asarray(queries)
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise ValueError(f"queries must have shape (n_queries, 3), got shape {arr.shape}")
    if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0):
        raise ValueError("queries must hold non-negative integer object indices")
    return arr.astype(np.intp, copy=False)


def _check_int(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


class _VoteMachine:
    """Shared vote bookkeeping: per slot, answers asked and answers "closer to p1"."""

    redundancy: int
    n_queries_: int
    n_asks_: int
    _asked: np.ndarray
    _p1: np.ndarray

    def _decided(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        asked, p1 = self._asked[slots], self._p1[slots]
        decided = (asked >= self.redundancy) & (2 * p1 != asked)
        return decided, 2 * p1 > asked

    def _add_votes(self, slots: np.ndarray, answers: np.ndarray, unique: bool = False) -> None:
        if unique:  # each slot once: plain fancy indexing
            self.n_queries_ += int(np.count_nonzero(self._asked[slots] == 0))
            self.n_asks_ += len(slots)
            self._asked[slots] += 1
            self._p1[slots] += answers
            return
        size = len(self._asked)
        new = np.bincount(slots, minlength=size)
        yes = np.bincount(slots, weights=answers, minlength=size).astype(np.int64)
        self.n_queries_ += int(np.count_nonzero((self._asked == 0) & (new > 0)))
        self.n_asks_ += len(slots)
        self._asked += new
        self._p1 += yes

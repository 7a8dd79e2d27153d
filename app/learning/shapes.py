"""Question shapes and the triplets their answers imply.

A screen shows objects in one of four shapes:

``triplet``
    An anchor and two candidates, "which is closer to the anchor?"; the answer is the
    chosen candidate.
``pair``
    Two objects compared on a scale, answered -1, 0 (a tie) or 1; pairs imply no
    triplets (they are learned by Bradley–Terry, :mod:`app.learning.bradley_terry`).
``odd_one_out``
    Three objects, "which one does not belong?" (the THINGS task; Hebart et al. 2020,
    Zheng et al. 2019); the answer is the odd object.
``rank``
    An anchor and ``n`` candidates, "pick the ``k`` most similar, in order" (psiz's
    "n-rank-k" trials; Roads & Mozer 2019); the answer is the ``k`` chosen candidates
    in order.

The one rule by which every model kind reads a shaped answer as triplets
``(anchor, near, far)`` (cblearn's loaders convert the same way):

- a triplet answer is itself: ``(anchor, chosen, other)``;
- odd-one-out ``{i, j, k}`` with ``k`` odd means s(i, j) > s(i, k) and
  s(i, j) > s(j, k): the two triplets ``(i, j, k)`` and ``(j, i, k)``;
- rank: the t-th chosen candidate is nearer the anchor than every candidate not
  chosen before it: ``(anchor, c_t, x)`` for each later choice and each unchosen ``x``.
  One 8-rank-2 answer implies 7 + 6 = 13 triplets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

TYPES = ("triplet", "pair", "odd_one_out", "rank")
RANK_CANDIDATES = range(3, 10)  # n: 3 … 9 candidates beside the anchor


@dataclass(frozen=True)
class Shape:
    """The shape of a question: ``type``, and for ``rank`` its ``n`` candidates and ``k`` picks."""

    type: str = "triplet"
    n: int = 2
    k: int = 1

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"shape type must be one of {', '.join(TYPES)}, got {self.type!r}")
        if self.type == "rank":
            if self.n not in RANK_CANDIDATES:
                raise ValueError(f"a rank shape's n must be 3 … 9 candidates, got {self.n!r}")
            if not 1 <= self.k < self.n:
                raise ValueError(f"a rank shape's k must be 1 … n-1 = {self.n - 1}, got {self.k!r}")
        else:
            fixed = {"triplet": (2, 1), "pair": (2, 1), "odd_one_out": (2, 1)}[self.type]
            if (self.n, self.k) != fixed:
                raise ValueError(f"only a rank shape takes n and k, not {self.type!r}")

    @classmethod
    def of(cls, value: str | dict | Shape | None) -> Shape:
        """A shape from its name, its JSON form ``{"type": …, "n": …, "k": …}``, or None."""
        if value is None:
            return cls()
        if isinstance(value, Shape):
            return value
        if isinstance(value, str):
            return cls(value)
        return cls(**value)

    @property
    def size(self) -> int:
        """How many objects a screen of this shape shows."""
        return {"triplet": 3, "pair": 2, "odd_one_out": 3}.get(self.type, self.n + 1)

    @property
    def has_anchor(self) -> bool:
        return self.type in ("triplet", "rank")

    @property
    def triplets_per_answer(self) -> int:
        """How many triplets one answer implies (0 for a pair)."""
        if self.type == "rank":
            return sum(self.n - t for t in range(1, self.k + 1))
        return {"triplet": 1, "pair": 0, "odd_one_out": 2}[self.type]

    def as_json(self) -> dict:
        if self.type == "rank":
            return {"type": "rank", "n": self.n, "k": self.k}
        return {"type": self.type}


def shape_of(objects: Sequence[int], kind: str, k: int | None = None) -> Shape:
    """The shape of a stored question from its kind, its objects and (rank) its ``k``."""
    if kind == "rank":
        return Shape("rank", n=len(objects) - 1, k=int(k or 1))
    return Shape(kind)


def check_choice(shape: Shape, objects: Sequence[int], choice: object) -> int | tuple[int, ...]:
    """The answer ``choice`` to a question of ``shape`` showing ``objects``, checked.

    Returns the choice normalised (an int, or a tuple for rank); raises ``ValueError``
    with a message a participant's client can act on.
    """
    if shape.type == "pair":
        if isinstance(choice, bool) or choice not in (-1, 0, 1):
            raise ValueError("the choice for a pair is -1, 0 (a tie) or 1")
        return int(choice)
    if shape.type == "rank":
        if not isinstance(choice, list | tuple) or any(
            isinstance(c, bool) or not isinstance(c, int) for c in choice
        ):
            raise ValueError(f"the choice for a ranked grid is a list of {shape.k} object indices")
        candidates = set(objects[1:])
        if len(choice) != shape.k or len(set(choice)) != shape.k or not set(choice) <= candidates:
            raise ValueError(
                f"the choice must list {shape.k} different candidates of the question, in order"
            )
        return tuple(int(c) for c in choice)
    if isinstance(choice, bool) or not isinstance(choice, int):
        raise ValueError("the choice is the index of one of the question's objects")
    allowed = objects[1:] if shape.type == "triplet" else objects
    if choice not in allowed:
        what = "candidates" if shape.type == "triplet" else "three objects"
        raise ValueError(f"the choice must be one of the question's {what}: {list(allowed)}")
    return int(choice)


def implied_triplets(
    shape: Shape, objects: Sequence[int], choice: int | Sequence[int]
) -> list[tuple[int, int, int]]:
    """The triplets ``(anchor, near, far)`` one answer implies (the module's rule)."""
    if shape.type == "pair":
        return []
    if shape.type == "triplet":
        anchor, first, second = objects
        return [(anchor, choice, second if choice == first else first)]
    if shape.type == "odd_one_out":
        i, j = (o for o in objects if o != choice)
        return [(i, j, choice), (j, i, choice)]
    anchor, *candidates = objects
    picked = list(choice)
    rest = [c for c in candidates if c not in picked]
    return [
        (anchor, near, far) for t, near in enumerate(picked) for far in (*picked[t + 1 :], *rest)
    ]


def implied_triplets_many(
    answers: Iterable[tuple[Shape, Sequence[int], int | Sequence[int]]],
) -> np.ndarray:
    """The implied triplets of many answers as one ``(n_triplets, 3)`` ``intp`` array."""
    rows = [
        row
        for shape, objects, choice in answers
        for row in implied_triplets(shape, objects, choice)
    ]
    return np.asarray(rows, dtype=np.intp).reshape(-1, 3)

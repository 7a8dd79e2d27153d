"""What a query strategy is: a deterministic, database-free proposer of questions.

A strategy maps (its state, a step number) to the next question it wants asked, and
(state, an answer) to a new state. State is plain JSON data, so the service can store
it beside the project and a replay from the same seed proposes the same questions.
Randomness comes only from ``np.random.default_rng([seed, step])``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from app.learning.shapes import Shape


@dataclass(frozen=True)
class Proposal:
    """A question a strategy wants answered.

    ``kind`` is the question's shape type (``app.learning.shapes``). ``objects`` lists the
    anchor first, then the two candidates (triplet), or the two objects (pair); the three
    objects in increasing order (odd_one_out); the anchor, then the candidates in
    increasing order (rank, ``k`` picks asked): a shaped question's objects are stored in
    this canonical form, and shown in an order drawn per query. ``gold_choice`` is the known
    right answer of a gold question (an object index: a triplet's near candidate, an
    odd-one-out's odd object, a ranked grid's first pick). ``ref`` is the strategy's own
    note, handed back to it with the answer.
    """

    kind: str
    objects: tuple[int, ...]
    strategy: str
    gold_choice: int | None = None
    ref: dict[str, Any] = field(default_factory=dict)
    k: int | None = None

    @classmethod
    def shaped(
        cls,
        shape: Shape,
        objects: Sequence[int],
        strategy: str,
        gold_choice: int | None = None,
        ref: dict[str, Any] | None = None,
    ) -> Proposal:
        """A question of ``shape`` over ``objects`` (the anchor first for a triplet or a
        ranked grid), its objects put in canonical form."""
        objects = tuple(int(o) for o in objects)
        if len(objects) != shape.size:
            raise ValueError(f"a {shape.type} question shows {shape.size} objects")
        k = None
        if shape.type == "odd_one_out":
            objects = tuple(sorted(objects))
        elif shape.type == "rank":
            objects = (objects[0], *sorted(objects[1:]))
            k = shape.k
        return cls(shape.type, objects, strategy, gold_choice, ref or {}, k)

    @property
    def shape(self) -> Shape:
        return (
            Shape("rank", len(self.objects) - 1, self.k or 1)
            if self.kind == "rank"
            else (Shape(self.kind))
        )

    @property
    def key(self) -> str:
        """The question's identity, the same in any order its objects are shown:
        ``t:anchor:low:high`` (triplet), ``p:low:high`` (pair), ``o:i:j:k`` (odd_one_out),
        ``r{k}:anchor:candidates…`` (rank); a gold question's starts with ``g``."""
        gold = "g" if self.gold_choice is not None else ""
        if self.kind == "triplet":
            anchor, first, second = self.objects
            low, high = sorted((first, second))
            return f"{gold or 't'}:{anchor}:{low}:{high}"
        if self.kind == "odd_one_out":
            return f"{gold}o:" + ":".join(str(o) for o in sorted(self.objects))
        if self.kind == "rank":
            anchor, *candidates = self.objects
            return f"{gold}r{self.k}:{anchor}:" + ":".join(str(o) for o in sorted(candidates))
        low, high = sorted(self.objects)
        return f"p:{low}:{high}"


class ShapeError(ValueError):
    """A strategy cannot ask questions of the shape it was given (the plan's ``shape``)."""


def step_rng(seed: int, step: int) -> np.random.Generator:
    return np.random.default_rng([seed, step])


@dataclass(frozen=True)
class Param:
    """One parameter a strategy accepts, declared once beside the strategy: the check of
    unknown names (:func:`check_only`), the plan builder's form and ``GET /api/strategies``
    read it. ``kind`` says what a value is: ``int``, ``float``, ``bool``, ``choice`` (one
    of ``choices``), ``indices`` (a list of object indices) or ``triplets`` (a list of
    ``[a, b, c]``). ``default`` None: the strategy decides (``description`` says how).
    ``low``/``high`` bound a number (inclusive; None: unbounded or bounded by the project).
    ``applies_with``: the other params it needs (adaptive's ``model`` with ``kind: pairs``).
    The strategy's constructor still checks every value (with the reasons it gives), and a
    test holds the two together (tests/active/test_strategy_params.py)."""

    name: str
    kind: str
    description: str
    default: Any = None
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    applies_with: tuple[tuple[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "default": self.default,
            "low": self.low,
            "high": self.high,
            "choices": list(self.choices),
            "applies_with": dict(self.applies_with),
        }


class Strategy(ABC):
    """A source of questions; subclasses set ``kind`` and implement :meth:`propose`."""

    kind: ClassVar[str]
    #: whether a question of this strategy is asked ``redundancy`` times
    redundant: ClassVar[bool] = True
    #: the ``params`` it accepts (see :class:`Param`)
    declared: ClassVar[tuple[Param, ...]] = ()
    #: the question shapes it can ask (a plan's ``shape``; ``app.learning.shapes``)
    shapes: ClassVar[tuple[str, ...]] = ("triplet",)

    @classmethod
    def param_names(cls) -> set[str]:
        return {param.name for param in cls.declared}

    @classmethod
    def describe(cls) -> dict[str, Any]:
        """What the strategy is and what it accepts, as data: its kind, the first paragraph
        of its docstring, whether redundancy applies, and its declared params."""
        doc = (cls.__doc__ or "").strip().split("\n\n", 1)[0]
        return {
            "kind": cls.kind,
            "description": " ".join(doc.split()),
            "redundant": cls.redundant,
            "shapes": list(cls.shapes),
            "params": [param.as_dict() for param in cls.declared],
        }

    def __init__(
        self, n_objects: int, params: Mapping[str, Any], seed: int, shape: Shape | None = None
    ) -> None:
        self.n_objects = n_objects
        self.params = dict(params)
        self.seed = seed
        self.shape = shape or Shape()
        if self.shape.type not in self.shapes:
            raise ShapeError(
                f"strategy {self.kind!r} asks {' or '.join(self.shapes)} questions, "
                f"not {self.shape.type}"
                if len(self.shapes) > 1
                else f"strategy {self.kind!r} takes no shape (its questions are its own), "
                f"got {self.shape.type}"
            )
        if self.shape.type not in ("triplet", "pair") and self.shape.size > n_objects:
            raise ShapeError(
                f"a {self.shape.type} question shows {self.shape.size} objects, "
                f"the project has {n_objects}"
            )

    @abstractmethod
    def propose(self, state: dict[str, Any], step: int) -> Proposal | None:
        """The next question, or None when this strategy has nothing to ask now."""

    def initial_state(self) -> dict[str, Any]:
        return {}

    def answers_wanted(self, proposal: Proposal, plan_redundancy: int) -> int:
        """How many answers (by distinct participants) a new question of this strategy wants."""
        return plan_redundancy if self.redundant else 1

    def observe(self, state: dict[str, Any], proposal: Proposal, outcome: int) -> dict[str, Any]:
        """The state after ``proposal`` was answered with ``outcome`` (passive: unchanged)."""
        return state


def check_indices(values: Sequence[int], n_objects: int, what: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or array.dtype.kind not in "iu":
        raise ValueError(f"{what} must be a list of object indices")
    if len(array) and (array.min() < 0 or array.max() >= n_objects):
        raise ValueError(f"{what} hold an index outside 0..{n_objects - 1}")
    if len(np.unique(array)) != len(array):
        raise ValueError(f"{what} repeat an object")
    return array


def check_only(params: Mapping[str, Any], allowed: set[str], kind: str) -> None:
    unknown = set(params) - allowed
    if unknown:
        allowed_text = ", ".join(sorted(allowed)) or "none"
        raise ValueError(
            f"unknown params {sorted(unknown)} for strategy {kind!r}; allowed: {allowed_text}"
        )

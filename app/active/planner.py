"""A collection plan: strategies mixed by weight, each within its budget, plus gold checks."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.active.adaptive import AdaptiveTriplets
from app.active.base import Proposal, ShapeError, Strategy, step_rng
from app.active.comprf import ComparisonForestStrategy
from app.active.gold import GoldQuestions
from app.active.landmarks import LandmarkK1, LandmarkK2
from app.active.passive import RandomPairs, RandomTriplets
from app.learning.shapes import Shape

STRATEGIES: dict[str, type[Strategy]] = {
    cls.kind: cls
    for cls in (
        RandomTriplets,
        LandmarkK1,
        LandmarkK2,
        RandomPairs,
        GoldQuestions,
        AdaptiveTriplets,
        ComparisonForestStrategy,
    )
}


class StrategyError(ValueError):
    """A strategy of a plan that cannot run, with where in the plan: ``loc`` is the path of
    the field to blame (``("strategies", 0, "params", "n_landmarks")``), for a form to show
    the message beside it."""

    def __init__(self, message: str, loc: tuple[str | int, ...]) -> None:
        super().__init__(message)
        self.loc = loc


def _blamed_param(message: str, names: set[str]) -> str | None:
    """The declared param a strategy's refusal names first (its messages start from, or
    quote, the param they refuse), if any."""
    found = [
        (match.start(), name)
        for name in names
        if (match := re.search(rf"(?<![A-Za-z_]){re.escape(name)}(?![A-Za-z_])", message))
    ]
    return min(found)[1] if found else None


def stream_seed(seed: int, position: int) -> int:
    """A seed for the strategy at ``position``, independent of its neighbours'."""
    return int(np.random.SeedSequence([seed, position]).generate_state(1)[0])


@dataclass
class PlannedStrategy:
    strategy: Strategy
    weight: float
    budget: int | None


class Planner:
    """Chooses which strategy proposes the next question.

    Parameters
    ----------
    strategies : list of mappings ``{"kind", "weight", "budget"?, "params"?, "shape"?}``
        ``budget`` caps how many distinct questions the strategy creates; a strategy at
        its budget stops, and when all have stopped the plan is exhausted.
    n_objects : int
    seed : int
    gold_rate : float
        Probability that a question is a gold question: from the plan's ``gold``
        strategy if it has one, else an identity check.

    Raises :class:`StrategyError` (a ``ValueError``) naming the strategy for anything it
    cannot run.
    """

    def __init__(
        self,
        strategies: Sequence[Mapping[str, Any]],
        n_objects: int,
        seed: int,
        gold_rate: float = 0.0,
    ) -> None:
        if not strategies:
            raise ValueError("a plan needs at least one strategy")
        if not 0.0 <= gold_rate < 1.0:
            raise ValueError(f"gold_rate must be in [0, 1), got {gold_rate}")
        self.seed = seed
        self.gold_rate = gold_rate
        self.planned: list[PlannedStrategy] = []
        for position, spec in enumerate(strategies):
            kind = spec["kind"]
            if kind not in STRATEGIES:
                raise StrategyError(
                    f"strategy {position}: unknown kind {kind!r}; known: {', '.join(STRATEGIES)}",
                    ("strategies", position, "kind"),
                )
            try:
                given = {k: v for k, v in (spec.get("shape") or {}).items() if v is not None}
                shape = Shape.of(given or None)
            except (ValueError, TypeError) as error:
                loc = ("strategies", position, "shape")
                raise StrategyError(f"strategy {position} ({kind}): {error}", loc) from error
            try:
                strategy = STRATEGIES[kind](
                    n_objects, spec.get("params") or {}, stream_seed(seed, position), shape
                )
            except ShapeError as error:
                loc = ("strategies", position, "shape")
                raise StrategyError(f"strategy {position} ({kind}): {error}", loc) from error
            except (ValueError, TypeError) as error:
                param = _blamed_param(str(error), STRATEGIES[kind].param_names())
                loc = ("strategies", position, *(("params", param) if param else ()))
                raise StrategyError(f"strategy {position} ({kind}): {error}", loc) from error
            self.planned.append(PlannedStrategy(strategy, spec["weight"], spec.get("budget")))
        gold = [p.strategy for p in self.planned if p.strategy.kind == "gold"]
        self.gold_source: Strategy | None = None
        if gold_rate > 0:
            # Without a gold strategy: identity checks in the shape of the plan's first
            # shaped strategy (triplets if none is shaped).
            shaped = [p.strategy.shape for p in self.planned if p.strategy.shape.type
                      not in ("triplet", "pair")]  # fmt: skip
            self.gold_source = (
                gold[0]
                if gold
                else GoldQuestions(n_objects, {}, stream_seed(seed, len(self.planned)), *shaped[:1])
            )

    def initial_state(self) -> dict[str, Any]:
        return {"created": [0] * len(self.planned), "strategies": [{} for _ in self.planned]}

    def open_strategies(self, state: Mapping[str, Any]) -> list[int]:
        created = state["created"]
        return [
            i
            for i, planned in enumerate(self.planned)
            if planned.weight > 0 and (planned.budget is None or created[i] < planned.budget)
        ]

    def exhausted(self, state: Mapping[str, Any]) -> bool:
        return not self.open_strategies(state)

    def propose(self, state: Mapping[str, Any], step: int) -> tuple[int, Proposal] | None:
        """``(strategy position, proposal)`` for step ``step``, or None when exhausted.

        Position −1 stands for the implicit identity-check source of ``gold_rate``.
        """
        open_positions = self.open_strategies(state)
        if not open_positions:
            return None
        # The step's generator is built only when something is drawn from it: a plan of one
        # open strategy and no gold draws nothing (building it was more than half of a
        # random triplet's cost, measured; the pool is filled 128 questions at a time).
        rng = None
        if self.gold_source is not None:
            rng = step_rng(self.seed, step)
            if rng.random() < self.gold_rate:
                position = next(
                    (i for i, p in enumerate(self.planned) if p.strategy is self.gold_source), -1
                )
                return position, self.gold_source.propose({}, step)
        # A strategy with nothing to ask now (comprf waiting for answers) yields to the others.
        while open_positions:
            if len(open_positions) == 1:
                position = open_positions[0]  # what any draw would choose; none is read after
            else:
                if rng is None:
                    rng = step_rng(self.seed, step)
                weights = [self.planned[i].weight for i in open_positions]
                total = sum(weights)
                position = open_positions[
                    int(rng.choice(len(open_positions), p=[w / total for w in weights]))
                ]
            strategy = self.planned[position].strategy
            proposal = strategy.propose(state["strategies"][position], step)
            if proposal is not None:
                return position, proposal
            open_positions = [i for i in open_positions if i != position]
        return None

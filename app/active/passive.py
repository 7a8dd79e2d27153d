"""Passive strategies: uniformly random triplets and random pairs."""

from __future__ import annotations

from typing import Any

from app.active.base import Proposal, Strategy, check_only, step_rng
from app.learning.shapes import Shape


class RandomTriplets(Strategy):
    """Triplets drawn uniformly: any anchor, two other distinct candidates (or any objects in
    the plan's ``shape``: an odd-one-out's three, a ranked grid's anchor and candidates).

    The passive data TripletBoost and the triplet kernels learn from (Perrot & von
    Luxburg 2019, §4; Kleindessner & von Luxburg 2017, §2).
    """

    kind = "random"
    shapes = ("triplet", "odd_one_out", "rank")

    def __init__(
        self, n_objects: int, params: dict[str, Any], seed: int, shape: Shape | None = None
    ) -> None:
        super().__init__(n_objects, params, seed, shape)
        check_only(params, self.param_names(), self.kind)
        if n_objects < 3:
            raise ValueError(
                f"random triplets need at least 3 objects, the project has {n_objects}"
            )

    def propose(self, state: dict[str, Any], step: int) -> Proposal:
        rng = step_rng(self.seed, step)
        if self.shape.type != "triplet":  # any objects; a grid's anchor first
            return Proposal.shaped(
                self.shape, rng.choice(self.n_objects, self.shape.size, replace=False), self.kind
            )
        anchor, first, second = rng.choice(self.n_objects, 3, replace=False)
        return Proposal("triplet", (int(anchor), int(first), int(second)), self.kind)


class RandomPairs(Strategy):
    """Pairs drawn uniformly, for SVMcompare (Venuto et al. 2016): better, same, or worse."""

    kind = "pairs"

    def __init__(
        self, n_objects: int, params: dict[str, Any], seed: int, shape: Shape | None = None
    ) -> None:
        super().__init__(n_objects, params, seed, shape)
        check_only(params, self.param_names(), self.kind)
        if n_objects < 2:
            raise ValueError(f"pairs need at least 2 objects, the project has {n_objects}")

    def propose(self, state: dict[str, Any], step: int) -> Proposal:
        left, right = step_rng(self.seed, step).choice(self.n_objects, 2, replace=False)
        return Proposal("pair", (int(left), int(right)), self.kind)

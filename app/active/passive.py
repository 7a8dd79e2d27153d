"""Passive strategies: uniformly random triplets and random pairs."""

from __future__ import annotations

from typing import Any

from app.active.base import Proposal, Strategy, check_only, step_rng


class RandomTriplets(Strategy):
    """Triplets drawn uniformly: any anchor, two other distinct candidates.

    The passive data TripletBoost and the triplet kernels learn from (Perrot & von
    Luxburg 2019, §4; Kleindessner & von Luxburg 2017, §2).
    """

    kind = "random"

    def __init__(self, n_objects: int, params: dict[str, Any], seed: int) -> None:
        super().__init__(n_objects, params, seed)
        check_only(params, self.param_names(), self.kind)
        if n_objects < 3:
            raise ValueError(
                f"random triplets need at least 3 objects, the project has {n_objects}"
            )

    def propose(self, state: dict[str, Any], step: int) -> Proposal:
        anchor, first, second = step_rng(self.seed, step).choice(self.n_objects, 3, replace=False)
        return Proposal("triplet", (int(anchor), int(first), int(second)), self.kind)


class RandomPairs(Strategy):
    """Pairs drawn uniformly, for SVMcompare (Venuto et al. 2016): better, same, or worse."""

    kind = "pairs"

    def __init__(self, n_objects: int, params: dict[str, Any], seed: int) -> None:
        super().__init__(n_objects, params, seed)
        check_only(params, self.param_names(), self.kind)
        if n_objects < 2:
            raise ValueError(f"pairs need at least 2 objects, the project has {n_objects}")

    def propose(self, state: dict[str, Any], step: int) -> Proposal:
        left, right = step_rng(self.seed, step).choice(self.n_objects, 2, replace=False)
        return Proposal("pair", (int(left), int(right)), self.kind)

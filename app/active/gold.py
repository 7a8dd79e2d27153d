"""Gold questions: questions whose right answer is known, to measure a worker's attention."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.active.base import Param, Proposal, Strategy, check_only, step_rng
from app.learning.shapes import Shape


class GoldQuestions(Strategy):
    """Researcher-supplied gold triplets, or identity checks.

    ``params``: ``{"triplets": [[a, b, c], …]}`` — a is known to be closer to b than to c —
    asked in turn; without them, identity checks: the anchor shown beside its exact
    duplicate and another object, so the duplicate is the right answer. Gold questions
    are never asked ``redundancy`` times and are not used as training data.
    """

    kind = "gold"
    redundant = False
    shapes = ("triplet", "odd_one_out", "rank")
    declared = (
        Param(
            "triplets", "triplets", "Gold questions [a, b, c]: a is known to be closer to b "
            "than to c (default: identity checks).",
        ),
    )  # fmt: skip

    def __init__(
        self, n_objects: int, params: dict[str, Any], seed: int, shape: Shape | None = None
    ) -> None:
        super().__init__(n_objects, params, seed, shape)
        check_only(params, self.param_names(), self.kind)
        self.triplets = None
        if "triplets" in params and self.shape.type != "triplet":
            raise ValueError(
                f"gold 'triplets' are asked as triplets, not as {self.shape.type} questions: "
                "leave out the shape, or the triplets for identity checks"
            )
        if "triplets" in params:
            triplets = np.asarray(params["triplets"])
            if triplets.ndim != 2 or triplets.shape[1] != 3 or triplets.dtype.kind not in "iu":
                raise ValueError("gold 'triplets' must be a list of [a, b, c] object indices")
            if len(triplets) == 0:
                raise ValueError("gold 'triplets' is empty")
            if triplets.min() < 0 or triplets.max() >= n_objects:
                raise ValueError(f"gold 'triplets' hold an index outside 0..{n_objects - 1}")
            rows = np.sort(triplets, axis=1)
            if np.any(rows[:, 1:] == rows[:, :-1]):
                raise ValueError("each gold triplet must name three distinct objects")
            self.triplets = triplets
        elif n_objects < max(2, self.shape.size - 1):
            raise ValueError(f"identity checks need at least {max(2, self.shape.size - 1)} objects")

    def propose(self, state: dict[str, Any], step: int) -> Proposal:
        rng = step_rng(self.seed, step)
        if self.triplets is not None:
            anchor, near, far = self.triplets[rng.integers(len(self.triplets))]
            return Proposal("triplet", (int(anchor), int(near), int(far)), self.kind, int(near))
        if self.shape.type != "triplet":
            return self._identity(rng)
        anchor, other = rng.choice(self.n_objects, 2, replace=False)
        return Proposal(
            "triplet", (int(anchor), int(anchor), int(other)), self.kind, int(anchor),
            ref={"identity": True},
        )  # fmt: skip

    def _identity(self, rng: np.random.Generator) -> Proposal:
        """An identity check of the shape: an odd-one-out shows an object twice beside
        another (the other is odd); a ranked grid has the anchor's duplicate among its
        candidates (the duplicate is the right first pick)."""
        if self.shape.type == "odd_one_out":
            same, odd = (int(o) for o in rng.choice(self.n_objects, 2, replace=False))
            return Proposal.shaped(self.shape, (same, same, odd), self.kind, odd,
                                   ref={"identity": True})  # fmt: skip
        anchor, *others = (int(o) for o in rng.choice(self.n_objects, self.shape.n, replace=False))
        return Proposal.shaped(self.shape, (anchor, anchor, *others), self.kind, anchor,
                               ref={"identity": True})  # fmt: skip

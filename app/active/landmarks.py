"""The landmark designs of Kleindessner & von Luxburg (2017), §2.3.

k1: the anchor is any object, the two candidates are landmarks; the answers order the
landmarks by their distance to the anchor, which is what k1's feature map needs.
k2: the anchor is a landmark, the candidates are an object and another landmark.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.active.base import Param, Proposal, Strategy, check_indices, check_only, step_rng
from app.learning.shapes import Shape


class LandmarkTriplets(Strategy):
    """Triplets of the k1 or k2 landmark design.

    ``params``: ``{"landmarks": [indices]}`` or ``{"n_landmarks": L}`` (chosen uniformly
    from the seed). The paper uses a few landmarks (10–30) chosen at random; without
    either parameter we take ``min(15, n_objects)`` as its experiments do for digits.
    """

    design = "k1"
    shapes = ("triplet", "odd_one_out", "rank")
    declared = (
        Param(
            "n_landmarks", "int", "Landmarks drawn at random from the seed (default: "
            "15, or every object if there are fewer).", low=2,
        ),
        Param("landmarks", "indices", "The landmarks' object indices (instead of n_landmarks)."),
    )  # fmt: skip

    def __init__(
        self, n_objects: int, params: dict[str, Any], seed: int, shape: Shape | None = None
    ) -> None:
        super().__init__(n_objects, params, seed, shape)
        check_only(params, self.param_names(), self.kind)
        if "landmarks" in params and "n_landmarks" in params:
            raise ValueError("give either 'landmarks' or 'n_landmarks', not both")
        if "landmarks" in params:
            self.landmarks = check_indices(params["landmarks"], n_objects, "landmarks")
        else:
            count = params.get("n_landmarks", min(15, n_objects))
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ValueError(f"n_landmarks must be a positive integer, got {count!r}")
            if count > n_objects:
                raise ValueError(f"n_landmarks={count} exceeds the {n_objects} objects")
            self.landmarks = np.sort(
                np.random.default_rng([seed]).choice(n_objects, count, replace=False)
            )
        if len(self.landmarks) < 2:
            raise ValueError(f"the {self.design} design needs at least 2 landmarks")
        if n_objects < 3:
            raise ValueError(f"the {self.design} design needs at least 3 objects")
        # A ranked grid's candidates are landmarks (k1: all of them, not the anchor; k2: all
        # but one object, beside a landmark as the anchor).
        wanted = self.shape.size
        if self.shape.type == "rank" and len(self.landmarks) < wanted:
            raise ValueError(
                f"a {self.shape.type} question of the {self.design} design needs at least "
                f"{wanted} landmarks, got {len(self.landmarks)}"
            )

    def propose(self, state: dict[str, Any], step: int) -> Proposal:
        rng = step_rng(self.seed, step)
        if self.shape.type == "rank":
            return self._grid(rng)
        if self.design == "k1":
            anchor = int(rng.integers(self.n_objects))
            others = self.landmarks[self.landmarks != anchor]
            first, second = rng.choice(others, 2, replace=False)
        else:
            # Anchor x_j and candidate x_k are landmarks; candidate x_i is any other object.
            anchor, second = rng.choice(self.landmarks, 2, replace=False)
            first = int(rng.integers(self.n_objects - 2))
            for taken in sorted((int(anchor), int(second))):
                first += first >= taken
        objects = (int(anchor), int(first), int(second))
        if self.shape.type == "odd_one_out":  # the same three objects, asked which is odd
            return Proposal.shaped(self.shape, objects, self.kind, ref={"design": self.design})
        return Proposal("triplet", objects, self.kind, ref={"design": self.design})

    def _grid(self, rng: np.random.Generator) -> Proposal:
        """A ranked grid: k1, any anchor and ``n`` landmarks as the candidates; k2, a landmark
        as the anchor, one other object and ``n - 1`` other landmarks as the candidates."""
        n = self.shape.n
        if self.design == "k1":
            anchor = int(rng.integers(self.n_objects))
            candidates = rng.choice(self.landmarks[self.landmarks != anchor], n, replace=False)
        else:
            anchor, *others = rng.choice(self.landmarks, n, replace=False)
            taken = np.array([anchor, *others])
            rest = np.setdiff1d(np.arange(self.n_objects), taken)
            extra = (
                rest[rng.integers(len(rest))]
                if len(rest)
                else rng.choice(np.setdiff1d(self.landmarks, taken))
            )
            candidates = [*others, int(extra)]
        objects = (int(anchor), *(int(c) for c in candidates))
        return Proposal.shaped(self.shape, objects, self.kind, ref={"design": self.design})


class LandmarkK1(LandmarkTriplets):
    """The k1 landmark design: any object as the anchor, two landmarks as the candidates
    (Kleindessner & von Luxburg 2017, §2.3)."""

    kind = "landmark_k1"
    design = "k1"


class LandmarkK2(LandmarkTriplets):
    """The k2 landmark design: a landmark as the anchor, an object and another landmark as
    the candidates (Kleindessner & von Luxburg 2017, §2.3)."""

    kind = "landmark_k2"
    design = "k2"

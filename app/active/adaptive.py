"""Adaptive triplets (and pairs with ties): ask what the current model is least sure of.

The strategy itself only hands out questions from a ranked batch kept in its state;
the batch is scored ahead of demand — when a model the strategy follows lands — by
:meth:`AdaptiveTriplets.refreshed_state` (called from ``app.services.adaptive`` in the
training job), never inside a worker's request. See :mod:`app.active.scoring` for what
the scores mean and where they come from.
"""

from __future__ import annotations

from collections.abc import Mapping
from numbers import Integral, Real
from typing import Any

import numpy as np

from app.active.base import Param, Proposal, ShapeError, Strategy, check_only, step_rng
from app.active.scoring import (
    CRITERIA,
    PAIR_CRITERIA,
    rank_embedding_triplets,
    rank_kernel_triplets,
    rank_pairs,
)
from app.learning.shapes import Shape

EMBEDDING_METHODS = ("soe", "tste", "ckl", "gnmds")
KINDS = ("embedding", "k1", "k2", "pairs")
RANKING_MODELS = ("bradley_terry", "svmcompare")  # what kind "pairs" follows
SCORES = CRITERIA
BATCH_PER_REFRESH = 2  # a batch holds this many refreshes' worth of questions


def _integer(params: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = params.get(name, default)
    if not isinstance(value, Integral) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


class AdaptiveTriplets(Strategy):
    """Triplets chosen by the information their answer would bring.

    ``params``
        ``kind``: ``"embedding"`` (default) follows the project's latest ``embedding``
        model of ``method`` (default ``"tste"``) and ``dims`` (default 2) and asks, for
        each anchor in turn, the candidate pair of a random ``pool`` (default 50) whose
        answer is most uncertain: ``score="entropy"`` (default), the entropy of the
        model's answer probability at the anchor, ``score="infogain"``, the expected
        information gain about the anchor's position of Tamuz et al. (2011), Eq. (6),
        ``score="bald"``, the mutual information between the answer and all three
        positions under a Laplace posterior (Houlsby et al. 2011), or
        ``score="predictive"``, the entropy of the answer averaged over that posterior
        (on our benchmark the plain entropy needs the fewest answers; docs/benchmarks.md);
        ``"k1"`` / ``"k2"``
        follow the triplet kernels of Kleindessner & von Luxburg (2017) and ask the
        comparisons that support their least-known kernel values (no model needed, the
        answers suffice); ``"pairs"`` asks pairs with ties (better / about the same /
        worse) and follows the project's latest ranking ``model``: ``"bradley_terry"``
        (default; no features needed) or ``"svmcompare"`` (a Davidson link fitted to its
        ranking), asking for each object in turn the partner of a random ``pool`` whose
        three-way outcome is least sure, by ``score`` ``"confidence"`` (default),
        ``"margin"`` or ``"entropy"`` (:func:`app.active.scoring.rank_pairs`; on
        ``bench/active_pairs.py`` the entropy needed 2-4x the answers of the others).
        ``explore`` (default 0.1) is the share of uniformly random questions mixed in;
        ``refresh_every`` (default 10) the answers between refits; ``seed`` (default 0)
        varies the draws.

    Until a batch has been scored (no model yet) every question is random.
    """

    kind = "adaptive"
    shapes = ("triplet", "odd_one_out", "rank")
    declared = (
        Param(
            "kind", "choice", "What it follows: an embedding model, the k1 / k2 triplet "
            "kernel (no model needed), or a ranking of pairs with ties (pairs).",
            default="embedding", choices=KINDS,
        ),
        Param(
            "model", "choice", "The ranking model kind pairs follows (kind pairs only).",
            default="bradley_terry", choices=RANKING_MODELS, applies_with=(("kind", "pairs"),),
        ),
        Param(
            "method", "choice", "The embedding's method (kind embedding only).",
            default="tste", choices=EMBEDDING_METHODS,
        ),
        Param("dims", "int", "The embedding's dimensions (kind embedding only).", 2, 1, 50),
        Param("pool", "int", "Candidate pairs scored per anchor.", 50, 1, 10_000),
        Param("explore", "float", "Share of uniformly random questions mixed in.", 0.1, 0, 1),
        Param("refresh_every", "int", "Answers between refits of the model.", 10, 1, 1_000_000),
        Param("score", "choice", "What makes a question informative.", "entropy", choices=SCORES),
        Param("seed", "int", "Varies the draws.", 0, 0, 2**31 - 1),
    )  # fmt: skip

    def __init__(
        self, n_objects: int, params: Mapping[str, Any], seed: int, shape: Shape | None = None
    ) -> None:
        super().__init__(n_objects, params, seed, shape)
        check_only(params, self.param_names(), self.kind)
        self.variant = params.get("kind", "embedding")
        if self.variant not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {self.variant!r}")
        self.method = params.get("method", "tste")
        if self.method not in EMBEDDING_METHODS:
            raise ValueError(
                f"method must be one of {', '.join(EMBEDDING_METHODS)}, got {self.method!r}"
            )
        if self.variant != "embedding" and ("method" in params or "dims" in params):
            raise ValueError(f"method and dims apply to kind 'embedding', not {self.variant!r}")
        self.ranking_model = params.get("model", "bradley_terry")
        if self.variant != "pairs" and "model" in params:
            raise ValueError(f"model applies to kind 'pairs', not {self.variant!r}")
        if self.ranking_model not in RANKING_MODELS:
            raise ValueError(
                f"model must be one of {', '.join(RANKING_MODELS)}, got {self.ranking_model!r}"
            )

        if self.variant == "pairs" and self.shape.type != "triplet":
            raise ShapeError(f"adaptive kind 'pairs' asks pairs, not {self.shape.type} questions")
        scores = PAIR_CRITERIA if self.variant == "pairs" else SCORES
        self.score = params.get("score", scores[0])
        if self.score not in scores:
            raise ValueError(f"score must be one of {', '.join(scores)}, got {self.score!r}")
        self.dims = _integer(params, "dims", 2, 1, 50)
        self.pool = _integer(params, "pool", 50, 1, 10_000)
        # 10, not 25 (issue 33): answers to random's final accuracy on blobs30 at 10% noise,
        # in-process, 3 seeds, budget 900: 428 against 519 (docs/crowd-quality.md). A refit
        # of a small project costs ~1-2 s in the job runner, and one runs at a time per
        # project, so on a large one the refits simply follow each other.
        self.refresh_every = _integer(params, "refresh_every", 10, 1, 1_000_000)
        explore = params.get("explore", 0.1)
        if not isinstance(explore, Real) or isinstance(explore, bool) or not 0 <= explore <= 1:
            raise ValueError(f"explore must be a number in [0, 1], got {explore!r}")
        self.explore = float(explore)
        self.param_seed = _integer(params, "seed", 0, 0, 2**31 - 1)
        self.seed = int(np.random.SeedSequence([seed, self.param_seed]).generate_state(1)[0])
        if n_objects < (2 if self.variant == "pairs" else 3):
            what = "pairs need at least 2" if self.variant == "pairs" else "triplets need 3"
            raise ValueError(f"adaptive {what} objects, the project has {n_objects}")

    # ------------------------------------------------------------ what it follows
    @property
    def model_kind(self) -> str:
        """The model kind whose landing refreshes the batch: embedding, kernel, or the
        ranking model of pairs."""
        if self.variant == "pairs":
            return self.ranking_model
        return "embedding" if self.variant == "embedding" else "kernel"

    @property
    def answer_kind(self) -> str:
        """The kind of answer this strategy's questions get: pair, or its shape's."""
        return "pair" if self.variant == "pairs" else self.shape.type

    def model_params(self) -> dict[str, Any]:
        """Training params of the model this strategy asks to be refit."""
        if self.variant == "pairs":
            return {}
        if self.variant == "embedding":
            return {"method": self.method, "dims": self.dims}
        return {"kernel": self.variant}

    def follows(self, kind: str, params: Mapping[str, Any]) -> bool:
        """Whether a model of ``kind`` with ``params`` is one this strategy scores with."""
        if kind != self.model_kind:
            return False
        if self.variant == "pairs":
            return True
        if self.variant == "embedding":
            return params.get("method") == self.method and params.get("dims") == self.dims
        return params.get("kernel") == self.variant and not params.get("landmarks")

    @property
    def batch_size(self) -> int:
        return BATCH_PER_REFRESH * self.refresh_every

    # ------------------------------------------------------------ asking
    def propose(self, state: dict[str, Any], step: int) -> Proposal:
        """The next scored triplet (advancing ``state["next"]`` in place), or with
        probability ``explore`` — and whenever the batch is used up — a random one."""
        rng = step_rng(self.seed, step)
        batch = state.get("batch") or []
        cursor = int(state.get("next", 0))
        if rng.random() >= self.explore and cursor < len(batch):
            state["next"] = cursor + 1
            kind = "pair" if self.variant == "pairs" else "triplet"
            if kind == "triplet" and self.shape.type != "triplet":
                return self._around(rng, batch[cursor])
            return Proposal(kind, tuple(batch[cursor]), self.kind, ref={"scored": 1})
        if self.shape.type != "triplet":
            objects = rng.choice(self.n_objects, self.shape.size, replace=False)
            return Proposal.shaped(self.shape, objects, self.kind)
        if self.variant == "pairs":
            left, right = rng.choice(self.n_objects, 2, replace=False)
            return Proposal("pair", (int(left), int(right)), self.kind)
        anchor, first, second = rng.choice(self.n_objects, 3, replace=False)
        return Proposal("triplet", (int(anchor), int(first), int(second)), self.kind)

    def _around(self, rng: np.random.Generator, row: list[int]) -> Proposal:
        """A question of the plan's shape around the scored triplet ``row``: its three
        objects asked as an odd-one-out, or a ranked grid of its anchor whose candidates
        are its two and ``n - 2`` others drawn at random (grids chosen by their expected
        information are ``app.active.grid_information``'s, to come)."""
        if self.shape.type == "rank":
            rest = np.setdiff1d(np.arange(self.n_objects), row)
            others = rng.choice(rest, self.shape.n - 2, replace=False)
            row = [*row, *(int(o) for o in others)]
        return Proposal.shaped(self.shape, row, self.kind, ref={"scored": 1})

    # ------------------------------------------------------------ scoring, ahead of demand
    def next_anchors(self, state: Mapping[str, Any], count: int) -> tuple[np.ndarray, int]:
        """``count`` anchors round-robin over a seeded order of the objects, and the
        position of the first of them.

        The round continues where the questions asked stopped: after the anchors of the
        previous batch's rows that were handed out (``state["next"]`` of them), not after
        the whole previous batch, so that no anchor is skipped when a refit lands early.
        """
        order = np.random.default_rng([self.seed, 1]).permutation(self.n_objects)
        if "start" in state:
            start = int(state["start"]) + int(state.get("next", 0))
        else:  # a state from before "start" was kept, or none
            start = int(state.get("cursor", 0))
        start %= self.n_objects
        positions = (start + np.arange(count)) % self.n_objects
        return order[positions], start

    def refreshed_state(
        self,
        state: Mapping[str, Any],
        triplets: np.ndarray,
        *,
        embedding: np.ndarray | None = None,
        model_id: int | None = None,
        answer_id: int | None = None,
        pairs: np.ndarray | None = None,
        scores: np.ndarray | None = None,
        tie: float | None = None,
    ) -> dict[str, Any]:
        """A new state holding a freshly scored batch: for each anchor in round-robin
        order, the most informative candidate of its pool (Salmon's ARR: every head in
        turn, each with its best question — not the globally most uncertain questions,
        which kept returning to the same few anchors).

        ``triplets`` are the answers the model saw; ``embedding`` its points (kind
        ``"embedding"``). Kind ``"pairs"``: ``pairs`` the pair answers (left, right, outcome),
        ``scores`` and ``tie`` the ranking's Davidson scores and tie parameter; the batch
        goes round the objects the same way, each with its least sure partner.
        Deterministic given the state, the inputs and the seed.
        """
        version = int(state.get("refreshes", 0)) + 1
        rng = np.random.default_rng([self.seed, 2, version])
        anchors, start = self.next_anchors(state, self.batch_size)
        if self.variant == "pairs":
            if scores is None or tie is None:
                raise ValueError("kind 'pairs' needs the ranking's scores and tie parameter")
            if len(scores) != self.n_objects:
                raise ValueError(
                    f"the ranking has {len(scores)} scores, the project {self.n_objects} objects"
                )
            answered = np.empty((0, 3), dtype=np.intp) if pairs is None else pairs
            rows, _ = rank_pairs(scores, float(tie), answered, anchors, self.pool, rng, self.score)
            return {
                "batch": rows.tolist(),
                "next": 0,
                "start": start,
                "refreshes": version,
                "model_id": model_id,
                "answer_id": answer_id,
            }
        if self.variant == "embedding":
            if embedding is None:
                raise ValueError("kind 'embedding' needs the model's embedding")
            if embedding.shape[0] != self.n_objects:
                raise ValueError(
                    f"the embedding has {embedding.shape[0]} points, "
                    f"the project {self.n_objects} objects"
                )
            rows, scores = rank_embedding_triplets(
                embedding, triplets, anchors, self.pool, rng, self.method, self.score
            )
        else:
            rows, scores = rank_kernel_triplets(
                triplets, self.n_objects, self.variant, anchors, self.pool, rng
            )
        del scores  # the order is the anchors' round; each row is its anchor's best
        batch, seen = [], set()
        for anchor, first, second in rows.tolist():
            key = (anchor, min(first, second), max(first, second))
            if key not in seen:  # an anchor drawn twice may score the same pair twice
                seen.add(key)
                batch.append([anchor, first, second])
        return {
            "batch": batch,
            "next": 0,
            "start": start,
            "refreshes": version,
            "model_id": model_id,
            "answer_id": answer_id,
        }

"""Routing new objects down a complete comparison tree, as a state machine.

Public through :mod:`app.learning.comparison_tree`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from app.learning._comparison_tree_base import (
    _FORMAT,
    SPLIT,
    _check_answers,
    _check_int,
    _check_queries,
    _VoteMachine,
)

if TYPE_CHECKING:
    from app.learning.comparison_tree import ComparisonTreeBuilder


class ComparisonTreeRouter(_VoteMachine):
    """Routes objects down a complete comparison tree with triplet questions.

    Line 5 of Algorithm 2 of Haghiri, Garreau & von Luxburg (2018): at each
    internal node the object is asked "closer to pivot1 or pivot2?" and moves to
    the left or right child. An object that is itself a pivot of a node moves to
    its own side without a question.

    Parameters
    ----------
    tree : ComparisonTreeBuilder
        A complete tree.
    objects : array-like of int, shape (k,)
        Distinct objects to route.
    redundancy : int, default=1
        Answers per question, combined by majority; ties ask again.

    Attributes
    ----------
    node : ndarray of shape (k,)
        Current node of each object; a leaf once :attr:`is_complete`.
    n_queries_, n_asks_ : int
        Distinct questions answered and answers recorded.
    """

    def __init__(
        self, tree: ComparisonTreeBuilder, objects: ArrayLike, redundancy: int = 1
    ) -> None:
        if not tree.is_complete:
            raise ValueError("the tree is still being built; route objects once it is complete")
        objects = np.asarray(objects)
        if (
            objects.ndim != 1
            or objects.dtype.kind not in "iu"
            or (objects.size and objects.min() < 0)
        ):
            raise ValueError("objects must be a 1-D array of non-negative integer indices")
        ranked = np.sort(objects)
        if np.any(ranked[1:] == ranked[:-1]):
            raise ValueError("objects must be distinct")
        self.tree = tree
        self.redundancy = _check_int(redundancy, "redundancy", 1)
        self.objects = objects.astype(np.int64)
        self.node = np.zeros(len(objects), dtype=np.int64)
        self._asked = np.zeros(len(objects), dtype=np.int64)
        self._p1 = np.zeros(len(objects), dtype=np.int64)
        self.n_queries_ = 0
        self.n_asks_ = 0
        self._advance_pivots(np.arange(len(objects)))

    @property
    def is_complete(self) -> bool:
        return not np.any(self.tree.state[self.node] == SPLIT)

    @classmethod
    def _batch(
        cls, trees: list[ComparisonTreeBuilder], objects: np.ndarray, redundancy: int
    ) -> tuple[ComparisonTreeRouter, np.ndarray]:
        """Route ``objects`` down several trees at once: one oracle call per level.

        Returns the router (slot ``t * len(objects) + i`` is object i in tree t,
        answers by slot only) and each tree's node offset in the merged table.
        """
        from app.learning.comparison_tree import ComparisonTreeBuilder  # a cycle at import time

        n_nodes = np.array([t.n_nodes for t in trees], dtype=np.int64)
        offsets = np.cumsum(n_nodes) - n_nodes
        table = ComparisonTreeBuilder.__new__(ComparisonTreeBuilder)
        table.state = np.concatenate([t.state for t in trees])
        table.child = np.concatenate(
            [np.where(t.child >= 0, t.child + o, -1) for t, o in zip(trees, offsets, strict=True)]
        )
        table.pivot1 = np.concatenate([t.pivot1 for t in trees])
        table.pivot2 = np.concatenate([t.pivot2 for t in trees])
        self = cls.__new__(cls)
        k = len(objects) * len(trees)
        self.tree, self.redundancy = table, _check_int(redundancy, "redundancy", 1)
        self.objects = np.tile(np.asarray(objects, dtype=np.int64), len(trees))
        self.node = np.repeat(offsets, len(objects))
        self._asked = np.zeros(k, dtype=np.int64)
        self._p1 = np.zeros(k, dtype=np.int64)
        self.n_queries_ = self.n_asks_ = 0
        self._advance_pivots(np.arange(k))
        return self, offsets

    def _advance_pivots(self, slots: np.ndarray) -> None:
        """Move objects that are a pivot of their node to that side, without asking."""
        t = self.tree
        while len(slots):
            node = self.node[slots]
            internal = t.state[node] == SPLIT
            is_p1 = internal & (t.pivot1[node] == self.objects[slots])
            is_p2 = internal & (t.pivot2[node] == self.objects[slots])
            move = is_p1 | is_p2
            slots = slots[move]
            self.node[slots] = t.child[node[move]] + is_p2[move]

    def _pending(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = self.tree
        slots = np.flatnonzero(t.state[self.node] == SPLIT)
        node = self.node[slots]
        queries = np.column_stack([self.objects[slots], t.pivot1[node], t.pivot2[node]])
        counts = np.maximum(self.redundancy - self._asked[slots], 1)
        return slots, queries, counts

    def pending_queries(self, return_counts: bool = False) -> Any:
        """Routing questions (object, p1, p2) still wanted; as the builder's ``pending_queries``."""
        _, queries, counts = self._pending()
        return (queries, counts) if return_counts else queries

    def record(self, anchor: int, p1: int, p2: int, closer_to_p1: bool) -> bool:
        """Store one routing answer; False (ignored) when it is not currently asked."""
        return bool(self.record_batch([[anchor, p1, p2]], [closer_to_p1])[0])

    def record_batch(self, queries: ArrayLike, answers: ArrayLike) -> np.ndarray:
        q = _check_queries(queries)
        ans = _check_answers(answers, len(q))
        ranked = np.argsort(self.objects, kind="stable")
        found = np.searchsorted(self.objects, q[:, 0], sorter=ranked)
        slots = ranked[np.minimum(found, len(ranked) - 1)] if len(ranked) else found
        missing = (found >= len(ranked)) | (self.objects[slots] != q[:, 0])
        if np.any(missing):
            raise ValueError(f"object {int(q[missing, 0][0])} is not being routed by this router")
        t, node = self.tree, self.node[slots]
        straight = (t.pivot1[node] == q[:, 1]) & (t.pivot2[node] == q[:, 2])
        flipped = (t.pivot1[node] == q[:, 2]) & (t.pivot2[node] == q[:, 1])
        ok = (t.state[node] == SPLIT) & (straight | flipped)
        self._record_slots(slots[ok], ans[ok] == straight[ok])
        return ok

    def _record_slots(self, slots: np.ndarray, answers: np.ndarray, unique: bool = False) -> None:
        if len(slots) == 0:
            return
        self._add_votes(slots, answers, unique)
        if not unique:
            slots = np.flatnonzero(np.bincount(slots, minlength=len(self.node)))
        decided, left = self._decided(slots)
        slots, left = slots[decided], left[decided]
        self.node[slots] = self.tree.child[self.node[slots]] + ~left
        self._asked[slots] = 0
        self._p1[slots] = 0
        self._advance_pivots(slots)

    def to_dict(self) -> dict[str, Any]:
        """Router state as JSON-compatible data (the tree is persisted separately)."""
        return {
            "format": _FORMAT,
            "redundancy": self.redundancy,
            "objects": self.objects.tolist(),
            "node": self.node.tolist(),
            "asked": self._asked.tolist(),
            "closer_to_p1": self._p1.tolist(),
            "n_queries": self.n_queries_,
            "n_asks": self.n_asks_,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], tree: ComparisonTreeBuilder) -> ComparisonTreeRouter:
        """Rebuild a router from :meth:`to_dict` output and its tree."""
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError("not a ComparisonTreeRouter state (missing or unknown 'format')")
        self = cls(tree, np.asarray(data["objects"], dtype=np.int64), int(data["redundancy"]))
        self.node = np.asarray(data["node"], dtype=np.int64)
        self._asked = np.asarray(data["asked"], dtype=np.int64)
        self._p1 = np.asarray(data["closer_to_p1"], dtype=np.int64)
        self.n_queries_, self.n_asks_ = int(data["n_queries"]), int(data["n_asks"])
        return self

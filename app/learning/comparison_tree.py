"""Comparison trees built and traversed as deterministic state machines.

A comparison tree (Algorithm 1 of Haghiri, Garreau & von Luxburg (2018)) splits
a node by two pivots ``p1, p2`` drawn from its objects and asks, for every other
object ``x`` of the node, the triplet question "is x closer to p1 or to p2?".
Objects closer to ``p1`` go to the left child, the others to the right child.

:class:`ComparisonTreeBuilder` holds one tree under construction: it says which
questions it is waiting for (:meth:`~ComparisonTreeBuilder.pending_queries`),
takes answers one at a time or in batches (:meth:`~ComparisonTreeBuilder.record`,
:meth:`~ComparisonTreeBuilder.record_batch`) and splits a node as soon as all of
its questions are decided. :class:`ComparisonTreeRouter` routes new objects down
a built tree the same way. Both round-trip their full state through
JSON-compatible dicts, so the same code serves an offline oracle (batches, see
:func:`drive`) and crowd workers answering over days.

Randomness is counter based: the pivots of a node are a hash of the tree's
``seed`` and the node's path from the root (splitmix64), not a draw from a
stateful generator. This is the ``default_rng([seed, step])`` idea taken one
step further: the tree depends only on the seed and the answers, never on the
order in which answers arrive, so a replay, a resumed build and an offline
batch build with the same answers give the identical tree.

Offline, many trees are driven together (``ComparisonTreeBuilder._batch`` and
``ComparisonTreeRouter._batch``, used by :mod:`app.learning.comprf`): every
level of every tree in a batch is one vectorised oracle call and one round of
array bookkeeping, and each tree comes out exactly as if built alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from app.learning import _comparison_tree_numba as _kernels
from app.learning._comparison_router import ComparisonTreeRouter
from app.learning._comparison_tree_base import (
    _FORMAT,
    _MASK64,
    LEAF,
    OPEN,
    SPLIT,
    Oracle,
    _check_answers,
    _check_int,
    _check_queries,
    _child_keys,
    _segment_positions,
    _splitmix64,
    _uniform,
    _VoteMachine,
)

__all__ = ["ComparisonTreeBuilder", "ComparisonTreeRouter", "drive"]

_NONE = np.zeros(0, dtype=np.int64)  # stands for a missing labels / position_of array in kernels


class ComparisonTreeBuilder(_VoteMachine):
    """One comparison tree under construction, as a state machine (Algorithm 1 of [1]_).

    Parameters
    ----------
    objects : array-like of int, shape (n,)
        Distinct object indices the tree is built on (the set S of Algorithm 1).
    labels : array-like of int, shape (n,), default=None
        Class codes of ``objects`` (aligned with them). Needed for ``supervised``
        pivots and for ``split_pure=False``.
    leaf_size : int, default=1
        n0: a node with at most ``leaf_size`` objects is a leaf.
    supervised : bool, default=True
        Draw the two pivots with different labels (Alg. 1, line 3); when a node's
        objects share one label, or without labels, draw them uniformly. The paper
        does not say how a pair "with different labels" is sampled: we draw the
        first pivot uniformly from the node and the second uniformly among the
        node's objects with another label.
    split_pure : bool, default=True
        Split nodes whose objects share one label (the paper does); ``False``
        makes them leaves and saves their questions.
    redundancy : int, default=1
        Answers wanted per question; the decision is their majority. Answers that
        arrive while a node is open all count; a tie asks again.
    seed : int, default=0
        Non-negative seed of the counter-based randomness (see module docstring).

    Attributes
    ----------
    n_queries_ : int
        Distinct questions that received at least one answer.
    n_asks_ : int
        Answers recorded, repeats included (stale answers excluded).

    Notes
    -----
    ============  ==========================================
    paper [1]_    here
    ============  ==========================================
    S             ``objects`` (a node's contiguous slice of ``order``)
    n0            ``leaf_size``
    x1, x2        ``pivot1``, ``pivot2`` (left and right pivots)
    S1            left child: objects closer to ``pivot1``
    ============  ==========================================

    Algorithm 1 assigns x to S1 when δ(x, x1) ≤ δ(x, x2); an oracle only answers
    "closer to p1" or not, so an exact tie goes right. The pivots themselves go
    to their own sides without a question, so every split makes progress.

    References
    ----------
    .. [1] Haghiri, Garreau & von Luxburg (2018). Comparison-based random forests. ICML.
    """

    def __init__(
        self,
        objects: ArrayLike,
        labels: ArrayLike | None = None,
        *,
        leaf_size: int = 1,
        supervised: bool = True,
        split_pure: bool = True,
        redundancy: int = 1,
        seed: int = 0,
    ) -> None:
        objects = np.asarray(objects)
        if objects.ndim != 1 or objects.size == 0:
            raise ValueError(f"objects must be a non-empty 1-D array, got shape {objects.shape}")
        if objects.dtype.kind not in "iu" or objects.min() < 0:
            raise ValueError("objects must be non-negative integer indices")
        ranked = np.sort(objects)
        if np.any(ranked[1:] == ranked[:-1]):
            raise ValueError("objects must be distinct")
        self.leaf_size = _check_int(leaf_size, "leaf_size", 1)
        self.redundancy = _check_int(redundancy, "redundancy", 1)
        self.seed = _check_int(seed, "seed", 0) & _MASK64
        self.supervised = bool(supervised)
        self.split_pure = bool(split_pure)
        if labels is None:
            if not split_pure:
                raise ValueError("split_pure=False needs labels")
            self._labels = None
        else:
            lab = np.asarray(labels)
            if lab.shape != objects.shape or lab.dtype.kind not in "iu":
                raise ValueError(
                    f"labels must be integer class codes of shape {objects.shape}, "
                    f"got shape {lab.shape} and dtype {lab.dtype}"
                )
            self._labels = lab.astype(np.int64)
        n = len(objects)
        self.order = objects.astype(np.int64)
        self._asked = np.zeros(n, dtype=np.int64)
        self._p1 = np.zeros(n, dtype=np.int64)
        self._fixed = np.zeros(n, dtype=np.int8)  # 1: left pivot, 2: right pivot
        self.start = np.zeros(0, dtype=np.int64)
        self.end = np.zeros(0, dtype=np.int64)
        self.child = np.zeros(0, dtype=np.int64)  # left child; the right one is child + 1
        self.pivot1 = np.zeros(0, dtype=np.int64)
        self.pivot2 = np.zeros(0, dtype=np.int64)
        self.state = np.zeros(0, dtype=np.int8)
        self._key = np.zeros(0, dtype=np.uint64)
        self.n_queries_ = 0
        self.n_asks_ = 0
        self._tree_of_pos = None
        root_key = _splitmix64(np.array([self.seed], dtype=np.uint64))
        self._position_of = np.full(int(self.order.max()) + 1, -1, dtype=np.int64)
        self._position_of[self.order] = np.arange(n)
        self._node_of = np.zeros(n, dtype=np.int64)
        self._add_nodes(np.array([0]), np.array([n]), root_key)
        self._split_trivial(np.array([0]))

    # ----------------------------------------------------------------- queries
    @property
    def is_complete(self) -> bool:
        """True when no node waits for answers."""
        return not np.any(self.state == OPEN)

    @property
    def n_nodes(self) -> int:
        return len(self.state)

    def _pending(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Slots (positions in ``order``), queries (m, 3) and asks still wanted."""
        open_ = np.flatnonzero(self.state == OPEN)
        pos, seg = _segment_positions(self.start[open_], self.end[open_])
        decided, _ = self._decided(pos)
        keep = ~decided & (self._fixed[pos] == 0)
        pos, nodes = pos[keep], open_[seg[keep]]
        queries = np.column_stack([self.order[pos], self.pivot1[nodes], self.pivot2[nodes]])
        counts = np.maximum(self.redundancy - self._asked[pos], 1)
        return pos, queries, counts

    def pending_queries(self, return_counts: bool = False) -> Any:
        """Questions (anchor, p1, p2) the tree waits for: "is anchor closer to p1?".

        Parameters
        ----------
        return_counts : bool, default=False
            Also return how many more answers each question needs.

        Returns
        -------
        queries : ndarray of shape (m, 3)
        counts : ndarray of shape (m,), only when ``return_counts``
        """
        _, queries, counts = self._pending()
        return (queries, counts) if return_counts else queries

    # ----------------------------------------------------------------- answers
    def record(self, anchor: int, p1: int, p2: int, closer_to_p1: bool) -> bool:
        """Store one answer; split the node if this completes its questions.

        The pivots may come in either order (the answer is flipped to match).
        Returns False, ignoring the answer, when the question is not one an open
        node asks (a late answer after the node split); raises ``ValueError``
        when the anchor is not an object of this tree.
        """
        return bool(self.record_batch([[anchor, p1, p2]], [closer_to_p1])[0])

    def record_batch(self, queries: ArrayLike, answers: ArrayLike) -> np.ndarray:
        """Vectorised :meth:`record`; returns a bool array, True where the answer counted."""
        q = _check_queries(queries)
        ans = _check_answers(answers, len(q))
        if self._position_of is None:
            raise ValueError("a batch of trees takes answers by slot only; record per tree")
        a = q[:, 0]
        inside = a < len(self._position_of)
        pos = np.full(len(a), -1, dtype=np.int64)
        pos[inside] = self._position_of[a[inside]]
        if np.any(pos < 0):
            raise ValueError(f"anchor {int(a[pos < 0][0])} is not an object of this tree")
        node = self._node_of[pos]
        is_open = (self.state[node] == OPEN) & (self._fixed[pos] == 0)
        straight = (self.pivot1[node] == q[:, 1]) & (self.pivot2[node] == q[:, 2])
        flipped = (self.pivot1[node] == q[:, 2]) & (self.pivot2[node] == q[:, 1])
        ok = is_open & (straight | flipped)
        self._record_slots(pos[ok], ans[ok] == straight[ok])
        return ok

    def _record_slots(self, pos: np.ndarray, answers: np.ndarray, unique: bool = False) -> None:
        if len(pos) == 0:
            return
        if self._tree_of_pos is not None:  # a batch of trees: count per tree
            fresh = pos[self._asked[pos] == 0]
            if not unique:
                fresh = np.flatnonzero(np.bincount(fresh, minlength=len(self.order)))
            n_trees = len(self._tree_queries)
            self._tree_queries += np.bincount(self._tree_of_pos[fresh], minlength=n_trees)
            self._tree_asks += np.bincount(self._tree_of_pos[pos], minlength=n_trees)
        self._add_votes(pos, answers, unique)
        mark = np.zeros(len(self.state), dtype=bool)
        mark[self._node_of[pos]] = True
        touched = np.flatnonzero(mark)
        seg_pos, seg = _segment_positions(self.start[touched], self.end[touched])
        decided, left = self._decided(seg_pos)
        fixed = self._fixed[seg_pos]
        waiting = ~decided & (fixed == 0)
        ready = np.bincount(seg, weights=waiting, minlength=len(touched)) == 0
        if ready.all():
            self._split(touched, left, fixed)
        elif ready.any():
            keep = ready[seg]
            self._split(touched[ready], left[keep], fixed[keep])

    # ---------------------------------------------------------------- splitting
    def _split(self, nodes: np.ndarray, left: np.ndarray, fixed: np.ndarray) -> None:
        """Partition ready nodes' slices stably into left then right (Alg. 1, lines 4-7).

        ``left`` (the majority answer "closer to pivot1") and ``fixed`` (the
        pivots: 1 left, 2 right) list the slots of ``nodes`` slice after slice.
        """
        left = np.where(fixed == 0, left, fixed == 1)
        starts, ends = self.start[nodes], self.end[nodes]
        first = len(self.state)
        n_left = _kernels.split_slices(
            self.order,
            _NONE if self._labels is None else self._labels,
            _NONE if self._position_of is None else self._position_of,
            self._node_of,
            self._asked,
            self._p1,
            self._fixed,
            starts,
            ends,
            left,
            first,
        )
        mids = starts + n_left
        self.state[nodes] = SPLIT
        self.child[nodes] = first + 2 * np.arange(len(nodes))
        left_keys, right_keys = _child_keys(self._key[nodes])
        self._add_nodes(
            np.column_stack([starts, mids]).ravel(),
            np.column_stack([mids, ends]).ravel(),
            np.column_stack([left_keys, right_keys]).ravel(),
        )
        self._split_trivial(np.arange(first, len(self.state)))

    def _split_trivial(self, nodes: np.ndarray) -> None:
        """Split at once the open nodes holding only their two pivots (nothing to ask)."""
        trivial = nodes[(self.state[nodes] == OPEN) & (self.end[nodes] - self.start[nodes] == 2)]
        if len(trivial):
            pos, _ = _segment_positions(self.start[trivial], self.end[trivial])
            fixed = self._fixed[pos]
            self._split(trivial, fixed == 1, fixed)

    def _add_nodes(self, starts: np.ndarray, ends: np.ndarray, keys: np.ndarray) -> None:
        """Append nodes (slices ``starts:ends`` of ``order``); choose pivots (Alg. 1, line 3).

        Only nodes that must split get pivots.
        """
        sizes = ends - starts
        split = sizes > self.leaf_size
        u1, u2 = _uniform(keys, 1), _uniform(keys, 2)
        first = starts + np.minimum((u1 * sizes).astype(np.int64), np.maximum(sizes - 1, 0))
        second = starts + np.minimum((u2 * (sizes - 1)).astype(np.int64), np.maximum(sizes - 2, 0))
        second = second + (second >= first)
        if self._labels is not None:
            # chosen: the k-th object of the node with another label than the first pivot
            n_diff, chosen = _kernels.other_label_pivots(self._labels, starts, ends, first, u2)
            if not self.split_pure:
                split &= n_diff > 0
            if self.supervised:
                second = np.where(n_diff > 0, chosen, second)
        last = len(self.order) - 1
        p1 = np.where(split, self.order[np.minimum(first, last)], -1)
        p2 = np.where(split, self.order[np.minimum(second, last)], -1)
        self._fixed[first[split]] = 1
        self._fixed[second[split]] = 2
        self.start = np.concatenate([self.start, starts])
        self.end = np.concatenate([self.end, ends])
        self.child = np.concatenate([self.child, np.full(len(starts), -1, dtype=np.int64)])
        self.pivot1 = np.concatenate([self.pivot1, p1])
        self.pivot2 = np.concatenate([self.pivot2, p2])
        self.state = np.concatenate([self.state, np.where(split, OPEN, LEAF).astype(np.int8)])
        self._key = np.concatenate([self._key, keys.astype(np.uint64)])

    def _reindex(self) -> None:
        """Rebuild the object -> slot and slot -> node maps from the node table."""
        self._position_of = np.full(int(self.order.max()) + 1, -1, dtype=np.int64)
        self._position_of[self.order] = np.arange(len(self.order))
        self._node_of = np.zeros(len(self.order), dtype=np.int64)
        current = np.flatnonzero(self.state != SPLIT)
        pos, seg = _segment_positions(self.start[current], self.end[current])
        self._node_of[pos] = current[seg]

    # ------------------------------------------------------------ tree batches
    @classmethod
    def _batch(
        cls,
        samples: list[np.ndarray],
        labels: list[np.ndarray] | None,
        seeds: list[int],
        **params: Any,
    ) -> ComparisonTreeBuilder:
        """Several trees in one builder, so each level of all of them is one oracle call.

        Tree t is built exactly as ``ComparisonTreeBuilder(samples[t], labels[t],
        seed=seeds[t], **params)`` would build it (same node numbering once
        :meth:`_unbatch` splits the batch). Answers go by slot only (objects repeat
        across trees), as :func:`drive` gives them.
        """
        self = cls([0], None if labels is None else [0], **params)  # validates the parameters
        sizes = np.array([len(sample) for sample in samples], dtype=np.int64)
        offsets = np.cumsum(sizes) - sizes
        n = int(sizes.sum())
        self.order = np.concatenate(samples).astype(np.int64)
        self._labels = None if labels is None else np.concatenate(labels).astype(np.int64)
        self._asked = np.zeros(n, dtype=np.int64)
        self._p1 = np.zeros(n, dtype=np.int64)
        self._fixed = np.zeros(n, dtype=np.int8)
        for name in ("start", "end", "child", "pivot1", "pivot2"):
            setattr(self, name, np.zeros(0, dtype=np.int64))
        self.state = np.zeros(0, dtype=np.int8)
        self._key = np.zeros(0, dtype=np.uint64)
        self._position_of = None
        self._seeds = [int(s) & _MASK64 for s in seeds]
        self._tree_of_pos = np.repeat(np.arange(len(samples)), sizes)
        self._tree_queries = np.zeros(len(samples), dtype=np.int64)
        self._tree_asks = np.zeros(len(samples), dtype=np.int64)
        self._node_of = self._tree_of_pos.copy()
        keys = _splitmix64(np.array([s & _MASK64 for s in seeds], dtype=np.uint64))
        self._add_nodes(offsets, offsets + sizes, keys)
        self._split_trivial(np.arange(len(samples)))
        return self

    def _unbatch(self) -> list[ComparisonTreeBuilder]:
        """Split a complete batch into its trees (node ids renumbered per tree)."""
        tree_of_node = self._tree_of_pos[self.start]
        by_tree = np.argsort(tree_of_node, kind="stable")
        n_nodes = np.bincount(tree_of_node, minlength=len(self._tree_queries))
        node_first = np.cumsum(n_nodes) - n_nodes
        local = np.empty(len(by_tree), dtype=np.int64)
        local[by_tree] = np.arange(len(by_tree)) - np.repeat(node_first, n_nodes)
        child = np.where(self.child >= 0, local[np.maximum(self.child, 0)], -1)
        sizes = np.bincount(self._tree_of_pos, minlength=len(n_nodes))
        pos_first = np.cumsum(sizes) - sizes
        trees = []
        for t in range(len(n_nodes)):
            ids = by_tree[node_first[t] : node_first[t] + n_nodes[t]]
            lo, hi = pos_first[t], pos_first[t] + sizes[t]
            tree = ComparisonTreeBuilder.__new__(ComparisonTreeBuilder)
            tree.__dict__.update(
                leaf_size=self.leaf_size,
                supervised=self.supervised,
                split_pure=self.split_pure,
                redundancy=self.redundancy,
                seed=self._seeds[t],
                order=self.order[lo:hi].copy(),
                _labels=None if self._labels is None else self._labels[lo:hi].copy(),
                _asked=self._asked[lo:hi].copy(),
                _p1=self._p1[lo:hi].copy(),
                _fixed=self._fixed[lo:hi].copy(),
                start=self.start[ids] - lo,
                end=self.end[ids] - lo,
                child=child[ids],
                pivot1=self.pivot1[ids],
                pivot2=self.pivot2[ids],
                state=self.state[ids],
                _key=self._key[ids],
                n_queries_=int(self._tree_queries[t]),
                n_asks_=int(self._tree_asks[t]),
                _tree_of_pos=None,
            )
            tree._reindex()
            trees.append(tree)
        return trees

    # ------------------------------------------------------------------ results
    def leaf_items(self, node: int) -> np.ndarray:
        """Objects of a leaf (or of any node, for a complete tree)."""
        return self.order[self.start[node] : self.end[node]]

    def router(self, objects: ArrayLike, redundancy: int | None = None) -> ComparisonTreeRouter:
        """A :class:`ComparisonTreeRouter` routing ``objects`` down this (complete) tree."""
        return ComparisonTreeRouter(self, objects, redundancy=redundancy or self.redundancy)

    def to_dict(self) -> dict[str, Any]:
        """The complete state as JSON-compatible data (``json.dumps`` works)."""
        return {
            "format": _FORMAT,
            "params": {
                "leaf_size": self.leaf_size,
                "supervised": self.supervised,
                "split_pure": self.split_pure,
                "redundancy": self.redundancy,
                "seed": self.seed,
            },
            "order": self.order.tolist(),
            "labels": None if self._labels is None else self._labels.tolist(),
            "asked": self._asked.tolist(),
            "closer_to_p1": self._p1.tolist(),
            "fixed": self._fixed.tolist(),
            "nodes": {
                "start": self.start.tolist(),
                "end": self.end.tolist(),
                "child": self.child.tolist(),
                "pivot1": self.pivot1.tolist(),
                "pivot2": self.pivot2.tolist(),
                "state": self.state.tolist(),
                "key": [int(k) for k in self._key],
            },
            "n_queries": self.n_queries_,
            "n_asks": self.n_asks_,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ComparisonTreeBuilder:
        """Rebuild a builder from :meth:`to_dict` output."""
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError("not a ComparisonTreeBuilder state (missing or unknown 'format')")
        try:
            self = cls.__new__(cls)
            p = data["params"]
            self.leaf_size, self.supervised = int(p["leaf_size"]), bool(p["supervised"])
            self.split_pure, self.redundancy = bool(p["split_pure"]), int(p["redundancy"])
            self.seed = int(p["seed"])
            self.order = np.asarray(data["order"], dtype=np.int64)
            labels = data["labels"]
            self._labels = None if labels is None else np.asarray(labels, dtype=np.int64)
            self._asked = np.asarray(data["asked"], dtype=np.int64)
            self._p1 = np.asarray(data["closer_to_p1"], dtype=np.int64)
            self._fixed = np.asarray(data["fixed"], dtype=np.int8)
            nodes = data["nodes"]
            for name in ("start", "end", "child", "pivot1", "pivot2"):
                setattr(self, name, np.asarray(nodes[name], dtype=np.int64))
            self.state = np.asarray(nodes["state"], dtype=np.int8)
            self._key = np.asarray(nodes["key"], dtype=np.uint64)
            self.n_queries_, self.n_asks_ = int(data["n_queries"]), int(data["n_asks"])
            self._tree_of_pos = None
        except (KeyError, TypeError) as error:
            raise ValueError(f"incomplete ComparisonTreeBuilder state: {error!r}") from error
        self._reindex()
        return self


def drive(machine: ComparisonTreeBuilder | ComparisonTreeRouter, oracle: Oracle) -> None:
    """Answer every pending question of ``machine`` with ``oracle`` until it is complete.

    Each round asks all pending questions at once (each repeated as often as it
    still needs answers) in one vectorised ``oracle(anchors, p1, p2)`` call.
    """
    while True:
        slots, queries, counts = machine._pending()
        if len(slots) == 0:
            return
        if np.any(counts > 1):
            slots, queries = np.repeat(slots, counts), np.repeat(queries, counts, axis=0)
        answers = _check_answers(
            oracle(queries[:, 0], queries[:, 1], queries[:, 2]), len(slots), "oracle answers"
        )
        machine._record_slots(slots, answers, unique=not np.any(counts > 1))

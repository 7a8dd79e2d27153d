"""Comparison trees built by the crowd: the CompRF strategy (Haghiri, Garreau & von Luxburg 2018).

A forest of comparison trees (Algorithm 1 of [1]_) is grown from workers' answers. A
node of a tree holds objects and two pivots ``p1, p2``; every other object ``x`` of the
node is asked "is x closer to p1 or to p2?" and the node splits once all are decided
(Alg. 1, lines 4-7). The trees are built over all of a project's objects at the moment
the plan was set, labelled and unlabelled together; objects uploaded later are routed
down the trees with the same questions (Alg. 2, line 5) and wait in the leaves.

The forest is a pure function of its parameters, the object snapshot and the answer
log: :func:`advance` folds answers in and splits every node that can split, and
replaying the same answers from scratch gives the identical forest (node names are
paths from the root, pivots a function of the seed and the path).

Votes. Each question ``(x, p1, p2)`` collects ``redundancy`` answers; its decision is
the majority of its first ``m`` answers in answer-id order, where ``m`` is the smallest
count ≥ ``redundancy`` without a tie (a tie asks once more). An answer from any source
(another strategy, an import) to the same question counts, in either orientation.

References
----------
.. [1] Haghiri, Garreau & von Luxburg (2018). Comparison-based random forests. ICML.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.active.base import Param, Proposal, Strategy, check_only
from app.learning.shapes import Shape

FORMAT = 1
MAX_TREES = 500
MAX_REDUNDANCY = 15
PARAMS = {"n_trees", "leaf_size", "redundancy", "supervised", "seed"}


def question_key(anchor: int, first: int, second: int) -> str:
    """The vote store's key of "is anchor closer to first or second?" (either orientation)."""
    low, high = sorted((first, second))
    return f"{anchor}:{low}:{high}"


def decide(votes: Sequence[int], redundancy: int) -> tuple[bool | None, int]:
    """The decision of one question from its votes, and how many more answers it needs.

    ``votes`` are signed answer ids: ``+id`` when the anchor was closer to the lower
    indexed pivot, ``-id`` otherwise. Returns ``(closer_to_low, 0)`` once decided, else
    ``(None, answers still needed)``.
    """
    if len(votes) < redundancy:
        return None, redundancy - len(votes)
    ordered = sorted(votes, key=abs)
    low = sum(1 for v in ordered[:redundancy] if v > 0)
    m = redundancy
    while True:
        if 2 * low != m:
            return 2 * low > m, 0
        if m == len(ordered):
            return None, 1
        low += ordered[m] > 0
        m += 1


def _check_int(params: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"params.{name} must be an integer in {low}..{high}, got {value!r}")
    return value


@dataclass
class ForestParams:
    """Validated parameters of a crowd-built forest (see :class:`ComparisonForestStrategy`)."""

    n_trees: int
    leaf_size: int
    redundancy: int
    supervised: bool | None
    seed: int

    @classmethod
    def parse(cls, params: Mapping[str, Any], default_seed: int) -> ForestParams:
        check_only(params, PARAMS, "comprf")
        supervised = params.get("supervised")
        if supervised is not None and not isinstance(supervised, bool):
            raise ValueError(f"params.supervised must be true or false, got {supervised!r}")
        return cls(
            n_trees=_check_int(params, "n_trees", 10, 1, MAX_TREES),
            leaf_size=_check_int(params, "leaf_size", 1, 1, 1_000_000),
            redundancy=_check_int(params, "redundancy", 3, 1, MAX_REDUNDANCY),
            supervised=supervised,
            seed=_check_int(params, "seed", default_seed % 2**31, 0, 2**31 - 1),
        )


def snapshot(params: ForestParams, labels: Sequence[str | None]) -> dict[str, Any]:
    """What the trees are built on, fixed when the plan is set: the objects and their classes.

    ``supervised`` defaults to true when at least two classes are labelled; asking for it
    without two classes is a ``ValueError`` naming the field.
    """
    classes = sorted({label for label in labels if label is not None})
    supervised = params.supervised
    if supervised is None:
        supervised = len(classes) >= 2
    if supervised and len(classes) < 2:
        raise ValueError(
            f"params.supervised needs labelled objects of at least 2 classes, found {len(classes)}"
        )
    code = {label: i for i, label in enumerate(classes)}
    return {
        "n_objects": len(labels),
        "supervised": supervised,
        "classes": [code[label] if label is not None else -1 for label in labels]
        if supervised
        else None,
    }


@dataclass
class Forest:
    """The state of a crowd-built forest: trees, routed late objects and the vote store.

    ``trees[t]`` maps a node's path (``"r"``, ``"r0"``, ``"r01"``, …; 0 = closer to its
    first pivot) to a node: ``{"p": [p1, p2]}`` once split (children at path+"0"/"1"),
    ``{"members": [...], "p": [p1, p2], "left": [...], "right": [...]}`` while open,
    ``{"members": [...]}`` as a leaf. ``routed[t]`` maps a late object to its node path.
    """

    params: ForestParams
    setup: dict[str, Any]
    trees: list[dict[str, dict[str, Any]]]
    routed: list[dict[int, str]]
    votes: dict[str, list[int]] = field(default_factory=dict)
    n_answers: int = 0  # votes stored (answers applied)
    #: anchors with votes since the last :meth:`resolve` (None: check every open node)
    _touched: set[int] | None = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------------ building
    @classmethod
    def new(cls, params: ForestParams, setup: Mapping[str, Any]) -> Forest:
        n = int(setup["n_objects"])
        forest = cls(params, dict(setup), [{} for _ in range(params.n_trees)], [])
        forest.routed = [{} for _ in range(params.n_trees)]
        for t in range(params.n_trees):
            forest._add_node(t, "r", list(range(n)))
        return forest

    def _add_node(self, t: int, path: str, members: list[int]) -> None:
        """A node on ``members``: a leaf when small enough, else open with its pivots
        (Alg. 1, line 3: two pivots of different labels when supervised)."""
        if len(members) <= self.params.leaf_size or len(members) < 2:
            self.trees[t][path] = {"members": members}
            return
        rng = np.random.default_rng([self.params.seed, t, len(path), int("1" + path[1:], 2)])
        classes = self.setup.get("classes")
        p1 = p2 = None
        if self.setup.get("supervised") and classes is not None:
            labelled = [m for m in members if m < len(classes) and classes[m] >= 0]
            if len({classes[m] for m in labelled}) >= 2:
                p1 = labelled[int(rng.integers(len(labelled)))]
                others = [m for m in labelled if classes[m] != classes[p1]]
                p2 = others[int(rng.integers(len(others)))]
        if p1 is None:
            i, j = rng.choice(len(members), 2, replace=False)
            p1, p2 = members[int(i)], members[int(j)]
        self.trees[t][path] = {
            "members": members,
            "p": [p1, p2],
            "left": [p1],
            "right": [p2],
            "pending": [m for m in members if m != p1 and m != p2],
        }

    def add_votes(self, answers: Iterable[tuple[int, int, int, int]]) -> None:
        """Store answers ``(answer_id, a, b, c)``, meaning a is closer to b than to c."""
        for answer_id, a, b, c in answers:
            if a in (b, c) or b == c:
                continue
            vote = answer_id if b < c else -answer_id
            self.votes.setdefault(question_key(a, b, c), []).append(vote)
            self.n_answers += 1
            if self._touched is not None:
                self._touched.add(a)

    def _decision(self, anchor: int, p1: int, p2: int) -> tuple[bool | None, int]:
        """Whether ``anchor`` is closer to ``p1`` (None if undecided), and answers needed."""
        votes = self.votes.get(question_key(anchor, p1, p2), ())
        closer_to_low, needed = decide(votes, self.params.redundancy)
        if closer_to_low is None:
            return None, needed
        return closer_to_low == (p1 < p2), 0

    def resolve(self) -> int:
        """Split every node whose questions are all decided, and move routed objects on,
        until nothing changes (Alg. 1, lines 4-7; Alg. 2, line 5). Returns the splits made."""
        splits = 0
        touched, self._touched = self._touched, set()
        for t, tree in enumerate(self.trees):
            work = [
                path
                for path, node in tree.items()
                if "pending" in node
                and (touched is None or any(m in touched for m in node["pending"]))
            ]
            while work:
                path = work.pop()
                node = tree[path]
                p1, p2 = node["p"]
                waiting = []
                for member in node["pending"]:
                    closer, _ = self._decision(member, p1, p2)
                    if closer is None:
                        waiting.append(member)
                    else:
                        node["left" if closer else "right"].append(member)
                if waiting:
                    node["pending"] = waiting
                    continue
                order = {m: i for i, m in enumerate(node["members"])}
                left = sorted(node["left"], key=order.__getitem__)
                right = sorted(node["right"], key=order.__getitem__)
                tree[path] = {"p": [p1, p2]}
                splits += 1
                for side, members in (("0", left), ("1", right)):
                    self._add_node(t, path + side, members)
                    if "pending" in tree[path + side]:
                        work.append(path + side)
            self._route(t)
        return splits

    def _route(self, t: int) -> None:
        tree, routed = self.trees[t], self.routed[t]
        for obj, path in list(routed.items()):
            while "members" not in tree[path] or "pending" in tree[path]:
                node = tree[path]
                if "members" in node:  # open: wait for the split
                    break
                p1, p2 = node["p"]
                if obj in (p1, p2):
                    closer: bool | None = obj == p1
                else:
                    closer, _ = self._decision(obj, p1, p2)
                if closer is None:
                    break
                path += "0" if closer else "1"
            routed[obj] = path

    def add_objects(self, n_objects: int) -> None:
        """Route the objects beyond the snapshot (late uploads) from the root of every tree."""
        first = int(self.setup["n_objects"])
        for routed in self.routed:
            for obj in range(first, n_objects):
                routed.setdefault(obj, "r")

    # ------------------------------------------------------------------ queries
    def pending(self) -> list[tuple[int, int, str, int, int, int, int]]:
        """Undecided questions ``(depth, tree, path, anchor, p1, p2, needed)``, shallow first.

        An object routed to an open node is asked its pivots at once; it moves on when
        the node splits.
        """
        rows: list[Any] = []
        for t, tree in enumerate(self.trees):
            for path, node in tree.items():
                if "pending" not in node:
                    continue
                p1, p2 = node["p"]
                for member in node["pending"]:
                    _, needed = self._decision(member, p1, p2)
                    rows.append((len(path), t, path, member, p1, p2, needed))
            for obj, path in self.routed[t].items():
                node = tree[path]
                if "p" not in node or obj in node["p"]:
                    continue
                p1, p2 = node["p"]
                closer, needed = self._decision(obj, p1, p2)
                if closer is None:
                    rows.append((len(path), t, path, obj, p1, p2, needed))
        rows.sort(key=lambda row: (row[0], row[1], row[2], row[3]))
        return rows

    @property
    def is_complete(self) -> bool:
        return not self.pending()

    def progress(self) -> list[dict[str, int]]:
        """Per tree: nodes split, nodes waiting for answers, leaves, depth so far."""
        out = []
        for tree in self.trees:
            split = sum(1 for node in tree.values() if "members" not in node)
            waiting = sum(1 for node in tree.values() if "pending" in node)
            out.append(
                {
                    "nodes_split": split,
                    "nodes_waiting": waiting,
                    "leaves": len(tree) - split - waiting,
                    "depth": max(len(path) - 1 for path in tree),
                }
            )
        return out

    # ------------------------------------------------------------------ results
    def placements(self, t: int, anytime: bool = False) -> dict[int, str]:
        """Object -> leaf path in tree ``t``, for the objects that reached a leaf (with
        ``anytime``, every object: the deepest node it has reached so far)."""
        tree = self.trees[t]
        where = {}
        for path, node in tree.items():
            if "members" in node and (anytime or "pending" not in node):
                for member in node["members"]:
                    where[member] = path
        for obj, path in self.routed[t].items():
            node = tree[path]
            if anytime or ("members" in node and "pending" not in node):
                where[obj] = path
        return where

    def neighbourhoods(
        self, known: Sequence[bool], anytime: bool = False
    ) -> tuple[list[dict[int, list[int]]], np.ndarray]:
        """Per tree, for each placed object, its nearest labelled leaf-mates, and how many
        trees placed each object.

        The leaf-mates of x are the objects with ``known`` values in the deepest node on
        x's path that holds one besides x (its leaf when the leaf does; with
        ``leaf_size=1`` leaves are single objects, so usually the leaf's parent).
        """
        n = len(known)
        placed = np.zeros(n, dtype=np.int64)
        result = []
        for t in range(len(self.trees)):
            where = {obj: path for obj, path in self.placements(t, anytime).items() if obj < n}
            below: dict[str, list[int]] = {}
            for obj, path in where.items():
                if known[obj]:
                    for k in range(1, len(path) + 1):
                        below.setdefault(path[:k], []).append(obj)
            mates: dict[int, list[int]] = {}
            for obj, path in where.items():
                placed[obj] += 1
                for k in range(len(path), 0, -1):
                    found = [o for o in below.get(path[:k], ()) if o != obj]
                    if found:
                        mates[obj] = found
                        break
            result.append(mates)
        return result, placed

    # ------------------------------------------------------------------ storage
    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "params": self.params.__dict__,
            "setup": self.setup,
            "trees": self.trees,
            "routed": [{str(k): v for k, v in r.items()} for r in self.routed],
            "votes": self.votes,
            "n_answers": self.n_answers,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Forest:
        if data.get("format") != FORMAT:
            raise ValueError("not a comprf forest state (missing or unknown 'format')")
        return cls(
            ForestParams(**data["params"]),
            dict(data["setup"]),
            [dict(tree) for tree in data["trees"]],
            [{int(k): v for k, v in r.items()} for r in data["routed"]],
            {k: list(v) for k, v in data["votes"].items()},
            int(data["n_answers"]),
            set(),  # stored resolved: only nodes with new votes need a look
        )

    def structure(self) -> list[dict[str, Any]]:
        """The trees without the vote store, lists sorted: what two equal forests share."""
        return [
            {
                path: {key: sorted(value) if key != "p" else value for key, value in node.items()}
                for path, node in sorted(tree.items())
            }
            for tree in self.trees
        ]


def replay(
    params: ForestParams,
    setup: Mapping[str, Any],
    answers: Iterable[tuple[int, int, int, int]],
    n_objects: int | None = None,
) -> Forest:
    """The forest the answers ``(answer_id, a, b, c)`` build, from nothing."""
    forest = Forest.new(params, setup)
    if n_objects is not None:
        forest.add_objects(n_objects)
    forest.add_votes(answers)
    forest.resolve()
    return forest


def advance(
    forest: Forest, answers: Iterable[tuple[int, int, int, int]], n_objects: int | None = None
) -> Forest:
    """``forest`` after newer answers (and objects up to ``n_objects``): same as a replay."""
    if n_objects is not None:
        forest.add_objects(n_objects)
    forest.add_votes(answers)
    forest.resolve()
    return forest


class ComparisonForestStrategy(Strategy):
    """Pivot questions of a crowd-built comparison forest, shallow nodes first.

    ``params``: ``n_trees`` (10, 1–500), ``leaf_size`` (1), ``redundancy`` (3, 1–15:
    answers per pivot question by distinct participants), ``supervised`` (default: true
    when the project has two labelled classes; pivots of different labels, Alg. 1 of
    [1]_), ``seed`` (default: the plan's stream seed).

    The service attaches the current forest (:meth:`attach`) before asking for
    proposals; it hands out the pending questions in order (anchor = the object being
    placed, candidates = the two pivots), each wanting as many answers as it still needs.
    """

    kind = "comprf"
    declared = (
        Param("n_trees", "int", "Trees of the forest.", 10, 1, MAX_TREES),
        Param("leaf_size", "int", "Objects in a leaf.", 1, 1, 1_000_000),
        Param("redundancy", "int", "Answers per pivot question.", 3, 1, MAX_REDUNDANCY),
        Param("supervised", "bool", "Pivots of different labels (default: with 2+ classes)."),
        Param("seed", "int", "The trees' seed (default: the plan's).", None, 0, 2**31 - 1),
    )  # the form's declaration of PARAMS (plan builder, GET /api/strategies)

    def __init__(
        self, n_objects: int, params: Mapping[str, Any], seed: int, shape: Shape | None = None
    ) -> None:
        super().__init__(n_objects, params, seed, shape)
        self.forest_params = ForestParams.parse(params, seed)
        if n_objects < 3:
            raise ValueError(f"comprf needs at least 3 objects, the project has {n_objects}")
        self.forest: Forest | None = None
        self._queue: list[Proposal] = []
        #: questions the trees wait for (leased out ones included): more will come
        self.n_pending = 0

    def setup(self, labels: Sequence[str | None]) -> dict[str, Any]:
        """The object snapshot the trees are built on (see :func:`snapshot`)."""
        if len(labels) != self.n_objects:
            raise ValueError(f"expected {self.n_objects} labels, got {len(labels)}")
        return snapshot(self.forest_params, labels)

    def attach(
        self,
        forest: Forest,
        queue: Sequence[tuple[int, int, str, int, int, int, int]],
        n_pending: int = 0,
    ) -> None:
        """Use ``forest``; propose the pending questions ``queue`` (rows of
        :meth:`Forest.pending`) in order; ``n_pending`` questions wait in all."""
        self.forest = forest
        self.n_pending = n_pending
        self._queue = [
            Proposal(
                "triplet",
                (anchor, p1, p2),
                self.kind,
                ref={"tree": t, "node": path, "wanted": needed},
            )
            for _depth, t, path, anchor, p1, p2, needed in queue
        ]
        self._queue.reverse()

    def propose(self, state: dict[str, Any], step: int) -> Proposal | None:
        return self._queue.pop() if self._queue else None

    def answers_wanted(self, proposal: Proposal, plan_redundancy: int) -> int:
        return int(proposal.ref.get("wanted", self.forest_params.redundancy))


def forest_predictions(
    forest: Forest,
    labels: Sequence[str | None],
    targets: Sequence[float | None],
    anytime: bool = False,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per object, what the trees say; and leave-one-out figures over the known objects.

    Classification (labels given) or regression (numeric ``targets``, when any object has
    one): in each tree that placed x, the known leaf-mates of x (see
    :meth:`Forest.neighbourhoods`) give class shares or their mean target; the forest
    averages the trees (Alg. 2 of [1]_, with shares instead of a plurality vote). A known
    object is predicted from its leaf-mates only, never from itself: that is its
    leave-one-out prediction.

    Returns one dict per object (``index``, ``trees_placed``: the trees where it reached a
    leaf, ``depth``: the mean depth of the nodes it has reached, ``in_leaf``: whether it
    reached a leaf in every tree, and ``label`` + ``shares`` or ``target`` + ``spread``;
    ``None`` when no tree placed it yet) and the figures, with ``share_in_leaves``: the
    share of (object, tree) placements that are leaves. With ``anytime`` an object still
    waiting in an open node is predicted from the known objects of the deepest node it has
    reached, so every object has a prediction from the first answer on, and it sharpens as
    the trees grow.
    """
    n = len(labels)
    regression = any(t is not None for t in targets)
    known = [t is not None for t in targets] if regression else [y is not None for y in labels]
    mates, _ = forest.neighbourhoods(known, anytime)
    placed = forest.neighbourhoods(known)[1]
    depths = np.zeros(n)
    for t in range(len(forest.trees)):
        for obj, path in forest.placements(t, anytime=True).items():
            if obj < n:
                depths[obj] += (len(path) - 1) / len(forest.trees)
    rows: list[dict[str, Any]] = []
    errors: list[float] = []
    for obj in range(n):
        per_tree = [m[obj] for m in mates if obj in m]
        row: dict[str, Any] = {
            "index": obj,
            "trees_placed": int(placed[obj]),
            "depth": round(float(depths[obj]), 2),
            "in_leaf": bool(placed[obj] == len(forest.trees)),
        }
        if not per_tree:
            row.update({"target": None, "spread": None} if regression else {"label": None})
            row["note"] = "not placed in any leaf yet" if not placed[obj] else "no known leaf-mate"
        elif regression:
            means = np.array([np.mean([float(targets[o]) for o in group]) for group in per_tree])
            row.update({"target": float(means.mean()), "spread": float(means.std())})
            if known[obj]:
                errors.append(row["target"] - float(targets[obj]))  # type: ignore[arg-type]
        else:
            shares: dict[str, float] = {}
            for group in per_tree:
                for o in group:
                    shares[str(labels[o])] = shares.get(str(labels[o]), 0.0) + 1 / len(group)
            total = sum(shares.values())
            shares = {k: v / total for k, v in sorted(shares.items())}
            row.update({"label": max(shares, key=shares.__getitem__), "shares": shares})
            if known[obj]:
                errors.append(float(row["label"] != labels[obj]))
        rows.append(row)
    n_known = int(sum(known))
    figures: dict[str, Any] = {
        "task": "regression" if regression else "classification",
        "n_known": n_known,
        "n_known_predicted": len(errors),
        "objects_placed": int(np.count_nonzero(placed)),
        "share_in_leaves": float(placed.sum() / (n * len(forest.trees))) if n else 0.0,
    }
    if errors:
        if regression:
            figures["loo_rmse"] = float(np.sqrt(np.mean(np.square(errors))))
        else:
            figures["loo_accuracy"] = 1.0 - float(np.mean(errors))
    return rows, figures

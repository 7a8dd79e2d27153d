"""The comprf strategy's pure forest: votes, replay, order of questions, predictions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.active.comprf import (
    ComparisonForestStrategy,
    Forest,
    ForestParams,
    advance,
    decide,
    forest_predictions,
    replay,
    snapshot,
)


def test_decide_takes_the_majority_of_the_first_answers_and_asks_again_on_a_tie():
    assert decide([], 3) == (None, 3)
    assert decide([5, -7], 3) == (None, 1)
    assert decide([5, -7, 9], 3) == (True, 0)
    assert decide([9, -7, -5], 3) == (False, 0)
    assert decide([1, -2], 2) == (None, 1)  # a tie asks once more
    assert decide([1, -2, -3], 2) == (False, 0)
    # only the first `redundancy` answers (by id) count when they decide
    assert decide([1, 2, 3, -4, -5, -6], 3) == (True, 0)
    assert decide([-6, -5, -4, 3, 2, 1], 3) == (True, 0)


def blobs(n: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = np.array([[0, 0], [6, 0], [0, 6]])[y] + rng.normal(size=(n, 2))
    return X, y


def crowd(X: np.ndarray, forest: Forest, rng: np.random.Generator, noise: float, first_id: int):
    """Answers to the forest's pending questions, as many as each needs."""
    out = []
    for *_, anchor, p1, p2, needed in forest.pending():
        for _ in range(needed):
            closer = np.linalg.norm(X[anchor] - X[p1]) < np.linalg.norm(X[anchor] - X[p2])
            closer ^= rng.random() < noise
            near, far = (p1, p2) if closer else (p2, p1)
            out.append((first_id + len(out), anchor, near, far))
    return out


def build(X, labels, params, noise=0.1, seed=0, batch=37):
    """Grow a forest from an oracle crowd, advancing in small batches; returns it and the log."""
    p = ForestParams.parse(params, 0)
    forest = Forest.new(p, snapshot(p, labels))
    rng = np.random.default_rng(seed)
    log: list = []
    while forest.pending():
        answers = crowd(X, forest, rng, noise, len(log) + 1)[:batch]
        log += answers
        advance(forest, answers)
    return forest, log


def test_a_replay_in_any_order_gives_the_tree_built_answer_by_answer():
    X, y = blobs()
    labels = [str(v) if i % 4 == 0 else None for i, v in enumerate(y)]
    forest, log = build(X, labels, {"n_trees": 4, "redundancy": 3, "seed": 3})
    p = ForestParams.parse({"n_trees": 4, "redundancy": 3, "seed": 3}, 0)
    setup = snapshot(p, labels)
    shuffled = [log[i] for i in np.random.default_rng(1).permutation(len(log))]
    assert replay(p, setup, shuffled).structure() == forest.structure()
    stored = Forest.from_dict(json.loads(json.dumps(forest.to_dict())))
    assert stored.structure() == forest.structure()
    assert forest.is_complete
    # every object sits in exactly one leaf of every tree
    for t in range(4):
        assert sorted(forest.placements(t)) == list(range(len(y)))


def test_questions_come_shallow_first_and_supervised_pivots_differ_in_label():
    X, y = blobs()
    labels = [str(v) for v in y]
    p = ForestParams.parse({"n_trees": 3, "seed": 1}, 0)
    setup = snapshot(p, labels)
    assert setup["supervised"] is True  # default with two classes or more
    forest = Forest.new(p, setup)
    rng = np.random.default_rng(0)
    seen_depths = []
    for step in range(40):
        pending = forest.pending()
        if not pending:
            break
        depths = [row[0] for row in pending]
        assert depths == sorted(depths)
        seen_depths.append(depths[0])
        advance(forest, crowd(X, forest, rng, 0.0, 1000 * (step + 1))[:50])
    assert seen_depths == sorted(seen_depths)
    for tree in forest.trees:  # the root holds every class (deeper nodes may not)
        p1, p2 = tree["r"]["p"]
        assert labels[p1] != labels[p2]


def test_predictions_use_leaf_mates_and_say_when_an_object_is_not_placed():
    X, y = blobs(90)
    labels = [str(v) if i % 4 == 0 else None for i, v in enumerate(y)]
    forest, _ = build(X, labels, {"n_trees": 5, "redundancy": 1}, noise=0.0)
    forest.add_objects(91)  # a late object, routed from the roots: not placed yet
    rows, figures = forest_predictions(forest, [*labels, None], [None] * 91)
    assert figures["task"] == "classification"
    assert figures["loo_accuracy"] > 0.9
    unlabelled = [r for r in rows[:90] if labels[r["index"]] is None]
    accuracy = np.mean([r["label"] == str(y[r["index"]]) for r in unlabelled])
    assert accuracy > 0.9
    assert rows[90]["label"] is None and rows[90]["trees_placed"] == 0
    assert all(r["trees_placed"] == 5 for r in rows[:90])
    # Any time: the late object is predicted from the labelled objects of the roots, where it
    # waits (depth 0, not in a leaf); the others are in their leaves.
    anytime, figures = forest_predictions(forest, [*labels, None], [None] * 91, anytime=True)
    assert anytime[90]["label"] is not None and anytime[90]["depth"] == 0
    assert anytime[90]["in_leaf"] is False
    assert all(r["in_leaf"] and r["depth"] >= 1 for r in anytime[:90])
    assert figures["share_in_leaves"] == pytest.approx(90 / 91)
    assert [r["label"] for r in anytime[:90]] == [r["label"] for r in rows[:90]]


def test_a_forest_half_built_predicts_every_object_from_the_node_it_reached():
    """CompRF any time: stopped half-way (the deepest nodes still open), every object has a
    prediction, from the labelled objects of the deepest node it reached, and most are right."""
    X, y = blobs(90)
    labels = [str(v) if i % 4 == 0 else None for i, v in enumerate(y)]
    params = ForestParams.parse({"n_trees": 5, "redundancy": 1}, 0)
    _, answers = build(X, labels, {"n_trees": 5, "redundancy": 1}, noise=0.0)
    half = replay(params, snapshot(params, labels), answers[: len(answers) // 3])
    rows, figures = forest_predictions(half, labels, [None] * 90, anytime=True)
    assert half.pending() and figures["share_in_leaves"] < 0.9
    assert all(r["label"] is not None for r in rows)
    unlabelled = [r for r in rows if labels[r["index"]] is None]
    assert np.mean([r["label"] == str(y[r["index"]]) for r in unlabelled]) > 0.8
    assert any(not r["in_leaf"] for r in rows)


def test_regression_gives_the_mean_target_and_its_spread():
    X, _ = blobs(60)
    targets = [float(X[i, 0]) if i % 2 == 0 else None for i in range(60)]
    forest, _ = build(X, [None] * 60, {"n_trees": 5, "redundancy": 1}, noise=0.0)
    rows, figures = forest_predictions(forest, [None] * 60, targets)
    assert figures["task"] == "regression"
    assert figures["loo_rmse"] < 2.0
    assert all(r["spread"] >= 0 for r in rows)


@pytest.mark.parametrize(
    "params,field",
    [
        ({"n_trees": 0}, "n_trees"),
        ({"n_trees": 501}, "n_trees"),
        ({"leaf_size": 0}, "leaf_size"),
        ({"redundancy": 0}, "redundancy"),
        ({"redundancy": 16}, "redundancy"),
        ({"supervised": 1}, "supervised"),
        ({"seed": -1}, "seed"),
        ({"colour": 1}, "unknown params"),
    ],
)
def test_bad_params_name_the_field(params, field):
    with pytest.raises(ValueError, match=field):
        ComparisonForestStrategy(10, params, 0)


def test_supervised_without_two_classes_names_the_field():
    strategy = ComparisonForestStrategy(4, {"supervised": True}, 0)
    with pytest.raises(ValueError, match="supervised"):
        strategy.setup(["a", "a", None, None])
    with pytest.raises(ValueError, match="at least 3 objects"):
        ComparisonForestStrategy(2, {}, 0)

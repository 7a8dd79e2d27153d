"""Tests of comparison trees and comparison-based random forests (CompRF)."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from joblib import parallel_config
from sklearn.exceptions import NotFittedError

from app.learning.comparison_tree import (
    LEAF,
    SPLIT,
    ComparisonTreeBuilder,
    ComparisonTreeRouter,
    drive,
)
from app.learning.comprf import ComparisonForestClassifier, ComparisonForestRegressor


def euclidean_oracle(X: np.ndarray):
    """A small exact oracle: True where d(a, b) < d(a, c)."""
    X = np.asarray(X, dtype=float).reshape(len(X), -1)

    def oracle(a, b, c):
        return ((X[a] - X[b]) ** 2).sum(1) < ((X[a] - X[c]) ** 2).sum(1)

    return oracle


def leaves_of(tree: ComparisonTreeBuilder) -> set[frozenset[int]]:
    return {frozenset(tree.leaf_items(n).tolist()) for n in np.flatnonzero(tree.state == LEAF)}


def splits_of(tree: ComparisonTreeBuilder) -> set[tuple[frozenset[int], int, int]]:
    return {
        (frozenset(tree.leaf_items(n).tolist()), int(tree.pivot1[n]), int(tree.pivot2[n]))
        for n in np.flatnonzero(tree.state == SPLIT)
    }


# ------------------------------------------------------------------ the tree


def test_hand_checked_supervised_split():
    # positions 0, 1, 10, 11 with labels 0, 0, 1, 1: the pivots have different
    # labels, so one is in {0, 1} and one in {2, 3}; their bisector lies
    # between 1 and 10, and both children (size 2 = leaf_size) are leaves.
    oracle = euclidean_oracle([0.0, 1.0, 10.0, 11.0])
    tree = ComparisonTreeBuilder([0, 1, 2, 3], [0, 0, 1, 1], leaf_size=2, seed=5)
    queries = tree.pending_queries()
    p1, p2 = int(tree.pivot1[0]), int(tree.pivot2[0])
    assert {p1 // 2, p2 // 2} == {0, 1}
    assert sorted(queries[:, 0].tolist()) == sorted(set(range(4)) - {p1, p2})
    assert (queries[:, 1] == p1).all() and (queries[:, 2] == p2).all()
    drive(tree, oracle)
    assert tree.is_complete and tree.n_nodes == 3
    assert leaves_of(tree) == {frozenset({0, 1}), frozenset({2, 3})}
    assert tree.n_queries_ == tree.n_asks_ == 2


def test_points_on_a_line_route_to_their_own_leaf():
    x = np.random.default_rng(0).permutation(40).astype(float)
    oracle = euclidean_oracle(x)
    tree = ComparisonTreeBuilder(np.arange(40), leaf_size=1, supervised=False, seed=7)
    drive(tree, oracle)
    assert leaves_of(tree) == {frozenset({i}) for i in range(40)}
    # on a line every node is an interval, split at the pivots' midpoint
    for node in np.flatnonzero(tree.state == SPLIT):
        items = tree.leaf_items(node)
        values = np.sort(x[items])
        assert np.array_equal(values, np.arange(values[0], values[-1] + 1))
        mid = (x[tree.pivot1[node]] + x[tree.pivot2[node]]) / 2
        left = tree.leaf_items(tree.child[node])
        right = tree.leaf_items(tree.child[node] + 1)
        near_p1 = np.sign(x[left] - mid) == np.sign(x[tree.pivot1[node]] - mid)
        assert near_p1.all()
        assert not (np.sign(x[right] - mid) == np.sign(x[tree.pivot1[node]] - mid)).any()
    router = tree.router(np.arange(40))
    drive(router, oracle)
    assert router.is_complete
    for obj, leaf in zip(router.objects, router.node, strict=True):
        assert tree.leaf_items(leaf).tolist() == [obj]
    # a pivot reaches its leaf without being asked about its own split
    assert router.n_queries_ < 40 * (tree.n_queries_ / 40 + 1)


def test_resume_from_json_mid_build_gives_identical_tree():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 3))
    oracle = euclidean_oracle(X)
    y = rng.integers(0, 3, 60)
    whole = ComparisonTreeBuilder(np.arange(60), y, leaf_size=2, redundancy=1, seed=11)
    drive(whole, oracle)

    part = ComparisonTreeBuilder(np.arange(60), y, leaf_size=2, redundancy=1, seed=11)
    for _ in range(3):  # three rounds of answers, then a restart
        q = part.pending_queries()
        part.record_batch(q, oracle(q[:, 0], q[:, 1], q[:, 2]))
    q = part.pending_queries()[:5]  # and a few single answers
    for a, b, c in q:
        part.record(int(a), int(b), int(c), bool(oracle(np.array([a]), [b], [c])[0]))
    state = json.loads(json.dumps(part.to_dict()))
    resumed = ComparisonTreeBuilder.from_dict(state)
    assert resumed.pending_queries().tolist() == part.pending_queries().tolist()
    drive(resumed, oracle)
    drive(part, oracle)
    for name in ("start", "end", "child", "pivot1", "pivot2", "state", "order"):
        assert np.array_equal(getattr(resumed, name), getattr(part, name)), name
    assert resumed.n_queries_ == part.n_queries_ == whole.n_queries_
    assert splits_of(resumed) == splits_of(whole)
    assert leaves_of(resumed) == leaves_of(whole)


def test_answer_order_does_not_change_the_tree():
    # a crowd answers one question at a time in any order: same tree as a batch build
    X = np.random.default_rng(2).normal(size=(30, 2))
    oracle = euclidean_oracle(X)
    batch = ComparisonTreeBuilder(np.arange(30), supervised=False, seed=3)
    drive(batch, oracle)
    crowd = ComparisonTreeBuilder(np.arange(30), supervised=False, seed=3)
    rng = np.random.default_rng(4)
    while not crowd.is_complete:
        q = crowd.pending_queries()
        a, b, c = q[rng.integers(len(q))]
        assert crowd.record(int(a), int(b), int(c), bool(oracle(np.array([a]), [b], [c])[0]))
    assert splits_of(crowd) == splits_of(batch)
    assert leaves_of(crowd) == leaves_of(batch)


def test_supervised_pivots_have_different_labels_and_noise_terminates():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(80, 2))
    y = rng.integers(0, 4, 80)
    noisy = euclidean_oracle(X)

    def oracle(a, b, c):  # 30% of answers flipped afresh at every ask
        return noisy(a, b, c) ^ (rng.random(len(a)) < 0.3)

    tree = ComparisonTreeBuilder(np.arange(80), y, redundancy=2, seed=9)
    drive(tree, oracle)
    assert leaves_of(tree) == {frozenset({i}) for i in range(80)}
    for node in np.flatnonzero(tree.state == SPLIT):
        if len(set(y[tree.leaf_items(node)].tolist())) > 1:
            assert y[tree.pivot1[node]] != y[tree.pivot2[node]]
    assert tree.n_asks_ > 2 * tree.n_queries_  # ties were asked again


def test_a_batch_of_trees_builds_each_tree_as_alone():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(90, 3))
    y = rng.integers(0, 3, 90)
    oracle = euclidean_oracle(X)
    samples = [np.sort(rng.choice(90, 60, replace=False)) for _ in range(4)]
    seeds = [3, 1, 4, 1 << 62]
    for params in ({}, {"leaf_size": 3, "supervised": False}, {"split_pure": False}):
        batch = ComparisonTreeBuilder._batch(samples, [y[s] for s in samples], seeds, **params)
        drive(batch, oracle)
        for sample, seed, tree in zip(samples, seeds, batch._unbatch(), strict=True):
            alone = ComparisonTreeBuilder(sample, y[sample], seed=seed, **params)
            drive(alone, oracle)
            assert tree.to_dict() == alone.to_dict()
    with pytest.raises(ValueError, match="by slot only"):
        batch.record(0, 1, 2, True)


def three_object_tree(redundancy: int) -> tuple[ComparisonTreeBuilder, tuple[int, int, int]]:
    tree = ComparisonTreeBuilder([0, 1, 2], supervised=False, redundancy=redundancy, seed=0)
    (query,) = tree.pending_queries().tolist()
    return tree, tuple(query)


def test_redundancy_takes_the_majority():
    tree, (a, b, c) = three_object_tree(3)
    _, counts = tree.pending_queries(return_counts=True)
    assert counts.tolist() == [3]
    assert tree.record(a, b, c, True) and tree.record(a, b, c, False)
    assert tree.pending_queries(return_counts=True)[1].tolist() == [1]
    tree.record(a, b, c, True)  # 2 of 3 say "closer to p1"
    assert tree.is_complete
    assert a in tree.leaf_items(tree.child[0]) and b in tree.leaf_items(tree.child[0])
    assert (tree.n_queries_, tree.n_asks_) == (1, 3)


def test_redundancy_tie_asks_again():
    tree, (a, b, c) = three_object_tree(2)
    tree.record(a, b, c, False)
    tree.record(a, b, c, True)  # 1-1: a tie, ask once more
    assert not tree.is_complete
    assert tree.pending_queries(return_counts=True)[1].tolist() == [1]
    tree.record(a, b, c, False)
    assert tree.is_complete
    assert a in tree.leaf_items(tree.child[0] + 1)  # closer to p2: right child
    assert (tree.n_queries_, tree.n_asks_) == (1, 3)


def test_reversed_pivots_and_stale_answers():
    tree, (a, b, c) = three_object_tree(1)
    assert not tree.record(b, a, c, True)  # a pivot is never asked
    assert tree.record(a, c, b, True)  # pivots swapped: "closer to c" means right
    assert tree.is_complete
    assert a in tree.leaf_items(tree.child[0] + 1)
    assert not tree.record(a, c, b, True)  # late answer after the split is ignored
    with pytest.raises(ValueError, match="not an object of this tree"):
        tree.record(7, b, c, True)


def test_router_state_machine_redundancy_and_json():
    X = np.arange(8, dtype=float)
    oracle = euclidean_oracle(X)
    tree = ComparisonTreeBuilder(np.arange(0, 8, 2), supervised=False, seed=1)
    drive(tree, oracle)
    router = ComparisonTreeRouter(tree, [1, 5, 7], redundancy=3)
    q, counts = router.pending_queries(return_counts=True)
    assert set(q[:, 0].tolist()) == {1, 5, 7} and (counts == 3).all()
    router.record_batch(q, oracle(q[:, 0], q[:, 1], q[:, 2]))
    router = ComparisonTreeRouter.from_dict(json.loads(json.dumps(router.to_dict())), tree)
    drive(router, oracle)
    nearest = {
        int(o): {int(v) for v in tree.leaf_items(n)}
        for o, n in zip(router.objects, router.node, strict=True)
    }
    assert nearest[7] == {6}  # 7 is nearer 6 than any other training point
    assert router.n_asks_ == 3 * router.n_queries_
    with pytest.raises(ValueError, match="not being routed"):
        router.record(3, 0, 2, True)


# ------------------------------------------------------------ the forests


def blobs(seed: int = 0, n: int = 150):
    rng = np.random.default_rng(seed)
    centers = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    y = np.repeat(np.arange(3), n // 3)
    X = centers[y] + rng.normal(size=(n, 2))
    return X, y


def test_classifier_on_separated_blobs():
    X, y = blobs()
    oracle = euclidean_oracle(X)
    y_train = y.copy()
    test = np.arange(0, len(y), 3)
    y_train[test] = -1
    clf = ComparisonForestClassifier(n_estimators=20, random_state=0).fit(oracle, y_train)
    assert clf.predict(oracle, test).tolist() == y[test].tolist()
    proba = clf.predict_proba(oracle, test)
    assert proba.shape == (len(test), 3) and np.allclose(proba.sum(1), 1)
    assert clf.n_queries_ == clf.n_asks_ > 0 and len(clf.estimators_) == 20
    assert clf.n_predict_queries_ > 0
    # duplicates and order of requested objects are respected
    assert np.array_equal(clf.predict(oracle, test[[2, 0, 2]]), y[test[[2, 0, 2]]])
    # the same forest for the same seed; unsupervised pivots also work here
    again = ComparisonForestClassifier(n_estimators=20, random_state=0).fit(oracle, y_train)
    assert again.n_queries_ == clf.n_queries_
    unsup = ComparisonForestClassifier(n_estimators=20, supervised=False, random_state=0)
    assert unsup.fit(oracle, y_train).score(oracle, test, y[test]) > 0.95


def test_classifier_string_labels_with_none_and_redundancy():
    X, y = blobs(1, 60)
    names = np.array(["a", "b", "c"], dtype=object)[y]
    names[::5] = None
    clf = ComparisonForestClassifier(n_estimators=5, redundancy=3, random_state=1)
    clf.fit(euclidean_oracle(X), names)
    assert clf.classes_.tolist() == ["a", "b", "c"]
    assert clf.n_asks_ == 3 * clf.n_queries_  # exact oracle, odd redundancy: no ties
    assert set(np.concatenate([t.order for t in clf.estimators_]).tolist()).isdisjoint(
        range(0, 60, 5)
    )


def test_subsample_builds_each_tree_on_a_fraction():
    X, y = blobs(5, 60)
    clf = ComparisonForestClassifier(n_estimators=3, subsample=0.5, random_state=0)
    clf.fit(euclidean_oracle(X), y)
    samples = [np.sort(t.order) for t in clf.estimators_]
    assert all(len(s) == 30 for s in samples)
    assert not np.array_equal(samples[0], samples[1])


def test_split_pure_false_saves_questions():
    X, y = blobs(2)
    oracle = euclidean_oracle(X)
    full = ComparisonForestClassifier(n_estimators=5, random_state=0).fit(oracle, y)
    lean = ComparisonForestClassifier(n_estimators=5, split_pure=False, random_state=0)
    lean.fit(oracle, y)
    assert lean.n_queries_ < full.n_queries_
    for tree in lean.estimators_:
        for leaf in np.flatnonzero(tree.state == LEAF):
            assert len(set(y[tree.leaf_items(leaf)].tolist())) == 1
    # with leaf size 1 an unsplit pure leaf votes once, as its full split would
    test = np.arange(len(y))
    assert np.allclose(full.predict_proba(oracle, test), lean.predict_proba(oracle, test))
    assert lean.n_predict_queries_ < full.n_predict_queries_


def test_parallel_build_matches_sequential_and_pickles():
    X, y = blobs(3, 60)
    oracle = euclidean_oracle(X)
    one = ComparisonForestClassifier(n_estimators=4, random_state=2).fit(oracle, y)
    # threads keep the test fast; the default process backend needs the same chunking
    with parallel_config(backend="threading"):
        two = ComparisonForestClassifier(n_estimators=4, n_jobs=2, random_state=2)
        two.fit(oracle, y)
        proba_two = two.predict_proba(oracle, range(60))
    for t1, t2 in zip(one.estimators_, two.estimators_, strict=True):
        assert np.array_equal(t1.pivot1, t2.pivot1) and np.array_equal(t1.order, t2.order)
    assert np.array_equal(one.predict_proba(oracle, range(60)), proba_two)
    copy = pickle.loads(pickle.dumps(one))
    assert np.array_equal(copy.predict_proba(oracle, range(60)), proba_two)


def test_regressor_on_a_smooth_function():
    x = np.linspace(0, 2 * np.pi, 200)
    y = np.sin(x)
    y_train = y.copy()
    test = np.arange(1, 200, 4)
    y_train[test] = np.nan
    oracle = euclidean_oracle(x)
    reg = ComparisonForestRegressor(n_estimators=20, leaf_size=3, random_state=0)
    pred = reg.fit(oracle, y_train).predict(oracle, test)
    assert np.sqrt(np.mean((pred - y[test]) ** 2)) < 0.1
    assert reg.score(oracle, test, y[test]) > 0.95
    # the mean of a single leaf, by hand: one tree, leaf size large -> one leaf
    one = ComparisonForestRegressor(n_estimators=1, leaf_size=500, random_state=0)
    assert np.allclose(one.fit(oracle, y_train).predict(oracle, [1]), np.nanmean(y_train))


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"objects": []}, "non-empty"),
        ({"objects": [[0, 1]]}, "non-empty 1-D"),
        ({"objects": [0, -1]}, "non-negative"),
        ({"objects": [0.5, 1]}, "non-negative integer"),
        ({"objects": [0, 0]}, "distinct"),
        ({"objects": [0, 1], "leaf_size": 0}, "leaf_size"),
        ({"objects": [0, 1], "redundancy": 0}, "redundancy"),
        ({"objects": [0, 1], "seed": -1}, "seed"),
        ({"objects": [0, 1], "labels": [0]}, "labels"),
        ({"objects": [0, 1], "labels": [0.5, 1.0]}, "labels"),
        ({"objects": [0, 1], "split_pure": False}, "split_pure=False needs labels"),
    ],
)
def test_builder_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ComparisonTreeBuilder(**kwargs)


def test_record_and_state_errors():
    tree, (a, b, c) = three_object_tree(1)
    with pytest.raises(ValueError, match="shape"):
        tree.record_batch([[a, b]], [True])
    with pytest.raises(ValueError, match="shape"):
        tree.record_batch([[a, b, c]], [True, False])
    with pytest.raises(ValueError, match="booleans"):
        tree.record_batch([[a, b, c]], [0.5])
    with pytest.raises(ValueError, match="non-negative integer"):
        tree.record_batch([[a, -1, c]], [True])
    with pytest.raises(ValueError, match="format"):
        ComparisonTreeBuilder.from_dict({"format": 99})
    with pytest.raises(ValueError, match="incomplete"):
        ComparisonTreeBuilder.from_dict({"format": 1, "params": {}})
    with pytest.raises(ValueError, match="still being built"):
        ComparisonTreeRouter(tree, [0])
    tree.record(a, b, c, True)
    with pytest.raises(ValueError, match="distinct"):
        ComparisonTreeRouter(tree, [1, 1])
    with pytest.raises(ValueError, match="non-negative integer"):
        ComparisonTreeRouter(tree, [-1])
    with pytest.raises(ValueError, match="format"):
        ComparisonTreeRouter.from_dict({}, tree)
    with pytest.raises(ValueError, match="oracle answers"):
        drive(ComparisonTreeBuilder([0, 1, 2], seed=0, supervised=False), lambda a, b, c: [1.5])


def test_forest_errors():
    X, y = blobs(4, 30)
    oracle = euclidean_oracle(X)
    clf = ComparisonForestClassifier(n_estimators=2)
    with pytest.raises(NotFittedError):
        clf.predict(oracle, [0])
    with pytest.raises(ValueError, match="n_estimators"):
        ComparisonForestClassifier(n_estimators=0).fit(oracle, y)
    with pytest.raises(ValueError, match="subsample"):
        ComparisonForestClassifier(subsample=0.0).fit(oracle, y)
    with pytest.raises(ValueError, match="leaf_size"):
        ComparisonForestRegressor(leaf_size=0).fit(oracle, y.astype(float))
    with pytest.raises(ValueError, match="two classes"):
        clf.fit(oracle, np.where(y == 0, 0, -1))
    with pytest.raises(ValueError, match="1-D"):
        clf.fit(oracle, y.reshape(-1, 1))
    with pytest.raises(ValueError, match="comparable"):
        clf.fit(oracle, np.array([1, "a"] * 15, dtype=object))
    with pytest.raises(TypeError, match="callable"):
        clf.fit("not an oracle", y)
    clf.fit(oracle, y)
    with pytest.raises(ValueError, match="1-D array of integer"):
        clf.predict(oracle, [[0, 1]])
    with pytest.raises(ValueError, match="1-D array of integer"):
        clf.predict(oracle, [0.5])
    with pytest.raises(ValueError, match="non-negative"):
        clf.predict(oracle, [-2])
    with pytest.raises(ValueError, match="oracle answers must have shape"):
        clf.predict(lambda a, b, c: np.ones(1, bool), np.arange(30))
    reg = ComparisonForestRegressor(n_estimators=2)
    with pytest.raises(ValueError, match="no labelled"):
        reg.fit(oracle, np.full(30, np.nan))
    with pytest.raises(ValueError, match="infinite"):
        reg.fit(oracle, np.r_[np.inf, np.zeros(29)])
    with pytest.raises(ValueError, match="numbers"):
        reg.fit(oracle, ["a"] * 30)
    with pytest.raises(ValueError, match="1-D"):
        reg.fit(oracle, np.zeros((30, 1)))

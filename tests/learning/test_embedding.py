"""Tests of the ordinal embeddings SOE, t-STE, CKL and GNMDS."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from scipy.optimize import check_grad
from scipy.spatial import procrustes
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from app.learning._embedding_base import _TripletIndex
from app.learning.embedding import (
    CKL,
    GNMDS,
    SOE,
    TSTE,
    embedding_knn_predict,
    triplet_accuracy,
)

ESTIMATORS = [SOE, TSTE, CKL, GNMDS]


def complete_triplets(points: np.ndarray) -> np.ndarray:
    """Every triplet of the points, oriented by their true distances."""
    n = len(points)
    dist = ((points[:, None] - points[None]) ** 2).sum(-1)
    rows = []
    for a in range(n):
        for b, c in combinations([i for i in range(n) if i != a], 2):
            rows.append((a, b, c) if dist[a, b] < dist[a, c] else (a, c, b))
    return np.array(rows)


@pytest.fixture(scope="module")
def square() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """20 points in the unit square; 70% of their 3,420 triplets to train, 30% held out."""
    rng = np.random.default_rng(0)
    points = rng.uniform(size=(20, 2))
    triplets = complete_triplets(points)
    order = rng.permutation(len(triplets))
    cut = len(triplets) * 7 // 10
    return points, triplets[order[:cut]], triplets[order[cut:]]


@pytest.fixture(scope="module")
def small() -> np.ndarray:
    """All 360 triplets of 10 random points, for tests of mechanics rather than quality."""
    return complete_triplets(np.random.default_rng(1).uniform(size=(10, 2)))


# --- recovery -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("estimator", "min_score", "max_disparity"),
    [
        (SOE(random_state=0), 0.95, 0.01),
        (GNMDS(random_state=0), 0.95, 0.01),
        (TSTE(alpha=20, random_state=0), 0.95, 0.01),
        # The likelihood models with their default parameters trade a few near-tie
        # triplets for likelihood: cblearn 0.4.0 also ends at 0.919 held out here
        # (t-STE and CKL with mu=0).
        (TSTE(random_state=0), 0.90, 0.05),
        (CKL(random_state=0), 0.90, 0.05),
    ],
    ids=["SOE", "GNMDS", "TSTE-alpha20", "TSTE", "CKL"],
)
def test_recovers_points_up_to_similarity(square, estimator, min_score, max_disparity):
    points, train, test = square
    embedding = estimator.fit_transform(train, n_objects=20)
    assert embedding.shape == (20, 2)
    assert estimator.score(test) >= min_score
    # Procrustes removes translation, rotation, reflection and scale.
    assert procrustes(points, embedding)[2] <= max_disparity


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tste_converges_instead_of_drifting_to_a_huge_scale(seed):
    """Unregularised, every satisfied triplet gains from spreading the points: L-BFGS-B
    drifted to norms of 10^3-10^4, where the gradient fell below ``tol``, and stopped with
    only 90-92% of these noise-free triplets satisfied (seeds 0 and 1). The L2 term of
    van der Maaten & Weinberger keeps the scale and lets the fit converge."""
    rng = np.random.default_rng(seed)
    points = rng.normal(scale=4.0, size=(3, 2))[np.arange(30) % 3] + rng.normal(size=(30, 2))
    rows = rng.integers(30, size=(3000, 3))
    rows = rows[
        (rows[:, 0] != rows[:, 1]) & (rows[:, 0] != rows[:, 2]) & (rows[:, 1] != rows[:, 2])
    ]
    rows = rows[:640]
    dist = ((points[:, None] - points[None]) ** 2).sum(-1)
    near = dist[rows[:, 0], rows[:, 1]] < dist[rows[:, 0], rows[:, 2]]
    triplets = np.where(near[:, None], rows, rows[:, [0, 2, 1]])
    est = TSTE(random_state=0).fit(triplets, 30)
    assert np.sqrt((est.embedding_**2).sum(axis=1).mean()) < 50
    assert est.score(triplets) >= 0.93
    unregularised = TSTE(lambd=0.0, random_state=0).fit(triplets, 30)
    assert np.sqrt((unregularised.embedding_**2).sum(axis=1).mean()) > 500  # the old drift


@pytest.mark.parametrize("cls", ESTIMATORS)
@pytest.mark.parametrize("n_components", [1, 3])
def test_n_components_respected(small, cls, n_components):
    train = small
    est = cls(n_components=n_components, max_iter=20, random_state=0).fit(train, 10)
    assert est.embedding_.shape == (10, n_components)
    assert np.all(np.isfinite(est.embedding_))


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_deterministic_with_a_seed(small, cls):
    train = small
    first = cls(random_state=7, max_iter=30).fit_transform(train, 10)
    again = cls(random_state=7, max_iter=30).fit_transform(train, 10)
    other = cls(random_state=8, max_iter=30).fit_transform(train, 10)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_more_restarts_never_worse(small, cls):
    # The first restart of n_init=3 is the single restart of n_init=1 (same seed).
    train = small
    one = cls(random_state=3, max_iter=30).fit(train, 10)
    three = cls(random_state=3, max_iter=30, n_init=3).fit(train, 10)
    assert three.loss_ <= one.loss_


def test_objects_in_no_triplet_get_rows():
    est = SOE(random_state=0).fit([[0, 1, 2], [1, 0, 2]], n_objects=5)
    assert est.embedding_.shape == (5, 2)
    assert est.n_objects_ == 5


def test_ckl_embedding_is_centred_with_unit_mean_squared_norm(square):
    _, train, _ = square
    X = CKL(random_state=0, max_iter=30).fit_transform(train, 20)
    np.testing.assert_allclose(X.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose((X**2).sum() / 20, 1.0)


# --- objectives: hand-checked values and exact gradients ------------------------------------


def test_loss_terms_by_hand():
    # X = [0, 1, 3] on a line; triplet (0, 2, 1) is violated: d(0,2)=3, d(0,1)=1.
    sq_near, sq_far = np.array([9.0]), np.array([1.0])
    assert SOE(margin=0.1)._loss_terms(sq_near, sq_far)[0][0] == pytest.approx(2.1**2)
    # alpha=1: k(s) = 1/(1+s), p = 0.1 / (0.1 + 0.5) = 1/6
    assert TSTE(alpha=1)._loss_terms(sq_near, sq_far)[0][0] == pytest.approx(np.log(6))
    # mu=0: p = 1 / (9 + 1)
    assert CKL(mu=0)._loss_terms(sq_near, sq_far)[0][0] == pytest.approx(np.log(10))
    assert CKL(mu=1)._loss_terms(sq_near, sq_far)[0][0] == pytest.approx(np.log(12 / 2))
    assert GNMDS()._loss_terms(sq_near, sq_far)[0][0] == pytest.approx(9.0)
    # a satisfied triplet with a wide margin costs nothing in the hinge losses
    assert SOE()._loss_terms(sq_far, sq_near)[0][0] == 0.0
    assert GNMDS()._loss_terms(sq_far, sq_near)[0][0] == 0.0


@pytest.mark.parametrize("dense", [True, False], ids=["dense", "per-triplet"])
@pytest.mark.parametrize(
    "estimator",
    [SOE(), TSTE(), TSTE(n_components=3, alpha=0.5), CKL(), CKL(mu=0.0), GNMDS(lambd=0.1)],
    ids=["SOE", "TSTE", "TSTE-3d", "CKL", "CKL-mu0", "GNMDS"],
)
def test_gradient_matches_finite_differences(square, estimator, dense):
    _, train, _ = square
    shape = (20, estimator.n_components)
    index = _TripletIndex(train, 20, dense=dense)
    x = np.random.default_rng(1).standard_normal(shape[0] * shape[1])

    def loss(v):
        return estimator._objective(v, shape, index)[0]

    def grad(v):
        return estimator._objective(v, shape, index)[1]

    assert check_grad(loss, grad, x) <= 1e-5 * max(1.0, np.linalg.norm(grad(x)))


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_dense_and_per_triplet_paths_agree(square, cls):
    _, train, _ = square
    est = cls(n_components=3)
    x = np.random.default_rng(2).standard_normal(20 * 3)
    loss_d, grad_d = est._objective(x, (20, 3), _TripletIndex(train, 20, dense=True))
    loss_t, grad_t = est._objective(x, (20, 3), _TripletIndex(train, 20, dense=False))
    assert loss_d == pytest.approx(loss_t, rel=1e-10)
    np.testing.assert_allclose(grad_d, grad_t, rtol=1e-8, atol=1e-12)


def test_path_choice():
    # 3,420 triplets of 20 objects: dense; 3 triplets of 20 objects: per triplet.
    assert _TripletIndex(np.zeros((3420, 3), dtype=np.intp), 20).dense
    assert not _TripletIndex(np.zeros((3, 3), dtype=np.intp), 20).dense


# --- scoring and prediction -----------------------------------------------------------------


def test_triplet_accuracy_by_hand():
    X = np.array([[0.0], [1.0], [3.0], [-1.0]])
    # true, false, true (d(1,0)=1 < d(1,2)=2), tie d(0,1) = d(0,3) counts as a miss
    triplets = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [0, 1, 3]]
    assert triplet_accuracy(X, triplets) == pytest.approx(2 / 4)


def test_score_and_predict_agree(square):
    _, train, test = square
    est = GNMDS(random_state=0, max_iter=50).fit(train, 20)
    holds = est.predict(test)
    assert holds.dtype == bool and holds.shape == (len(test),)
    assert est.score(test) == pytest.approx(holds.mean())
    assert est.score(test) == pytest.approx(triplet_accuracy(est.embedding_, test))


def test_knn_predict_by_hand():
    X = np.array([[0.0], [0.1], [5.0], [5.2], [0.3], [4.8], [2.0]])
    labelled, labels = [0, 1, 2, 3], ["a", "a", "b", "b"]
    assert embedding_knn_predict(X, labelled, labels, [4, 5]).tolist() == ["a", "b"]
    # object 6 at 2.0: its 3 nearest labelled objects are 1 (a), 0 (a) and 2 (b)
    assert embedding_knn_predict(X, labelled, labels, [6], k=3).tolist() == ["a"]
    assert embedding_knn_predict(X, labelled, labels, []).shape == (0,)


# --- progress callback ----------------------------------------------------------------------


def test_callback_reports_progress(square):
    _, train, _ = square
    calls = []
    GNMDS(random_state=0, max_iter=15, n_init=2).fit(
        train, 20, callback=lambda done, total, loss: calls.append((done, total, loss))
    )
    done = [c[0] for c in calls]
    assert all(c[1] == 30 for c in calls)
    assert done == sorted(done) and done[-1] == 30 and 15 in done
    assert all(np.isfinite(c[2]) for c in calls)


def test_callback_stop_iteration_stops_the_fit(square):
    _, train, _ = square
    calls = []

    def stop_at_three(done, total, loss):
        calls.append(done)
        if done == 3:
            raise StopIteration

    est = SOE(random_state=0, max_iter=200, n_init=4).fit(train, 20, callback=stop_at_three)
    assert calls == [1, 2, 3]  # no further iterations, no further restarts
    assert est.n_iter_ == 3
    assert est.embedding_.shape == (20, 2)

    # StopIteration from the report closing a restart stops the fit too.
    calls.clear()

    def stop_at_end_of_restart(done, total, loss):
        calls.append(done)
        if done == 5:
            raise StopIteration

    GNMDS(random_state=0, max_iter=5, n_init=3).fit(train, 20, callback=stop_at_end_of_restart)
    assert calls[-1] == 5 and max(calls) == 5


def test_callback_error_propagates(square):
    _, train, _ = square

    def fail(done, total, loss):
        raise RuntimeError("job cancelled")

    with pytest.raises(RuntimeError, match="job cancelled"):
        TSTE(max_iter=5).fit(train, 20, callback=fail)


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("estimator", "name"),
    [
        (SOE(n_components=0), "n_components"),
        (TSTE(n_components=2.5), "n_components"),
        (CKL(max_iter=0), "max_iter"),
        (GNMDS(tol=-1.0), "tol"),
        (SOE(n_init=0), "n_init"),
        (SOE(random_state="seed"), "random_state"),
        (SOE(margin=0.0), "margin"),
        (TSTE(alpha=0.0), "alpha"),
        (TSTE(lambd=-1.0), "lambd"),
        (CKL(mu=-0.1), "mu"),
        (GNMDS(lambd=-1.0), "lambd"),
    ],
)
def test_invalid_hyperparameters(estimator, name):
    with pytest.raises(ValueError, match=name):
        estimator.fit([[0, 1, 2]])


@pytest.mark.parametrize(
    ("triplets", "n_objects", "match"),
    [
        (np.empty((0, 3), dtype=int), None, "empty"),
        ([[0, 1, 2]], 2.5, "n_objects must be an integer"),
        ([[0, 1, 2]], True, "n_objects must be an integer"),
        ([[0, 1, 3]], 3, "out of range"),
        ([[0, 1]], None, "shape"),
        ([[0, 0, 1]], None, "repeat"),
        ([[0, -1, 2]], None, "negative"),
    ],
)
def test_invalid_fit_input(triplets, n_objects, match):
    with pytest.raises(ValueError, match=match):
        SOE().fit(triplets, n_objects)


def test_score_errors():
    with pytest.raises(NotFittedError):
        SOE().score([[0, 1, 2]])
    est = SOE(max_iter=5, random_state=0).fit([[0, 1, 2]])
    with pytest.raises(ValueError, match="out of range"):
        est.score([[0, 1, 3]])
    with pytest.raises(ValueError, match="empty"):
        est.score(np.empty((0, 3), dtype=int))
    with pytest.raises(ValueError, match="2-D"):
        triplet_accuracy(np.zeros(3), [[0, 1, 2]])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"embedding": np.zeros(4)}, "2-D"),
        ({"labelled_idx": [0, 1, 9]}, "labelled_idx holds an index out of range"),
        ({"query_idx": [[2]]}, "query_idx must be a 1-D"),
        ({"query_idx": [2.0]}, "query_idx must be a 1-D"),
        ({"labels": ["a", "b"]}, "one entry per labelled object"),
        ({"labelled_idx": [], "labels": []}, "empty"),
        ({"k": 0}, "k must be"),
        ({"k": 4}, "k must be"),
        ({"k": True}, "k must be"),
    ],
)
def test_knn_errors(kwargs, match):
    args = {
        "embedding": np.arange(8.0).reshape(4, 2),
        "labelled_idx": [0, 1, 2],
        "labels": ["a", "b", "a"],
        "query_idx": [3],
        "k": 1,
        **kwargs,
    }
    with pytest.raises(ValueError, match=match):
        embedding_knn_predict(**args)


def test_sklearn_parameter_api():
    est = TSTE(n_components=3, alpha=2.0, random_state=1)
    assert clone(est).get_params() == est.get_params()
    assert est.set_params(alpha=4.0).alpha == 4.0

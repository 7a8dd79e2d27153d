"""Tests of SVMCompare (Venuto, Hocking et al., Support vector comparison machines)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.svm import SVC

from app.learning.svmcompare import SVMCompare, flip_pairs, threshold

# liblinear (solver="primal") may stop at max_iter on these tiny, nearly hard-margin
# problems; the tests check the agreement it reaches, not its convergence report.
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def separable_pairs(n: int = 60, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs labelled by the linear rank r(x) = 2 x_0 - x_1 with a gap around |diff| = 1.

    Ties have |diff| <= 0.5, inequality pairs |diff| >= 2: linearly separable in the
    sense of the LP (7) of the paper.
    """
    rng = np.random.default_rng(seed)
    w = np.array([2.0, -1.0])
    X_left = rng.uniform(-2, 2, size=(4 * n, 2))
    X_right = X_left + rng.normal(0, 1.0, size=(4 * n, 2))
    diff = (X_right - X_left) @ w
    keep = (np.abs(diff) <= 0.5) | (np.abs(diff) >= 2)
    X_left, X_right, diff = X_left[keep][:n], X_right[keep][:n], diff[keep][:n]
    y = np.where(diff >= 2, 1, np.where(diff <= -2, -1, 0))
    return X_left, X_right, y


def squared_norm_pairs(n: int = 80, seed: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The paper's Section 4.1 simulation with r(x) = ||x||_2^2 (not linearly separable)."""
    rng = np.random.default_rng(seed)
    X_left = rng.uniform(-2, 2, size=(n, 2))
    X_right = X_left + rng.normal(0, 0.5, size=(n, 2))
    diff = (X_right**2).sum(1) - (X_left**2).sum(1) + rng.normal(0, 0.25, n)
    return X_left, X_right, threshold(diff, 1.0)


def test_threshold_is_eq_4() -> None:
    values = np.array([-2.0, -1.0, -0.5, 0.0, 1.0, 1.0001, 3.0])
    assert threshold(values).tolist() == [-1, 0, 0, 0, 0, 1, 1]
    assert threshold(values, tau=0.25).tolist() == [-1, -1, -1, 0, 1, 1, 1]


def test_flip_pairs_is_eq_8() -> None:
    X_left = np.array([[0.0], [1.0], [2.0]])
    X_right = np.array([[10.0], [11.0], [12.0]])
    y = np.array([-1, 0, 1])
    X_t, X_tp, y_t = flip_pairs(X_left, X_right, y)
    # rows: y=1 unchanged, y=-1 swapped, the tie in both orders
    assert X_t.ravel().tolist() == [2.0, 10.0, 1.0, 11.0]
    assert X_tp.ravel().tolist() == [12.0, 0.0, 11.0, 1.0]
    assert y_t.tolist() == [1, 1, -1, -1]


def test_hand_solved_hard_margin_problem() -> None:
    # 1-d pairs: (0 -> 2, right better) and a tie (0, 1). Flipped differences
    # d = 2 (y~=1), 1 and -1 (y~=-1). Hard-margin QP (9): min u^2 subject to
    # beta + 2u >= 1, beta + u <= -1, beta - u <= -1  =>  u = 2, beta = -3,
    # so r(x) = u x / -beta = 2x/3 and mu = 1/3 (Lemma 3.1).
    X_left = np.array([[0.0], [0.0]])
    X_right = np.array([[2.0], [1.0]])
    y = np.array([1, 0])
    for solver in ("dual", "primal"):
        model = SVMCompare(C=1e6, kernel="linear", solver=solver).fit(X_left, X_right, y)
        assert model.bias_ == pytest.approx(-3.0, rel=1e-2)
        assert model.margin_ == pytest.approx(1 / 3, rel=1e-2)
        assert model.rank(np.array([[3.0], [-1.5]])) == pytest.approx([2.0, -1.0], rel=1e-2)
        assert model.n_flipped_pairs_ == 3


@pytest.mark.parametrize("solver", ["dual", "primal"])
def test_separable_pairs_all_training_pairs_right_including_ties(solver: str) -> None:
    X_left, X_right, y = separable_pairs()
    assert set(np.unique(y)) == {-1, 0, 1}
    model = SVMCompare(C=1e4, kernel="linear", solver=solver).fit(X_left, X_right, y)
    assert model.predict(X_left, X_right).tolist() == y.tolist()
    assert model.score(X_left, X_right, y) == 1.0


def test_separable_pairs_with_rbf_kernel() -> None:
    X_left, X_right, y = separable_pairs()
    model = SVMCompare(C=1e4, kernel="rbf", gamma=0.1).fit(X_left, X_right, y)
    assert model.predict(X_left, X_right).tolist() == y.tolist()


def test_ranking_is_algorithm_1_literally() -> None:
    # Build K (2m x 2m, Eq. (14)) and M = [-I I]^T exactly as Algorithm 1 writes
    # them, solve the dual with SVC, and evaluate Eq. (19) by hand.
    X_left, X_right, y = squared_norm_pairs(40)
    gamma = 0.7
    X_t, X_tp, y_t = flip_pairs(X_left, X_right, y)
    m = y_t.shape[0]
    K = rbf_kernel(np.vstack([X_t, X_tp]), gamma=gamma)
    M = np.vstack([-np.eye(m), np.eye(m)])
    svc = SVC(C=3.0, kernel="precomputed").fit(M.T @ K @ M, y_t)
    v_y = np.zeros(m)
    v_y[svc.support_] = svc.dual_coef_[0]  # y~_i v_i with the decision-function sign
    beta = svc.intercept_[0]
    X_new = np.random.default_rng(5).uniform(-2, 2, size=(7, 2))
    expected = (rbf_kernel(X_new, X_tp, gamma=gamma) - rbf_kernel(X_new, X_t, gamma=gamma)) @ (
        v_y / -beta
    )
    model = SVMCompare(C=3.0, gamma=gamma).fit(X_left, X_right, y)
    assert model.bias_ == pytest.approx(beta)
    np.testing.assert_allclose(model.rank(X_new), expected, rtol=1e-7, atol=1e-9)
    # and the SVM decision function on the flipped pairs is beta (1 - (r(x~') - r(x~)))
    rank_diff = model.rank(X_tp) - model.rank(X_t)
    np.testing.assert_allclose(
        svc.decision_function(M.T @ K @ M), beta * (1 - rank_diff), rtol=1e-6, atol=1e-8
    )


@pytest.mark.parametrize("solver", ["dual", "primal"])
def test_swapping_left_and_right_negates_the_prediction(solver: str) -> None:
    X_left, X_right, y = squared_norm_pairs()
    model = SVMCompare(C=10.0, gamma=0.5, solver=solver, random_state=0)
    model.fit(X_left, X_right, y)
    rng = np.random.default_rng(3)
    A, B = rng.uniform(-2, 2, size=(50, 2)), rng.uniform(-2, 2, size=(50, 2))
    np.testing.assert_allclose(
        model.decision_function(B, A), -model.decision_function(A, B), rtol=1e-9, atol=1e-9
    )
    assert (model.predict(B, A) == -model.predict(A, B)).all()
    assert set(np.unique(model.predict(A, B))) <= {-1, 0, 1}


def test_rank_is_invariant_to_the_pair_order() -> None:
    X_left, X_right, y = squared_norm_pairs()
    grid = np.random.default_rng(4).uniform(-2, 2, size=(30, 2))
    reference = SVMCompare(C=10.0, gamma=0.5).fit(X_left, X_right, y).rank(grid)
    # every pair written the other way round, with the outcome negated
    swapped = SVMCompare(C=10.0, gamma=0.5).fit(X_right, X_left, -y).rank(grid)
    # the pairs in another order
    order = np.random.default_rng(0).permutation(y.shape[0])
    permuted = SVMCompare(C=10.0, gamma=0.5).fit(X_left[order], X_right[order], y[order])
    scale = np.ptp(reference)
    np.testing.assert_allclose(swapped, reference, atol=1e-3 * scale)
    np.testing.assert_allclose(permuted.rank(grid), reference, atol=1e-3 * scale)


def test_primal_linear_agrees_with_dual_linear() -> None:
    X_left, X_right, y = squared_norm_pairs(120)
    # a linear pattern plus noise, so the linear model is not trivial
    rng = np.random.default_rng(2)
    diff = 1.5 * (X_right - X_left) @ np.array([1.0, 1.0]) + rng.normal(0, 0.25, 120)
    y = threshold(diff)
    dual = SVMCompare(C=1.0, kernel="linear").fit(X_left, X_right, y)
    primal = SVMCompare(C=1.0, kernel="linear", solver="primal", loss="hinge")
    primal.fit(X_left, X_right, y)
    grid = rng.uniform(-2, 2, size=(50, 2))
    np.testing.assert_allclose(primal.rank(grid), dual.rank(grid), rtol=0.02, atol=0.02)
    assert primal.bias_ == pytest.approx(dual.bias_, rel=0.02)
    agree = np.mean(primal.predict(X_left, X_right) == dual.predict(X_left, X_right))
    assert agree >= 0.98


def test_nystroem_with_every_point_as_landmark_agrees_with_exact_rbf() -> None:
    X_left, X_right, y = squared_norm_pairs(60)
    exact = SVMCompare(C=10.0, gamma=0.5).fit(X_left, X_right, y)
    approx = SVMCompare(
        C=10.0, gamma=0.5, solver="primal", n_components=120, loss="hinge", random_state=0
    ).fit(X_left, X_right, y)
    assert approx.nystroem_.n_components == 120
    assert approx.bias_ == pytest.approx(exact.bias_, rel=0.05)
    assert np.mean(approx.predict(X_left, X_right) == exact.predict(X_left, X_right)) >= 0.97
    rng = np.random.default_rng(6)
    A, B = rng.uniform(-2, 2, size=(300, 2)), rng.uniform(-2, 2, size=(300, 2))
    assert np.mean(approx.predict(A, B) == exact.predict(A, B)) >= 0.95


def test_default_squared_hinge_primal_is_close_to_exact() -> None:
    # the L2-loss primal is a different loss: close to, not equal to, the exact model
    X_left, X_right, y = squared_norm_pairs(200)
    exact = SVMCompare(C=10.0, gamma=0.5).fit(X_left, X_right, y)
    approx = SVMCompare(C=10.0, gamma=0.5, solver="primal", random_state=0)
    approx.fit(X_left, X_right, y)
    A, B, y_test = squared_norm_pairs(2000, seed=9)
    assert np.mean(approx.predict(A, B) == exact.predict(A, B)) >= 0.9
    assert approx.score(A, B, y_test) > 0.8


def test_learns_the_squared_norm_pattern() -> None:
    X_left, X_right, y = squared_norm_pairs(200)
    model = SVMCompare(C=10.0, gamma=0.5).fit(X_left, X_right, y)
    X_test_left, X_test_right, y_test = squared_norm_pairs(2000, seed=9)
    assert model.score(X_test_left, X_test_right, y_test) > 0.8


def test_gamma_scale_auto_and_poly_kernel() -> None:
    X_left, X_right, y = squared_norm_pairs()
    points = np.vstack([X_left, X_right])
    model = SVMCompare().fit(X_left, X_right, y)
    assert model.gamma_ == pytest.approx(1 / (2 * points.var()))
    assert SVMCompare(gamma="auto").fit(X_left, X_right, y).gamma_ == 0.5
    poly = SVMCompare(kernel="poly", degree=2, coef0=1.0, gamma=1.0, C=10.0)
    poly.fit(X_left, X_right, y)  # ||x||^2 is a degree-2 polynomial
    assert poly.score(X_left, X_right, y) > 0.85
    assert clone(poly).get_params()["degree"] == 2


def test_integer_features_and_list_input() -> None:
    model = SVMCompare(C=1e6, kernel="linear").fit([[0], [0]], [[2], [1]], [1, 0])
    assert model.predict([[0], [5]], [[3], [5]]).tolist() == [1, 0]


# ---------------------------------------------------------------- ValueErrors
def test_error_left_right_shapes_differ() -> None:
    X_left, X_right, y = separable_pairs()
    with pytest.raises(ValueError, match="same shape"):
        SVMCompare().fit(X_left, X_right[:-1], y)
    with pytest.raises(ValueError, match="same shape"):
        SVMCompare().fit(X_left, np.hstack([X_right, X_right]), y)
    with pytest.raises(ValueError, match="2D array"):
        SVMCompare().fit(X_left[:, 0], X_right[:, 0], y)


def test_error_y_wrong_length_or_shape() -> None:
    X_left, X_right, y = separable_pairs()
    with pytest.raises(ValueError, match="outcomes but"):
        SVMCompare().fit(X_left, X_right, y[:-1])
    with pytest.raises(ValueError, match="one-dimensional"):
        SVMCompare().fit(X_left, X_right, y[:, None])
    with pytest.raises(ValueError, match="numeric outcomes"):
        SVMCompare().fit(X_left, X_right, y.astype(str))


@pytest.mark.parametrize("bad", [2, -2, 0.5, np.nan])
def test_error_y_outside_minus_one_zero_one(bad: float) -> None:
    X_left, X_right, y = separable_pairs()
    y = y.astype(float)
    y[3] = bad
    with pytest.raises(ValueError, match="-1, 0 or 1 only"):
        SVMCompare().fit(X_left, X_right, y)


def test_error_single_class_of_labels() -> None:
    X_left, X_right, y = separable_pairs()
    with pytest.raises(ValueError, match=r"single class.*no ties"):
        SVMCompare().fit(X_left, X_right, np.where(y == 0, 1, y))
    with pytest.raises(ValueError, match=r"single class.*no ties"):
        SVMCompare().fit(X_left, X_right, np.ones_like(y))
    with pytest.raises(ValueError, match=r"single class.*no inequality pairs"):
        SVMCompare().fit(X_left, X_right, np.zeros_like(y))


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("side", ["left", "right"])
def test_error_nan_or_inf_features(value: float, side: str) -> None:
    X_left, X_right, y = separable_pairs()
    target = X_left if side == "left" else X_right
    target[2, 1] = value
    with pytest.raises(ValueError, match=f"X_{side}"):
        SVMCompare().fit(X_left, X_right, y)
    clean_left, clean_right, _ = separable_pairs()
    model = SVMCompare(kernel="linear").fit(clean_left, clean_right, y)
    with pytest.raises(ValueError, match=r"NaN|infinity"):
        model.predict(X_left, X_right)
    with pytest.raises(ValueError, match=r"NaN|infinity"):
        model.rank(target)


def test_error_wrong_number_of_features_after_fit() -> None:
    X_left, X_right, y = separable_pairs()
    model = SVMCompare(kernel="linear").fit(X_left, X_right, y)
    with pytest.raises(ValueError, match="3 features, but SVMCompare was fitted with 2"):
        model.rank(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="3 features"):
        model.predict(np.zeros((4, 3)), np.zeros((4, 3)))


def test_error_not_fitted() -> None:
    with pytest.raises(NotFittedError):
        SVMCompare().rank(np.zeros((2, 2)))
    with pytest.raises(NotFittedError):
        SVMCompare().predict(np.zeros((2, 2)), np.zeros((2, 2)))


@pytest.mark.parametrize(
    "params",
    [
        {"C": 0.0},
        {"C": -1.0},
        {"kernel": "sigmoid"},
        {"gamma": 0.0},
        {"gamma": "big"},
        {"degree": 0},
        {"solver": "sgd"},
        {"n_components": 0},
        {"loss": "log"},
    ],
)
def test_error_invalid_hyperparameters(params: dict) -> None:
    X_left, X_right, y = separable_pairs()
    with pytest.raises(ValueError, match="parameter"):
        SVMCompare(**params).fit(X_left, X_right, y)


def test_error_nonnegative_bias_has_no_comparison_function() -> None:
    # Random outcomes with a single tie: the best SVM calls every pair
    # "significant" (beta > 0), and Lemma 3.1 gives no ranking function.
    rng = np.random.default_rng(1)
    X_left, X_right = rng.normal(size=(30, 2)), rng.normal(size=(30, 2))
    y = rng.choice([-1, 1], 30)
    y[0] = 0
    with pytest.raises(ValueError, match=r"bias beta = .* is not negative"):
        SVMCompare(kernel="linear").fit(X_left, X_right, y)

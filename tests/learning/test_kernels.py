"""Tests for the triplet kernels k1 / k2 (Kleindessner & von Luxburg 2017)."""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest
from scipy.stats import kendalltau
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from app.learning import kernels
from app.learning.kernels import TripletKernel, landmark_triplet_mask

# ------------------------------------------------------------------ helpers


def answer(X: np.ndarray, anchor: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Triplets (anchor, near, far) answered by Euclidean distances on X."""
    d_b = ((X[anchor] - X[b]) ** 2).sum(axis=1)
    d_c = ((X[anchor] - X[c]) ** 2).sum(axis=1)
    swap = d_b > d_c
    return np.column_stack([anchor, np.where(swap, c, b), np.where(swap, b, c)])


def random_triplets(n: int, m: int, seed: int) -> np.ndarray:
    """m random rows of distinct objects; answers random (repeats and contradictions likely)."""
    rng = np.random.default_rng(seed)
    rows = np.array([rng.choice(n, size=3, replace=False) for _ in range(m)])
    return rows


def landmark_triplets(X: np.ndarray, landmarks: np.ndarray, m: int, kind: str, seed: int):
    rng = np.random.default_rng(seed)
    n = len(X)
    if kind == "k1":
        anchor = rng.integers(0, n, m)
        pair = np.array([rng.choice(landmarks, 2, replace=False) for _ in range(m)])
        b, c = pair[:, 0], pair[:, 1]
    else:
        anchor = rng.choice(landmarks, m)
        b = rng.integers(0, n, m)
        c = rng.choice(landmarks, m)
    ok = (anchor != b) & (anchor != c) & (b != c)
    return answer(X, anchor[ok], b[ok], c[ok])


def reference_features(triplets: np.ndarray, n: int, kind: str) -> np.ndarray:
    """Dense Φ straight from §2 (with counts for repeats / contradictions), loops only.

    k1: feature (i, j), i < j, of object a = (#(a,i,j) - #(a,j,i)) / (#(a,i,j) + #(a,j,i)).
    k2: feature (i, j) of object a = (#(i,a,j) - #(i,j,a)) / (#(i,a,j) + #(i,j,a)).
    Each object's vector is then scaled to unit norm (0 stays 0).
    """
    count: dict[tuple[int, int, int], int] = {}
    for a, b, c in triplets.tolist():
        count[(a, b, c)] = count.get((a, b, c), 0) + 1

    def ratio(key: tuple[int, int, int], converse: tuple[int, int, int]) -> float:
        plus, minus = count.get(key, 0), count.get(converse, 0)
        return 0.0 if plus + minus == 0 else (plus - minus) / (plus + minus)

    if kind == "k1":
        pairs = list(itertools.combinations(range(n), 2))
        phi = np.array([[ratio((a, i, j), (a, j, i)) for (i, j) in pairs] for a in range(n)])
    else:
        cells = list(itertools.product(range(n), range(n)))
        phi = np.array([[ratio((i, a, j), (i, j, a)) for (i, j) in cells] for a in range(n)])
    norms = np.linalg.norm(phi, axis=1, keepdims=True)
    return np.divide(phi, norms, out=np.zeros_like(phi), where=norms > 0)


# ------------------------------------------------------------ exact values


def figure_1_triplets() -> np.ndarray:
    """Every triplet with anchor x1 or x2 consistent with the rankings of Figure 1 (left)."""
    rankings = {1: [1, 3, 2, 4, 5, 6, 7], 2: [2, 3, 6, 1, 5, 4, 7]}
    rows = []
    for anchor, ranking in rankings.items():
        others = [o for o in ranking if o != anchor]
        for near, far in itertools.combinations(others, 2):  # near ranks before far
            rows.append((anchor - 1, near - 1, far - 1))
    return np.array(rows)


@pytest.mark.parametrize("fix_diagonal", [True, False])
def test_figure_1_left_k1_is_4_over_15(fix_diagonal: bool) -> None:
    triplets = figure_1_triplets()
    assert len(triplets) == 2 * 15
    K = TripletKernel("k1", fix_diagonal=fix_diagonal).fit(triplets, 7).kernel_matrix()
    assert K[0, 1] == pytest.approx(4 / 15, abs=1e-12)
    assert K[1, 0] == pytest.approx(4 / 15, abs=1e-12)
    # 7 concordant and 3 discordant pairs among x3..x7: Kendall's tau is 4/10.
    tau = kendalltau([1, 2, 3, 4, 5], [1, 4, 3, 2, 5]).statistic  # ranks of x3..x7 by x2
    assert tau == pytest.approx(0.4)
    assert K[0, 0] == pytest.approx(1.0)
    assert np.allclose(K[2:], 0.0)  # x3..x7 never anchor: Φ = 0 ("0/0 = 0")


def test_k2_hand_built_case() -> None:
    # (0, 1, 2) and (0, 3, 2): x1 and x3 both closer to x0 than x2 is.
    triplets = np.array([[0, 1, 2], [0, 3, 2]])
    tk = TripletKernel("k2", fix_diagonal=False).fit(triplets, 4)
    K = tk.kernel_matrix()
    assert K[1, 3] == pytest.approx(1.0)
    assert K[1, 2] == pytest.approx(0.0)
    assert K[2, 2] == pytest.approx(1.0)  # x2: two features of -1, scaled by 1/sqrt(2)
    assert np.allclose(K[0], 0.0)
    # A contradiction of (0, 1, 2) zeroes x1's feature and x2's (0, 1) feature.
    K = TripletKernel("k2", fix_diagonal=False).fit(np.vstack([triplets, [0, 2, 1]]), 4)
    K = K.kernel_matrix()
    assert np.allclose(K[1], 0.0)
    assert K[2, 2] == pytest.approx(1.0)
    assert K[3, 3] == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["k1", "k2"])
def test_matches_dense_reference_with_repeats_and_contradictions(kind: str) -> None:
    n = 7
    triplets = random_triplets(n, 300, seed=1)  # ~300 rows over 105 comparisons
    tk = TripletKernel(kind, fix_diagonal=False).fit(triplets, n)
    phi = reference_features(triplets, n, kind)
    assert np.allclose(tk.kernel_matrix(), phi @ phi.T)
    assert np.allclose(tk.features_.toarray() @ tk.features_.toarray().T, phi @ phi.T)


def test_partial_contradiction_weights() -> None:
    # two votes (0, 1, 2), one vote (0, 2, 1), one vote (0, 1, 3): features 1/3 and 1.
    triplets = np.array([[0, 1, 2], [0, 1, 2], [0, 2, 1], [0, 1, 3]])
    tk = TripletKernel("k1", fix_diagonal=False).fit(triplets, 4)
    row = tk.features_[0].toarray().ravel()
    expected = np.array([1 / 3, 1.0]) / np.sqrt(1 / 9 + 1)
    assert np.allclose(np.sort(row[row != 0]), np.sort(expected))
    assert tk.n_comparisons_ == 2


# -------------------------------------------------------------- invariances


@pytest.mark.parametrize("kind", ["k1", "k2"])
@pytest.mark.parametrize("with_landmarks", [False, True])
def test_relabeling_permutes_K(kind: str, with_landmarks: bool) -> None:
    rng = np.random.default_rng(3)
    X = rng.standard_normal((30, 2))
    landmarks = np.array([2, 5, 11, 17, 23])
    triplets = landmark_triplets(X, landmarks, 800, kind, seed=4)
    perm = rng.permutation(30)
    K = TripletKernel(kind, landmarks=landmarks if with_landmarks else None).fit(triplets, 30)
    K = K.kernel_matrix()
    permuted = TripletKernel(kind, landmarks=perm[landmarks] if with_landmarks else None)
    K_perm = permuted.fit(perm[triplets], 30).kernel_matrix()
    assert np.allclose(K_perm[np.ix_(perm, perm)], K)


@pytest.mark.parametrize("kind", ["k1", "k2"])
def test_duplicating_and_shuffling_triplets_leaves_K_unchanged(kind: str) -> None:
    triplets = random_triplets(12, 400, seed=5)
    K = TripletKernel(kind).fit(triplets, 12).kernel_matrix()
    doubled = np.vstack([triplets, triplets])[np.random.default_rng(0).permutation(800)]
    assert np.allclose(TripletKernel(kind).fit(doubled, 12).kernel_matrix(), K)


@pytest.mark.parametrize("kind", ["k1", "k2"])
def test_contradicting_pairs_cancel(kind: str) -> None:
    triplets = random_triplets(10, 200, seed=6)
    both = np.vstack([triplets, triplets[:, [0, 2, 1]]])
    tk = TripletKernel(kind).fit(both, 10)
    assert tk.features_.nnz == 0
    assert np.array_equal(tk.kernel_matrix(), np.zeros((10, 10)))


@pytest.mark.parametrize("kind", ["k1", "k2"])
def test_all_landmarks_equals_general(kind: str) -> None:
    triplets = random_triplets(9, 200, seed=7)
    general = TripletKernel(kind).fit(triplets, 9).kernel_matrix()
    landmark = TripletKernel(kind, landmarks=np.arange(9)[::-1]).fit(triplets, 9)
    assert np.allclose(landmark.kernel_matrix(), general)


# ------------------------------------------------------------- diagonal shift


def test_diagonal_shift_is_smallest_eigenvalue() -> None:
    triplets = random_triplets(20, 3000, seed=8)
    raw = TripletKernel("k1", fix_diagonal=False).fit(triplets, 20).kernel_matrix()
    assert np.allclose(np.diag(raw), 1.0)
    tk = TripletKernel("k1").fit(triplets, 20)
    K = tk.kernel_matrix()
    lam = np.linalg.eigvalsh(raw)[0]
    assert lam > 0.05
    assert tk.diagonal_shift() == pytest.approx(lam)
    assert np.allclose(K, raw - lam * np.eye(20))
    assert np.linalg.eigvalsh(K)[0] == pytest.approx(0.0, abs=1e-10)
    assert TripletKernel("k1", fix_diagonal=False).fit(triplets, 20).diagonal_shift() == 0.0


@pytest.mark.parametrize("kind", ["k1", "k2"])
def test_lanczos_shift_matches_dense(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    triplets = random_triplets(60, 20_000, seed=9)
    dense = TripletKernel(kind).fit(triplets, 60).diagonal_shift()
    monkeypatch.setattr(kernels, "_DENSE_EIGH_MAX_N", 10)
    assert TripletKernel(kind).fit(triplets, 60).diagonal_shift() == pytest.approx(dense, 1e-6)
    tk = TripletKernel(kind).fit(triplets, 60)
    tk.kernel_matrix()  # the dense-matrix Lanczos branch
    assert tk.diagonal_shift() == pytest.approx(dense, rel=1e-6)


def test_shift_is_zero_with_fewer_features_than_objects() -> None:
    X = np.random.default_rng(10).standard_normal((40, 3))
    triplets = landmark_triplets(X, np.arange(5), 2000, "k1", seed=11)
    tk = TripletKernel("k1", landmarks=np.arange(5)).fit(triplets, 40)
    assert tk.features_.shape == (40, 10)
    assert tk.diagonal_shift() == 0.0


# ------------------------------------------------------------------ landmarks


def test_landmark_feature_shapes_and_names() -> None:
    X = np.random.default_rng(12).standard_normal((25, 2))
    landmarks = np.array([20, 3, 7, 11])
    t1 = landmark_triplets(X, landmarks, 500, "k1", seed=13)
    tk1 = TripletKernel("k1", landmarks=landmarks).fit(t1, 25)
    assert tk1.features_.shape == (25, comb(4, 2))
    assert tk1.feature_index_.shape == (6, 2)
    assert set(map(tuple, tk1.feature_index_.tolist())) == {
        (min(a, b), max(a, b)) for a, b in itertools.combinations(landmarks.tolist(), 2)
    }
    t2 = landmark_triplets(X, landmarks, 500, "k2", seed=13)
    tk2 = TripletKernel("k2", landmarks=landmarks).fit(t2, 25)
    assert tk2.features_.shape == (25, 16)
    assert set(np.unique(tk2.feature_index_)) == set(landmarks.tolist())
    np.testing.assert_array_equal(tk2.landmarks_, landmarks)


def test_landmark_k2_drops_non_landmark_features() -> None:
    # (0, 5, 1) with landmarks {0, 1}: x5 gets feature (0, 1); x1's feature (0, 5) is dropped.
    tk = TripletKernel("k2", landmarks=[0, 1], fix_diagonal=False).fit([[0, 5, 1]], 6)
    assert tk.features_.nnz == 1
    assert tk.features_[5].toarray().ravel()[tk.feature_index_.tolist().index([0, 1])] == 1.0


def test_landmark_triplet_mask() -> None:
    triplets = np.array([[5, 0, 1], [0, 5, 1], [0, 1, 5], [5, 4, 3]])
    np.testing.assert_array_equal(
        landmark_triplet_mask(triplets, [0, 1], "k1"), [True, False, False, False]
    )
    np.testing.assert_array_equal(
        landmark_triplet_mask(triplets, [0, 1], "k2"), [False, True, True, False]
    )


# -------------------------------------------------------- neighbours, blocks


def test_neighbors_and_kernel_block() -> None:
    X = np.random.default_rng(14).standard_normal((50, 2))
    landmarks = np.arange(0, 50, 5)
    tk = TripletKernel("k1", landmarks=landmarks).fit(
        landmark_triplets(X, landmarks, 3000, "k1", seed=15), 50
    )
    K = tk.kernel_matrix()
    indices, values = tk.neighbors(7, 5)
    row = K[7].copy()
    row[7] = -np.inf
    np.testing.assert_array_equal(indices, np.argsort(-row, kind="stable")[:5])
    assert np.allclose(values, K[7, indices])
    assert 7 not in tk.neighbors(7, 100)[0]
    assert len(tk.neighbors(7, 100)[0]) == 49
    rows, cols = np.array([1, 7, 9]), np.array([9, 2, 7])
    assert np.allclose(tk.kernel_block(rows, cols), K[np.ix_(rows, cols)])


def test_kernel_block_applies_shift_on_diagonal() -> None:
    triplets = random_triplets(15, 2000, seed=16)
    tk = TripletKernel("k2").fit(triplets, 15)
    K = tk.kernel_matrix()
    idx = np.array([3, 4, 5])
    assert tk.diagonal_shift() > 0
    assert np.allclose(tk.kernel_block(idx, idx), K[np.ix_(idx, idx)])


def test_get_params_and_clone() -> None:
    tk = TripletKernel("k2", landmarks=[1, 2], fix_diagonal=False)
    assert clone(tk).get_params() == {"kind": "k2", "landmarks": [1, 2], "fix_diagonal": False}


def test_n_objects_inferred_and_empty_triplets() -> None:
    assert TripletKernel().fit([[0, 1, 4]]).n_objects_ == 5
    assert TripletKernel(landmarks=[0, 9]).fit([[3, 0, 9]]).n_objects_ == 10
    K = TripletKernel().fit(np.empty((0, 3), dtype=int), 4).kernel_matrix()
    assert np.array_equal(K, np.zeros((4, 4)))


# ------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("params", "triplets", "n_objects", "message"),
    [
        ({"kind": "k3"}, [[0, 1, 2]], 3, "kind"),
        ({"fix_diagonal": "yes"}, [[0, 1, 2]], 3, "fix_diagonal"),
        ({}, [[0, 1, 2]], 0, "at least 1"),
        ({}, [[0, 1, 2]], 2.5, "integer"),
        ({}, [[0, 1, 5]], 3, "out of range"),
        ({}, [[0, 1, 1]], 3, "repeat"),
        ({}, [[0, 1]], 3, "shape"),
        ({"landmarks": [[0, 1]]}, [[2, 0, 1]], 3, "1-D"),
        ({"landmarks": [0.5, 1]}, [[2, 0, 1]], 3, "integer"),
        ({"landmarks": [0]}, [[2, 0, 1]], 3, "at least 2"),
        ({"landmarks": [0, 3]}, [[2, 0, 1]], 3, r"\[0, 3\)"),
        ({"landmarks": [-1, 0]}, [[2, 0, 1]], 3, r"\[0, 3\)"),
        ({"landmarks": [0, 0, 1]}, [[2, 0, 1]], 3, "distinct"),
        ({"landmarks": [0, 1]}, [[0, 2, 1]], 3, "near and far"),
        ({"kind": "k2", "landmarks": [0, 1]}, [[2, 0, 1]], 3, "anchor and one"),
    ],
)
def test_fit_value_errors(params: dict, triplets: list, n_objects: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TripletKernel(**params).fit(triplets, n_objects)


def test_method_value_errors() -> None:
    with pytest.raises(NotFittedError):
        TripletKernel().kernel_matrix()
    with pytest.raises(NotFittedError):
        TripletKernel().neighbors(0)
    tk = TripletKernel().fit([[0, 1, 2]], 3)
    for index in (-1, 3, 1.0, True):
        with pytest.raises(ValueError, match="index"):
            tk.neighbors(index)
    for n_neighbors in (0, 2.0):
        with pytest.raises(ValueError, match="n_neighbors"):
            tk.neighbors(0, n_neighbors)
    with pytest.raises(ValueError, match="rows"):
        tk.kernel_block([[0]], [1])
    with pytest.raises(ValueError, match="columns"):
        tk.kernel_block([0], [3])
    with pytest.raises(ValueError, match="kind"):
        landmark_triplet_mask([[0, 1, 2]], [0, 1], "k3")

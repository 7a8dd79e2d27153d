"""Kernel functions k1 and k2 from similarity triplets.

Implements the data-dependent kernels of Kleindessner & von Luxburg (2017):
the sparse feature maps of Eq. (2) (k1) and of Eq. (5)'s feature map (k2),
with the unit-norm scaling and the handling of repeated and contradicting
triplets of §2, the diagonal-dominance correction K - λ_min I of §2.1 and the
landmark design of §2.3 / §2.4. Kernel methods on top live in
:mod:`app.learning.kernel_methods`.

A triplet is a row ``(anchor, near, far)`` meaning d(anchor, near) < d(anchor, far),
the paper's ordered triple (x_i, x_j, x_k).
"""

from __future__ import annotations

from numbers import Integral
from typing import ClassVar

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from numpy.typing import ArrayLike
from scipy.sparse.linalg import LinearOperator, eigsh
from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted

from app.learning.triplets import check_sample_weight, check_triplets

__all__ = ["TripletKernel", "landmark_triplet_mask"]

# Below this many objects λ_min comes from a dense symmetric eigensolver (exact to
# machine precision); above it from Lanczos (ARPACK), which needs only products K @ v.
_DENSE_EIGH_MAX_N = 2_000
# Φ Φᵀ as a dense BLAS product when Φ is at least this dense (landmark designs),
# as a sparse product otherwise (general triplets).
_DENSE_PRODUCT_MIN_DENSITY = 0.02


def _landmark_positions(landmarks: ArrayLike, n_objects: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate landmarks; return them and the map object -> landmark position (-1 if none)."""
    array = np.asarray(landmarks)
    if array.ndim != 1:
        raise ValueError(
            f"landmarks must be a 1-D array of object indices, got shape {array.shape}"
        )
    integral_floats = array.dtype.kind == "f" and bool(np.all(array == np.round(array)))
    if array.dtype.kind not in "iu" and not integral_floats:
        raise ValueError(f"landmarks must hold integer object indices, got dtype {array.dtype}")
    array = array.astype(np.intp)
    if array.size < 2:
        raise ValueError(f"landmarks must hold at least 2 objects, got {array.size}")
    if array.min() < 0 or array.max() >= n_objects:
        raise ValueError(
            f"landmarks must be object indices in [0, {n_objects}), "
            f"got values from {array.min()} to {array.max()}"
        )
    if np.unique(array).size != array.size:
        raise ValueError("landmarks must be distinct, got a repeated index")
    position = np.full(n_objects, -1, dtype=np.intp)
    position[array] = np.arange(array.size)
    return array, position


def landmark_triplet_mask(triplets: ArrayLike, landmarks: ArrayLike, kind: str) -> np.ndarray:
    """Boolean mask of the triplets that fit the landmark design of §2.3.

    For ``kind="k1"`` the near and far objects must both be landmarks (the
    anchor is any object); for ``kind="k2"`` the anchor and at least one of
    near / far must be landmarks. Use it to pass a mixed collection to
    ``TripletKernel(landmarks=...)``: ``triplets[landmark_triplet_mask(...)]``.
    """
    if kind not in ("k1", "k2"):
        raise ValueError(f"kind must be 'k1' or 'k2', got {kind!r}")
    triplets = check_triplets(triplets)
    landmarks = np.asarray(landmarks, dtype=np.intp)
    is_landmark = np.isin(triplets, landmarks)
    if kind == "k1":
        return is_landmark[:, 1] & is_landmark[:, 2]
    return is_landmark[:, 0] & (is_landmark[:, 1] | is_landmark[:, 2])


def _weighted_comparison_values(
    triplets: np.ndarray, n: int, weight: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_comparison_values` with weighted answers: value = (Σ weights of the answers
    saying lo is closer − Σ weights saying hi) / #answers. With every weight 1 this is §2's
    (#agree − #disagree) / (#agree + #disagree); an answer of weight w < 1 counts as w of a
    vote, so a lone answer of a doubtful participant makes a small feature, not ±1."""
    anchor, near, far = triplets[:, 0], triplets[:, 1], triplets[:, 2]
    pair = np.minimum(near, far).astype(np.int64) * n + np.maximum(near, far)
    signed = sp.csr_matrix((np.where(near < far, weight, -weight), (anchor, pair)), (n, n * n))
    counts = sp.csr_matrix((np.ones(len(anchor)), (anchor, pair)), shape=(n, n * n))
    signed.sum_duplicates()
    counts.sum_duplicates()
    signed = signed + 0 * counts  # the same pattern as counts, explicit zeros included
    signed.sort_indices()
    counts.sort_indices()
    value = np.asarray(signed[counts.nonzero()]).ravel() / counts.data
    a = np.repeat(np.arange(n, dtype=np.intp), np.diff(counts.indptr))
    lo, hi = np.divmod(counts.indices.astype(np.int64), n)
    return a, lo.astype(np.intp), hi.astype(np.intp), value


def _comparison_values(
    triplets: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Distinct comparisons (anchor a, pair lo < hi) and their §2 value.

    §2 "Contradicting similarity triplets": value =
    (#(a, lo, hi) - #(a, hi, lo)) / (#(a, lo, hi) + #(a, hi, lo)). The counts are
    summed by a CSR matrix (rows: anchors, columns: the pair code lo·n + hi)
    whose data packs both counts in one int64, (#(a, lo, hi) << 32) + #both:
    a counting sort by anchor and a sort within each anchor's row, no global
    sort of |S| codes.
    """
    anchor, near, far = triplets[:, 0], triplets[:, 1], triplets[:, 2]
    pair = np.minimum(near, far).astype(np.int64) * n + np.maximum(near, far)
    packed = np.where(near < far, (1 << 32) + 1, 1).astype(np.int64)
    counts = sp.csr_matrix((packed, (anchor, pair)), shape=(n, n * n))
    del pair, packed
    counts.sum_duplicates()
    closer_to_lo = (counts.data >> 32).astype(np.float64)
    total = (counts.data & 0xFFFFFFFF).astype(np.float64)
    value = (2.0 * closer_to_lo - total) / total
    a = np.repeat(np.arange(n, dtype=np.intp), np.diff(counts.indptr))
    lo, hi = np.divmod(counts.indices.astype(np.int64), n)
    return a, lo.astype(np.intp), hi.astype(np.intp), value


class TripletKernel(BaseEstimator):
    """Triplet kernel k1 or k2 of Kleindessner & von Luxburg (2017) [1]_.

    ``fit`` builds the sparse feature map Φ: Eq. (2) for k1 (one feature per
    pair of objects {i, j}: does the object, as anchor, rank i closer than j?)
    or the map of Eq. (5) for k2 (one feature per (anchor i, other j): is the
    object closer to i than j is?). Repeated and contradicting triplets are
    handled as in §2, "Contradicting similarity triplets": a feature is
    (#agree - #disagree) / (#agree + #disagree), and each object's feature
    vector is scaled to unit norm (the 1/sqrt(|...|) factor of Eq. (2); an
    object with no information keeps the zero vector, "0/0 = 0"). With
    ``landmarks`` the features live on landmark pairs only (§2.4).

    Parameters
    ----------
    kind : {"k1", "k2"}, default="k1"
        Which kernel: k1 (Eq. (2)-(3)) or k2 (Eq. (5)).
    landmarks : array-like of int, default=None
        Landmark objects L of §2.3. When given, every triplet must fit the
        landmark design (k1: near and far in L; k2: anchor and one of
        near / far in L, see :func:`landmark_triplet_mask`) and Φ has
        C(|L|, 2) (k1) or |L|^2 (k2) features; for k2, entries whose feature
        (anchor, other) has a non-landmark ``other`` are dropped before the
        unit-norm scaling, since they are not landmark pairs (the paper's
        Φ_k2(D) ∈ R^{|L|^2 × n}; it does not spell out this detail).
    fix_diagonal : bool, default=True
        Replace K by K - λ_min I in :meth:`kernel_matrix` (§2.1).

    Attributes
    ----------
    features_ : scipy.sparse.csr_matrix of shape (n_objects, n_features)
        Φ, one row per object (the transpose of the paper's Φ(D)). Without
        landmarks only the comparisons that occur in the triplets are kept as
        features (the other features of the paper's C(n, 2) or n^2 are zero
        for every object and change no inner product).
    feature_index_ : ndarray of shape (n_features, 2)
        Object indices naming each feature: the pair (i, j), i < j, compared
        (k1), or (anchor i, other j) (k2).
    n_objects_ : int
    landmarks_ : ndarray of shape (n_landmarks,) or None
    n_comparisons_ : int
        Distinct comparisons (anchor, unordered pair) in the triplets.

    Notes
    -----
    ========================  =============================================
    paper                     here
    ========================  =============================================
    Φ_k1(D), Φ_k2(D)          ``features_.T``
    K = Φ(D)ᵀ Φ(D)            ``kernel_matrix()`` (= ``features_ @ features_.T``)
    #{(x_a, x_i, x_j) ∈ S}    counts per distinct comparison in ``fit``
    λ_min                     ``diagonal_shift()``
    L                         ``landmarks_``
    ========================  =============================================

    Building Φ sums the counts of each comparison with a sparse matrix (a
    counting sort by anchor, then a sort within each anchor's triplets):
    O(|S| log r) time for r triplets per anchor, O(|S|) memory, no loop over
    triplets. K is n × n:
    use ``kernel_matrix`` up to n ≈ 10^4 and the feature routes of
    :mod:`app.learning.kernel_methods` (which never form K) beyond. Without
    landmarks, n^2 must stay below 2^63.

    Since K is a Gram matrix, λ_min ≥ 0: whenever n_features < n (a landmark
    design with C(|L|, 2) < n) or some object has no triplets, λ_min = 0
    exactly and the §2.1 correction changes nothing.

    References
    ----------
    .. [1] Kleindessner & von Luxburg (2017). Kernel functions based on triplet
       comparisons. NIPS.

    Examples
    --------
    >>> import numpy as np
    >>> triplets = np.array([[0, 1, 2], [1, 0, 2], [2, 1, 0]])
    >>> K = TripletKernel(kind="k1").fit(triplets, n_objects=3).kernel_matrix()
    >>> K.shape
    (3, 3)
    """

    _parameter_constraints: ClassVar[dict] = {
        "kind": [StrOptions({"k1", "k2"})],
        "landmarks": ["array-like", None],
        "fix_diagonal": ["boolean"],
    }

    def __init__(
        self,
        kind: str = "k1",
        landmarks: ArrayLike | None = None,
        fix_diagonal: bool = True,
    ) -> None:
        self.kind = kind
        self.landmarks = landmarks
        self.fix_diagonal = fix_diagonal

    # ------------------------------------------------------------------ fit
    def fit(
        self,
        triplets: ArrayLike,
        n_objects: int | None = None,
        *,
        sample_weight: ArrayLike | None = None,
    ) -> TripletKernel:
        """Build Φ from triplets.

        Parameters
        ----------
        triplets : array-like of shape (n_triplets, 3)
            Rows (anchor, near, far); repeats and contradictions allowed.
        n_objects : int, default=None
            Number of objects; default: one more than the largest index seen
            in ``triplets`` or ``landmarks``.
        sample_weight : array-like of shape (n_triplets,), default=None
            How much each answer counts in its feature's value: the weighted net vote over
            the number of answers (see ``_weighted_comparison_values``).

        Returns
        -------
        self : TripletKernel
        """
        self._validate_params()
        if n_objects is None:
            triplets = check_triplets(triplets)
            seen = [triplets.max() + 1 if triplets.size else 0]
            if self.landmarks is not None and np.size(self.landmarks):
                seen.append(int(np.max(self.landmarks)) + 1)
            n_objects = int(max(seen))
        if not isinstance(n_objects, Integral) or isinstance(n_objects, bool):
            raise ValueError(f"n_objects must be an integer, got {n_objects!r}")
        n = int(n_objects)
        if n < 1:
            raise ValueError(f"n_objects must be at least 1, got {n}")
        triplets = check_triplets(triplets, n)
        if self.landmarks is None:
            landmarks, position = None, None
        else:
            landmarks, position = _landmark_positions(self.landmarks, n)
            self._check_design(triplets, position)

        weight = check_sample_weight(sample_weight, len(triplets))
        if weight is None:
            a, lo, hi, value = _comparison_values(triplets, n)
        else:
            a, lo, hi, value = _weighted_comparison_values(triplets, n, weight)
        del triplets
        self.n_comparisons_ = int(a.size)

        if self.kind == "k1":
            # Eq. (2): object a, feature {lo, hi}, value as above.
            rows, first, second, data = a, lo, hi, value
        else:
            # Eq. (5)'s map: [Φ(x_lo)]_(a, hi) = +value and [Φ(x_hi)]_(a, lo) = -value.
            rows = np.concatenate([lo, hi])
            first = np.concatenate([a, a])
            second = np.concatenate([hi, lo])
            data = np.concatenate([value, -value])

        columns, feature_index, n_features = self._feature_columns(first, second, n, position)
        if landmarks is not None and self.kind == "k2":
            keep = columns >= 0  # drop features (anchor, other) with other not a landmark
            rows, columns, data = rows[keep], columns[keep], data[keep]
        phi = sp.csr_matrix((data, (rows, columns)), shape=(n, n_features))
        phi.eliminate_zeros()  # exactly cancelled contradictions
        norms = np.sqrt(np.asarray(phi.multiply(phi).sum(axis=1)).ravel())
        scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)  # 0/0 = 0
        self.features_ = sp.csr_matrix(sp.diags(scale) @ phi)
        self.features_.sort_indices()
        self.feature_index_ = feature_index
        self.n_objects_ = n
        self.landmarks_ = landmarks
        self._diagonal_shift = None
        return self

    def _check_design(self, triplets: np.ndarray, position: np.ndarray) -> None:
        is_landmark = position[triplets] >= 0
        if self.kind == "k1":
            bad = ~(is_landmark[:, 1] & is_landmark[:, 2])
            rule = "near and far must both be landmarks for kind='k1'"
        else:
            bad = ~(is_landmark[:, 0] & (is_landmark[:, 1] | is_landmark[:, 2]))
            rule = "the anchor and one of near / far must be landmarks for kind='k2'"
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(
                f"triplet row {row} {triplets[row].tolist()} does not fit the landmark design: "
                f"{rule}; select fitting rows with landmark_triplet_mask()"
            )

    def _feature_columns(
        self, first: np.ndarray, second: np.ndarray, n: int, position: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Column of each entry, the (n_features, 2) feature names, n_features."""
        if position is None:
            # Keep only the comparisons that occur (all other features are zero).
            code = first.astype(np.int64) * n + second
            unique, columns = np.unique(code, return_inverse=True)
            index = np.column_stack(np.divmod(unique, n)).astype(np.intp)
            return columns.astype(np.intp), index.reshape(-1, 2), int(unique.size)
        order = np.empty(int((position >= 0).sum()), dtype=np.intp)
        order[position[position >= 0]] = np.flatnonzero(position >= 0)  # position -> object
        n_landmarks = order.size
        p, q = position[first], position[second]
        if self.kind == "k1":
            # Pair (p, q), p < q, of landmark positions -> its rank in row-major triu order.
            p, q = np.minimum(p, q), np.maximum(p, q)
            columns = p * (2 * n_landmarks - p - 1) // 2 + (q - p - 1)
            ip, iq = np.triu_indices(n_landmarks, k=1)
            a, b = order[ip], order[iq]
            index = np.column_stack([np.minimum(a, b), np.maximum(a, b)])
            return columns, index, n_landmarks * (n_landmarks - 1) // 2
        # k2: (anchor position, other position) -> anchor * |L| + other; -1 off the landmarks.
        columns = np.where(q >= 0, p * n_landmarks + q, -1)
        ia, io = np.divmod(np.arange(n_landmarks * n_landmarks), n_landmarks)
        index = np.column_stack([order[ia], order[io]])
        return columns, index, n_landmarks * n_landmarks

    # ---------------------------------------------------------- kernel values
    def diagonal_shift(self) -> float:
        """λ_min of K = Φ Φᵀ, the shift of §2.1 (0.0 when ``fix_diagonal`` is False).

        Exactly 0 when K is singular by construction (fewer features than
        objects, or an object without triplets). Otherwise from a dense
        eigensolver for n ≤ 2,000 and from Lanczos (ARPACK ``eigsh``, relative
        tolerance 1e-6, products K v = Φ (Φᵀ v) when Φ is sparser than K)
        above; clipped at 0 against rounding. Lanczos approaches λ_min from
        above, so K - λ_min I may keep an eigenvalue of order -1e-6 λ_min.
        """
        check_is_fitted(self, "features_")
        if not self.fix_diagonal:
            return 0.0
        if self._diagonal_shift is None:
            self._diagonal_shift = self._smallest_eigenvalue()
        return self._diagonal_shift

    def _smallest_eigenvalue(self, gram: np.ndarray | None = None) -> float:
        phi = self.features_
        n = phi.shape[0]
        if phi.shape[1] < n or np.diff(phi.indptr).min() == 0:
            return 0.0
        if n <= _DENSE_EIGH_MAX_N:
            gram = self._gram() if gram is None else gram
            value = scipy.linalg.eigh(gram, eigvals_only=True, subset_by_index=[0, 0])[0]
            return float(max(value, 0.0))
        if gram is None or 2 * phi.nnz < n * n:
            phi_t = phi.T.tocsr()
            operator = LinearOperator((n, n), matvec=lambda v: phi @ (phi_t @ v), dtype=float)
        else:
            operator = gram
        v0 = np.random.default_rng(0).standard_normal(n)  # deterministic start
        value = eigsh(
            operator, k=1, which="SA", tol=1e-6, ncv=min(n, 40), v0=v0, return_eigenvectors=False
        )[0]
        return float(max(value, 0.0))

    def _gram(self) -> np.ndarray:
        """Φ Φᵀ as a dense array (Eq. (3) / (5) for all pairs), without the shift."""
        phi = self.features_
        n, m = phi.shape
        if phi.nnz >= _DENSE_PRODUCT_MIN_DENSITY * n * max(m, 1):
            dense = phi.toarray()
            return dense @ dense.T
        return (phi @ phi.T).toarray()

    def kernel_matrix(self) -> np.ndarray:
        """Dense kernel matrix K (n_objects × n_objects).

        K = Φ Φᵀ, Eq. (3) (k1) or Eq. (5) (k2); with ``fix_diagonal``,
        K - λ_min I (§2.1). Memory n^2 floats: up to n ≈ 10^4.
        """
        check_is_fitted(self, "features_")
        gram = self._gram()
        if self.fix_diagonal:
            if self._diagonal_shift is None:
                self._diagonal_shift = self._smallest_eigenvalue(gram)
            gram[np.diag_indices_from(gram)] -= self._diagonal_shift
        return gram

    def kernel_block(self, rows: ArrayLike, columns: ArrayLike) -> np.ndarray:
        """``K[rows][:, columns]`` from Φ without forming K (shift applied where row == column)."""
        check_is_fitted(self, "features_")
        rows = self._check_objects(rows, "rows")
        columns = self._check_objects(columns, "columns")
        phi = self.features_
        block = (phi[rows] @ phi[columns].T).toarray()
        if self.fix_diagonal:
            shift = self.diagonal_shift()
            if shift:
                block -= shift * (rows[:, None] == columns[None, :])
        return block

    def neighbors(self, index: int, n_neighbors: int = 10) -> tuple[np.ndarray, np.ndarray]:
        """The objects most similar to ``index`` by kernel value, most similar first.

        One sparse row product Φ[index] Φᵀ: O(nnz(Φ)), no n × n matrix, any n.
        The object itself is excluded; ties are broken by the smaller index.
        The §2.1 shift only touches the diagonal, so it does not change the
        values returned.

        Returns
        -------
        indices : ndarray of shape (min(n_neighbors, n_objects - 1),)
        similarities : ndarray of the same shape, the kernel values.
        """
        check_is_fitted(self, "features_")
        n = self.n_objects_
        if isinstance(index, bool) or not isinstance(index, Integral) or not 0 <= index < n:
            raise ValueError(f"index must be an object index in [0, {n}), got {index!r}")
        if isinstance(n_neighbors, bool) or not isinstance(n_neighbors, Integral):
            raise ValueError(f"n_neighbors must be a positive integer, got {n_neighbors!r}")
        if n_neighbors < 1:
            raise ValueError(f"n_neighbors must be a positive integer, got {n_neighbors}")
        phi = self.features_
        row = np.asarray((phi @ phi[int(index)].T).todense()).ravel()
        others = np.delete(np.arange(n), int(index))
        values = row[others]
        order = np.lexsort((others, -values))[:n_neighbors]
        return others[order], values[order]

    def _check_objects(self, objects: ArrayLike, name: str) -> np.ndarray:
        array = np.asarray(objects)
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise ValueError(f"{name} must be a 1-D array of object indices")
        array = array.astype(np.intp)
        if array.size and (array.min() < 0 or array.max() >= self.n_objects_):
            raise ValueError(f"{name} must be object indices in [0, {self.n_objects_})")
        return array


# The kernel methods live in kernel_methods, which imports this module; resolving
# them lazily lets ``from app.learning.kernels import KernelKMeans`` work without a cycle.
_KERNEL_METHODS = frozenset(
    {"KernelKMeans", "kernel_kmeans", "kernel_pca", "kernel_svm", "complete_linkage"}
)


def __getattr__(name: str) -> object:
    if name in _KERNEL_METHODS:
        from app.learning import kernel_methods

        return getattr(kernel_methods, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

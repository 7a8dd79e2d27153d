"""SPoSE: a sparse positive similarity embedding learned from odd-one-out answers."""

from __future__ import annotations

from collections.abc import Callable
from numbers import Real
from typing import Any, ClassVar

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import check_is_fitted

from app.learning._embedding_base import ProgressCallback, _check_init, _OrdinalEmbedding
from app.learning._shape_likelihood import _ChoiceIndex
from app.learning.shape_answers import AnswerGroup
from app.learning.shapes import Shape
from app.learning.triplets import check_triplets

__all__ = ["SPoSE"]


class SPoSE(_OrdinalEmbedding):
    r"""Sparse positive object similarity embedding (SPoSE) [1]_.

    Objects get non-negative coordinates :math:`x_i \in \mathbb{R}^d_{\geq 0}` and
    similarity :math:`S_{ij} = x_i \cdot x_j`. An odd-one-out answer "of i, j, k the odd
    one is k" says the pair (i, j) is the most similar of the three, with probability

    .. math:: p = \frac{e^{S_{ij}}}{e^{S_{ij}} + e^{S_{ik}} + e^{S_{jk}}}
              \qquad \text{(Eq. (1) of [1]_)},

    and SPoSE minimises :math:`-\frac{1}{m}\sum \log p + \frac{\lambda}{n}\sum_i
    \|x_i\|_1` (their Eq. (2), the L1 term per object here so one ``lambd`` suits any
    number of objects). On non-negative coordinates the L1 norm is the plain sum, so
    the objective is smooth; the constraint :math:`x \geq 0` is a box bound of
    L-BFGS-B where [1]_ clamps after each Adam step. The L1 term drives unused
    dimensions to 0 (the paper then prunes them; ``n_dims_used_`` counts the rest).
    VICE [2]_ keeps this likelihood and replaces the point estimate by a variational
    posterior; we keep SPoSE's point estimate.

    ``fit`` takes odd-one-out answers; ``fit_answers`` any triplet-like shape, each with
    its own likelihood on the same similarity (a triplet: a softmax over its two pairs;
    a ranked grid: the Plackett–Luce choices of Roads & Mozer 2019), or the implied
    triplets (``likelihood="triplets"``). Triplets are scored by similarity:
    ``(a, b, c)`` holds when :math:`S_{ab} > S_{ac}`.

    Parameters
    ----------
    n_components : int, default=10
        Dimensions :math:`d` before pruning (the paper starts with 90 for 1,854 objects).
    lambd : float, default=0.005
        L1 weight :math:`\lambda \geq 0`, per object as above.
    max_iter : int, default=1000
        L-BFGS-B iterations per restart.
    tol : float, default=1e-6
        ``tol`` of :func:`scipy.optimize.minimize`.
    n_init : int, default=1
        Random restarts; the embedding with the smallest loss is kept.
    random_state : int, RandomState instance or None, default=None
        Seeds the uniform [0, 1) initialisations.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_objects, n_components)
        Non-negative coordinates.
    loss_ : float
    n_iter_ : int
    n_objects_ : int
    n_dims_used_ : int
        Dimensions with a coordinate above 0.01 times the largest (the rest are pruned
        in [1]_).
    likelihood_ : {"shape", "triplets"}

    Notes
    -----
    ==========================  ================
    [1]_                        here
    ==========================  ================
    :math:`X` (n × d)           ``embedding_``
    :math:`\lambda`             ``lambd / n``
    :math:`(i, j, k)`, k odd    a row ``(i, j, k)``
    ==========================  ================

    References
    ----------
    .. [1] Zheng, Pereira, Baker & Hebart (2019). Revealing interpretable object
       representations from human behavior. ICLR.
    .. [2] Muttenthaler, Zheng, McClure, Vandermeulen, Hebart & Pereira (2022). VICE:
       Variational interpretable concept embeddings. NeurIPS.

    Examples
    --------
    >>> import numpy as np
    >>> from app.learning.spose import SPoSE
    >>> odd_one_out = np.array([[0, 1, 2], [0, 1, 3], [2, 3, 0], [2, 3, 1]])
    >>> SPoSE(n_components=3, random_state=0).fit(odd_one_out).score([[0, 1, 2]])
    1.0
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **_OrdinalEmbedding._parameter_constraints,
        "lambd": [Interval(Real, 0, None, closed="left")],
    }
    _shape_similarity = "dot"

    def __init__(
        self,
        n_components: int = 10,
        *,
        lambd: float = 0.005,
        max_iter: int = 1000,
        tol: float = 1e-6,
        n_init: int = 1,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_components = n_components
        self.lambd = lambd
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.random_state = random_state

    def fit(
        self,
        odd_one_out: ArrayLike,
        n_objects: int | None = None,
        *,
        sample_weight: ArrayLike | None = None,
        init: ArrayLike | None = None,
        callback: ProgressCallback | None = None,
    ) -> SPoSE:
        """Embed the objects from odd-one-out answers.

        Parameters
        ----------
        odd_one_out : array-like of shape (n_answers, 3)
            Rows ``(i, j, odd)``: of the three objects shown, ``odd`` was chosen as the
            one that does not belong (the ordered rows of
            :mod:`app.learning.shape_answers`).
        n_objects, sample_weight, init, callback
            As in :meth:`app.learning.embedding.SOE.fit`; ``init`` must be
            non-negative.

        Returns
        -------
        self : object
        """
        rows = check_triplets(odd_one_out, n_objects)  # same format: 3 distinct indices
        self.fit_answers(
            {Shape("odd_one_out"): rows},
            n_objects,
            likelihood="shape",
            sample_weight=sample_weight,
            init=init,
            callback=callback,
        )
        return self

    def _fit_triplets(
        self,
        triplets: np.ndarray,
        n: int,
        weight: np.ndarray | None,
        init: ArrayLike | None,
        callback: ProgressCallback | None,
    ) -> None:
        # SPoSE has no triplet loss of its own: a triplet is a softmax over its two pairs.
        group = AnswerGroup(Shape("triplet"), triplets, np.arange(len(triplets)))
        shape = (n, self.n_components)
        index = _ChoiceIndex([group], n, "dot", weight)
        self._minimise(self._shape_objective, index, shape, _check_init(init, shape), callback)

    def _start(self, rng: np.random.RandomState, size: int) -> np.ndarray:
        return rng.uniform(0.0, 1.0, size)

    def _bounds(self, size: int) -> list[tuple[float | None, float | None]]:
        return [(0.0, None)] * size

    def _log_kernel(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # Zheng et al. (2019), Eq. (1): the logit of a pair is its similarity x_i . x_j
        return v, np.ones_like(v)

    def _penalty(self, X: np.ndarray) -> tuple[float, np.ndarray]:
        # Zheng et al. (2019), Eq. (2): + lambda sum_i ||x_i||_1 = sum(X) on X >= 0
        n = X.shape[0]
        return self.lambd * float(X.sum()) / n, np.full_like(X, self.lambd / n)

    def _minimise(
        self,
        objective: Callable[..., tuple],
        index: Any,
        shape: tuple[int, int],
        start: np.ndarray | None,
        callback: ProgressCallback | None,
    ) -> SPoSE:
        if start is not None and np.any(start < 0):
            raise ValueError("init must be non-negative: SPoSE's coordinates are")
        super()._minimise(objective, index, shape, start, callback)
        self.embedding_ = np.maximum(self.embedding_, 0.0)
        top = float(self.embedding_.max()) if self.embedding_.size else 0.0
        self.n_dims_used_ = int(np.sum(self.embedding_.max(axis=0) > 0.01 * top)) if top else 0
        return self

    def similarity(self) -> np.ndarray:
        """The similarity matrix :math:`S = X X^T` of shape (n_objects, n_objects)."""
        check_is_fitted(self)
        return self.embedding_ @ self.embedding_.T

    def predict(self, triplets: ArrayLike) -> np.ndarray:
        """Whether S(anchor, near) > S(anchor, far), per row."""
        check_is_fitted(self)
        T = check_triplets(triplets, self.n_objects_)
        X = self.embedding_
        near = np.einsum("ij,ij->i", X[T[:, 0]], X[T[:, 1]])
        far = np.einsum("ij,ij->i", X[T[:, 0]], X[T[:, 2]])
        return near > far

    def score(self, triplets: ArrayLike) -> float:
        """Fraction of ``triplets`` the similarity satisfies (a tie counts as a miss)."""
        holds = self.predict(triplets)
        if holds.size == 0:
            raise ValueError("triplets is empty: cannot score an embedding on no triplets")
        return float(np.mean(holds))

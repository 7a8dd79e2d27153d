"""Ordinal embedding from triplets: SOE, t-STE, CKL and GNMDS.

Each estimator places the objects ``0 .. n_objects - 1`` in ``R^n_components``
so that as many triplets as possible hold: a row ``(anchor, near, far)`` asks
for ``d(anchor, near) < d(anchor, far)``. All four minimise an average over
triplets of a loss of the two distances with L-BFGS-B
(:func:`scipy.optimize.minimize`) on the flattened embedding; gradients are
vectorised over triplets and scattered with :func:`numpy.bincount`, into an
n x n Laplacian when that is cheaper (see ``_embedding_base._TripletIndex``).

Typical use in the service: ``est = SOE(n_components=dims).fit(train, n)``,
``est.embedding_`` for coordinates, ``est.score(held_out)`` for held-out
triplet accuracy, ``embedding_knn_predict(est.embedding_, ...)`` for labels.

These are the baselines Salmon and NEXT offer; cblearn implements the same
four but pins numpy 1.26, which the project does not accept.
``bench/embedding.py`` compares the two on the same triplets.
"""

from __future__ import annotations

from numbers import Real
from typing import Any, ClassVar

import numpy as np
from sklearn.utils._param_validation import Interval

from app.learning._embedding_base import (
    _EPS,
    ProgressCallback,
    _OrdinalEmbedding,
    _TripletIndex,
    embedding_knn_predict,
    triplet_accuracy,
)

__all__ = [
    "CKL",
    "GNMDS",
    "SOE",
    "TSTE",
    "ProgressCallback",
    "embedding_knn_predict",
    "triplet_accuracy",
]


class SOE(_OrdinalEmbedding):
    r"""Soft ordinal embedding [1]_.

    Minimises the soft objective of SOE in [1]_,

    .. math:: \frac{1}{m} \sum_{(a, b, c)} \max(0,\ \delta + \|x_a - x_b\| - \|x_a - x_c\|)^2,

    a squared hinge on plain (not squared) Euclidean distances with margin
    :math:`\delta`. [1]_ minimises it by majorisation; we hand its exact
    gradient to L-BFGS-B instead. The margin fixes the scale, so no
    regulariser is needed. We average rather than sum over triplets, which
    changes no minimiser and keeps ``tol`` meaningful for any number of
    triplets.

    Parameters
    ----------
    n_components : int, default=2
        Dimension of the embedding.
    margin : float, default=0.1
        The scale :math:`\delta > 0` of [1]_.
    max_iter : int, default=1000
        L-BFGS-B iterations per restart.
    tol : float, default=1e-6
        ``tol`` of :func:`scipy.optimize.minimize` (relative loss decrease and
        projected gradient).
    n_init : int, default=1
        Random restarts; the embedding with the smallest loss is kept.
    random_state : int, RandomState instance or None, default=None
        Seeds the standard normal initialisations.

    Attributes
    ----------
    embedding_ : ndarray of shape (n_objects, n_components)
    loss_ : float
        Final objective of the kept restart.
    n_iter_ : int
        L-BFGS-B iterations of the kept restart.
    n_objects_ : int
    likelihood_ : {"triplets", "shape"}
        The likelihood of the last fit: the triplet loss (``fit``, or ``fit_answers`` on
        implied triplets) or the answers' own (``fit_answers``, :class:`TSTE` only).

    Notes
    -----
    ====================  ===================
    [1]_                  here
    ====================  ===================
    :math:`\delta`        ``margin``
    :math:`p`             ``n_components``
    :math:`(i, j, k, l)`  ``(a, b, a, c)``
    ====================  ===================

    [1]_ states SOE for quadruplets :math:`d_{ij} < d_{kl}`; a triplet is the
    quadruplet with :math:`k = i`.

    References
    ----------
    .. [1] Terada & von Luxburg (2014). Local ordinal embedding. ICML.

    Examples
    --------
    >>> import numpy as np
    >>> from app.learning.embedding import SOE
    >>> triplets = np.array([[0, 1, 2], [1, 0, 2], [2, 1, 0]])
    >>> SOE(random_state=0).fit(triplets).score(triplets)
    1.0
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **_OrdinalEmbedding._parameter_constraints,
        "margin": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        n_components: int = 2,
        *,
        margin: float = 0.1,
        max_iter: int = 1000,
        tol: float = 1e-6,
        n_init: int = 1,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_components = n_components
        self.margin = margin
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.random_state = random_state

    def _loss_terms(self, sq_near: np.ndarray, sq_far: np.ndarray) -> tuple:
        # Terada & von Luxburg (2014), SOE objective: max(0, delta + d_ab - d_ac)^2
        d_near = np.sqrt(np.maximum(sq_near, _EPS))
        d_far = np.sqrt(np.maximum(sq_far, _EPS))
        slack = np.maximum(self.margin + d_near - d_far, 0.0)
        # d(h^2)/d(s) with d = sqrt(s): 2h * 1/(2 sqrt(s))
        return slack**2, slack / d_near, -slack / d_far


class TSTE(_OrdinalEmbedding):
    r"""t-distributed stochastic triplet embedding (t-STE) [1]_.

    Maximises the log-likelihood of the triplets under the Student-t model of
    [1]_ (t-STE, their Sec. 4),

    .. math:: p_{abc} = \frac{(1 + \|x_a - x_b\|^2/\alpha)^{-\frac{\alpha+1}{2}}}
              {(1 + \|x_a - x_b\|^2/\alpha)^{-\frac{\alpha+1}{2}}
              + (1 + \|x_a - x_c\|^2/\alpha)^{-\frac{\alpha+1}{2}}},

    i.e. minimises :math:`-\frac{1}{m}\sum \log p_{abc} + \frac{\lambda}{n}\sum_i \|x_i\|^2`,
    the log term computed stably as ``logaddexp(0, log k_ac - log k_ab)``. The
    L2 term is the regulariser of [1]_ (per object and triplet, as in
    :class:`GNMDS`). It is what keeps the fit converging: without it every
    satisfied triplet gains from spreading the points, the optimiser drifts to
    embeddings of norm 10^3-10^5 where the Student-t kernel is a pure power law and
    the gradient falls below ``tol``, and stops there unconverged (on 640
    noise-free triplets of 30 points in 2-D it stopped with 86% of them
    satisfied at norm 3·10^4; with the default ``lambd`` it reaches 96% at
    norm ~10). The default degrees of freedom
    :math:`\alpha = d - 1` are those of the authors' reference code; with one
    dimension that is 0, which the kernel does not allow, so we use 1 there
    (as cblearn does). The reference code defaults the regulariser to 0 but runs
    a fixed number of gradient steps from a tiny start, which bounds the scale
    as well; ``lambd=0`` gives the unregularised objective (cblearn's). The
    objective is not convex: with 1,000
    objects in 2-D, L-BFGS-B reached stationary points of held-out accuracy
    0.83 where cblearn's longer runs found 0.88 (``bench/results/embedding.txt``);
    raise ``n_init`` when that matters.

    ``fit_answers`` also fits odd-one-out and ranked-grid answers by their own
    likelihoods with the same kernel as the similarity: the odd one out of three is the
    object left when the most similar pair stays, a softmax over the three pairs' log
    kernels (Eq. (1) of [2]_ with the t-kernel for ``exp(x_i . x_j)``); a grid's k
    choices are successive softmaxes over the candidates not yet chosen, the
    Plackett–Luce likelihood of [3]_ (their Eq. (2), with the t-kernel for their
    exponential similarity). On a plain triplet both reduce to t-STE's
    :math:`p_{abc}` above.

    Parameters
    ----------
    n_components : int, default=2
        Dimension :math:`d` of the embedding.
    alpha : float, default=None
        Degrees of freedom of the Student-t kernel; ``None`` means
        ``max(n_components - 1, 1)``.
    lambd : float, default=1e-4
        L2 regularisation :math:`\lambda \geq 0`, per object and triplet as
        above.
    max_iter, tol, n_init, random_state
        As in :class:`SOE`.

    Attributes
    ----------
    embedding_, loss_, n_iter_, n_objects_, likelihood_
        As in :class:`SOE`.

    Notes
    -----
    ================  ================
    [1]_              here
    ================  ================
    :math:`(i, j, l)`  ``(a, b, c)``
    :math:`\alpha`    ``alpha``
    :math:`\lambda`   ``lambd * m / n``
    ================  ================

    References
    ----------
    .. [1] van der Maaten & Weinberger (2012). Stochastic triplet embedding.
       IEEE MLSP.
    .. [2] Zheng, Pereira, Baker & Hebart (2019). Revealing interpretable object
       representations from human behavior. ICLR.
    .. [3] Roads & Mozer (2019). Obtaining psychological embeddings through joint
       kernel and metric learning. Behavior Research Methods 51.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **_OrdinalEmbedding._parameter_constraints,
        "alpha": [Interval(Real, 0, None, closed="neither"), None],
        "lambd": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        n_components: int = 2,
        *,
        alpha: float | None = None,
        lambd: float = 1e-4,
        max_iter: int = 1000,
        tol: float = 1e-6,
        n_init: int = 1,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_components = n_components
        self.alpha = alpha
        self.lambd = lambd
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.random_state = random_state

    _shape_similarity = "distance"

    def _log_kernel(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # The Student-t kernel of van der Maaten & Weinberger (2012) as the similarity of
        # the shape likelihoods: log k(s) = -(alpha+1)/2 log(1 + s/alpha), s = ||x_p - x_q||^2
        alpha = self._dof()
        power = (alpha + 1.0) / 2.0
        return -power * np.log1p(v / alpha), -power / (alpha + v)

    def _dof(self) -> float:
        return float(max(self.n_components - 1, 1) if self.alpha is None else self.alpha)

    def _loss_terms(self, sq_near: np.ndarray, sq_far: np.ndarray) -> tuple:
        alpha = self._dof()
        power = (alpha + 1.0) / 2.0
        # van der Maaten & Weinberger (2012): log k(s) = -(alpha+1)/2 log(1 + s/alpha)
        log_k_near = -power * np.log1p(sq_near / alpha)
        log_k_far = -power * np.log1p(sq_far / alpha)
        z = log_k_far - log_k_near
        loss = np.logaddexp(0.0, z)  # -log p_abc
        q = np.exp(z - loss)  # 1 - p_abc
        # dl/ds_near = q * power / (alpha + s_near); dl/ds_far = -q * power / (alpha + s_far)
        return loss, q * power / (alpha + sq_near), -q * power / (alpha + sq_far)

    def _penalty(self, X: np.ndarray) -> tuple[float, np.ndarray]:
        # van der Maaten & Weinberger (2012), Sec. 4: + lambda ||X||_F^2 (per object here)
        n = X.shape[0]
        return self.lambd * float(np.sum(X**2)) / n, (2.0 * self.lambd / n) * X


class CKL(_OrdinalEmbedding):
    r"""Crowd kernel learning (CKL) [1]_, embedding form.

    Maximises the log-likelihood of the triplets under the relative-similarity
    model of [1]_,

    .. math:: p_{abc} = \frac{\delta_{ac} + \mu}{\delta_{ab} + \delta_{ac} + 2\mu},
              \qquad \delta_{ab} = \|x_a - x_b\|^2,

    i.e. minimises :math:`-\frac{1}{m}\sum \log p_{abc}`. [1]_ optimises the
    kernel matrix and fixes its scale by normalising the kernel; we
    optimise coordinates and fix the scale by the trace instead: the
    embedding is centred and scaled to a mean squared norm of 1
    (``trace(K) = n``) inside the objective, by a smooth reparametrisation.
    Holding every norm at 1 (unit diagonal) would put the points on a
    sphere, which a low-dimensional embedding cannot afford. With the scale fixed,
    ``mu`` is comparable across data sets; the paper leaves its value open,
    our default 0.1 is our choice.

    Parameters
    ----------
    n_components : int, default=2
        Dimension of the embedding.
    mu : float, default=0.1
        The :math:`\mu \geq 0` of [1]_; larger values act like a margin.
    max_iter, tol, n_init, random_state
        As in :class:`SOE`.

    Attributes
    ----------
    embedding_, loss_, n_iter_, n_objects_, likelihood_
        As in :class:`SOE`; ``embedding_`` is centred with mean squared norm 1.

    Notes
    -----
    =====================  ================
    [1]_                   here
    =====================  ================
    :math:`(a, b, c)`      ``(a, b, c)``
    :math:`\mu`            ``mu``
    :math:`\delta_{ab}`    ``sq_near``
    =====================  ================

    References
    ----------
    .. [1] Tamuz, Liu, Belongie, Shamir & Kalai (2011). Adaptively learning the
       crowd kernel. ICML.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **_OrdinalEmbedding._parameter_constraints,
        "mu": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        n_components: int = 2,
        *,
        mu: float = 0.1,
        max_iter: int = 1000,
        tol: float = 1e-6,
        n_init: int = 1,
        random_state: int | np.random.RandomState | None = None,
    ) -> None:
        self.n_components = n_components
        self.mu = mu
        self.max_iter = max_iter
        self.tol = tol
        self.n_init = n_init
        self.random_state = random_state

    def _loss_terms(self, sq_near: np.ndarray, sq_far: np.ndarray) -> tuple:
        # Tamuz et al. (2011): -log((d_ac + mu) / (d_ab + d_ac + 2 mu))
        numerator = np.maximum(sq_far + self.mu, _EPS)
        denominator = np.maximum(sq_near + sq_far + 2.0 * self.mu, _EPS)
        loss = np.log(denominator) - np.log(numerator)
        return loss, 1.0 / denominator, 1.0 / denominator - 1.0 / numerator

    def _embed(self, x: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        Z = x.reshape(shape)
        Z = Z - Z.mean(axis=0)
        return Z * np.sqrt(shape[0]) / max(np.linalg.norm(Z), _EPS)

    def _objective(self, x: np.ndarray, shape: tuple[int, int], index: _TripletIndex) -> tuple:
        # X = sqrt(n) Z / ||Z||_F with Z = Y - mean(Y); chain rule back to Y.
        Z = x.reshape(shape)
        Z = Z - Z.mean(axis=0)
        norm = max(float(np.linalg.norm(Z)), _EPS)
        scale = np.sqrt(shape[0]) / norm
        loss, grad_x = super()._objective((Z * scale).ravel(), shape, index)
        G = grad_x.reshape(shape)
        grad_z = scale * (G - Z * (np.vdot(Z, G) / norm**2))
        return loss, (grad_z - grad_z.mean(axis=0)).ravel()


class GNMDS(_OrdinalEmbedding):
    r"""Generalised non-metric multidimensional scaling (GNMDS) [1]_, embedding form.

    [1]_ learns a kernel matrix by a semidefinite program with one slack per
    triplet, margin 1 on squared distances and a trace regulariser. We solve
    its embedding form (the rank fixed to ``n_components``, as cblearn and
    the STE toolbox do):

    .. math:: \frac{1}{m} \sum_{(a, b, c)} \max(0,\ 1 + \|x_a - x_b\|^2 - \|x_a - x_c\|^2)
              + \frac{\lambda}{n} \sum_i \|x_i\|^2,

    a plain hinge on squared distances. Dividing the paper's
    :math:`\sum \xi + \lambda' \operatorname{tr}(K)` by m gives this with
    :math:`\lambda = \lambda' n / m`, so one ``lambd`` suits any number of
    triplets. The hinge is not smooth; L-BFGS-B copes in practice but may
    stop on a line-search failure near a kink, which still leaves a good
    embedding.

    Parameters
    ----------
    n_components : int, default=2
        Dimension of the embedding.
    lambd : float, default=1e-3
        Trace regularisation :math:`\lambda \geq 0`, per object and triplet
        as above.
    max_iter, tol, n_init, random_state
        As in :class:`SOE`.

    Attributes
    ----------
    embedding_, loss_, n_iter_, n_objects_, likelihood_
        As in :class:`SOE`.

    Notes
    -----
    ======================  ================
    [1]_                    here
    ======================  ================
    :math:`\xi_{ijkl}`      ``slack``
    :math:`\lambda`         ``lambd * m / n``
    :math:`\mathrm{tr}(K)`  ``sum(X ** 2)``
    ======================  ================

    References
    ----------
    .. [1] Agarwal, Wills, Cayton, Lanckriet, Kriegman & Belongie (2007).
       Generalized non-metric multidimensional scaling. AISTATS.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        **_OrdinalEmbedding._parameter_constraints,
        "lambd": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        n_components: int = 2,
        *,
        lambd: float = 1e-3,
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

    def _loss_terms(self, sq_near: np.ndarray, sq_far: np.ndarray) -> tuple:
        # Agarwal et al. (2007): slack = max(0, 1 + d_ab - d_ac) on squared distances
        slack = np.maximum(1.0 + sq_near - sq_far, 0.0)
        active = (slack > 0).astype(float)
        return slack, active, -active

    def _penalty(self, X: np.ndarray) -> tuple[float, np.ndarray]:
        n = X.shape[0]
        return self.lambd * float(np.sum(X**2)) / n, (2.0 * self.lambd / n) * X

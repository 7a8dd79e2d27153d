"""Ranked grids chosen by expected information under the current embedding (psiz's way).

A grid shows an anchor and ``n`` candidates and asks for the ``k`` most similar in
order. Its answer is one of the ``n!/(n-k)!`` ordered choices, with Plackett–Luce
probabilities under an embedding (Roads & Mozer 2019, Eq. (2): successive softmaxes of
the candidates' similarity to the anchor, here the Student-t kernel of t-STE so the
probabilities match :class:`app.learning.embedding.TSTE`'s shape likelihood).

The embedding is uncertain: it is known through samples ``X_1 … X_S`` of its posterior
(psiz draws them by MCMC; :func:`choose_grid` perturbs one fit by default). A grid is
worth asking when its answer tells the samples apart: the expected information gain
is the mutual information between the answer ``y`` and the embedding,

    I(y; X) = H( mean_s p(y | X_s) ) - mean_s H( p(y | X_s) ),

the BALD score of Houlsby et al. (2011) that psiz's active selection uses
(Roads & Mozer 2019, "Obtaining psychological embeddings"; Roads & Love 2021,
"Enriching ImageNet with human similarity judgments"). :func:`choose_grid` draws
``n_grids`` random grids, scores each, and returns the best. The function is pure:
numpy only, randomness from the ``rng`` given.
"""

from __future__ import annotations

from itertools import permutations
from math import perm

import numpy as np

__all__ = ["choose_grid", "grid_information", "ranked_choice_probabilities"]

MAX_OUTCOMES = 20_000  # ordered choices n!/(n-k)! enumerated per grid
_EPS = 1e-300


def ranked_choice_probabilities(logits: np.ndarray, k: int) -> np.ndarray:
    """Plackett–Luce probabilities of every ordered choice of ``k`` of ``n`` options.

    Parameters
    ----------
    logits : ndarray of shape (..., n)
        Log-similarity of each candidate to the anchor.
    k : int
        Choices made, 1 ≤ k < n.

    Returns
    -------
    probabilities : ndarray of shape (..., n!/(n-k)!)
        In the order of ``itertools.permutations(range(n), k)``; they sum to 1 over the
        last axis (Roads & Mozer 2019, Eq. (2)).
    """
    n = logits.shape[-1]
    if not 1 <= k < n:
        raise ValueError(f"k must be 1 … n-1 = {n - 1}, got {k}")
    if perm(n, k) > MAX_OUTCOMES:
        raise ValueError(
            f"{n}-rank-{k} has {perm(n, k)} ordered answers; at most {MAX_OUTCOMES} are enumerated"
        )
    tuples = np.asarray(list(permutations(range(n), k)), dtype=np.intp)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    out = np.ones((*logits.shape[:-1], len(tuples)))
    remaining = np.repeat(weights.sum(axis=-1)[..., None], len(tuples), axis=-1)
    for t in range(k):
        w_t = weights[..., tuples[:, t]]
        out *= w_t / remaining
        remaining = remaining - w_t
    return out


def _log_kernel(sq: np.ndarray, alpha: float) -> np.ndarray:
    # the Student-t kernel of t-STE (van der Maaten & Weinberger 2012), as in TSTE
    return -(alpha + 1.0) / 2.0 * np.log1p(sq / alpha)


def grid_information(
    samples: np.ndarray,
    anchors: np.ndarray,
    candidates: np.ndarray,
    k: int,
    alpha: float | None = None,
) -> np.ndarray:
    """Expected information gain (nats) of each grid about the embedding.

    Parameters
    ----------
    samples : ndarray of shape (n_samples, n_objects, n_components)
        Samples of the embedding's posterior.
    anchors : ndarray of shape (n_grids,)
    candidates : ndarray of shape (n_grids, n)
    k : int
        Candidates chosen per answer.
    alpha : float, default=None
        Degrees of freedom of the Student-t kernel; None: ``max(n_components - 1, 1)``
        as :class:`app.learning.embedding.TSTE`.

    Returns
    -------
    information : ndarray of shape (n_grids,)
        ``H(mean_s p_s) - mean_s H(p_s)`` over the ordered answers, ≥ 0.
    """
    samples = np.asarray(samples, dtype=float)
    if samples.ndim != 3:
        raise ValueError(
            f"samples must have shape (n_samples, n_objects, n_components), got {samples.shape}"
        )
    anchors = np.asarray(anchors, dtype=np.intp)
    candidates = np.asarray(candidates, dtype=np.intp)
    if candidates.ndim != 2 or anchors.shape != candidates.shape[:1]:
        raise ValueError("anchors must have shape (n_grids,) and candidates (n_grids, n)")
    alpha = float(max(samples.shape[2] - 1, 1) if alpha is None else alpha)
    diff = samples[:, anchors[:, None], :] - samples[:, candidates, :]  # (S, G, n, d)
    logits = _log_kernel(np.einsum("sgnd,sgnd->sgn", diff, diff), alpha)
    P = ranked_choice_probabilities(logits, k)  # (S, G, outcomes)
    mean = P.mean(axis=0)
    h_mean = -np.sum(mean * np.log(np.maximum(mean, _EPS)), axis=-1)
    mean_h = -np.mean(np.sum(P * np.log(np.maximum(P, _EPS)), axis=-1), axis=0)
    return np.maximum(h_mean - mean_h, 0.0)


def choose_grid(
    embedding: np.ndarray,
    n: int,
    k: int,
    rng: np.random.Generator,
    *,
    n_samples: int = 16,
    n_grids: int = 64,
    scale: float | np.ndarray | None = None,
    alpha: float | None = None,
) -> tuple[int, np.ndarray]:
    """The anchor and ``n`` candidates of the most informative of ``n_grids`` random grids.

    Parameters
    ----------
    embedding : ndarray of shape (n_objects, n_components) or (n_samples, n_objects, n_components)
        The current embedding, or samples of its posterior (then ``n_samples`` and
        ``scale`` are ignored).
    n : int
        Candidates per grid, 2 ≤ n < n_objects (n = 2, k = 1 is a triplet).
    k : int
        Candidates chosen per answer, 1 ≤ k < n.
    rng : numpy.random.Generator
        Draws the perturbations and the candidate grids.
    n_samples : int, default=16
        Posterior samples made by perturbing a single embedding: each coordinate plus
        Gaussian noise of standard deviation ``scale``.
    n_grids : int, default=64
        Random grids scored; the best is returned (psiz scores a few thousand; the
        cost is ``n_grids × n_samples × n!/(n-k)!``).
    scale : float or ndarray of shape (n_objects,), default=None
        Standard deviation of the perturbation, one for all objects or one per object
        (e.g. shrinking with the answers an object has been in, a Laplace-like
        posterior); None: 0.1 times the embedding's root-mean-square distance to its
        centroid.
    alpha : float, default=None
        As in :func:`grid_information`.

    Returns
    -------
    anchor : int
    candidates : ndarray of shape (n,)
    """
    X = np.asarray(embedding, dtype=float)
    if X.ndim not in (2, 3) or not np.all(np.isfinite(X)):
        raise ValueError(
            "embedding must be a finite array of shape (n_objects, n_components) or "
            f"(n_samples, n_objects, n_components), got shape {X.shape}"
        )
    n_objects = X.shape[-2]
    if not 2 <= n < n_objects:
        raise ValueError(f"n must be 2 … n_objects - 1 = {n_objects - 1}, got {n}")
    if not 1 <= k < n:
        raise ValueError(f"k must be 1 … n-1 = {n - 1}, got {k}")
    if n_samples < 2 or n_grids < 1:
        raise ValueError(f"need n_samples ≥ 2 and n_grids ≥ 1, got {n_samples}, {n_grids}")
    if X.ndim == 2:
        if scale is None:
            centred = X - X.mean(axis=0)
            scale = 0.1 * float(np.sqrt(np.mean(np.sum(centred**2, axis=1))))
        scale_ = np.asarray(scale, dtype=float)
        if scale_.shape not in ((), (n_objects,)) or np.any(scale_ < 0):
            raise ValueError(
                f"scale must be non-negative, one number or one per object, got {scale!r}"
            )
        if scale_.ndim:
            scale_ = scale_[:, None]
        X = X[None] + scale_ * rng.standard_normal((n_samples, *X.shape))
    # a grid: an anchor and n other objects, uniformly
    draws = np.argsort(rng.random((n_grids, n_objects)), axis=1)[:, : n + 1]
    information = grid_information(X, draws[:, 0], draws[:, 1:], k, alpha)
    best = int(np.argmax(information))
    return int(draws[best, 0]), draws[best, 1:].copy()

"""The shape likelihoods: every triplet-like answer as successive softmax choices.

Each answer is one or more *choices*: among a few options (pairs of objects), the one
picked; the probability of a choice is a softmax of the options' logits, the log of a
similarity kernel of the pair:

- a triplet ``(a, b, c)``: options ``(a, b), (a, c)``, picked ``(a, b)`` — with the
  Student-t kernel this is t-STE (van der Maaten & Weinberger 2012) exactly;
- odd-one-out ``(i, j, o)``, ``o`` odd: options ``(i, j), (i, o), (j, o)``, picked
  ``(i, j)``: the most similar pair stays, the third object is odd (Eq. (1) of Zheng,
  Pereira, Baker & Hebart 2019, SPoSE; Muttenthaler et al. 2022, VICE);
- rank ``(a, c_1, …, c_k, rest)``: k successive choices, the t-th among the pairs of
  ``a`` with the candidates not yet chosen (the Plackett–Luce model of the ranked
  trials of Roads & Mozer 2019, psiz, Eq. (2)).

The loss is the (weighted) mean over answers of the answer's negative log-likelihood
(the sum over its choices). Logits come from ``v``, either the squared distance
``||x_p - x_q||^2`` (``similarity="distance"``) or the dot product ``x_p . x_q``
(``"dot"``, SPoSE's), through the estimator's ``log_kernel(v) -> (logit, dlogit/dv)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from app.learning.shape_answers import AnswerGroup

LogKernel = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
_DENSE_MAX_OBJECTS = 2000


class _ChoiceIndex:
    """Shaped answers prepared for repeated loss and gradient evaluations.

    Choices of equal width form blocks; the pairs of all blocks are flattened once into
    ``p, q`` (and ``p * n + q`` for the dense path).
    """

    def __init__(
        self,
        groups: Sequence[AnswerGroup],
        n: int,
        similarity: str,
        weight: np.ndarray | None = None,
    ) -> None:
        self.n = n
        self.similarity = similarity
        n_answers = sum(len(g.rows) for g in groups)
        share = np.full(n_answers, 1.0 / n_answers) if weight is None else weight / weight.sum()
        blocks: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}

        def add(pairs: np.ndarray, owner_share: np.ndarray) -> None:
            width = pairs.shape[1]
            lists = blocks.setdefault(width, ([], []))
            lists[0].append(pairs)
            lists[1].append(owner_share)

        for group in groups:
            rows, w = group.rows, share[group.positions]
            if group.shape.type == "odd_one_out":
                i, j, o = rows[:, 0], rows[:, 1], rows[:, 2]
                pairs = np.stack([np.stack([i, j], 1), np.stack([i, o], 1), np.stack([j, o], 1)], 1)
                add(pairs, w)
                continue
            anchor = rows[:, 0]
            for t in range(group.k):  # Plackett-Luce: choice t among candidates t+1 ..
                options = rows[:, 1 + t :]
                pairs = np.stack([np.broadcast_to(anchor[:, None], options.shape), options], 2)
                add(pairs, w)
        # one block per width: pairs (m, w, 2), share (m,)
        self.blocks = [(np.concatenate(p, axis=0), np.concatenate(s)) for p, s in blocks.values()]
        flat = np.concatenate([p.reshape(-1, 2) for p, _ in self.blocks], axis=0)
        self.p, self.q = np.ascontiguousarray(flat[:, 0]), np.ascontiguousarray(flat[:, 1])
        self.dense = n <= _DENSE_MAX_OBJECTS
        if self.dense:
            self.flat = self.p * n + self.q

    def values(self, X: np.ndarray) -> np.ndarray:
        """``v`` for every option pair: squared distances or dot products."""
        if self.dense:
            if self.similarity == "dot":
                V = X @ X.T
            else:
                Xc = X - X.mean(axis=0)
                gram = Xc @ Xc.T
                norms = np.diag(gram).copy()
                V = np.maximum(norms[:, None] + norms[None, :] - 2.0 * gram, 0.0)
            return V.ravel()[self.flat]
        if self.similarity == "dot":
            return np.einsum("ij,ij->i", X[self.p], X[self.q])
        diff = X[self.p] - X[self.q]
        return np.einsum("ij,ij->i", diff, diff)

    def gradient(self, X: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Gradient w.r.t. X of sum_pairs l(v_pq), given g = dl/dv per pair."""
        n, d = X.shape
        if self.dense:
            W = np.bincount(self.flat, weights=g, minlength=n * n).reshape(n, n)
            S = W + W.T
            if self.similarity == "dot":  # d(x_p . x_q)/dx_p = x_q
                return S @ X
            return 2.0 * (S.sum(axis=1)[:, None] * X - S @ X)
        if self.similarity == "dot":
            to_p, to_q = g[:, None] * X[self.q], g[:, None] * X[self.p]
        else:
            to_p = (2.0 * g)[:, None] * (X[self.p] - X[self.q])
            to_q = -to_p
        rows = np.concatenate([self.p, self.q])
        values = np.concatenate([to_p, to_q])
        flat = (rows[:, None] * d + np.arange(d)).ravel()
        return np.bincount(flat, weights=values.ravel(), minlength=n * d).reshape(n, d)

    def loss(self, X: np.ndarray, log_kernel: LogKernel) -> tuple[float, np.ndarray]:
        """Mean negative log-likelihood of the answers, and its gradient w.r.t. X."""
        logit, dlogit = log_kernel(self.values(X))
        total = 0.0
        g = np.empty_like(logit)
        start = 0
        for pairs, share in self.blocks:
            m, w = pairs.shape[:2]
            L = logit[start : start + m * w].reshape(m, w)
            top = L.max(axis=1, keepdims=True)
            log_z = top[:, 0] + np.log(np.exp(L - top).sum(axis=1))
            total += float(share @ (log_z - L[:, 0]))
            # d(-log softmax_0)/dL = softmax - onehot(0), times the answer's share
            P = np.exp(L - log_z[:, None])
            P[:, 0] -= 1.0
            g[start : start + m * w] = (P * share[:, None]).ravel()
            start += m * w
        return total, self.gradient(X, g * dlogit)

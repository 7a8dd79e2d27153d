"""Scoring candidate triplets for the adaptive strategy (numpy only, deterministic).

Two scorers, both given the answers so far and a seeded generator:

* :func:`rank_embedding_triplets` follows an ordinal embedding. For each anchor (in the
  order given) it draws ``pool`` random candidate pairs and scores each by

  - ``"entropy"``: :math:`H(p_a)`, the binary entropy of the model's probability that the
    anchor calls ``near`` the closer one (uncertainty sampling; Salmon's
    ``UncertaintyScorer``, Sievert et al. 2021), or
  - ``"infogain"``: the mutual information between the answer and the anchor's position,
    Eq. (4)–(6) of Tamuz et al. (2011): the anchor's position has a posterior over the
    embedded points (uniform prior times the likelihood of the anchor's earlier answers,
    their Eq. (5)), and

    .. math:: I(y; x_a) = H\\big(\\textstyle\\sum_l w_l\\, p_l\\big) - \\sum_l w_l\\, H(p_l),

    where :math:`p_l` is the answer probability for an anchor at point :math:`l` and
    :math:`H` the binary entropy (Salmon's ARR scores this way, its ``InfoGainScorer``), or
  - ``"bald"``: the same mutual information with a better posterior — all three points
    uncertain, each with a Laplace approximation of its posterior (the inverse Fisher
    information of the answers it is in, plus the points' spread as the prior:
    :func:`position_covariances`), by Monte Carlo (BALD, Houlsby et al. 2011;
    :func:`bald_gains`), or
  - ``"predictive"``: the entropy again, of the answer probability averaged over that
    posterior instead of taken at the fitted points (uncertainty sampling with the
    positions' uncertainty in it).

  On ``bench/active_embedding.py`` (blobs30, 3 seeds, noise 0/10/20%) the entropy needs
  the fewest answers; both information gains steer most questions inside one cluster
  (60% against 9% of random triplets), fine detail that a uniformly random held-out
  triplet rarely asks about — see docs/benchmarks.md, "Adaptive questions".
* :func:`rank_kernel_triplets` serves the triplet kernels k1 and k2 of Kleindessner &
  von Luxburg (2017), whose k(i, j) is the agreement of two objects' feature vectors
  over the comparisons both took part in (their Eq. (2) and the feature map of Eq. (5)).
  A kernel value resting on few shared comparisons is the least known; for an object
  it asks the comparison (feature) that the most other objects already have, weighted
  by ``1 / (1 + shared(i, j))`` so that thinly-known pairs count most.

* :func:`rank_pairs` serves pairs with ties ("better", "about the same", "worse"). Given
  a ranking model's scores and Davidson's (1970) tie parameter — a Bradley–Terry–Davidson
  fit, or SVMcompare's ranking with a Davidson link fitted to the answers — it asks, for
  each object in turn, the partner of a random ``pool`` whose three-way outcome is least
  sure: the entropy of (P(better), P(same), P(worse)). Pairs answered before are not asked
  again.

Both return ``(triplets, scores)`` with one row per anchor (the best of its pool), in
the anchors' order; rows whose pool held nothing useful are dropped. The embedding
scorer never proposes a question (anchor and unordered pair) already answered or
already proposed in the same call.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = [
    "answer_probabilities",
    "bald_gains",
    "binary_entropy",
    "pair_outcome_probabilities",
    "position_covariances",
    "rank_embedding_triplets",
    "rank_kernel_triplets",
    "rank_pairs",
]

_EPS = 1e-12
CRITERIA = ("entropy", "infogain", "bald", "predictive")
BALD_SAMPLES = 64  # draws of the three positions per candidate
MAX_LOCATIONS = 400  # posterior support per anchor: its own point and up to this many others


def binary_entropy(p: np.ndarray) -> np.ndarray:
    """H(p) = −p log p − (1 − p) log(1 − p), in nats."""
    p = np.clip(p, _EPS, 1 - _EPS)
    return -(p * np.log(p) + (1 - p) * np.log1p(-p))


def answer_probabilities(
    locations: np.ndarray, near: np.ndarray, far: np.ndarray, method: str = "tste"
) -> np.ndarray:
    """P(an anchor at each location calls ``near`` closer than ``far``): (L, P).

    ``locations`` (L, d) and ``near``, ``far`` (P, d) are points. ``"ckl"`` uses Eq. (2)
    of Tamuz et al. (2011), (μ + d²_ac) / (2μ + d²_ab + d²_ac) with μ = 0.1; every other
    method uses the Student-t model of t-STE (van der Maaten & Weinberger 2012, Sec. 4)
    with α = max(d − 1, 1), which also gives SOE's and GNMDS's embeddings a calibrated
    answer probability.
    """
    return _probability(
        ((locations[:, None, :] - near[None, :, :]) ** 2).sum(-1),
        ((locations[:, None, :] - far[None, :, :]) ** 2).sum(-1),
        locations.shape[1],
        method,
    )


def _probability(sq_near: np.ndarray, sq_far: np.ndarray, dims: int, method: str) -> np.ndarray:
    """The answer probability of :func:`answer_probabilities` from squared distances."""
    if method == "ckl":
        mu = 0.1
        return (mu + sq_far) / (2 * mu + sq_near + sq_far)
    alpha = float(max(dims - 1, 1))
    power = (alpha + 1.0) / 2.0
    z = power * (np.log1p(sq_near / alpha) - np.log1p(sq_far / alpha))  # log k_far − log k_near
    return 1.0 / (1.0 + np.exp(np.clip(z, -50, 50)))


def _answer_gradients(
    X: np.ndarray, triplets: np.ndarray, method: str
) -> tuple[np.ndarray, np.ndarray]:
    """∂p/∂x of each answered triplet's probability, for its anchor, near and far point
    (m, 3, d), and p itself (m,)."""
    a, b, c = triplets.T
    diff_b, diff_c = X[a] - X[b], X[a] - X[c]
    sq_b, sq_c = (diff_b**2).sum(1), (diff_c**2).sum(1)
    if method == "ckl":  # p = A / (A + B), A = μ + d²_ac, B = μ + d²_ab
        mu = 0.1
        A, B = mu + sq_c, mu + sq_b
        p = A / (A + B)
        dA, dB = 2 * diff_c, 2 * diff_b  # w.r.t. x_a; w.r.t. x_c resp. x_b: minus these
        scale = 1.0 / (A + B) ** 2
        grad_a = scale[:, None] * (B[:, None] * dA - A[:, None] * dB)
        grad_b = scale[:, None] * A[:, None] * dB
        grad_c = -scale[:, None] * B[:, None] * dA
    else:  # p = σ(z), z = (α+1)/2 · (log(1 + d²_ac/α) − log(1 + d²_ab/α))
        alpha = float(max(X.shape[1] - 1, 1))
        z = (alpha + 1) / 2 * (np.log1p(sq_c / alpha) - np.log1p(sq_b / alpha))
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))
        dz_c = (alpha + 1) * diff_c / (alpha + sq_c)[:, None]  # ∂z/∂x_a from the far term
        dz_b = (alpha + 1) * diff_b / (alpha + sq_b)[:, None]
        slope = (p * (1 - p))[:, None]
        grad_a = slope * (dz_c - dz_b)
        grad_b = slope * dz_b
        grad_c = -slope * dz_c
    return np.stack([grad_a, grad_b, grad_c], axis=1), p


def position_covariances(X: np.ndarray, triplets: np.ndarray, method: str = "tste") -> np.ndarray:
    """A Laplace approximation (MacKay 1992) of each point's posterior, the others held
    fixed: the inverse of the Fisher information its answered triplets carry, Σ ∇p ∇pᵀ /
    (p (1 − p)) over every triplet the point is in (as anchor, near or far), plus the
    precision of a Gaussian prior with the embedding's own covariance — the spread of the
    embedded points, Tamuz et al.'s (2011) prior, so that a point nobody has compared can
    be anywhere the points are. Returns (n, d, d).
    """
    X = np.asarray(X, dtype=float)
    n, d = X.shape
    spread = np.cov(X.T).reshape(d, d) + 1e-9 * np.eye(d)
    info = np.broadcast_to(np.linalg.inv(spread), (n, d, d)).copy()
    triplets = np.asarray(triplets, dtype=np.intp).reshape(-1, 3)
    if len(triplets):
        grads, p = _answer_gradients(X, triplets, method)
        weight = 1.0 / np.clip(p * (1 - p), 1e-6, None)
        outer = np.einsum("mki,mkj->mkij", grads, grads) * weight[:, None, None, None]
        for k in range(3):
            np.add.at(info, triplets[:, k], outer[:, k])
    return np.linalg.inv(info)


def bald_gains(
    X: np.ndarray,
    roots: np.ndarray,
    anchor: int,
    first: np.ndarray,
    second: np.ndarray,
    rng: np.random.Generator,
    method: str = "tste",
    samples: int = BALD_SAMPLES,
    total: bool = False,
) -> np.ndarray:
    """Mutual information between the answer to (anchor; first, second) and the three
    positions, under independent Gaussian posteriors ``X[i] + roots[i] @ ε`` (``roots``:
    Cholesky factors of :func:`position_covariances`): BALD (Houlsby et al. 2011, Eq. 3),

    I(y; x_a, x_b, x_c) = H(E[p]) − E[H(p)],

    by Monte Carlo over ``samples`` draws. Tamuz et al.'s (2011) information gain is the
    same quantity with only the anchor uncertain and its posterior on the embedded points.
    A near-tie whose three points are pinned scores ~0 (the answer is a coin flip the
    model already expects), where the entropy would score it highest.
    """
    d = X.shape[1]
    noise = rng.standard_normal((3, samples, len(first), d))
    xa = X[anchor] + noise[0] @ roots[anchor].T  # (S, P, d)
    xb = X[first] + np.einsum("spj,pij->spi", noise[1], roots[first])
    xc = X[second] + np.einsum("spj,pij->spi", noise[2], roots[second])
    p = _probability(((xa - xb) ** 2).sum(-1), ((xa - xc) ** 2).sum(-1), d, method)  # (S, P)
    if total:  # the posterior predictive's entropy: uncertainty sampling, Laplace posterior
        return binary_entropy(p.mean(0))
    return binary_entropy(p.mean(0)) - binary_entropy(p).mean(0)


def _locations(n: int, anchor: int, rng: np.random.Generator) -> np.ndarray:
    if n <= MAX_LOCATIONS + 1:
        return np.arange(n)
    others = rng.choice(n - 1, MAX_LOCATIONS, replace=False)
    others += others >= anchor
    return np.concatenate([[anchor], others])


def _candidate_pairs(
    n: int, anchor: int, pool: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``pool`` random pairs of distinct objects other than ``anchor``."""
    first = rng.integers(n - 1, size=pool)
    second = rng.integers(n - 2, size=pool)
    second += second >= first  # distinct from first, in 0..n-2
    first += first >= anchor
    second += second >= anchor
    return first, second


def rank_embedding_triplets(
    embedding: np.ndarray,
    triplets: np.ndarray,
    anchors: np.ndarray,
    pool: int,
    rng: np.random.Generator,
    method: str = "tste",
    criterion: str = "entropy",
) -> tuple[np.ndarray, np.ndarray]:
    """The most informative triplet of a random pool for each anchor; see the module notes.

    Parameters
    ----------
    embedding : ndarray of shape (n_objects, d)
    triplets : int ndarray of shape (m, 3)
        The answers so far, rows (anchor, near, far): they shape each anchor's posterior.
    anchors : int ndarray
        Anchors in the order their questions should be asked.
    pool : int
        Candidate pairs drawn per anchor.
    """
    X = np.asarray(embedding, dtype=float)
    n = X.shape[0]
    if n < 3:
        raise ValueError(f"adaptive triplets need at least 3 objects, got {n}")
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {', '.join(CRITERIA)}, got {criterion!r}")
    triplets = np.asarray(triplets, dtype=np.intp).reshape(-1, 3)
    order = np.argsort(triplets[:, 0], kind="stable")
    by_anchor = triplets[order]
    starts = np.searchsorted(by_anchor[:, 0], np.arange(n + 1))
    if criterion in ("bald", "predictive"):
        roots = np.linalg.cholesky(position_covariances(X, triplets, method))
    asked: dict[int, set[int]] = {}  # per anchor, the pairs answered or chosen already
    rows, scores = [], []
    for anchor in np.asarray(anchors, dtype=np.intp):
        history = by_anchor[starts[anchor] : starts[anchor + 1]]
        if int(anchor) not in asked:
            asked[int(anchor)] = set(_pair_codes(history[:, 1], history[:, 2], n).tolist())
        if criterion == "entropy":  # the answer's uncertainty at the anchor's own point
            first, second = _candidate_pairs(n, int(anchor), pool, rng)
            p = answer_probabilities(X[[anchor]], X[first], X[second], method)[0]
            gain = binary_entropy(p)
        elif criterion in ("bald", "predictive"):
            first, second = _candidate_pairs(n, int(anchor), pool, rng)
            gain = bald_gains(
                X, roots, int(anchor), first, second, rng, method, total=criterion == "predictive"
            )
        else:
            locations = _locations(n, int(anchor), rng)
            # Eq. (5) of Tamuz et al.: posterior ∝ prior × Π p(answer | anchor at location).
            log_w = np.zeros(len(locations))
            if len(history):
                p = answer_probabilities(X[locations], X[history[:, 1]], X[history[:, 2]], method)
                log_w = np.log(np.clip(p, _EPS, 1.0)).sum(axis=1)
            w = np.exp(log_w - log_w.max())
            w /= w.sum()
            first, second = _candidate_pairs(n, int(anchor), pool, rng)
            p = answer_probabilities(X[locations], X[first], X[second], method)  # (L, P)
            gain = binary_entropy(w @ p) - w @ binary_entropy(p)  # Eq. (6)
        # A question answered before is not asked again: under a model that cannot
        # place it (a near-tie it gives up), it would stay the most uncertain one and
        # be asked over and over (26% repeats in 800 noise-free answers on blobs30,
        # bench/adaptive_diagnostic.py).
        repeat = np.isin(_pair_codes(first, second, n), list(asked[int(anchor)]))
        if repeat.all():
            continue
        gain = np.where(repeat, -np.inf, gain)
        best = int(np.argmax(gain))
        asked[int(anchor)].add(int(_pair_codes(first[best], second[best], n)))
        rows.append((int(anchor), int(first[best]), int(second[best])))
        scores.append(float(gain[best]))
    return np.asarray(rows, dtype=np.intp).reshape(-1, 3), np.asarray(scores)


def _pair_codes(first: np.ndarray, second: np.ndarray, n: int) -> np.ndarray:
    """One integer per unordered pair of candidates."""
    return np.minimum(first, second).astype(np.int64) * n + np.maximum(first, second)


def _kernel_features(triplets: np.ndarray, n: int, kernel: str) -> tuple[sp.csr_matrix, dict]:
    """Which object has which comparison (feature) answered: a 0/1 (n × columns) matrix
    and the map column → (x, y) of the comparison.

    k1: object a's feature (b, c), unordered, from any answered triplet (a; b, c).
    k2: object b's feature (a, c) and object c's feature (a, b), from (a; b, c): the
    anchor and the other candidate.
    """
    a, b, c = triplets.T
    if kernel == "k1":
        owners = a
        first, second = np.minimum(b, c), np.maximum(b, c)
    else:
        owners = np.concatenate([b, c])
        first, second = np.concatenate([a, a]), np.concatenate([c, b])
    code = first.astype(np.int64) * n + second
    unique, columns = np.unique(code, return_inverse=True)
    matrix = sp.csr_matrix(
        (np.ones(len(owners)), (owners, columns)), shape=(n, max(len(unique), 1))
    )
    matrix.data[:] = 1.0  # repeated answers count once
    return matrix, unique


def rank_kernel_triplets(
    triplets: np.ndarray,
    n_objects: int,
    kernel: str,
    objects: np.ndarray,
    pool: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """For each object, the comparison that most strengthens its least-known kernel values.

    The candidates of object i are ``pool`` comparisons drawn among those other objects
    already have and i lacks; comparison f scores Σ_j [j has f] / (1 + shared(i, j)),
    shared(i, j) being the comparisons i and j both have (the support of k(i, j)).
    Objects none of whose candidates is useful (no answers yet) are skipped.

    k1 asks (i; x, y) for a feature (x, y) of i; k2 asks (x; i, y) for a feature (x, y).
    """
    if kernel not in ("k1", "k2"):
        raise ValueError(f"kernel must be 'k1' or 'k2', got {kernel!r}")
    triplets = np.asarray(triplets, dtype=np.intp).reshape(-1, 3)
    if len(triplets) == 0:
        return np.empty((0, 3), dtype=np.intp), np.empty(0)
    F, codes = _kernel_features(triplets, n_objects, kernel)
    shared = (F @ F.T).tocsr()
    coverage = np.asarray(F.sum(axis=0)).ravel()
    FT = F.T.tocsr()
    x, y = np.divmod(codes, n_objects)
    rows, scores = [], []
    for obj in np.asarray(objects, dtype=np.intp):
        # Comparisons that involve i itself are not features of i.
        usable = (x != obj) & (y != obj) & (coverage > 0)
        usable[F[obj].indices] = False
        candidates = np.flatnonzero(usable)
        if len(candidates) == 0:
            continue
        if len(candidates) > pool:
            candidates = rng.choice(candidates, pool, replace=False)
        weight = 1.0 / (1.0 + shared[obj].toarray().ravel())
        block = FT[candidates]
        score = block @ weight  # Σ_j [j has f] / (1 + shared(i, j))
        best = int(np.argmax(score))
        column = int(candidates[best])
        first, second = int(x[column]), int(y[column])
        row = (obj, first, second) if kernel == "k1" else (first, obj, second)
        rows.append(tuple(int(v) for v in row))
        scores.append(float(score[best]))
    return np.asarray(rows, dtype=np.intp).reshape(-1, 3), np.asarray(scores)


def pair_outcome_probabilities(
    scores: np.ndarray, tie: float, left: np.ndarray, right: np.ndarray
) -> np.ndarray:
    """Davidson's (1970) P(left better), P(same), P(right better) for scores θ and tie ν:
    proportional to e^(−δ), ν, e^δ with δ = (θ_right − θ_left) / 2 — the link of
    ``app.learning.bradley_terry`` (restated here: strategies import no learning code)."""
    delta = (scores[right] - scores[left]) / 2.0
    logits = np.stack([-delta, np.full_like(delta, np.log(max(tie, 1e-300))), delta], axis=1)
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return p / p.sum(axis=1, keepdims=True)


PAIR_CRITERIA = ("confidence", "margin", "entropy")  # the first is the strategy's default


def pair_uncertainty(p: np.ndarray, criterion: str) -> np.ndarray:
    """How unsure outcome probabilities (m, 3) are, larger is less sure: ``"entropy"``,
    ``"margin"`` (minus the gap between the two likeliest outcomes) or ``"confidence"``
    (one minus the likeliest's probability) — the uncertainty measures of Settles (2009),
    Sec. 3.1. The entropy is largest for two objects of equal score, where left and right
    are equally likely but "about the same" is the sure answer; the margin looks at the
    decision the model would make, which is near a tie's boundary."""
    if criterion == "entropy":
        q = np.clip(p, _EPS, 1.0)
        return -(q * np.log(q)).sum(axis=1)
    top = np.sort(p, axis=1)
    if criterion == "margin":
        return -(top[:, -1] - top[:, -2])
    if criterion == "confidence":
        return 1.0 - top[:, -1]
    raise ValueError(f"criterion must be one of {', '.join(PAIR_CRITERIA)}, got {criterion!r}")


def rank_pairs(
    scores: np.ndarray,
    tie: float,
    pairs: np.ndarray,
    objects: np.ndarray,
    pool: int,
    rng: np.random.Generator,
    criterion: str = "confidence",
) -> tuple[np.ndarray, np.ndarray]:
    """For each object in ``objects`` (in order), the partner of ``pool`` random ones whose
    outcome is least sure (:func:`pair_uncertainty`); ``(rows (m, 2), uncertainties)``.
    ``pairs`` are the answers so far, rows (left, right, outcome): their pairs are not asked
    again, nor is a pair twice in one batch. The object is shown left or right at random."""
    scores = np.asarray(scores, dtype=float)
    n = len(scores)
    if n < 2:
        raise ValueError(f"adaptive pairs need at least 2 objects, got {n}")
    answered = np.asarray(pairs, dtype=np.int64).reshape(-1, 3)[:, :2]
    asked = set(_pair_codes(answered[:, 0], answered[:, 1], n).tolist())
    rows, entropies = [], []
    for obj in np.asarray(objects, dtype=np.intp):
        partners = rng.integers(n - 1, size=min(pool, n - 1) if pool < n - 1 else n - 1)
        if pool >= n - 1:
            partners = np.arange(n - 1)
        partners = partners + (partners >= obj)
        p = pair_outcome_probabilities(scores, tie, np.full(len(partners), obj), partners)
        entropy = pair_uncertainty(p, criterion)
        codes = _pair_codes(np.full(len(partners), obj), partners, n)
        entropy = np.where(np.isin(codes, list(asked)), -np.inf, entropy)
        best = int(np.argmax(entropy))
        if not np.isfinite(entropy[best]):
            continue
        asked.add(int(codes[best]))
        partner = int(partners[best])
        rows.append((int(obj), partner) if rng.random() < 0.5 else (partner, int(obj)))
        entropies.append(float(entropy[best]))
    return np.asarray(rows, dtype=np.intp).reshape(-1, 2), np.asarray(entropies)

"""Why did noise-free answers to ``adaptive``'s questions make the embedding worse? (issue 12)

A deterministic replay of ``bench/active_embedding.py``'s adaptive column on blobs30 (one
seed, noise 0 by default): a simulated crowd answers the strategy's questions, t-STE (the
service's defaults) is refit every ``refresh`` answers and scores the next batch. Every
``every`` answers it prints what could go wrong, suspect by suspect:

- orientation and storage: the share of answered rows that agree with the true geometry
  (1.000 at noise 0 unless questions/answers are mixed up), degenerate rows (a repeated
  object), distinct questions (anchor, unordered pair) among the answers so far;
- the anchors' round: the fewest and most questions any anchor got so far (a round-robin
  keeps them close, explore's random questions spread them a little);
- the fit: t-STE's training accuracy on the (noise-free) answers, the embedding's RMS
  norm, and its held-out accuracy on 3,000 noiseless random triplets;
- where the questions go: the share of answered questions inside one cluster and their
  median true relative margin |d_ab − d_ac| / (d_ab + d_ac) (small = a near-tie).

Usage: .venv/bin/python bench/adaptive_diagnostic.py [--score entropy|infogain|bald|predictive]
       [--noise 0] [--answers 800] [--refresh 20] [--every 80]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.active.adaptive import AdaptiveTriplets  # noqa: E402
from app.active.scoring import CRITERIA  # noqa: E402
from app.learning.embedding import triplet_accuracy  # noqa: E402
from app.learning.triplets import make_oracle  # noqa: E402
from app.training.kinds.embedding import EmbeddingParams, estimator  # noqa: E402


def blobs30() -> np.ndarray:
    """The blobs30 points of bench/active_embedding.py."""
    rng = np.random.default_rng(12)
    centres = rng.normal(scale=4.0, size=(3, 2))
    return centres[np.arange(30) % 3] + rng.normal(size=(30, 2))


def oriented(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    a, b, c = rows.T
    closer = ((X[a] - X[b]) ** 2).sum(1) < ((X[a] - X[c]) ** 2).sum(1)
    return np.where(closer[:, None], rows, rows[:, [0, 2, 1]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--score", choices=list(CRITERIA), default="entropy")
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--answers", type=int, default=800)
    parser.add_argument("--refresh", type=int, default=20)
    parser.add_argument("--every", type=int, default=80)
    args = parser.parse_args()

    X = blobs30()
    n = len(X)
    test_rng = np.random.default_rng([0, 99])
    test = oriented(X, np.array([test_rng.choice(n, 3, replace=False) for _ in range(3000)]))
    oracle = make_oracle(X, noise=args.noise, random_state=0)
    params = {"pool": 50, "refresh_every": args.refresh, "explore": 0.1, "score": args.score}
    strategy = AdaptiveTriplets(n, params, 0)
    state: dict = {}
    answered = np.empty((args.answers, 3), dtype=np.intp)
    print(
        f"blobs30, noise {args.noise:.0%}, score {args.score}, refit every {args.refresh}\n"
        f"{'answers':>7} {'truth':>6} {'degen':>5} {'distinct':>8} {'per anchor':>10} "
        f"{'train':>6} {'norm':>9} {'held-out':>8} {'1 cluster':>9} {'margin':>6}"
    )
    for step in range(args.answers):
        a, b, c = strategy.propose(state, step).objects
        closer = bool(oracle(np.array([a]), np.array([b]), np.array([c]))[0])
        answered[step] = (a, b, c) if closer else (a, c, b)
        done = step + 1
        if done % args.refresh:
            continue
        T = answered[:done]
        model = estimator(EmbeddingParams(method="tste")).fit(T, n)
        state = strategy.refreshed_state(state, T, embedding=model.embedding_)
        if done % args.every:
            continue
        truth = float(np.mean((oriented(X, T) == T).all(axis=1)))
        degenerate = int(np.sum((T[:, 0] == T[:, 1]) | (T[:, 0] == T[:, 2]) | (T[:, 1] == T[:, 2])))
        distinct = len({(r[0], min(r[1], r[2]), max(r[1], r[2])) for r in T.tolist()})
        counts = np.bincount(T[:, 0], minlength=n)
        norm = float(np.sqrt((model.embedding_**2).sum(axis=1).mean()))
        # Where the questions went: all three objects in one cluster, and the true
        # relative margin |d_ab - d_ac| / (d_ab + d_ac) (small = a near-tie).
        cluster = T % 3
        inside = float(np.mean((cluster[:, 0] == cluster[:, 1]) & (cluster[:, 1] == cluster[:, 2])))
        d_ab = np.linalg.norm(X[T[:, 0]] - X[T[:, 1]], axis=1)
        d_ac = np.linalg.norm(X[T[:, 0]] - X[T[:, 2]], axis=1)
        margin = float(np.median(np.abs(d_ab - d_ac) / (d_ab + d_ac)))
        print(
            f"{done:>7} {truth:>6.3f} {degenerate:>5} {distinct:>8} "
            f"{counts.min():>4} - {counts.max():<3} {model.score(T):>6.3f} {norm:>9.1f} "
            f"{triplet_accuracy(model.embedding_, test):>8.3f} {inside:>9.3f} {margin:>6.3f}"
        )


if __name__ == "__main__":
    main()

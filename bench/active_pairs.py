"""Adaptive pairs with ties against random pairs (issue 33).

Objects: ``quadratic`` — n points x ~ U[-2, 2]² (seeded), quality r(x) = ‖x‖², a pair "about
the same" when the qualities differ by at most 1 (the threshold t_1 of the SVMcompare
paper's simulation, Section 4.1); ``linear`` — r(x) = x₀ + x₁ on the same points, ties
within 0.5. A simulated crowd answers each column's questions: the true outcome, replaced
with probability ``noise`` by one of the two others (fresh at every ask).

Columns:

- ``random``: uniformly random pairs (the ``pairs`` strategy);
- ``adaptive``: the service's ``adaptive`` strategy with ``kind: "pairs"``, following a
  Bradley–Terry–Davidson fit (the ``bradley_terry`` kind's defaults) refit every
  ``--refresh`` answers, as the service's job does;
- ``adaptive_svm``: the same strategy with ``model: "svmcompare"``, following SVMcompare
  (rbf, C = 1, standardised features, the kind's defaults) with a Davidson link fitted to
  its ranking.

At each checkpoint two models are fit on the answers so far and scored on 3,000 random
pairs with their true (noise-free) outcomes: Bradley–Terry–Davidson (no features) and
SVMcompare (features). The summary gives the answers each column needs to reach the
accuracy ``random`` ends with at the budget (linear interpolation between checkpoints;
">budget" when never), and random / adaptive.

Run: ``nice -n 10 .venv/bin/python bench/active_pairs.py [--n 60] [--noise 0.1]
[--seeds 3] [--budget-per-object 20] [--refresh 20] [--sets quadratic linear]``; output in
``bench/results/active_pairs.txt``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.active.adaptive import AdaptiveTriplets  # noqa: E402
from app.active.passive import RandomPairs  # noqa: E402
from app.learning.bradley_terry import BradleyTerryDavidson, calibrate_link  # noqa: E402
from app.learning.svmcompare import SVMCompare, threshold  # noqa: E402

N_TEST = 3000


def make_set(name: str, n: int) -> tuple[np.ndarray, np.ndarray, float]:
    X = np.random.default_rng(12).uniform(-2, 2, size=(n, 2))
    if name == "quadratic":
        return X, (X**2).sum(axis=1), 1.0
    if name == "linear":
        return X, X.sum(axis=1), 0.5
    raise SystemExit(f"unknown set {name!r}")


def outcome(quality: np.ndarray, tau: float, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    return threshold(quality[right] - quality[left], tau).astype(int)


def svm_fit(Z: np.ndarray, pairs: np.ndarray) -> SVMCompare | None:
    try:
        return SVMCompare(C=1.0, kernel="rbf").fit(Z[pairs[:, 0]], Z[pairs[:, 1]], pairs[:, 2])
    except ValueError:  # too few ties, or no comparison function yet
        return None


def collect(column: str, X, quality, tau, args, seed: int, test) -> list[tuple]:  # type: ignore[no-untyped-def]
    n = len(X)
    budget = args.budget_per_object * n
    Z = (X - X.mean(0)) / X.std(0)
    rng = np.random.default_rng([seed, 5])
    if column == "random":
        strategy = RandomPairs(n, {}, seed)
    else:
        params = {
            "kind": "pairs",
            "refresh_every": args.refresh,
            "pool": args.pool,
            "score": args.score,
            "explore": args.explore,
        }
        if column == "adaptive_svm":
            params["model"] = "svmcompare"
        strategy = AdaptiveTriplets(n, params, seed)
    state: dict = {}
    answered = np.empty((budget, 3), dtype=np.intp)
    checkpoints = set(range(args.every, budget + 1, args.every))
    rows = []
    left_t, right_t, truth_t = test
    for step in range(budget):
        proposal = strategy.propose(state, step)
        left, right = proposal.objects
        verdict = int(outcome(quality, tau, np.array([left]), np.array([right]))[0])
        if rng.random() < args.noise:
            verdict = int(rng.choice([v for v in (-1, 0, 1) if v != verdict]))
        answered[step] = (left, right, verdict)
        done = step + 1
        if column != "random" and done % args.refresh == 0 and done < budget:
            so_far = answered[:done]
            scores = None
            if column == "adaptive":
                model = BradleyTerryDavidson().fit(so_far, n)
                scores, tie = model.scores_, model.tie_
            else:
                svm = svm_fit(Z, so_far)
                if svm is not None:  # else: no model yet, the batch stays as it is
                    rank = svm.rank(Z)
                    scale, tie = calibrate_link(rank, so_far)
                    scores = scale * rank
            if scores is not None:
                state = strategy.refreshed_state(
                    state, np.empty((0, 3), dtype=np.intp), pairs=so_far, scores=scores, tie=tie
                )
        if done in checkpoints:
            so_far = answered[:done]
            btd = BradleyTerryDavidson().fit(so_far, n)
            btd_acc = float(np.mean(btd.predict(np.column_stack([left_t, right_t])) == truth_t))
            svm = svm_fit(Z, so_far)
            svm_acc = (
                float(np.mean(svm.predict(Z[left_t], Z[right_t]) == truth_t))
                if svm is not None
                else float("nan")
            )
            rows.append((done, btd_acc, svm_acc))
    return rows


def answers_to_reach(rows: list[tuple], column: int, target: float) -> float:
    previous = None
    for row in rows:
        answers, accuracy = row[0], row[column]
        if np.isfinite(accuracy) and accuracy >= target:
            if previous is None or previous[1] >= target:
                return float(answers)
            a0, y0 = previous
            return a0 + (target - y0) / (accuracy - y0) * (answers - a0)
        if np.isfinite(accuracy):
            previous = (answers, accuracy)
    return float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="+", default=["quadratic", "linear"])
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget-per-object", type=int, default=20)
    parser.add_argument("--refresh", type=int, default=20)
    parser.add_argument("--pool", type=int, default=50)
    parser.add_argument("--score", default="confidence", help="confidence, margin or entropy")
    parser.add_argument("--explore", type=float, default=0.1)
    parser.add_argument("--every", type=int, default=40, help="answers between checkpoints")
    parser.add_argument("--columns", nargs="+", default=["random", "adaptive", "adaptive_svm"])
    args = parser.parse_args()
    for name in args.sets:
        X, quality, tau = make_set(name, args.n)
        curves: dict[str, list] = {c: [] for c in args.columns}
        seconds = dict.fromkeys(args.columns, 0.0)
        for seed in range(args.seeds):
            test_rng = np.random.default_rng([seed, 99])
            left = test_rng.integers(args.n, size=N_TEST)
            right = (left + 1 + test_rng.integers(args.n - 1, size=N_TEST)) % args.n
            test = (left, right, outcome(quality, tau, left, right))
            for column in args.columns:
                started = time.perf_counter()
                curves[column].append(collect(column, X, quality, tau, args, seed, test))
                seconds[column] += time.perf_counter() - started
        report(name, args, curves, seconds, float(np.mean(test[2] == 0)))


def report(name: str, args, curves: dict, seconds: dict, ties: float) -> None:  # type: ignore[no-untyped-def]
    budget = args.budget_per_object * args.n
    mean = {
        c: [
            (runs[0][i][0], *(float(np.nanmean([r[i][k] for r in runs])) for k in (1, 2)))
            for i in range(len(runs[0]))
        ]
        for c, runs in curves.items()
    }
    print(
        f"\n## {name} (n={args.n}, ties {ties:.0%} of random pairs), noise {args.noise:.0%}, "
        f"{args.seeds} seeds, refit every {args.refresh}, pool {args.pool}, score {args.score}, "
        f"explore {args.explore}"
    )
    print("answers  " + "  ".join(f"{c:>22}" for c in mean))
    for i in range(len(next(iter(mean.values())))):
        cells = [f"{mean[c][i][1]:.3f} / {mean[c][i][2]:.3f}".rjust(22) for c in mean]
        print(f"{next(iter(mean.values()))[i][0]:>7}  " + "  ".join(cells))
    print("(held-out pair accuracy: Bradley-Terry-Davidson / SVMcompare)")
    for k, model in ((1, "Bradley-Terry-Davidson"), (2, "SVMcompare")):
        target = mean["random"][-1][k]
        reach = {c: answers_to_reach(rows, k, target) for c, rows in mean.items()}
        text = "  ".join(
            f"{c} {'>' + str(budget) if not np.isfinite(v) else f'{v:.0f}'}"
            for c, v in reach.items()
        )
        ratios = "  ".join(
            f"random/{c} {reach['random'] / reach[c]:.2f}" for c in reach if c != "random"
        )
        print(f"{model}: answers to random's final {target:.3f}: {text};  {ratios}")
    print("seconds: " + "  ".join(f"{c} {s:.1f}" for c, s in seconds.items()))


if __name__ == "__main__":
    main()

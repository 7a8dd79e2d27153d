"""Adaptive against random and landmark triplets for ordinal embedding (issue 12).

A simulated crowd (``make_oracle``: Euclidean answers on the true points, each flipped
with probability ``noise``, fresh flips at every ask) answers the questions of

- ``adaptive``: the service's own strategy (:class:`app.active.adaptive.AdaptiveTriplets`,
  t-STE, ``pool``, ``explore`` 0.1, entropy score unless ``--score``): after every
  ``refresh`` answers (``--refresh``; none before ``--warmup`` answers, so those questions
  are random) a t-STE model (the service's defaults) is fit on all answers and
  ``refreshed_state`` scores the next batch, as the service's job does;
- ``random``: uniformly random triplets (``RandomTriplets``);
- ``landmark_k1`` / ``landmark_k2``: the landmark designs (15 landmarks);
- ``salmon_arr`` (optional): Salmon's ``ARR`` sampler (salmon-triplets 1.0.3, its default
  R=1, n_top=1, t-STE) run in its own Python 3.8 environment; it sends its questions
  here, they are answered by the same oracle, and it sends its embeddings back
  (``bench/_salmon_arr.py``); the column scores our t-STE fit on ARR's answered
  questions, like every other column, and a line below gives Salmon's own embedding's
  scores. It refits after every ``refresh`` answers too, and scores
  61,440 random queries per refit (its server goes on until new answers arrive, up to
  ~2 million).

At each checkpoint a t-STE embedding (``dims``, seed 0, best of 3 starts) is fit on the
answers collected so far — for every column the same estimator, Salmon's included, so
the columns differ only in the questions asked — and scored by

- held-out triplet accuracy: the share of 3,000 random triplets, answered by the true
  geometry without noise, that the embedding satisfies;
- 1-NN label accuracy: leave-one-out 1-nearest-neighbour accuracy of the labels.

The summary gives the answers each column needs to reach 90% and 95% of the best final
held-out accuracy of any column (linear interpolation between checkpoints; ">budget"
when never), and random / adaptive — issue 12's measure; then, added, the answers to a
held-out accuracy of 0.90 (the goal's words read literally) and to the accuracy random
ends with at the budget (the same quality, as Salmon's documentation compares).

Data sets: ``blobs30`` (30 points in 2-D, 3 Gaussian clusters: the size of Salmon's
benchmark), ``digits300`` (300 of scikit-learn's 8×8 digits, pixels as the geometry,
embedded in 5-D), ``blobs2000`` (2,000 points in 2-D, 10 clusters). Budgets (bounded for
a shared 2-core machine): blobs30 40·n answers with a refit every 20, digits300 20·n with
a refit every 300, blobs2000 10·n with a refit every 2,000 (``--budget-per-object`` sets
another); ten checkpoints from 2·n, and one at every refit up to a third of the budget.

Usage: nice -n 10 .venv/bin/python bench/active_embedding.py [--datasets blobs30 ...]
       [--noise 0 0.1 0.2] [--seeds 1] [--salmon-python bench/.salmon/salmon-venv/bin/python]
       [--salmon-extra-fits K] [--score entropy|infogain|bald|predictive] [--refresh R]
       [--warmup W] [--pool P] [--explore E] [--budget-per-object B]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.neighbors import KNeighborsClassifier

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.active.adaptive import AdaptiveTriplets  # noqa: E402
from app.active.landmarks import LandmarkK1, LandmarkK2  # noqa: E402
from app.active.passive import RandomTriplets  # noqa: E402
from app.active.scoring import CRITERIA  # noqa: E402
from app.learning.embedding import TSTE, triplet_accuracy  # noqa: E402
from app.learning.triplets import make_oracle  # noqa: E402
from app.training.kinds.embedding import EmbeddingParams, estimator  # noqa: E402

SALMON_PYTHON = ROOT / "bench" / ".salmon" / "salmon-venv" / "bin" / "python"
N_TEST = 3000
SALMON_SEARCH_ROUNDS = 4  # 2^12 + ... + 2^15 = 61,440 queries scored per refit
EXPLORE = 0.1
EVAL_STARTS = 3  # one start left dips of up to 0.06 in the curves (t-STE local minima)
SALMON_EXTRA_FITS = 0  # empty process_answers calls (refits) after each batch, see _salmon_arr
SALMON_OWN: list[list[tuple]] = []  # Salmon's own embeddings' scores, per run
SCORE = "entropy"  # the strategy's default
WARMUP = 0  # answers before the first refit (before it, every question is random)


@dataclass
class Dataset:
    name: str
    X: np.ndarray
    labels: np.ndarray
    dims: int
    budget: int
    checkpoints: np.ndarray
    refresh: int
    pool: int


def make_dataset(name: str) -> Dataset:
    rng = np.random.default_rng(12)
    if name.startswith("blobs"):
        n = int(name[5:])
        k = 3 if n <= 100 else 10
        centres = rng.normal(scale=4.0, size=(k, 2))
        labels = np.arange(n) % k
        X = centres[labels] + rng.normal(size=(n, 2))
        if n <= 100:
            budget, refresh = 40 * n, 20
        else:
            budget, refresh = 10 * n, n
        return Dataset(name, X, labels, 2, budget, _grid(n, budget, refresh), refresh, 50)
    if name == "digits300":
        digits = load_digits()
        pick = rng.choice(len(digits.target), 300, replace=False)
        budget, refresh = 20 * 300, 300
        grid = _grid(300, budget, refresh)
        return Dataset(name, digits.data[pick], digits.target[pick], 5, budget, grid, refresh, 50)
    raise SystemExit(f"unknown dataset {name!r}")


def _grid(n: int, budget: int, step: int) -> np.ndarray:
    """Ten checkpoints from 2n answers to the budget, plus one every ``step`` answers up to
    a third of the budget, all on multiples of ``step`` (the refit interval, so that
    Salmon's batches end on them too). The early ones are where 90% of the best accuracy
    is crossed: interpolating linearly across a wide gap of a concave curve there
    overstated every column's answers (blobs30: 60 → 180)."""
    points = np.round(np.linspace(2 * n, budget, 10) / step).astype(int) * step
    early = np.arange(step, budget // 3 + 1, step)
    return np.unique(np.clip(np.concatenate([points, early]), step, budget))


def truth(X: np.ndarray, triplets: np.ndarray) -> np.ndarray:
    """Triplets oriented by the true geometry (near first)."""
    a, b, c = triplets.T
    closer = ((X[a] - X[b]) ** 2).sum(1) < ((X[a] - X[c]) ** 2).sum(1)
    return np.where(closer[:, None], triplets, triplets[:, [0, 2, 1]])


def fit(n: int, dims: int, triplets: np.ndarray) -> np.ndarray:
    """The embedding every column is scored on: t-STE, best of ``EVAL_STARTS`` starts."""
    return TSTE(n_components=dims, n_init=EVAL_STARTS, random_state=0).fit(triplets, n).embedding_


def refit(n: int, dims: int, triplets: np.ndarray) -> np.ndarray:
    """The model ``adaptive`` follows: t-STE with the embedding kind's defaults (``n_init``
    starts; one before 2026-11-24's sixth session)."""
    return estimator(EmbeddingParams(method="tste", dims=dims)).fit(triplets, n).embedding_


def scores(data: Dataset, test: np.ndarray, embedding: np.ndarray) -> tuple[float, float]:
    heldout = triplet_accuracy(embedding, test)
    knn = KNeighborsClassifier(n_neighbors=2).fit(embedding, data.labels)
    _, neighbours = knn.kneighbors(embedding)
    nn_acc = float(np.mean(data.labels[neighbours[:, 1]] == data.labels))  # leave-one-out
    return heldout, nn_acc


def collect(data: Dataset, column: str, noise: float, seed: int, test: np.ndarray) -> list[tuple]:
    """Answers by ``column``'s strategy; (answers, held-out, 1-NN) at each checkpoint."""
    n = len(data.X)
    oracle = make_oracle(data.X, noise=noise, random_state=seed)
    if column == "adaptive":
        params = {
            "pool": data.pool,
            "refresh_every": data.refresh,
            "dims": data.dims,
            "explore": EXPLORE,
            "score": SCORE,
        }
        strategy = AdaptiveTriplets(n, params, seed)
    elif column == "random":
        strategy = RandomTriplets(n, {}, seed)
    elif column == "landmark_k1":
        strategy = LandmarkK1(n, {}, seed)
    else:
        strategy = LandmarkK2(n, {}, seed)
    state: dict = {}
    answered = np.empty((data.budget, 3), dtype=np.intp)
    rows = []
    checkpoints = set(int(c) for c in data.checkpoints)
    for step in range(data.budget):
        proposal = strategy.propose(state, step)
        a, b, c = proposal.objects
        closer = bool(oracle(np.array([a]), np.array([b]), np.array([c]))[0])
        answered[step] = (a, b, c) if closer else (a, c, b)
        done = step + 1
        if column == "adaptive" and done % data.refresh == 0 and WARMUP <= done < data.budget:
            embedding = refit(n, data.dims, answered[:done])
            state = strategy.refreshed_state(state, answered[:done], embedding=embedding)
        if done in checkpoints:
            rows.append((done, *scores(data, test, fit(n, data.dims, answered[:done]))))
    return rows


def collect_salmon(
    data: Dataset, noise: float, seed: int, test: np.ndarray, python: Path
) -> list[tuple]:
    """Salmon's ARR in its own environment, answered here by the same oracle."""
    n = len(data.X)
    oracle = make_oracle(data.X, noise=noise, random_state=seed)
    script = ROOT / "bench" / "_salmon_arr.py"
    process = subprocess.Popen(
        [str(python), str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    config = {
        "n": n,
        "d": data.dims,
        "budget": data.budget,
        "batch": data.refresh,
        "checkpoints": [int(c) for c in data.checkpoints],
        "seed": seed,
        "search_rounds": SALMON_SEARCH_ROUNDS,
        "extra_fits": SALMON_EXTRA_FITS,
    }
    process.stdin.write(json.dumps(config) + "\n")
    process.stdin.flush()
    rows, own = [], []
    answered: list[np.ndarray] = []
    for line in process.stdout:
        if not line.startswith("@@ "):
            continue  # anything else Salmon or torch prints
        message = json.loads(line[3:])
        if "ask" in message:
            q = np.asarray(message["ask"], dtype=np.intp).reshape(-1, 3)
            closer = oracle(q[:, 0], q[:, 1], q[:, 2])
            answered.append(np.where(closer[:, None], q, q[:, [0, 2, 1]]))
            process.stdin.write(json.dumps({"left_closer": closer.tolist()}) + "\n")
            process.stdin.flush()
        elif "embedding" in message:
            # The column: our t-STE on ARR's answered questions, as for every other column
            # (the questions are what is compared); Salmon's own embedding is kept aside.
            so_far = np.concatenate(answered)
            rows.append((message["answers"], *scores(data, test, fit(n, data.dims, so_far))))
            salmon_embedding = np.asarray(message["embedding"], dtype=float)
            own.append((message["answers"], *scores(data, test, salmon_embedding)))
        elif message.get("done"):
            break
    process.wait(timeout=60)
    SALMON_OWN.append(own)
    return rows


def answers_to_reach(rows: list[tuple], target: float) -> float:
    """Answers at which held-out accuracy first reaches ``target`` (linear interpolation)."""
    previous = None
    for answers, accuracy, _ in rows:
        if accuracy >= target:
            if previous is None or previous[1] >= target:
                return float(answers)
            a0, y0 = previous
            return a0 + (target - y0) / (accuracy - y0) * (answers - a0)
        previous = (answers, accuracy)
    return float("inf")


def main() -> None:
    global EXPLORE, SCORE, SALMON_EXTRA_FITS, WARMUP
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["blobs30", "digits300", "blobs2000"])
    parser.add_argument("--noise", nargs="+", type=float, default=[0.0, 0.1, 0.2])
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument(
        "--columns", nargs="+", default=["adaptive", "random", "landmark_k1", "landmark_k2"]
    )
    parser.add_argument("--salmon-python", type=Path, default=SALMON_PYTHON)
    parser.add_argument("--no-salmon", action="store_true")
    parser.add_argument(
        "--salmon-extra-fits",
        type=int,
        default=SALMON_EXTRA_FITS,
        help="extra refits of Salmon's model after each batch (its server refits while idle)",
    )
    parser.add_argument("--salmon-max-n", type=int, default=300)
    parser.add_argument("--explore", type=float, default=EXPLORE)
    parser.add_argument("--score", choices=list(CRITERIA), default=SCORE)
    parser.add_argument("--pool", type=int, default=None, help="candidates per anchor")
    parser.add_argument("--refresh", type=int, default=None, help="answers between refits")
    parser.add_argument(
        "--warmup", type=int, default=WARMUP, help="random answers before the first refit"
    )
    parser.add_argument(
        "--budget-per-object", type=int, default=None, help="answers per object (default: set's)"
    )
    args = parser.parse_args()
    EXPLORE, SCORE, SALMON_EXTRA_FITS = args.explore, args.score, args.salmon_extra_fits
    WARMUP = args.warmup

    salmon = not args.no_salmon and args.salmon_python.exists()
    if not args.no_salmon and not salmon:
        print(f"Salmon's python not found at {args.salmon_python}: no salmon_arr column")
    for name in args.datasets:
        data = make_dataset(name)
        if args.pool:
            data.pool = args.pool
        if args.refresh:
            data.refresh = args.refresh
        if args.budget_per_object:
            data.budget = args.budget_per_object * len(data.X)
            data.checkpoints = _grid(len(data.X), data.budget, data.refresh)
        n = len(data.X)
        columns = list(args.columns)
        if salmon and n <= args.salmon_max_n:
            columns.append("salmon_arr")
        for noise in args.noise:
            curves: dict[str, list[list[tuple]]] = {c: [] for c in columns}
            seconds: dict[str, float] = dict.fromkeys(columns, 0.0)
            for seed in range(args.seeds):
                test_rng = np.random.default_rng([seed, 99])
                test = truth(
                    data.X, np.array([test_rng.choice(n, 3, replace=False) for _ in range(N_TEST)])
                )
                for column in columns:
                    started = time.perf_counter()
                    if column == "salmon_arr":
                        rows = collect_salmon(data, noise, seed, test, args.salmon_python)
                    else:
                        rows = collect(data, column, noise, seed, test)
                    seconds[column] += time.perf_counter() - started
                    curves[column].append(rows)
            report(data, noise, args.seeds, curves, seconds)


def report(data: Dataset, noise: float, seeds: int, curves: dict, seconds: dict) -> None:
    mean = {
        c: [
            (
                runs[0][i][0],
                float(np.mean([r[i][1] for r in runs])),
                float(np.mean([r[i][2] for r in runs])),
            )
            for i in range(min(len(r) for r in runs))
        ]
        for c, runs in curves.items()
        if runs
    }
    best = max(rows[-1][1] for rows in mean.values())
    print(
        f"\n## {data.name} (n={len(data.X)}, dims={data.dims}), noise {noise:.0%}, "
        f"{seeds} seed(s), refit every {data.refresh} answers, pool {data.pool}"
    )
    print("answers  " + "  ".join(f"{c:>20}" for c in mean))
    for i in range(len(next(iter(mean.values())))):
        cells = []
        for c in mean:
            rows = mean[c]
            cells.append(
                f"{rows[i][1]:.3f} / {rows[i][2]:.3f}".rjust(20) if i < len(rows) else " " * 20
            )
        print(f"{next(iter(mean.values()))[i][0]:>7}  " + "  ".join(cells))
    print("(held-out triplet accuracy / 1-NN label accuracy)")
    print(f"best final held-out accuracy {best:.3f}")
    need = {}
    for fraction in (0.9, 0.95):
        need[fraction] = {c: answers_to_reach(rows, fraction * best) for c, rows in mean.items()}
        text = "  ".join(f"{c} {_fmt(v, data.budget)}" for c, v in need[fraction].items())
        ratio = (
            need[fraction]["random"] / need[fraction]["adaptive"]
            if "adaptive" in need[fraction] and "random" in need[fraction]
            else float("nan")
        )
        print(f"answers to {fraction:.0%} of best: {text};  random/adaptive {ratio:.2f}")
    # The goal read literally ("at 90% accuracy"): a held-out accuracy of 0.90.
    reach = {c: answers_to_reach(rows, 0.9) for c, rows in mean.items()}
    text = "  ".join(f"{c} {_fmt(v, data.budget)}" for c, v in reach.items())
    ratio = reach["random"] / reach["adaptive"] if {"random", "adaptive"} <= set(reach) else 0
    print(f"answers to held-out accuracy 0.900: {text};  random/adaptive {ratio:.2f}")
    if "random" in mean and "adaptive" in mean:
        # Salmon's documentation compares samplers this way: answers for the same quality.
        target = mean["random"][-1][1]
        reach = {c: answers_to_reach(rows, target) for c, rows in mean.items()}
        text = "  ".join(f"{c} {_fmt(v, data.budget)}" for c, v in reach.items())
        print(
            f"answers to random's final accuracy {target:.3f}: {text};  "
            f"random/adaptive {reach['random'] / reach['adaptive']:.2f}"
        )
    print("seconds: " + "  ".join(f"{c} {s:.1f}" for c, s in seconds.items()))
    if SALMON_OWN and "salmon_arr" in curves:
        runs = SALMON_OWN[-seeds:]
        own = [
            (runs[0][i][0], np.mean([r[i][1] for r in runs]), np.mean([r[i][2] for r in runs]))
            for i in range(min(len(r) for r in runs))
        ]
        text = ", ".join(f"{a}: {h:.3f} / {k:.3f}" for a, h, k in own)
        print(f"salmon_arr with Salmon's own embedding (held-out / 1-NN): {text}")


def _fmt(value: float, budget: int) -> str:
    return f">{budget}" if not np.isfinite(value) else f"{value:.0f}"


if __name__ == "__main__":
    main()

"""A heterogeneous simulated crowd: the reliability model against today's rules (issue 33).

The crowd: 60% careful workers (each answer flipped with probability 5%), 25% sloppy (25%),
15% spammers — half of them answer at random, half always click the left option. Every
worker answers ``--answers`` questions (default 20), shown in a random left/right order:
random triplets (``blobs30``: 30 points in 2-D, 3 clusters, 60 workers; ``digits300``: 300
of scikit-learn's digits, embedded in 5-D, 300 workers) or random pairs with ties
(``quadratic``: 60 objects x ~ U[-2, 2]², r(x) = ‖x‖², "about the same" when the ranks
differ by at most 1 — the threshold t_1 of the SVMcompare paper's simulation, 60 workers).
As in a plan with ``gold_rate`` 0.15 and ``repeat_rate`` 0.05, a question is an identity
check (triplets; a pair question with a known answer for pairs) with probability 0.15 and a
mirrored repeat of an earlier one with probability 0.05: today's rules need them. No
response times are simulated (every worker looks human-paced), so the too-fast rule
never fires here; that is a limit of the simulation.

Per data set and seed, it reports

- spammer detection: ROC AUC of the reliability (``CrowdReliability``, higher = more
  careful) for telling spammers from everyone else, against today's rules
  (``app.services.quality.failures`` with the default thresholds: the flag, a 0/1 score)
  and against two of the rules' figures used as scores (gold accuracy, position bias);
- held-out accuracy at equal budget of the model trained on: every answer unweighted;
  every answer weighted by its participant's reliability (``weighting: "reliability"``);
  every answer weighted by its own posterior (the EM's answer weights); the answers of the
  participants today's rules do not flag; the careful workers' answers alone (an oracle).
  Triplets: t-STE (3 starts, seed 0) on 3,000 noiseless random triplets; pairs:
  SVMcompare (rbf, C = 1, standardised features, the service's defaults) and a
  Bradley–Terry–Davidson fit, on 3,000 noiseless random pairs.

Run: ``nice -n 10 .venv/bin/python bench/crowd_reliability.py [--datasets blobs30 digits300
quadratic] [--seeds 3] [--answers 20]``; output in ``bench/results/crowd_reliability.txt``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.metrics import roc_auc_score

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.learning.bradley_terry import BradleyTerryDavidson  # noqa: E402
from app.learning.embedding import TSTE, triplet_accuracy  # noqa: E402
from app.learning.reliability import CrowdReliability  # noqa: E402
from app.learning.svmcompare import SVMCompare, threshold  # noqa: E402
from app.schemas.plans import QualityThresholds  # noqa: E402
from app.services.quality import ParticipantQuality, failures  # noqa: E402

TYPES = {"careful": 0.05, "sloppy": 0.25, "random": None, "left": None}
SHARES = {"careful": 0.60, "sloppy": 0.25, "random": 0.075, "left": 0.075}
GOLD_RATE, REPEAT_RATE = 0.15, 0.05
N_TEST = 3000


@dataclass
class Crowd:
    """One simulated crowd's answers: training rows, their workers and sides, the rules'
    figures per worker, and each worker's type."""

    rows: np.ndarray  # triplets (a, chosen, other) or pairs (left, right, outcome)
    workers: np.ndarray
    sides: np.ndarray
    types: list[str]
    quality: list[ParticipantQuality]


def worker_types(n_workers: int, rng: np.random.Generator) -> list[str]:
    counts = {t: round(s * n_workers) for t, s in SHARES.items()}
    counts["careful"] += n_workers - sum(counts.values())
    types = [t for t, c in counts.items() for _ in range(c)]
    rng.shuffle(types)
    return types


def answer_side(kind: str, correct_side: int, n_sides: int, rng: np.random.Generator) -> int:
    """The side a worker of ``kind`` clicks when ``correct_side`` is right."""
    sides = [-1, 1] if n_sides == 2 else [-1, 0, 1]
    if kind == "left":
        return -1
    if kind == "random" or rng.random() < TYPES[kind]:
        if kind == "random":
            return int(rng.choice(sides))
        return int(rng.choice([s for s in sides if s != correct_side]))
    return correct_side


def simulate_triplets(X: np.ndarray, n_workers: int, per_worker: int, seed: int) -> Crowd:
    rng = np.random.default_rng([seed, 1])
    n = len(X)
    types = worker_types(n_workers, rng)
    rows, workers, sides, quality = [], [], [], []
    for w, kind in enumerate(types):
        gold_n = gold_ok = repeat_n = repeat_ok = left = sided = 0
        asked: list[tuple[int, int, int, int]] = []  # (a, left shown, right shown, side)
        for _ in range(per_worker):
            draw = rng.random()
            if draw < GOLD_RATE:  # identity check: the anchor's duplicate is right
                a, other = rng.choice(n, 2, replace=False)
                dup_side = int(rng.choice([-1, 1]))
                side = answer_side(kind, dup_side, 2, rng)
                gold_n += 1
                gold_ok += side == dup_side
            elif draw < GOLD_RATE + REPEAT_RATE and asked:
                a, shown_left, shown_right, first_side = asked[int(rng.integers(len(asked)))]
                near_left = _closer(X, a, shown_left, shown_right)
                # mirrored: the candidates swap sides, so a consistent worker clicks the other side
                side = answer_side(kind, 1 if near_left else -1, 2, rng)
                repeat_n += 1
                repeat_ok += side == -first_side
            else:
                a, b, c = rng.choice(n, 3, replace=False)
                near_left = _closer(X, a, b, c)
                side = answer_side(kind, -1 if near_left else 1, 2, rng)
                chosen, other = (b, c) if side == -1 else (c, b)
                rows.append((a, chosen, other))
                workers.append(w)
                sides.append(side)
                asked.append((int(a), int(b), int(c), side))
            left += side == -1
            sided += 1
        quality.append(_quality(w, per_worker, gold_n, gold_ok, left, sided, repeat_n, repeat_ok))
    return Crowd(np.array(rows), np.array(workers), np.array(sides), types, quality)


def _closer(X: np.ndarray, a: int, b: int, c: int) -> bool:
    return float(((X[a] - X[b]) ** 2).sum()) < float(((X[a] - X[c]) ** 2).sum())


def simulate_pairs(rank: np.ndarray, n_workers: int, per_worker: int, seed: int) -> Crowd:
    rng = np.random.default_rng([seed, 2])
    n = len(rank)
    types = worker_types(n_workers, rng)
    rows, workers, sides, quality = [], [], [], []
    for w, kind in enumerate(types):
        gold_n = gold_ok = repeat_n = repeat_ok = left = sided = 0
        asked: list[tuple[int, int, int]] = []
        for _ in range(per_worker):
            draw = rng.random()
            if draw < GOLD_RATE:  # a pair whose answer is known: the best object against the worst
                best, worst = int(np.argmax(rank)), int(np.argmin(rank))
                left_obj, right_obj = (best, worst) if rng.random() < 0.5 else (worst, best)
                truth = int(threshold(rank[right_obj] - rank[left_obj]))
                side = answer_side(kind, truth, 3, rng)
                gold_n += 1
                gold_ok += side == truth
            elif draw < GOLD_RATE + REPEAT_RATE and asked:
                left_obj, right_obj, first = asked[int(rng.integers(len(asked)))]
                truth = int(threshold(rank[left_obj] - rank[right_obj]))  # mirrored
                side = answer_side(kind, truth, 3, rng)
                repeat_n += 1
                repeat_ok += side == -first
            else:
                left_obj, right_obj = (int(v) for v in rng.choice(n, 2, replace=False))
                truth = int(threshold(rank[right_obj] - rank[left_obj]))
                side = answer_side(kind, truth, 3, rng)
                rows.append((left_obj, right_obj, side))
                workers.append(w)
                sides.append(side)
                asked.append((left_obj, right_obj, side))
            left += side == -1
            sided += side != 0
        quality.append(_quality(w, per_worker, gold_n, gold_ok, left, sided, repeat_n, repeat_ok))
    return Crowd(np.array(rows), np.array(workers), np.array(sides), types, quality)


def _quality(w, n, gold_n, gold_ok, left, sided, repeat_n, repeat_ok) -> ParticipantQuality:  # type: ignore[no-untyped-def]
    share = left / sided if sided else None
    return ParticipantQuality(
        id=w, platform="sim", external_id=str(w), flagged=False, flag_reason="",
        flag_manual=False, n_answers=n, gold_answers=gold_n,
        gold_accuracy=gold_ok / gold_n if gold_n else None, fast_share=0.0, left_share=share,
        position_bias=abs(share - 0.5) * 2 if share is not None else None, repeats=repeat_n,
        consistency=repeat_ok / repeat_n if repeat_n else None,
    )  # fmt: skip


def detection(crowd: Crowd, model: CrowdReliability) -> dict[str, float]:
    spammer = np.array([t in ("random", "left") for t in crowd.types])
    reliability = model.reliability_of(np.arange(len(crowd.types)))
    flags = np.array([bool(failures(q, QualityThresholds())) for q in crowd.quality])
    gold = np.array([0.5 if q.gold_accuracy is None else q.gold_accuracy for q in crowd.quality])
    bias = np.array([q.position_bias or 0.0 for q in crowd.quality])
    return {
        "auc_reliability": roc_auc_score(spammer, -reliability),
        "auc_rules_flag": roc_auc_score(spammer, flags.astype(float)),
        "auc_gold_accuracy": roc_auc_score(spammer, -gold),
        "auc_position_bias": roc_auc_score(spammer, bias),
        "flagged_by_rules": float(flags.sum()),
        "spammers_flagged_by_rules": float((flags & spammer).sum()),
        "spammers": float(spammer.sum()),
    }


def arms(crowd: Crowd, model: CrowdReliability) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(rows, weights) of each way of training."""
    everyone = np.ones(len(crowd.rows))
    flagged = np.array([bool(failures(q, QualityThresholds())) for q in crowd.quality])
    careful = np.array([t == "careful" for t in crowd.types])
    kept = ~flagged[crowd.workers]
    weights = model.reliability_of(crowd.workers)
    posterior = model.triplet_weight_ if model.triplet_weight_.size else model.pair_weight_
    return {
        "all, unweighted": (crowd.rows, everyone),
        "reliability-weighted": (crowd.rows, weights),
        "answer posterior": (crowd.rows, posterior),
        "rules exclude": (crowd.rows[kept], everyone[kept]),
        "careful only": (crowd.rows[careful[crowd.workers]], everyone[careful[crowd.workers]]),
    }


def run_triplets(name: str, X: np.ndarray, dims: int, n_workers: int, args, seed: int) -> dict:  # type: ignore[no-untyped-def]
    n = len(X)
    crowd = simulate_triplets(X, n_workers, args.answers, seed)
    started = time.perf_counter()
    model = CrowdReliability(n_components=dims, n_folds=args.folds, random_state=seed).fit(
        crowd.rows, crowd.workers, sides=crowd.sides, n_objects=n
    )
    seconds = time.perf_counter() - started
    test_rng = np.random.default_rng([seed, 99])
    test = np.array([test_rng.choice(n, 3, replace=False) for _ in range(N_TEST)])
    near_first = np.array([_closer(X, *t) for t in test])
    test = np.where(near_first[:, None], test, test[:, [0, 2, 1]])
    result = {**detection(crowd, model), "em_seconds": seconds, "em_rounds": model.n_iter_}
    for arm, (rows, weight) in arms(crowd, model).items():
        fit = TSTE(n_components=dims, n_init=3, random_state=0).fit(rows, n, sample_weight=weight)
        result[f"tste: {arm}"] = triplet_accuracy(fit.embedding_, test)
        result[f"answers: {arm}"] = float(len(rows))
    return result


def run_pairs(X: np.ndarray, n_workers: int, args, seed: int) -> dict:  # type: ignore[no-untyped-def]
    n = len(X)
    rank = (X**2).sum(axis=1)
    crowd = simulate_pairs(rank, n_workers, args.answers, seed)
    started = time.perf_counter()
    model = CrowdReliability(n_folds=args.folds, random_state=seed).fit(
        pairs=crowd.rows, pair_workers=crowd.workers, pair_sides=crowd.sides, n_objects=n
    )
    seconds = time.perf_counter() - started
    test_rng = np.random.default_rng([seed, 98])
    left = test_rng.integers(n, size=N_TEST)
    right = (left + 1 + test_rng.integers(n - 1, size=N_TEST)) % n
    truth = threshold(rank[right] - rank[left])
    Z = (X - X.mean(0)) / X.std(0)
    result = {**detection(crowd, model), "em_seconds": seconds, "em_rounds": model.n_iter_}
    for arm, (rows, weight) in arms(crowd, model).items():
        try:
            svm = SVMCompare(C=1.0, kernel="rbf").fit(
                Z[rows[:, 0]], Z[rows[:, 1]], rows[:, 2], sample_weight=weight
            )
            result[f"svmcompare: {arm}"] = float(np.mean(svm.predict(Z[left], Z[right]) == truth))
        except ValueError:
            result[f"svmcompare: {arm}"] = float("nan")
        btd = BradleyTerryDavidson().fit(rows, n, sample_weight=weight)
        predicted = btd.predict(np.column_stack([left, right]))
        result[f"btd: {arm}"] = float(np.mean(predicted == truth))
        result[f"answers: {arm}"] = float(len(rows))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["blobs30", "digits300", "quadratic"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--answers", type=int, default=20, help="answers per worker")
    parser.add_argument("--folds", type=int, default=5, help="CrowdReliability's n_folds")
    args = parser.parse_args()
    for name in args.datasets:
        runs = []
        for seed in range(args.seeds):
            if name == "blobs30":  # bench/active_embedding.py's blobs30
                rng = np.random.default_rng(12)
                centres = rng.normal(scale=4.0, size=(3, 2))
                X = centres[np.arange(30) % 3] + rng.normal(size=(30, 2))
                runs.append(run_triplets(name, X, 2, 60, args, seed))
            elif name == "digits300":
                digits = load_digits()
                pick = np.random.default_rng(12).choice(len(digits.target), 300, replace=False)
                runs.append(run_triplets(name, digits.data[pick], 5, 300, args, seed))
            elif name == "quadratic":
                X = np.random.default_rng(12).uniform(-2, 2, size=(60, 2))
                runs.append(run_pairs(X, 60, args, seed))
            else:
                raise SystemExit(f"unknown data set {name!r}")
        report(name, args, runs)


def report(name: str, args, runs: list[dict]) -> None:  # type: ignore[no-untyped-def]
    print(
        f"\n## {name}, {len(runs)} seeds, {args.answers} answers per worker, {args.folds} fold(s)"
    )
    for key in runs[0]:
        values = np.array([r[key] for r in runs], dtype=float)
        cells = " ".join(f"{v:.3f}" for v in values)
        print(f"{key:40} mean {np.nanmean(values):.3f}   ({cells})")


if __name__ == "__main__":
    main()

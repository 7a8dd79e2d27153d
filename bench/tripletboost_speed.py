"""TripletBoost speed: 20,000 rounds on Moons (1,000 points, 10% triplets).

Issue 3, benchmark 3. Target: fit under 1.5 s on one core, prediction of all test
objects under 0.2 s. Reports wall and CPU time (the machine may be shared: CPU
time of this process is the steadier figure), split into input validation,
CSR indexing of the triplets by reference pair, and the boosting rounds, against
a baseline: the same rounds as vectorised numpy calls (our first version, kept
here to show why the rounds are compiled). Ends with a cProfile of one fit.

    nice -n 10 .venv/bin/python bench/tripletboost_speed.py [--quick]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np
from sklearn.datasets import make_moons

from app.learning import _tripletboost_numba as kernels
from app.learning.tripletboost import TripletBoost
from app.learning.triplets import check_triplets, make_random_triplets


def numpy_rounds(T: np.ndarray, y: np.ndarray, n_rounds: int, seed: int) -> np.ndarray:
    """Baseline: Algorithm 1's rounds as vectorised numpy calls (two classes)."""
    train = np.flatnonzero(y >= 0)
    codes = y[train]
    order = np.argsort(codes, kind="stable")
    train, codes = train[order], codes[order]
    n_obj, n_train = y.size, train.size
    position = np.full(n_obj, -1)
    position[train] = np.arange(n_train)
    label = np.where(y >= 0, y, -1)
    anchors, near_lo, indptr, keys = kernels.index_dense(T, position, label, n_obj)
    seg = np.searchsorted(codes, [0, 1, 2])
    sign = np.where(codes[:, None] == np.arange(2), 1.0, -1.0)
    weight = np.ones((n_train, 2))
    marginal = weight.sum(1)
    smooth = 1.0 / n_train
    u = np.random.default_rng(seed).random((n_rounds, 2))
    alphas = np.zeros(n_rounds)
    for c in range(n_rounds):
        cum = np.cumsum(marginal)
        j = int(np.searchsorted(cum[: seg[1]], u[c, 0] * cum[seg[1] - 1], "right"))
        k = seg[1] + int(
            np.searchsorted(cum[seg[1] :] - cum[seg[1] - 1], u[c, 1] * (cum[-1] - cum[seg[1] - 1]))
        )
        j, k = min(j, seg[1] - 1), min(k, n_train - 1)
        lo, hi = sorted((int(train[j]), int(train[k])))
        at = int(np.searchsorted(keys, lo * n_obj + hi))
        if at == keys.size or keys[at] != lo * n_obj + hi:
            continue
        who, side = anchors[indptr[at] : indptr[at + 1]], near_lo[indptr[at] : indptr[at + 1]]
        w, s = weight[who], sign[who]
        signed = s * w
        sum_lo = signed[side].sum(0)
        sum_hi = signed.sum(0) - sum_lo
        total = marginal.sum()  # exact each round: a running sum drifts as weights shrink
        spoken = marginal[who].sum()
        gap = np.abs(sum_lo).sum() + np.abs(sum_hi).sum()
        alpha = 0.5 * np.log(
            ((spoken + gap) / (2 * total) + smooth) / ((spoken - gap) / (2 * total) + smooth)
        )
        right = (s > 0) == np.where(side[:, None], sum_lo > 0, sum_hi > 0)
        updated = w * np.where(right, np.exp(-alpha), np.exp(alpha))
        weight[who] = updated
        row = updated.sum(1)
        marginal[who] = row
        alphas[c] = alpha
    return alphas


def timed(fn, *args, **kwargs):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - wall, time.process_time() - cpu


def fmt(values: list[float]) -> str:
    return f"{np.mean(values):7.3f} ± {np.std(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n=300, 2 repetitions")
    args = parser.parse_args()
    n, reps, rounds = (300, 2, 20_000) if args.quick else (1000, 3, 20_000)
    X, y = make_moons(n, noise=0.1, random_state=0)
    rng = np.random.default_rng(0)
    perm = rng.permutation(n)
    train, test = np.sort(perm[: 2 * n // 3]), np.sort(perm[2 * n // 3 :])
    y_fit = y.copy()
    y_fit[test] = -1
    T_train, gen_wall, gen_cpu = timed(
        make_random_triplets, X, fraction=0.1, anchors=train, references=train, random_state=0
    )
    T_test, gen2_wall, gen2_cpu = timed(
        make_random_triplets, X, fraction=0.1, anchors=test, references=train, random_state=1
    )
    print(
        f"Moons n={n}, 2/3 train, 10% of the triplets: {len(T_train):,} training "
        f"triplets (anchors and references in train), {len(T_test):,} test triplets"
    )
    print(f"generation: {gen_wall + gen2_wall:.2f} s wall, {gen_cpu + gen2_cpu:.2f} s CPU")
    TripletBoost(n_estimators=10, random_state=0).fit(T_train[:1000], y_fit)  # JIT warm-up
    numpy_rounds(T_train[:1000], y_fit, 10, 0)
    rows: dict[str, list[list[float]]] = {}

    def add(name: str, wall: float, cpu: float) -> None:
        rows.setdefault(name, [[], []])
        rows[name][0].append(wall)
        rows[name][1].append(cpu)

    for rep in range(reps):
        _, w, c = timed(check_triplets, T_train, n)
        add("validation (check_triplets)", w, c)
        _, w1, c1 = timed(TripletBoost(n_estimators=1, random_state=rep).fit, T_train, y_fit)
        add("fit, 1 round (validation + index)", w1, c1)
        model, w, c = timed(TripletBoost(n_estimators=rounds, random_state=rep).fit, T_train, y_fit)
        add(f"fit, {rounds:,} rounds", w, c)
        add(f"  of which {rounds:,} rounds (difference)", w - w1, c - c1)
        _, wb, cb = timed(numpy_rounds, T_train, y_fit, rounds, rep)
        _, wi, ci = timed(numpy_rounds, T_train, y_fit, 1, rep)
        add(f"baseline numpy: {rounds:,} rounds (difference)", wb - wi, cb - ci)
        pred, w, c = timed(model.predict, T_test, test)
        add(f"predict {len(test)} test objects", w, c)
        add("  accuracy (not a time)", float(np.mean(pred == y[test])), float("nan"))
    print(f"\n{'step':45s} {'wall s (mean ± sd)':>20s} {'CPU s (mean ± sd)':>20s}")
    for name, (walls, cpus) in rows.items():
        cpu = fmt(cpus) if not np.isnan(cpus).any() else ""
        print(f"{name:45s} {fmt(walls):>20s} {cpu:>20s}")
    ours = np.array(rows[f"  of which {rounds:,} rounds (difference)"][1])
    base = np.array(rows[f"baseline numpy: {rounds:,} rounds (difference)"][1])
    print(f"\nrounds only, CPU ratio numpy baseline / ours: {np.mean(base) / np.mean(ours):.1f}x")
    profile = cProfile.Profile()
    profile.enable()
    TripletBoost(n_estimators=rounds, random_state=0).fit(T_train, y_fit)
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(8)
    print("\ncProfile of one fit (tottime):")
    print("\n".join(text.getvalue().splitlines()[4:22]))


if __name__ == "__main__":
    main()

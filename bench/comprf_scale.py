"""Benchmark 3 of issue 4: CompRF at scale.

Run:  nice -n 10 .venv/bin/python bench/comprf_scale.py [--quick] [--n-jobs 2]

make_classification(n_samples=60_000, n_features=20, n_informative=10,
n_classes=10): 100 supervised comparison trees with leaf size 1 built on 50,000
labelled objects from the Euclidean oracle (``make_oracle``), then 10,000
further objects routed down every tree. Targets of the issue: fit under 60 s
and predict under 10 s on two cores. Beside it, scikit-learn's
RandomForestClassifier (100 trees, same cores) on the feature vectors, and a
single-tree breakdown of where the time goes (oracle calls vs tree bookkeeping).
Mean ± sd over repetitions; the joblib process pool is started before timing.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from sklearn.datasets import make_classification
from sklearn.ensemble import RandomForestClassifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.learning.comparison_tree import ComparisonTreeBuilder, drive
from app.learning.comprf import ComparisonForestClassifier
from app.learning.triplets import make_oracle


def ms(values: list[float], digits: int = 1) -> str:
    return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6,000 objects, 10 trees")
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    n_fit, n_predict, n_trees = (5_000, 1_000, 10) if args.quick else (50_000, 10_000, 100)
    repeats = args.repeats or 2
    now = datetime.datetime.now(datetime.UTC)
    print(f"# CompRF scale: {n_trees} trees, leaf size 1, fit on {n_fit:,}, predict {n_predict:,}")
    print(f"# {now:%Y-%m-%d %H:%M} UTC, python {platform.python_version()}, n_jobs={args.n_jobs}")

    # start the joblib worker processes once, outside the timings (under load a
    # cold start of the process pool alone took ~17 s here)
    Parallel(n_jobs=args.n_jobs)(delayed(np.sqrt)(i) for i in range(2 * args.n_jobs))
    res: dict[str, list[float]] = {}
    for rep in range(repeats):
        X, y = make_classification(
            n_samples=n_fit + n_predict,
            n_features=20,
            n_informative=10,
            n_classes=10,
            random_state=rep,
        )
        new = np.arange(n_fit, n_fit + n_predict)
        y_train = y.copy()
        y_train[new] = -1
        oracle = make_oracle(X, random_state=rep)

        clf = ComparisonForestClassifier(n_estimators=n_trees, n_jobs=args.n_jobs, random_state=rep)
        t = time.perf_counter()
        clf.fit(oracle, y_train)
        res.setdefault("fit", []).append(time.perf_counter() - t)
        t = time.perf_counter()
        pred = clf.predict(oracle, new)
        res.setdefault("predict", []).append(time.perf_counter() - t)
        res.setdefault("acc", []).append(100 * float(np.mean(pred == y[new])))
        res.setdefault("q_tree", []).append(clf.n_queries_ / n_trees)
        res.setdefault("q_obj", []).append(clf.n_predict_queries_ / n_predict / n_trees)

        rf = RandomForestClassifier(n_estimators=n_trees, n_jobs=args.n_jobs, random_state=rep)
        t = time.perf_counter()
        rf.fit(X[:n_fit], y[:n_fit])
        res.setdefault("rf_fit", []).append(time.perf_counter() - t)
        t = time.perf_counter()
        rf_pred = rf.predict(X[new])
        res.setdefault("rf_predict", []).append(time.perf_counter() - t)
        res.setdefault("rf_acc", []).append(100 * float(np.mean(rf_pred == y[new])))

        # one tree, sequential: share of the time spent inside the oracle
        spent = [0.0]

        def timed(a, b, c, spent: list = spent, oracle=oracle) -> np.ndarray:
            t0 = time.perf_counter()
            out = oracle(a, b, c)
            spent[0] += time.perf_counter() - t0
            return out

        tree = ComparisonTreeBuilder(np.arange(n_fit), y[:n_fit], seed=rep)
        t = time.perf_counter()
        drive(tree, timed)
        res.setdefault("tree", []).append(time.perf_counter() - t)
        res.setdefault("tree_oracle", []).append(spent[0])
        print(f"# repeat {rep + 1}/{repeats} done", flush=True)

    print("\n| | CompRF (oracle) | CART RF (features) | ratio CompRF / RF |")
    print("|---|---:|---:|---:|")
    for name, ours, theirs in (("fit s", "fit", "rf_fit"), ("predict s", "predict", "rf_predict")):
        ratio = np.mean(res[ours]) / np.mean(res[theirs])
        print(f"| {name} | {ms(res[ours])} | {ms(res[theirs])} | {ratio:.1f} |")
    print(f"| accuracy % | {ms(res['acc'])} | {ms(res['rf_acc'])} | |")
    print(f"\nquestions per tree (fit): {np.mean(res['q_tree']):,.0f}; ")
    print(f"questions per object per tree (predict): {np.mean(res['q_obj']):.1f}")
    share = np.mean(res["tree_oracle"]) / np.mean(res["tree"])
    print(
        f"one tree, sequential: {ms(res['tree'], 2)} s, of which oracle "
        f"{ms(res['tree_oracle'], 2)} s ({100 * share:.0f}%)"
    )
    print(f"targets: fit < 60 s, predict < 10 s (n_jobs={args.n_jobs})")


if __name__ == "__main__":
    main()

"""Benchmark 2 of issue 4: CompRF regression on load_diabetes.

Run:  nice -n 10 .venv/bin/python bench/comprf_regression.py [--quick]

10 random 90/10 train/test splits (as in §4.1.2 of Haghiri et al. 2018) of
load_diabetes (442 objects, 10 standardised features), Euclidean triplet oracle.
Test RMSE of CompRF (unsupervised pivots, mean of pooled leaf items) for M trees
and leaf size n0, beside scikit-learn's RandomForestRegressor with M trees and
the constant (training mean) predictor; mean ± sd over the splits. A forest of
max(M) trees is built once per setting and its first M trees scored as the
M-tree forest.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.ensemble import RandomForestRegressor
from sklearn.model_selection import train_test_split

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.learning.comprf import ComparisonForestRegressor
from app.learning.triplets import make_oracle


def ms(values: list[float]) -> str:
    return f"{np.mean(values):6.2f} ± {np.std(values):5.2f}"


def rmse(pred: np.ndarray, truth: np.ndarray) -> float:
    return float(np.sqrt(np.mean((pred - truth) ** 2)))


def first_trees(reg: ComparisonForestRegressor, m: int) -> ComparisonForestRegressor:
    """The forest made of the first ``m`` trees of ``reg`` (trees are independent)."""
    sub = ComparisonForestRegressor(**reg.get_params())
    sub.__dict__.update({k: v for k, v in reg.__dict__.items() if k.endswith("_") or k[0] == "_"})
    sub.estimators_ = reg.estimators_[:m]
    return sub


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 splits, small grid")
    args = parser.parse_args()
    n_splits = 3 if args.quick else 10
    trees = [1, 4, 16] if args.quick else [1, 4, 16, 64, 256]
    leaves = [1, 5] if args.quick else [1, 4, 16, 64]

    X, y = load_diabetes(return_X_y=True)
    n = len(y)
    now = datetime.datetime.now(datetime.UTC)
    print(f"# CompRF regression, load_diabetes ({n} objects, 10 features)")
    print(f"# {now:%Y-%m-%d %H:%M} UTC, python {platform.python_version()}")
    print(f"# splits={n_splits} (90% train, 10% test), Euclidean oracle, quick={args.quick}")
    t_start = time.perf_counter()
    res: dict[tuple, list[float]] = {}
    for split in range(n_splits):
        train, test = train_test_split(np.arange(n), test_size=0.1, random_state=split)
        y_train = np.full(n, np.nan)
        y_train[train] = y[train]
        oracle = make_oracle(X, random_state=split)
        for leaf in leaves:
            reg = ComparisonForestRegressor(
                n_estimators=max(trees), leaf_size=leaf, random_state=split
            ).fit(oracle, y_train)
            res.setdefault(("q", leaf), []).append(reg.n_queries_ / max(trees))
            for m in trees:
                pred = first_trees(reg, m).predict(oracle, test)
                res.setdefault(("comprf", leaf, m), []).append(rmse(pred, y[test]))
        for m in trees:
            rf = RandomForestRegressor(n_estimators=m, random_state=split, n_jobs=1)
            res.setdefault(("rf", m), []).append(
                rmse(rf.fit(X[train], y[train]).predict(X[test]), y[test])
            )
        res.setdefault(("mean",), []).append(rmse(np.full(len(test), y[train].mean()), y[test]))
    print(f"# {time.perf_counter() - t_start:.0f} s\n")

    print("## Test RMSE by number of trees M and leaf size n0\n")
    print(
        "| M | "
        + " | ".join(f"CompRF n0={leaf}" for leaf in leaves)
        + " | CART RF (sklearn) | training mean |"
    )
    print("|---:|" + "---:|" * (len(leaves) + 2))
    for m in trees:
        cells = [ms(res[("comprf", leaf, m)]) for leaf in leaves]
        print(f"| {m} | " + " | ".join(cells) + f" | {ms(res[('rf', m)])} | {ms(res[('mean',)])} |")
    print(
        "\nQuestions per tree (fit): "
        + ", ".join(f"n0={leaf}: {np.mean(res[('q', leaf)]):.0f}" for leaf in leaves)
    )


if __name__ == "__main__":
    main()

"""Benchmark 1 of issue 4: CompRF classification on load_digits.

Run:  nice -n 10 .venv/bin/python bench/comprf_classification.py [--quick]

10 random 2/3-1/3 splits of load_digits (1797 images, 10 classes, raw pixels),
Euclidean triplet oracle (``app.learning.triplets.make_oracle``). Tables:

1. test error (%) of supervised and unsupervised CompRF for M trees and leaf
   size n0, beside scikit-learn's RandomForestClassifier with M trees and k-NN
   (k by 5-fold CV on the training part), plus questions asked per tree;
2. ``split_pure=False``: error and questions saved;
3. oracle noise (answers flipped afresh at every ask) x redundancy.

Every figure is mean ± sd over the splits; the tables are printed again after
each split (the last print is the result). A forest of max(M) trees is built
once per setting and its first M trees are scored as the M-tree forest (trees
are independent, so that is an M-tree forest).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits
from sklearn.ensemble import RandomForestClassifier
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.neighbors import KNeighborsClassifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.learning.comprf import ComparisonForestClassifier
from app.learning.triplets import make_oracle


def ms(values: list[float]) -> str:
    return f"{np.mean(values):6.2f} ± {np.std(values):4.2f}"


def error(pred: np.ndarray, truth: np.ndarray) -> float:
    return 100.0 * float(np.mean(pred != truth))


def first_trees(clf: ComparisonForestClassifier, m: int) -> ComparisonForestClassifier:
    """The forest made of the first ``m`` trees of ``clf`` (trees are independent)."""
    sub = ComparisonForestClassifier(**clf.get_params())
    sub.__dict__.update({k: v for k, v in clf.__dict__.items() if k.endswith("_") or k[0] == "_"})
    sub.estimators_ = clf.estimators_[:m]
    return sub


def report(
    err: dict, qpt: dict, trees: list, leaves: list, m_side: int, noises: list, redundancies: list
) -> None:
    print("\n## 1. Test error (%) by number of trees M and leaf size n0\n")
    cols = [f"sup n0={leaf}" for leaf in leaves] + [f"unsup n0={leaf}" for leaf in leaves]
    print("| M | " + " | ".join(cols) + " | CART RF (sklearn) | k-NN (k by CV) |")
    print("|---:|" + "---:|" * (len(cols) + 2))
    for m in trees:
        cells = [ms(err[("sup", leaf, m)]) for leaf in leaves]
        cells += [ms(err[("unsup", leaf, m)]) for leaf in leaves]
        print(f"| {m} | " + " | ".join(cells) + f" | {ms(err[('rf', m)])} | {ms(err[('knn',)])} |")
    print("\nQuestions asked per tree while fitting (distinct; training part ~1198 objects):\n")
    print("| variant | " + " | ".join(f"n0={leaf}" for leaf in leaves) + " |")
    print("|---|" + "---:|" * len(leaves))
    for v in ("sup", "unsup"):
        print(f"| {v} | " + " | ".join(f"{np.mean(qpt[(v, leaf)]):.0f}" for leaf in leaves) + " |")

    print(f"\n## 2. split_pure (supervised, n0=1, M={m_side})\n")
    print("| split_pure | error % | questions / tree (fit) | questions / object / tree (predict) |")
    print("|---|---:|---:|---:|")
    for pure in (True, False):
        print(
            f"| {pure} | {ms(err[('pure', pure)])} | {np.mean(qpt[('pure', pure)]):.0f} | "
            f"{np.mean(qpt[('pure-predict', pure)]):.2f} |"
        )
    saved = 1 - np.mean(qpt[("pure", False)]) / np.mean(qpt[("pure", True)])
    print(f"\nsplit_pure=False saves {100 * saved:.1f}% of the fitting questions.")

    print(
        f"\n## 3. Oracle noise x redundancy (supervised, n0=1, M={m_side}); error % (asks / tree)\n"
    )
    print("| noise | " + " | ".join(f"r={r}" for r in redundancies) + " |")
    print("|---:|" + "---:|" * len(redundancies))
    for noise in noises:
        cells = [
            f"{ms(err[('noise', noise, r)])} ({np.mean(qpt[('noise', noise, r)]):.0f})"
            for r in redundancies
        ]
        print(f"| {noise:.0%} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 splits, small grid")
    parser.add_argument("--splits", type=int, default=None, help="number of splits")
    args = parser.parse_args()
    quick = args.quick
    n_splits = args.splits or (2 if quick else 10)
    trees = [1, 4, 16] if quick else [1, 4, 16, 64, 256]
    leaves = [1, 4] if quick else [1, 4, 16]
    m_side = 16 if quick else 64  # forest size for the split_pure and noise tables
    noises = [0.0, 0.1, 0.2]
    redundancies = [1, 3] if quick else [1, 3, 5]

    X, y = load_digits(return_X_y=True)
    n = len(y)
    print(f"# CompRF classification, load_digits ({n} objects, 10 classes, raw pixels)")
    now = datetime.datetime.now(datetime.UTC)
    print(f"# {now:%Y-%m-%d %H:%M} UTC, python {platform.python_version()}")
    print(f"# splits={n_splits} (2/3 train, 1/3 test), Euclidean oracle, quick={quick}")
    t_start = time.perf_counter()

    err: dict[tuple, list[float]] = {}
    qpt: dict[tuple, list[float]] = {}
    for split in range(n_splits):
        train, test = train_test_split(np.arange(n), test_size=1 / 3, random_state=split)
        y_train = np.full(n, -1)
        y_train[train] = y[train]
        oracle = make_oracle(X, random_state=split)
        for supervised in (True, False):
            for leaf in leaves:
                clf = ComparisonForestClassifier(
                    n_estimators=max(trees),
                    leaf_size=leaf,
                    supervised=supervised,
                    random_state=split,
                ).fit(oracle, y_train)
                per_tree = [t.n_queries_ for t in clf.estimators_]
                for m in trees:
                    key = ("sup" if supervised else "unsup", leaf, m)
                    err.setdefault(key, []).append(
                        error(first_trees(clf, m).predict(oracle, test), y[test])
                    )
                qpt.setdefault(("sup" if supervised else "unsup", leaf), []).append(
                    np.mean(per_tree)
                )
        for m in trees:
            rf = RandomForestClassifier(n_estimators=m, random_state=split, n_jobs=1)
            err.setdefault(("rf", m), []).append(
                error(rf.fit(X[train], y[train]).predict(X[test]), y[test])
            )
        knn = GridSearchCV(KNeighborsClassifier(), {"n_neighbors": [1, 3, 5, 7, 9]}, cv=5)
        err.setdefault(("knn",), []).append(
            error(knn.fit(X[train], y[train]).predict(X[test]), y[test])
        )

        # split_pure=False: stop at pure nodes
        for pure in (True, False):
            clf = ComparisonForestClassifier(
                n_estimators=m_side, split_pure=pure, random_state=split
            ).fit(oracle, y_train)
            err.setdefault(("pure", pure), []).append(error(clf.predict(oracle, test), y[test]))
            qpt.setdefault(("pure", pure), []).append(clf.n_queries_ / m_side)
            qpt.setdefault(("pure-predict", pure), []).append(
                clf.n_predict_queries_ / m_side / len(test)
            )

        # noise x redundancy (noise flipped afresh at every ask, in fit and predict)
        for noise in noises:
            noisy = make_oracle(X, noise=noise, random_state=1000 + split)
            for r in redundancies:
                clf = ComparisonForestClassifier(
                    n_estimators=m_side, redundancy=r, random_state=split
                ).fit(noisy, y_train)
                err.setdefault(("noise", noise, r), []).append(
                    error(clf.predict(noisy, test), y[test])
                )
                qpt.setdefault(("noise", noise, r), []).append(clf.n_asks_ / m_side)
        print(
            f"\n# ===== after {split + 1}/{n_splits} splits, {time.perf_counter() - t_start:.0f} s"
        )
        report(err, qpt, trees, leaves, m_side, noises, redundancies)

    print(f"\n# total {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()

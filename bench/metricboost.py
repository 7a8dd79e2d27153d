"""Benchmark 4 of issue 4: MetricBoost (Bi et al. 2011) on Wine and Breast Cancer.

Repeated stratified 5-fold CV. For every fold and method: fraction of the held-out
label-derived triplets (i, j, k all in the test fold, y_i = y_j != y_k) satisfied,
1-NN accuracy on the test fold with the training fold as reference, fit time.

Methods: Euclidean and MetricBoost binary / normalized, from all label-derived
triplets (``fit_from_labels``, bipartite) and from a uniform random 0.5% of them
(``fit``), on raw, z-scored and min-max scaled features (scalers fitted on the
training fold); metric-learn's ITML, LMNN and SCML (``ITML_Supervised``, ``LMNN``,
``SCML_Supervised`` with default parameters) on raw and z-scored features, same folds.

Triplet columns: "Eq.1" counts a triplet satisfied when H(i, j) < H(i, k) strictly
(ties are errors, as in Eq. (1) of the paper); "ties" is the fraction with
H(i, j) == H(i, k) (the binary H takes few values); "tie-broken" breaks them as
MetricBoost.predict_triplets does. 1-NN for MetricBoost is MetricBoost.predict_knn,
which ranks by the metric part H+ = sum of the alpha_t > 0 rounds (class Notes);
"1-NN full H" ranks by the full H (alpha_t < 0 rounds too), as predict_knn did before.

metric-learn 0.7.0 fails on scikit-learn >= 1.8, so its part runs in its own venv
as a subprocess of this script (``--worker``), receiving the fold indices as JSON
on stdin and printing its figures as JSON. Create that venv once with::

    python3 -m venv bench/.venv-metric-learn
    bench/.venv-metric-learn/bin/pip install -r bench/requirements-metric-learn.txt

Run (from the repository root)::

    nice -n 10 .venv/bin/python bench/metricboost.py            # full (~1 h CPU-bound)
    nice -n 10 .venv/bin/python bench/metricboost.py --quick    # 1 repeat, Wine only

Every method runs with BLAS limited to one thread (both here and in the worker), so
fit times compare single-threaded code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import MinMaxScaler, StandardScaler

ROOT = Path(__file__).resolve().parent.parent
ML_PYTHON = ROOT / "bench" / ".venv-metric-learn" / "bin" / "python"
LOADERS = {"wine": load_wine, "breast_cancer": load_breast_cancer}
PREPS = ("raw", "z", "minmax")  # MetricBoost and Euclidean
ML_PREPS = ("raw", "z")  # metric-learn (slow: two are enough)

# Tables 1 and 2 of Bi et al. (2011): (triplets %, 1-NN %) as mean (sd).
PAPER = {
    "wine": {
        "euclidean": ("71.0 (3.7)", "72.0 (3.7)"),
        "binary/all": ("91.4 (2.6)", "96.8 (1.7)"),
        "binary/0.5%": ("90.5 (3.0)", "96.6 (2.2)"),
        "normalized/all": ("82.7 (3.6)", "89.7 (5.6)"),
        "normalized/0.5%": ("85.0 (4.0)", "92.0 (5.3)"),
        "ITML": ("80.0 (4.5)", "92.0 (3.0)"),
    },
    "breast_cancer": {
        "euclidean": ("82.2 (1.7)", "90.8 (1.3)"),
        "binary/all": ("87.7 (1.7)", "95.1 (1.2)"),
        "binary/0.5%": ("87.6 (2.4)", "94.9 (1.4)"),
        "normalized/all": ("85.9 (2.2)", "92.4 (1.9)"),
        "normalized/0.5%": ("85.7 (2.6)", "93.0 (1.9)"),
        "ITML": ("82.6 (2.1)", "92.9 (1.3)"),
    },
}


# ------------------------------------------------------------- shared helpers
def prepare(X: np.ndarray, train: np.ndarray, prep: str) -> np.ndarray:
    """Raw features, or scaled with the training fold's statistics: z-scored (mean 0,
    sd 1) or min-max (range [0, 1])."""
    if prep == "raw":
        return X
    scaler = StandardScaler() if prep == "z" else MinMaxScaler()
    return scaler.fit(X[train]).transform(X)


def triplet_fractions(H: np.ndarray, y: np.ndarray, G: np.ndarray | None = None):
    """(strict, tied) fractions of the label-derived triplets of (H, y) with
    H(i, j) < H(i, k) and H(i, j) == H(i, k); with G, ties in H are broken by G
    (strict < in G) and counted as satisfied or not instead of tied."""
    satisfied = tied = total = 0
    for i in range(len(y)):
        same = np.flatnonzero(y == y[i])
        same = same[same != i]
        other = np.flatnonzero(y != y[i])
        if G is None:
            far = np.sort(H[i, other])
            near = H[i, same]
            left = np.searchsorted(far, near, side="left")
            right = np.searchsorted(far, near, side="right")
            satisfied += int(np.sum(len(far) - right))
            tied += int(np.sum(right - left))
        else:  # lexicographic (H, G) keys, compared through their joint ranks
            keys = np.concatenate([same, other])
            order = np.lexsort((G[i, keys], H[i, keys]))
            kh, kg = H[i, keys][order], G[i, keys][order]
            new = np.r_[True, (np.diff(kh) != 0) | (np.diff(kg) != 0)]
            rank = np.empty(len(keys))
            rank[order] = np.cumsum(new)
            far = np.sort(rank[len(same) :])
            near = rank[: len(same)]
            satisfied += int(np.sum(len(far) - np.searchsorted(far, near, side="right")))
        total += len(same) * len(other)
    return satisfied / total, tied / total


def euclidean_figures(Z: np.ndarray, y: np.ndarray, train, test) -> dict:
    """1-NN accuracy and held-out triplet fraction under the Euclidean distance of Z."""
    knn = KNeighborsClassifier(n_neighbors=1).fit(Z[train], y[train])
    Zt = Z[test]
    H = np.square(Zt[:, None, :] - Zt[None, :, :]).sum(axis=-1)
    strict, tied = triplet_fractions(H, y[test])
    return {"acc": float(knn.score(Zt, y[test])), "trip": strict, "tied": tied}


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    X, y = LOADERS[name](return_X_y=True)
    return X.astype(np.float64), y


def limit_blas_threads() -> None:
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        pass


# ------------------------------------------------------ metric-learn worker
def worker() -> None:
    """Run in bench/.venv-metric-learn: JSON jobs on stdin, JSON figures on stdout."""
    limit_blas_threads()
    warnings.filterwarnings("ignore")
    from metric_learn import LMNN, ITML_Supervised, SCML_Supervised

    learners = {"ITML": ITML_Supervised, "LMNN": LMNN, "SCML": SCML_Supervised}
    job = json.load(sys.stdin)
    out: dict = {}
    for name, folds in job["folds"].items():
        X, y = load(name)
        for prep in job["preps"]:
            for method, cls in learners.items():
                rows = []
                for seed, (train, test) in enumerate(folds):
                    train, test = np.array(train), np.array(test)
                    Xp = prepare(X, train, prep)
                    start = time.perf_counter()
                    model = cls(random_state=seed).fit(Xp[train], y[train])
                    fit = time.perf_counter() - start
                    row = euclidean_figures(model.transform(Xp), y, train, test)
                    row["fit"] = fit
                    rows.append(row)
                    print(f"  {name} {prep} {method} {seed}: {row}", file=sys.stderr, flush=True)
                out[f"{name}|{method}|{prep}"] = rows
    json.dump(out, sys.stdout)


def run_metric_learn(folds: dict, preps: list[str]) -> dict:
    if not ML_PYTHON.exists():
        print(f"[metric-learn skipped: {ML_PYTHON} missing; see the module docstring]")
        return {}
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [str(ML_PYTHON), __file__, "--worker"],
        input=json.dumps({"folds": folds, "preps": preps}),
        stdout=subprocess.PIPE,  # figures as JSON; progress goes to our stderr
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        print(f"[metric-learn worker failed with exit code {proc.returncode}; see stderr]")
        return {}
    return json.loads(proc.stdout)


# ------------------------------------------------------------ MetricBoost part
def sample_label_triplets(y: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """A uniform random `fraction` of the label-derived triplets, without building them all."""
    n = len(y)
    classes, codes = np.unique(y, return_inverse=True)
    counts = np.bincount(codes)
    per_anchor = (counts[codes] - 1) * (n - counts[codes])
    m = int(per_anchor.sum())
    want = int(np.ceil(fraction * m))
    members = [np.flatnonzero(codes == c) for c in range(len(classes))]
    others = [np.flatnonzero(codes != c) for c in range(len(classes))]
    rows = np.empty((0, 3), dtype=np.intp)
    while len(rows) < want:
        a = rng.choice(n, size=2 * want, p=per_anchor / m)
        b = np.empty_like(a)
        c = np.empty_like(a)
        for cls in range(len(classes)):
            sel = np.flatnonzero(codes[a] == cls)
            pick = rng.integers(0, counts[cls] - 1, size=len(sel))
            same = members[cls]
            pos = np.searchsorted(same, a[sel])
            b[sel] = same[pick + (pick >= pos)]  # skip the anchor itself
            c[sel] = others[cls][rng.integers(0, len(others[cls]), size=len(sel))]
        rows = np.unique(np.vstack([rows, np.c_[a, b, c]]), axis=0)
    return rows[rng.permutation(len(rows))[:want]]


def metricboost_rows(name: str, folds: list, seed: int) -> dict:
    sys.path.insert(0, str(ROOT))
    from app.learning.metricboost import MetricBoost

    X, y = load(name)
    out: dict = {}
    for f, (train, test) in enumerate(folds):
        train, test = np.array(train), np.array(test)
        rng = np.random.default_rng([seed, f])
        subset = sample_label_triplets(y[train], 0.005, rng)
        for prep in PREPS:
            Xp = prepare(X, train, prep)
            out.setdefault(f"{name}|euclidean|{prep}", []).append(
                dict(euclidean_figures(Xp, y, train, test), fit=0.0)
            )
            for wl in ("binary", "normalized"):
                for data in ("all", "0.5%"):
                    model = MetricBoost(weak_learner=wl)
                    start = time.perf_counter()
                    if data == "all":
                        model.fit_from_labels(Xp[train], y[train])
                    else:
                        model.fit(Xp[train], subset)
                    fit = time.perf_counter() - start
                    Zt = Xp[test] @ model.directions_.T
                    H, G = model._dissimilarity(Zt, Zt)
                    strict, tied = triplet_fractions(H, y[test])
                    broken = triplet_fractions(H, y[test], G)[0] if G is not None else strict
                    acc = float(
                        np.mean(model.predict_knn(Xp[train], y[train], Xp[test]) == y[test])
                    )
                    acc_full = full_h_knn_accuracy(model, Xp[train], y[train], Xp[test], y[test])
                    out.setdefault(f"{name}|{wl}/{data}|{prep}", []).append(
                        {
                            "acc": acc,
                            "acc_full": acc_full,
                            "trip": strict,
                            "tied": tied,
                            "broken": broken,
                            "fit": fit,
                            **training_loo(model, Xp[train], y[train]),
                            "rounds": model.n_estimators_,
                            "m": model.n_triplets_,
                        }
                    )
    return out


def full_h_knn_accuracy(model, X_train, y_train, X_test, y_test) -> float:
    """1-NN accuracy under the full H, similarity rounds (alpha_t < 0) included, ties
    broken by G then index: what ``predict_knn`` did before it used the metric part H+."""
    H, G = model._dissimilarity(X_test @ model.directions_.T, X_train @ model.directions_.T)
    return float(np.mean(y_train[nearest_by(H, G)] == y_test))


def training_loo(model, X_train, y_train) -> dict:
    """Training fold only: leave-one-out 1-NN under H+ (``kneighbors``) and under the
    full H, and the fraction of objects whose smallest full H to another is < 0."""
    ind = model.kneighbors(X_train, n_neighbors=1, return_distance=False)[:, 0]
    Z = X_train @ model.directions_.T
    H, G = model._dissimilarity(Z, Z)
    np.fill_diagonal(H, np.inf)
    if G is not None:
        np.fill_diagonal(G, np.inf)
    return {
        "loo": float(np.mean(y_train[ind] == y_train)),
        "loo_full": float(np.mean(y_train[nearest_by(H, G)] == y_train)),
        "neg_min": float(np.mean(H.min(axis=1) < 0)),
    }


def nearest_by(H: np.ndarray, G: np.ndarray | None) -> np.ndarray:
    if G is None:
        return np.argmin(H, axis=1)  # first index among ties, as a stable sort
    return np.array([np.lexsort((G[i], H[i]))[0] for i in range(len(H))])


def full_fit_time(repeats: int = 5) -> list[str]:
    """fit_from_labels on all of Breast Cancer (569 objects), both variants, z-scored
    features (on raw ones binary boosting finds no edge after ~4 rounds and stops)."""
    from app.learning.metricboost import MetricBoost

    X, y = load("breast_cancer")
    X = StandardScaler().fit_transform(X)
    lines = []
    for wl in ("binary", "normalized"):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            model = MetricBoost(weak_learner=wl).fit_from_labels(X, y)
            times.append(time.perf_counter() - start)
        lines.append(
            f"fit_from_labels, all {len(y)} Breast Cancer objects (z-scored), {wl}: "
            f"{model.n_triplets_:,} label-derived triplets, {model.n_estimators_} rounds, "
            f"{np.mean(times):.3f} ± {np.std(times):.3f} s (min {np.min(times):.3f}) "
            f"over {repeats} fits"
        )
    return lines


# ------------------------------------------------------------------ tables
def fmt(values: list[float], scale: float = 100.0, digits: int = 1) -> str:
    v = scale * np.asarray(values, dtype=float)
    return f"{v.mean():.{digits}f} ± {v.std(ddof=1) if len(v) > 1 else 0.0:.{digits}f}"


def print_table(name: str, results: dict) -> None:
    print(f"\n## {name}  (mean ± sd over folds x repeats; % except fit time)\n")
    head = (
        f"{'method':<18}{'prep':<7}{'triplets (Eq.1)':>16}{'ties':>13}{'tie-broken':>14}"
        f"{'1-NN acc':>15}{'1-NN full H':>14}{'fit s':>16}   paper: triplets / 1-NN"
    )
    print(head)
    print("-" * len(head))
    methods = ["euclidean"] + [
        f"{wl}/{d}" for wl in ("binary", "normalized") for d in ("all", "0.5%")
    ]
    methods += ["ITML", "LMNN", "SCML"]
    for method in methods:
        for prep in PREPS:
            rows = results.get(f"{name}|{method}|{prep}")
            if not rows:
                continue
            tied = fmt([r["tied"] for r in rows])
            broken = fmt([r.get("broken", r["trip"]) for r in rows])
            paper = " / ".join(PAPER[name].get(method, ("", "")))
            full = fmt([r["acc_full"] for r in rows]) if "acc_full" in rows[0] else "-"
            print(
                f"{method:<18}{prep:<7}{fmt([r['trip'] for r in rows]):>16}{tied:>13}"
                f"{broken:>14}{fmt([r['acc'] for r in rows]):>15}{full:>14}"
                f"{fmt([r['fit'] for r in rows], 1.0, 3):>16}   {paper}"
            )
    print(
        "\ntraining folds only, leave-one-out 1-NN under H+ / under the full H, and share of"
        " objects whose smallest full H to another object is < 0 (= H(x, x) > min):"
    )
    for method in [m for m in methods if "/" in m]:
        for prep in PREPS:
            rows = results.get(f"{name}|{method}|{prep}")
            if rows:
                print(
                    f"  {method:<16}{prep:<7}{fmt([r['loo'] for r in rows]):>13} / "
                    f"{fmt([r['loo_full'] for r in rows])}   {fmt([r['neg_min'] for r in rows])}"
                )
    extra = results.get(f"{name}|binary/all|raw")
    if extra:
        print(
            f"\nlabel-derived training triplets per fold (all): {extra[0]['m']:,}; "
            f"rounds kept (binary raw / z): "
            f"{np.mean([r['rounds'] for r in extra]):.1f} / "
            f"{np.mean([r['rounds'] for r in results[f'{name}|binary/all|z']]):.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 repeat, Wine only")
    parser.add_argument("--repeats", type=int, default=3, help="repeats of 5-fold CV")
    parser.add_argument(
        "--ml-repeats", type=int, default=1, help="of those, how many metric-learn also runs"
    )
    parser.add_argument("--no-metric-learn", action="store_true", help="skip ITML/LMNN/SCML")
    parser.add_argument(
        "--fit-time-only", action="store_true", help="only the full Breast Cancer fit times"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    limit_blas_threads()
    if args.fit_time_only:
        for line in full_fit_time(5):
            print(line)
        return
    from sklearn.model_selection import StratifiedKFold

    repeats = 1 if args.quick else args.repeats
    names = ["wine"] if args.quick else list(LOADERS)
    folds = {}
    for name in names:
        _, y = load(name)
        folds[name] = [
            (tr.tolist(), te.tolist())
            for r in range(repeats)
            for tr, te in StratifiedKFold(5, shuffle=True, random_state=r).split(y, y)
        ]
    print(
        f"# MetricBoost benchmark: {repeats} x stratified 5-fold CV on {', '.join(names)} "
        f"(metric-learn: the first {min(args.ml_repeats, repeats)} of those repeats); "
        "BLAS limited to 1 thread"
    )
    results: dict = {}
    for name in names:
        results.update(metricboost_rows(name, folds[name], seed=0))
    if not args.no_metric_learn:
        ml_folds = {name: f[: 5 * args.ml_repeats] for name, f in folds.items()}
        results.update(run_metric_learn(ml_folds, list(ML_PREPS)))
    for name in names:
        print_table(name, results)
    print()
    for line in full_fit_time(2 if args.quick else 5):
        print(line)


if __name__ == "__main__":
    main()

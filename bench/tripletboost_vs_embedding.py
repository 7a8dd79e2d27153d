"""TripletBoost against the embedding route (cblearn SOE / t-STE + 1-NN), same triplets.

Issue 3, benchmark 2 (the paper's Figure 2c / 3c questions): make_moons(n,
noise=0.1), 2/3 train, triplets drawn uniformly from all questions on the n
objects (a share of all n(n-1)(n-2)/2) and answered by the Euclidean, cosine or
city-block metric. TripletBoost (20k rounds) is fitted on them with the test
labels hidden and predicts each test object from the triplets anchored at it;
the embedding route embeds all n objects in 2-D (the data's dimension, as the
paper did for t-STE) from the same triplets with cblearn 0.4.0 and classifies
test objects by 1-NN among training objects. Accuracy and wall time (fit +
predict; cblearn's embedding time is measured inside its worker), mean ± sd
over seeds; time ratio = embedding / TripletBoost (above 1: TripletBoost faster).

cblearn pins numpy 1.26, so it runs in its own venv, called as a subprocess:

    python3 -m venv bench/.venv-cblearn
    bench/.venv-cblearn/bin/pip install -r bench/requirements-cblearn.txt
    nice -n 10 .venv/bin/python bench/tripletboost_vs_embedding.py [--quick]

Both sides run single-threaded. cblearn runs are capped by --timeout seconds
each (reported as "> timeout") and skipped above --max-cblearn triplets.
SOE uses n_init=1 (cblearn's default is 10 restarts); t-STE cblearn's defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SINGLE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
os.environ.update({**SINGLE_THREAD, "NUMBA_NUM_THREADS": "1"})

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CBLEARN_PYTHON = ROOT / "bench" / ".venv-cblearn" / "bin" / "python"
METHODS = ("SOE", "TSTE")


def cblearn_worker(path: str) -> None:
    """Runs inside bench/.venv-cblearn: embed with each method, save embeddings and times."""
    from cblearn import embedding as cbl

    data = np.load(path)
    triplets, n, seed = data["triplets"], int(data["n"]), int(data["seed"])
    out, info = {}, {}
    for method in [str(data["method"])]:
        params = {"n_init": 1} if method == "SOE" else {}
        est = getattr(cbl, method)(n_components=2, random_state=seed, **params)
        start = time.perf_counter()
        est.fit(triplets, n_objects=n)
        info[method] = time.perf_counter() - start
        out[method] = est.embedding_
    np.savez(path + ".out.npz", **out)
    print(json.dumps(info))


def run_cblearn(
    triplets: np.ndarray, n: int, seed: int, method: str, timeout: float
) -> tuple | str:
    if not CBLEARN_PYTHON.exists():
        return "no venv"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "job.npz")
        np.savez(path, triplets=triplets, n=n, seed=seed, method=method)
        try:
            proc = subprocess.run(
                [str(CBLEARN_PYTHON), __file__, "--cblearn-worker", path],
                env={**os.environ, **SINGLE_THREAD},
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return f"> {timeout:.0f} s"
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            return "failed"
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        with np.load(path + ".out.npz") as saved:
            return info, {k: saved[k] for k in saved.files}


def fmt(values: list[float], digits: int = 2) -> str:
    return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f}" if values else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n=500 only, one seed")
    parser.add_argument("--seeds", type=int, default=2, help="repetitions (quick: 1)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--max-cblearn", type=int, default=700_000)
    parser.add_argument(
        "--grid", nargs="+", metavar="N:SHARE", help="only these cells, e.g. 2000:0.001"
    )
    parser.add_argument("--metrics", nargs="+", choices=("euclidean", "cosine", "cityblock"))
    parser.add_argument("--cblearn-worker", metavar="NPZ", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cblearn_worker:
        cblearn_worker(args.cblearn_worker)
        return

    from sklearn.datasets import make_moons
    from sklearn.neighbors import KNeighborsClassifier

    from app.learning.tripletboost import TripletBoost
    from app.learning.triplets import make_random_triplets

    # (n, share of all questions): the 62k triplets at n = 500 is 0.1%.
    grid = [(500, 0.001), (500, 0.01)]
    if not args.quick:
        grid += [(1000, 0.001), (1000, 0.01), (2000, 0.001), (5000, 0.0005)]
    if args.grid:  # resume a long run, or run part of it
        grid = [(int(n), float(share)) for n, share in (cell.split(":") for cell in args.grid)]
    seeds = range(1 if args.quick else args.seeds)
    metrics = tuple(args.metrics or ("euclidean", "cosine", "cityblock"))
    TripletBoost(n_estimators=5, random_state=0).fit(  # JIT warm-up
        [[0, 1, 2], [1, 0, 2], [2, 1, 0]], np.array([0, 0, 1])
    )
    rows = []
    for n, share in grid:
        for metric in metrics:
            acc: dict[str, list[float]] = {"TripletBoost": [], "SOE": [], "TSTE": []}
            sec: dict[str, list[float]] = {"TripletBoost": [], "SOE": [], "TSTE": []}
            notes: set[str] = set()
            m = 0
            for seed in seeds:
                X, y = make_moons(n, noise=0.1, random_state=seed)
                perm = np.random.default_rng(seed).permutation(n)
                train, test = np.sort(perm[: 2 * n // 3]), np.sort(perm[2 * n // 3 :])
                y_fit = y.copy()
                y_fit[test] = -1
                T = make_random_triplets(X, fraction=share, metric=metric, random_state=seed)
                m = len(T)
                start = time.perf_counter()
                model = TripletBoost(n_estimators=20_000, random_state=seed).fit(T, y_fit)
                pred = model.predict(T, test)
                sec["TripletBoost"].append(time.perf_counter() - start)
                acc["TripletBoost"].append(float(np.mean(pred == y[test])))
                if m > args.max_cblearn:
                    notes.add(f"cblearn skipped (> {args.max_cblearn:,} triplets)")
                    continue
                for method in METHODS:
                    result = run_cblearn(T, n, seed, method, args.timeout)
                    if isinstance(result, str):
                        notes.add(f"{method} {result}")
                        continue
                    times, embeddings = result
                    knn = KNeighborsClassifier(1).fit(embeddings[method][train], y[train])
                    acc[method].append(float(knn.score(embeddings[method][test], y[test])))
                    sec[method].append(times[method])
            rows.append((n, share, m, metric, acc, sec, notes))
            line = " ".join(f"{k} {fmt(acc[k])} ({fmt(sec[k], 2)} s)" for k in acc)
            print(f"  n={n} {share:.2%} {metric}: {line} {' '.join(notes)}", flush=True)

    print(f"\nMoons, 2/3 train, accuracy and wall seconds, mean ± sd over {len(seeds)} seed(s)")
    head = (
        f"{'n':>5s} {'share':>6s} {'triplets':>10s} {'metric':>9s} | {'TripletBoost':>24s} | "
        f"{'SOE + 1-NN':>24s} | {'t-STE + 1-NN':>24s} | {'time SOE/TB':>11s}"
    )
    print(head)
    print("-" * len(head))
    for n, share, m, metric, acc, sec, notes in rows:
        cells = []
        for k in ("TripletBoost", "SOE", "TSTE"):
            cells.append(f"{fmt(acc[k])} {fmt(sec[k], 2):>10s}s" if acc[k] else "n/a")
        ratio = np.mean(sec["SOE"]) / np.mean(sec["TripletBoost"]) if sec["SOE"] else float("nan")
        extra = f"  {'; '.join(sorted(notes))}" if notes else ""
        print(
            f"{n:5d} {share:6.2%} {m:10,d} {metric:>9s} | {cells[0]:>24s} | {cells[1]:>24s} | "
            f"{cells[2]:>24s} | {ratio:11.1f}{extra}"
        )


if __name__ == "__main__":
    main()

"""Benchmark 5 of issue 3: how far the triplet kernels scale.

Part A, landmark design (Kleindessner & von Luxburg 2017, §4.2 MNIST setting:
30 landmarks, 150·n triplets): Gaussian blobs in 10-D (10 centres),
n = 10^3, 10^4, 10^5, k1 landmark triplets from
``make_landmark_triplets``. Stages, each timed: build Φ (``TripletKernel.fit``),
10-component kernel PCA, 10-cluster kernel k-means. Two routes:

- "features" (ours at scale): PCA of the centred rows of Φ through the 435 × 435
  covariance, and k-means on the rows of Φ; no n × n matrix.
- "precomputed" (the paper's route, n ≤ 10^4): dense K - λ_min I,
  ``KernelPCA(kernel="precomputed")`` and ``KernelKMeans`` on K.

Target: n = 10^5 end to end (Φ + PCA + k-means, the triplet generation is
reported apart) under 60 s and 8 GB. The paper needed 900 s for k1 alone at
n = 2·10^4 (Matlab, no sparse operations).

Part B, general triplets: n = 5,000 objects, 10^6 random triplets
(``make_random_triplets``), kernel matrix K (fit + Φ Φᵀ + λ_min + shift) for k1
and k2, target under 10 s. Baseline: a dense straightforward implementation of
Eq. (3) (dense Φ of shape C(n, 2) × n filled in one pass over S, K = ΦᵀΦ by
BLAS, λ_min by a full ``eigvalsh``), run at n = 200 and 400 with the same 200
triplets per object, since at n = 5,000 its Φ would need C(5000, 2)·5000·8 B
= 500 GB. Ratio = baseline time / ours (above 1: ours is faster).

Every (part, n, route, repetition) runs in a fresh subprocess so that its peak
resident memory (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, including the
data) is its own; "traced MB" is tracemalloc's peak during the stage (numpy
and scipy buffers; not BLAS workspaces).

Usage: nice -n 10 .venv/bin/python bench/kernel_scale.py [--quick] [--reps R] [--part A|B|all]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from math import comb
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
N_LANDMARKS = 30


def _stage(record: dict, name: str, fn: Callable[[], Any]) -> Any:
    tracemalloc.reset_peak()
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    record[f"{name} s"] = time.perf_counter() - start
    record[f"{name} cpu"] = time.process_time() - cpu
    record[f"{name} MB"] = tracemalloc.get_traced_memory()[1] / 2**20
    return out


def child_landmark(n: int, route: str, seed: int) -> dict:
    from sklearn.datasets import make_blobs

    from app.learning.kernel_methods import KernelKMeans, kernel_kmeans, kernel_pca
    from app.learning.kernels import TripletKernel
    from app.learning.triplets import make_landmark_triplets

    record: dict = {}
    X, _ = make_blobs(n, n_features=10, centers=10, random_state=seed)
    landmarks = np.sort(np.random.default_rng(seed).choice(n, N_LANDMARKS, replace=False))
    tracemalloc.start()
    triplets = _stage(
        record,
        "generate",
        lambda: make_landmark_triplets(
            X, landmarks, n_triplets=150 * n, kind="k1", random_state=seed
        ),
    )
    tk = _stage(record, "phi", lambda: TripletKernel("k1", landmarks=landmarks).fit(triplets, n))
    if route == "features":
        _stage(record, "pca", lambda: kernel_pca(tk, 10, route="features"))
        _stage(
            record,
            "kmeans",
            lambda: kernel_kmeans(
                tk, 10, n_init=5, max_iter=100, random_state=seed, route="features"
            ),
        )
    else:
        K = _stage(record, "K", tk.kernel_matrix)
        _stage(record, "pca", lambda: kernel_pca(K, 10))  # KernelPCA(kernel="precomputed")
        _stage(
            record,
            "kmeans",
            lambda: KernelKMeans(10, n_init=5, max_iter=100, random_state=seed).fit(K),
        )
    tracemalloc.stop()
    own = ("phi", "K", "pca", "kmeans")
    record["total s"] = sum(record.get(f"{k} s", 0.0) for k in own)
    record["total cpu"] = sum(record.get(f"{k} cpu", 0.0) for k in own)
    return record


def dense_eq3_kernel(triplets: np.ndarray, n: int) -> np.ndarray:
    """Baseline: Eq. (3) with a dense Φ ∈ R^{C(n,2) × n}, §2 counts, λ_min by eigvalsh."""
    a, b, c = triplets.T
    lo, hi = np.minimum(b, c), np.maximum(b, c)
    pair = lo * (2 * n - lo - 1) // 2 + (hi - lo - 1)  # row of pair (lo, hi) in triu order
    agree = np.zeros((comb(n, 2), n))
    total = np.zeros((comb(n, 2), n))
    np.add.at(agree, (pair, a), np.where(b < c, 1.0, -1.0))
    np.add.at(total, (pair, a), 1.0)
    phi = np.divide(agree, total, out=np.zeros_like(agree), where=total > 0)
    del agree, total
    norms = np.linalg.norm(phi, axis=0)
    phi = np.divide(phi, norms, out=np.zeros_like(phi), where=norms > 0)
    K = phi.T @ phi
    K -= max(np.linalg.eigvalsh(K)[0], 0.0) * np.eye(n)
    return K


def child_general(n: int, route: str, seed: int) -> dict:
    from app.learning.kernels import TripletKernel
    from app.learning.triplets import make_random_triplets

    record: dict = {}
    X = np.random.default_rng(seed).standard_normal((n, 2))
    m = 10**6 if n == 5000 else 200 * n
    triplets = make_random_triplets(X, n_triplets=m, random_state=seed)
    tracemalloc.start()
    if route == "dense":
        K = _stage(record, "K", lambda: dense_eq3_kernel(triplets, n))
        ours = TripletKernel("k1").fit(triplets, n).kernel_matrix()
        record["max abs diff"] = float(np.abs(K - ours).max())
    else:
        _stage(record, "K", lambda: TripletKernel(route).fit(triplets, n).kernel_matrix())
    tracemalloc.stop()
    record["m"] = m
    return record


def run_child(part: str, n: int, route: str, seed: int) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", part, str(n), route, str(seed)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise RuntimeError(f"child {part} n={n} {route} failed")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def fmt(values: list[float], digits: int = 2) -> str:
    return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n up to 10^4, 1 repetition")
    parser.add_argument("--reps", type=int, default=None, help="repetitions (default 3)")
    parser.add_argument("--part", choices=["A", "B", "all"], default="all", help="which part")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.child:
        part, n, route, seed = args.child
        fn = child_landmark if part == "landmark" else child_general
        record = fn(int(n), route, int(seed))
        record["maxrss MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(record))
        return

    reps = args.reps or (1 if args.quick else 3)
    if args.part in ("A", "all"):
        part_a(args.quick, reps)
    if args.part in ("B", "all"):
        part_b(args.quick, reps)


def part_a(quick: bool, reps: int) -> None:
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    print(
        f"Part A: k1 landmark design, 10-D blobs, {N_LANDMARKS} landmarks, 150·n triplets, "
        f"{reps} repetition(s), mean ± sd"
    )
    stages = ["generate", "phi", "K", "pca", "kmeans", "total"]
    header = f"{'n':>7} {'route':<11} " + " ".join(f"{s + ' s':>15}" for s in stages)
    header += f" {'total CPU s':>15} {'peak traced MB':>15} {'max RSS MB':>11}"
    print(header)
    print("-" * len(header))
    for n in sizes:
        routes = ["features", "precomputed"] if n <= 10_000 else ["features"]
        for route in routes:
            runs = [run_child("landmark", n, route, seed) for seed in range(reps)]
            cells = []
            for s in stages:
                values = [r[f"{s} s"] for r in runs if f"{s} s" in r]
                cells.append(f"{fmt(values):>15}" if values else f"{'-':>15}")
            cells.append(f"{fmt([r['total cpu'] for r in runs]):>15}")
            traced = max(r[f"{s} MB"] for r in runs for s in stages if f"{s} MB" in r)
            rss = max(r["maxrss MB"] for r in runs)
            print(f"{n:>7} {route:<11} " + " ".join(cells) + f" {traced:>15.0f} {rss:>11.0f}")
    print("Wall-clock seconds per stage; total = phi + K + pca + kmeans (generation excluded);")
    print("total CPU s = process CPU time of those stages (all threads; robust to contention).")
    print("kmeans: 10 clusters, 5 inits, 100 iterations. max RSS includes data and generation.")


def part_b(quick: bool, reps: int) -> None:
    print()
    print(f"Part B: general random triplets, kernel matrix K (fit + Φ Φᵀ + λ_min), {reps} rep(s)")
    header = (
        f"{'n':>6} {'triplets':>9} {'ours k1 s':>14} {'ours k2 s':>14} {'dense Eq.(3) s':>15} "
        f"{'k1 CPU s':>9} {'k2 CPU s':>9} "
        f"{'dense/ours k1':>14} {'max |ΔK|':>9} {'RSS k1 MB':>10} {'RSS dense MB':>13}"
    )
    print(header)
    print("-" * len(header))
    general = [200, 400, 5_000] if not quick else [200, 1_000]
    for n in general:
        k1 = [run_child("general", n, "k1", seed) for seed in range(reps)]
        k2 = [run_child("general", n, "k2", seed) for seed in range(reps)]
        if n <= 400:
            dense = [run_child("general", n, "dense", seed) for seed in range(reps)]
            dense_s = fmt([r["K s"] for r in dense])
            ratio = f"{np.mean([r['K s'] for r in dense]) / np.mean([r['K s'] for r in k1]):.1f}"
            diff = f"{max(r['max abs diff'] for r in dense):.0e}"
            rss_dense = f"{max(r['maxrss MB'] for r in dense):.0f}"
        else:
            gb = comb(n, 2) * n * 8 / 1e9
            dense_s, ratio, diff, rss_dense = f"({gb:.0f} GB)", "-", "-", "-"
        print(
            f"{n:>6} {k1[0]['m']:>9} {fmt([r['K s'] for r in k1]):>14} "
            f"{fmt([r['K s'] for r in k2]):>14} {dense_s:>15} "
            f"{np.mean([r['K cpu'] for r in k1]):>9.2f} {np.mean([r['K cpu'] for r in k2]):>9.2f} "
            f"{ratio:>14} {diff:>9} "
            f"{max(r['maxrss MB'] for r in k1):>10.0f} {rss_dense:>13}"
        )
    print("dense: one dense Φ of C(n,2) × n; (X GB) = memory that Φ alone would need, not run.")


if __name__ == "__main__":
    main()

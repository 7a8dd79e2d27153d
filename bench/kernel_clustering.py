"""Benchmark 4 of issue 3: clustering quality of the triplet kernels k1 / k2.

Kleindessner & von Luxburg (2017) §4.2 (USPS 1/2/3, Figure 5 rows 1-2) on
scikit-learn's ``load_digits`` restricted to the digits 1, 2, 3 (n = 542
8×8 images): 15 random landmarks, landmark triplets (§2.3) answered by the
Euclidean metric on the pixels, answer noise ep = 0 and 0.3. Purity of

- k1 + kernel k-means and k2 + kernel k-means (``KernelKMeans`` on K - λ_min I,
  5 inits, 100 iterations, as in the paper, started from the Ng-Jordan-Weiss spectral
  clustering of K (issue 12); a second table compares k-means++ starts alone, the
  k-means++ and the spectral start together (lowest inertia wins, as the previous
  default did with an unnormalised spectral start),
  the spectral reference and the default now, and a third shows every seed against
  the reference),
- t-STE (cblearn 0.4.0, default parameters, embedding dimension 10 as in
  Figure 5 row 2; ``--tste-dims 2 10`` adds row 1's dimension 2, which took
  ~100 s per fit here) on the *same* triplets as k1, then k-means (5 inits),
- k-means on the pixels (does not use the triplets),

mean ± sd over seeds; each seed draws new landmarks and triplets. Time columns:
computing the kernel (fit + K) against computing the t-STE embedding.

The landmark design here has (n - 15)·C(15, 2) + 15·C(14, 2) = 56,700 distinct
k1 questions, fewer than the issue's 100,000; triplets are drawn without
replacement, so the k1 grid stops at all 56,700 (k2 has 15·(C(14, 2) + 14·527)
= 112,035 and goes to 100,000). k1 and k2 get the same number of triplets when both fit.

t-STE runs in its own venv (cblearn pins numpy 1.26; never the project's):

    python3 -m venv bench/.venv-cblearn
    bench/.venv-cblearn/bin/pip install -r bench/requirements-cblearn-embedding.txt

This script calls that venv's python on itself with ``--tste-worker``,
exchanging triplets and embeddings through an .npz file; without the venv the
t-STE columns print "n/a".

Usage: nice -n 10 .venv/bin/python bench/kernel_clustering.py [--quick] [--seeds S]
       [--tste-dims 2 10] [--no-tste]
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

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CBLEARN_PYTHON = ROOT / "bench" / ".venv-cblearn" / "bin" / "python"
N_LANDMARKS = 15


def tste_worker(path: str, dims: list[int]) -> None:
    """Runs inside bench/.venv-cblearn: t-STE for every job, then k-means labels."""
    from cblearn.embedding import TSTE
    from sklearn.cluster import KMeans

    data = np.load(path)
    n, n_jobs = int(data["n"]), int(data["n_jobs"])
    out, times = {}, {}
    TSTE(n_components=2, max_iter=2).fit(np.array([[0, 1, 2], [1, 0, 2]]), n_objects=3)  # warm
    for job in range(n_jobs):
        triplets, seed = data[f"triplets_{job}"], int(data[f"seed_{job}"])
        for dim in dims:
            start = time.perf_counter()
            embedding = TSTE(n_components=dim, random_state=seed).fit_transform(
                triplets, n_objects=n
            )
            times[f"{job}_{dim}"] = time.perf_counter() - start
            out[f"{job}_{dim}"] = KMeans(3, n_init=5, random_state=seed).fit_predict(embedding)
    np.savez(path + ".out.npz", **out)
    print(json.dumps(times))


def run_tste(
    jobs: list[tuple[np.ndarray, int]], n: int, dims: list[int]
) -> tuple[dict, dict] | None:
    """Labels and times of t-STE + k-means for each (triplets, seed) job, or None."""
    if not CBLEARN_PYTHON.exists() or not jobs:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "jobs.npz")
        arrays = {f"triplets_{i}": t for i, (t, _) in enumerate(jobs)}
        arrays.update({f"seed_{i}": s for i, (_, s) in enumerate(jobs)})
        np.savez(path, n=n, n_jobs=len(jobs), **arrays)
        proc = subprocess.run(
            [str(CBLEARN_PYTHON), __file__, "--tste-worker", path, "--tste-dims", *map(str, dims)],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)
            return None
        times = json.loads(proc.stdout.strip().splitlines()[-1])
        with np.load(path + ".out.npz") as saved:
            labels = {k: saved[k] for k in saved.files}
    return labels, times


def purity(y: np.ndarray, labels: np.ndarray) -> float:
    """Share of objects in their cluster's majority class (Manning et al. 2008)."""
    total = 0
    for cluster in np.unique(labels):
        total += np.bincount(y[labels == cluster]).max()
    return total / len(y)


def fmt(values: list[float], digits: int = 3) -> str:
    if not values:
        return "n/a"
    return f"{np.mean(values):.{digits}f} ± {np.std(values):.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grid, 1 seed")
    parser.add_argument("--seeds", type=int, default=None, help="repetitions (default 5)")
    parser.add_argument("--tste-dims", type=int, nargs="+", default=[10], help="t-STE dims")
    parser.add_argument("--no-tste", action="store_true", help="skip the t-STE columns")
    parser.add_argument("--tste-worker", metavar="NPZ", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.tste_worker:
        tste_worker(args.tste_worker, args.tste_dims)
        return

    sys.path.insert(0, str(ROOT))
    from sklearn.cluster import KMeans
    from sklearn.datasets import load_digits

    from app.learning.kernel_methods import KernelKMeans, spectral_labels
    from app.learning.kernels import TripletKernel
    from app.learning.triplets import make_landmark_triplets

    digits = load_digits()
    keep = np.isin(digits.target, [1, 2, 3])
    X, y = digits.data[keep], digits.target[keep]
    n = len(X)
    k1_max = (n - N_LANDMARKS) * 105 + N_LANDMARKS * 91  # distinct k1 questions
    grid = [1_000, 10_000] if args.quick else [1_000, 3_000, 10_000, 30_000, k1_max, 100_000]
    noises = [0.0, 0.3]
    n_seeds = args.seeds or (1 if args.quick else 3)

    results: dict[tuple, dict[str, list[float]]] = {}
    jobs: list[tuple[np.ndarray, int]] = []
    job_keys: list[tuple] = []
    pixels = []
    for seed in range(n_seeds):
        pixels.append(purity(y, KMeans(3, n_init=5, random_state=seed).fit_predict(X)))
        rng = np.random.default_rng(seed)
        landmarks = np.sort(rng.choice(n, N_LANDMARKS, replace=False))
        for noise in noises:
            for m in grid:
                row = results.setdefault((noise, m), {})
                for kind in ("k1", "k2"):
                    if kind == "k1" and m > k1_max:
                        continue
                    triplets = make_landmark_triplets(
                        X, landmarks, n_triplets=m, kind=kind, noise=noise, random_state=seed
                    )
                    start = time.perf_counter()
                    K = TripletKernel(kind, landmarks=landmarks).fit(triplets, n).kernel_matrix()
                    row.setdefault(f"time {kind}", []).append(time.perf_counter() - start)
                    labels = KernelKMeans(3, n_init=5, max_iter=100, random_state=seed).fit(K)
                    row.setdefault(kind, []).append(purity(y, labels.labels_))
                    # Issue 12: the k-means++ starts alone, the previous default (k-means++
                    # and a spectral start, lowest inertia wins) and the spectral reference.
                    for init, name in (("k-means++", "pp"), ("spectral+k-means++", "mixed")):
                        other = KernelKMeans(3, n_init=5, random_state=seed, init=init).fit(K)
                        row.setdefault(f"{kind} {name}", []).append(purity(y, other.labels_))
                    row.setdefault(f"{kind} spectral", []).append(
                        purity(y, spectral_labels(K, 3, seed))
                    )
                    if kind == "k1":
                        jobs.append((triplets, seed))
                        job_keys.append((noise, m))

    tste = None if args.no_tste else run_tste(jobs, n, args.tste_dims)
    if tste is not None:
        labels, times = tste
        for job, key in enumerate(job_keys):
            for dim in args.tste_dims:
                results[key].setdefault(f"tste{dim}", []).append(purity(y, labels[f"{job}_{dim}"]))
                results[key].setdefault(f"time tste{dim}", []).append(times[f"{job}_{dim}"])

    print(f"load_digits 1/2/3: n = {n}, {N_LANDMARKS} landmarks, {n_seeds} seed(s), purity")
    print(f"k-means on pixels (no triplets): {fmt(pixels)}")
    if tste is None:
        reason = "--no-tste" if args.no_tste else "bench/.venv-cblearn missing or failed"
        print(f"t-STE: n/a ({reason}; see module docstring)")
    dims = args.tste_dims
    header = (
        f"{'ep':>4} {'triplets':>8} | {'k1 + KKM':>13} {'k2 + KKM':>13} "
        + "".join(f"{f't-STE{d} + KM':>14}" for d in dims)
        + f" | {'time k1 s':>9} {'time k2 s':>9}"
        + "".join(f"{f't-STE{d} s':>10}" for d in dims)
    )
    print(header)
    print("-" * len(header))
    for (noise, m), row in results.items():
        t = {k: (f"{np.mean(v):.3f}" if v else "n/a") for k, v in row.items()}
        print(
            f"{noise:>4.1f} {m:>8} | {fmt(row.get('k1', [])):>13} {fmt(row.get('k2', [])):>13} "
            + "".join(f"{fmt(row.get(f'tste{d}', [])):>14}" for d in dims)
            + f" | {t.get('time k1', 'n/a'):>9} {t.get('time k2', 'n/a'):>9}"
            + "".join(f"{t.get(f'time tste{d}', 'n/a'):>10}" for d in dims)
        )
    print("KKM: kernel k-means (NJW spectral start, 5 k-means starts in the embedding, then")
    print("Lloyd on K, 100 iterations); KM: k-means.")
    print()
    print("Kernel k-means starts (issue 12), purity: k-means++ only (5 inits); 'mixed'")
    print("(init='spectral+k-means++': 5 k-means++ and the NJW start, lowest inertia wins);")
    print("the spectral reference (top-3 eigenvectors of K, k-means with 10 starts); and")
    print("KernelKMeans now (Ng-Jordan-Weiss start: unit-length rows, then Lloyd on K).")
    print("'<ref' counts the seeds where 'now' is below the reference.")
    header = (
        f"{'kind':>4} {'ep':>4} {'triplets':>8} | {'k-means++':>13} {'mixed':>13} "
        f"{'spectral ref':>13} {'now':>13} {'<ref':>4}"
    )
    print(header)
    print("-" * len(header))
    below, total = 0, 0
    for kind in ("k1", "k2"):
        for (noise, m), row in results.items():
            if row.get(kind):
                worse = sum(a < b for a, b in zip(row[kind], row[f"{kind} spectral"], strict=True))
                below, total = below + worse, total + len(row[kind])
                print(
                    f"{kind:>4} {noise:>4.1f} {m:>8} | {fmt(row[f'{kind} pp']):>13} "
                    f"{fmt(row[f'{kind} mixed']):>13} {fmt(row[f'{kind} spectral']):>13} "
                    f"{fmt(row[kind]):>13} {worse:>4}"
                )
    gaps = [
        b - a
        for kind in ("k1", "k2")
        for row in results.values()
        for a, b in zip(row.get(kind, []), row.get(f"{kind} spectral", []), strict=True)
        if a < b
    ]
    print(
        f"now below the reference in {below} of {total} (row, seed) cases"
        + (f", by {min(gaps):.3f} to {max(gaps):.3f}." if gaps else ".")
    )
    print()
    print("Per seed (the issue's cases: k2, noise 0 and 0.3), purity now / reference:")
    for kind in ("k2", "k1"):
        for (noise, m), row in results.items():
            if row.get(kind):
                cells = " ".join(
                    f"{a:.3f}/{b:.3f}{'*' if a < b else ' '}"
                    for a, b in zip(row[kind], row[f"{kind} spectral"], strict=True)
                )
                print(f"  {kind} {noise:>4.1f} {m:>8} | {cells}")
    print("  (* = below the reference; seeds 0, 1, 2 from left to right)")
    print()
    print("KM: k-means (5 inits).")
    print("time k1/k2: fit Φ + dense K with λ_min; t-STE: cblearn fit (k-means excluded); mean s.")
    print(f"k1 rows stop at the {k1_max} distinct k1 questions of this design.")


if __name__ == "__main__":
    main()

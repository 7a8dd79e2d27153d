"""Benchmark 5: SVMcompare against rank and rank2 on the simulation of Section 4.1.

Venuto, Hocking, Spanurattana & Sugiyama, "Support vector comparison machines",
Section 4.1 / Figure 4, as the authors ran it (tdhock/compare-paper,
``simulation.samples.R``):

* x ~ U[-2, 2]^2, x' = x + delta, y = t_1(r(x') - r(x) + eps), eps ~ N(0, 1/4^2),
  t_1 the threshold function (4) with tau = 1 (|diff| <= 1 is a tie), and
  r(x) = ||x||_1^2, ||x||_2^2, ||x||_inf^2.
* delta: ``--delta authors`` (default) draws it as their script does, uniform per
  norm: U(-1, 1/2)^2 for l2, U(-1/2, 1/2)^2 for l1, U(-1, 1)^2 for linf.
  ``--delta gaussian`` draws N(0, 0.5^2 I) for every norm (the issue's wording).
* Equality pairs: a pool of labelled pairs is simulated, then every set takes
  exactly half its pairs at random among the ties (y = 0) and half among the
  inequality pairs (y = +-1, in their natural proportions). A fixed test set of
  10,000 pairs (5,000 ties); for each N and seed, train and validation sets of N
  pairs each, disjoint from each other and from the test set.
* Grid C = 10^linspace(-1, 5, 10) x RBF gamma = 2^linspace(-8, 4, 10) (the
  kernlab / SVMlight "kernel width", exp(-gamma ||x - y||^2)), features
  standardised on the training points as the authors' code does; the model with
  the least validation 0/1 error is chosen (first in grid order, C fastest, as
  R's ``which.min``), and its test 0/1 error reported.
* compare = ``SVMCompare``; rank, rank2 = SVMrank + threshold (bench/svmcompare_baselines.py);
  truth = t_1(r(x') - r(x)) with the true r, no noise (the figure's "truth").

Then the scale study: ``SVMCompare(solver="primal")`` (Nystroem features +
liblinear) against the exact dual on up to 10^5 training pairs.

Run: ``nice -n 10 .venv/bin/python bench/svmcompare.py [--quick] [--delta gaussian]``
(``--sizes``, ``--seeds`` and ``--norms`` run a part of the grid, e.g. one cell to time it;
a cell's data depend only on its norm, N and seed, so parts agree with the full grid).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from joblib import Parallel, delayed
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from svmcompare_baselines import SVMRankThreshold

from app.learning.svmcompare import SVMCompare, threshold

NORMS = {
    "l1": lambda X: np.abs(X).sum(axis=1) ** 2,
    "l2": lambda X: (X**2).sum(axis=1),
    "linf": lambda X: np.abs(X).max(axis=1) ** 2,
}
AUTHORS_DELTA = {"l2": (-1.0, 0.5), "l1": (-0.5, 0.5), "linf": (-1.0, 1.0)}
# compare's test error at N = 400 read off Figure 4 of the paper (percent)
PAPER_COMPARE_N400 = {"l1": 10.1, "l2": 8.4, "linf": 10.6}
METHODS = ("compare", "rank", "rank2")


def simulate(norm: str, size: int, delta: str, rng: np.random.Generator) -> dict:
    """Labelled pairs of Section 4.1; ``truth`` is t_1 of the noiseless difference."""
    X_left = rng.uniform(-2, 2, size=(size, 2))
    if delta == "authors":
        low, high = AUTHORS_DELTA[norm]
        X_right = X_left + rng.uniform(low, high, size=(size, 2))
    else:
        X_right = X_left + rng.normal(0, 0.5, size=(size, 2))
    diff = NORMS[norm](X_right) - NORMS[norm](X_left)
    y = threshold(diff + rng.normal(0, 0.25, size))
    return {"X_left": X_left, "X_right": X_right, "y": y, "truth": threshold(diff)}


def take(pairs: dict, index: np.ndarray) -> dict:
    return {key: value[index] for key, value in pairs.items()}


def half_and_half(
    is_tie: np.ndarray, free: np.ndarray, n: int, rng: np.random.Generator
) -> np.ndarray:
    """n/2 ties and n/2 inequality pairs among the free pairs; marks them used."""
    ties = rng.choice(np.flatnonzero(free & is_tie), n // 2, replace=False)
    ineq = rng.choice(np.flatnonzero(free & ~is_tie), n - n // 2, replace=False)
    chosen = np.concatenate([ties, ineq])
    free[chosen] = False
    return chosen


def standardise(train: dict, *sets: dict) -> list[dict]:
    scaler = StandardScaler().fit(np.vstack([train["X_left"], train["X_right"]]))
    out = []
    for s in (train, *sets):
        s = dict(s)
        s["X_left"], s["X_right"] = scaler.transform(s["X_left"]), scaler.transform(s["X_right"])
        out.append(s)
    return out


def make_model(method: str, C: float, gamma: float):
    if method == "compare":
        return SVMCompare(C=C, kernel="rbf", gamma=gamma)
    equality = "nopairs" if method == "rank" else "bothpairs"
    return SVMRankThreshold(C=C, gamma=gamma, equality=equality)


def error(model, s: dict) -> float:
    return float(np.mean(model.predict(s["X_left"], s["X_right"]) != s["y"]))


def run_cell(norm: str, N: int, seed: int, train: dict, valid: dict, test: dict, grid) -> dict:
    """Fit the grid for every method, choose by validation error, report test error."""
    train, valid, test = standardise(train, valid, test)
    Cs, gammas = grid
    result = {"norm": norm, "N": N, "seed": seed, "failed": dict.fromkeys(METHODS, 0)}
    for method in METHODS:
        val_err = np.full((len(gammas), len(Cs)), np.inf)
        for g, gamma in enumerate(gammas):
            for c, C in enumerate(Cs):
                try:
                    model = make_model(method, C, gamma).fit(
                        train["X_left"], train["X_right"], train["y"]
                    )
                except ValueError:  # SVMCompare: bias beta >= 0, no comparison function
                    result["failed"][method] += 1
                    continue
                val_err[g, c] = error(model, valid)
        g, c = np.unravel_index(np.argmin(val_err), val_err.shape)
        model = make_model(method, Cs[c], gammas[g]).fit(
            train["X_left"], train["X_right"], train["y"]
        )
        result[method] = 100 * error(model, test)
        result[method + "_params"] = (float(Cs[c]), float(gammas[g]))
    result["truth"] = 100 * float(np.mean(test["truth"] != test["y"]))
    return result


def mean_sd(values: list[float]) -> str:
    values = np.asarray(values, dtype=float)
    sd = values.std(ddof=1) if values.size > 1 else 0.0
    return f"{values.mean():5.1f} ± {sd:4.1f}"


def summarise(results: list[dict], n_fits: int) -> None:
    """Print the table of the grid study from its cells (complete or partial)."""
    Ns = sorted({r["N"] for r in results})
    print("Test 0/1 error (%) of the model chosen by validation error, mean ± sd over seeds")
    header = f"{'r(x)':6} {'N':>5} {'seeds':>5}  " + "  ".join(
        f"{m:>13}" for m in (*METHODS, "truth")
    )
    print(header + "   paper compare")
    print("-" * len(header) + "-" * 17)
    for norm in NORMS:
        for N in Ns:
            rows = [r for r in results if r["norm"] == norm and r["N"] == N]
            if not rows:
                continue
            cells = "  ".join(f"{mean_sd([r[m] for r in rows]):>13}" for m in (*METHODS, "truth"))
            paper = f"{PAPER_COMPARE_N400[norm]:5.1f}" if N == 400 else ""
            print(f"{norm:6} {N:>5} {len(rows):>5}  {cells}   {paper}")
    failed = {m: sum(r["failed"][m] for r in results) for m in METHODS}
    total = len(results) * n_fits
    print(f"\nfits with no comparison function (bias beta >= 0), of {total} per method: {failed}")
    print("\nchosen (C, gamma) of compare per seed at the largest N:")
    for norm in NORMS:
        chosen = [r["compare_params"] for r in results if r["norm"] == norm and r["N"] == Ns[-1]]
        print(f"  {norm}: " + ", ".join(f"({C:.3g}, {g:.3g})" for C, g in chosen))


def grid_study(args: argparse.Namespace) -> list[dict]:
    Ns = tuple(args.sizes) if args.sizes else (50, 100, 200, 400) if not args.quick else (50, 200)
    seeds = tuple(args.seeds) if args.seeds else (1, 2, 3, 4) if not args.quick else (1, 2)
    n_grid = 10 if not args.quick else 5
    Cs = 10 ** np.linspace(-1, 5, n_grid)
    gammas = 2 ** np.linspace(-8, 4, n_grid)
    test_n = 10_000 if not args.quick else 2_000
    jobs = []
    for norm in args.norms or NORMS:
        pool = simulate(norm, args.pool, args.delta, np.random.default_rng([1, len(norm)]))
        is_tie = pool["y"] == 0
        test_free = np.ones(args.pool, dtype=bool)
        test_index = half_and_half(is_tie, test_free, test_n, np.random.default_rng(1))
        for N in Ns:
            for seed in seeds:
                rng = np.random.default_rng(seed)
                free = test_free.copy()
                train = take(pool, half_and_half(is_tie, free, N, rng))
                valid = take(pool, half_and_half(is_tie, free, N, rng))
                jobs.append((norm, N, seed, train, valid, take(pool, test_index)))
    # largest N first (the paper's comparison point), so a partial run is still useful
    jobs.sort(key=lambda job: (-job[1], job[2], list(NORMS).index(job[0])))
    print(
        f"# grid study: delta={args.delta}, N in {Ns}, seeds {seeds}, "
        f"{n_grid}x{n_grid} grid, test set {test_n} pairs (half ties), "
        f"{len(jobs)} cells x 3 methods x {n_grid**2} fits; cells in {args.cells}",
        flush=True,
    )
    start = time.perf_counter()
    results = []
    cells = Parallel(n_jobs=args.n_jobs, return_as="generator")(
        delayed(run_cell)(*job, (Cs, gammas)) for job in jobs
    )
    with open(args.cells, "w") as out:
        for result in cells:
            results.append(result)
            out.write(json.dumps(result) + "\n")
            out.flush()
            print(
                f"  cell {result['norm']:4} N={result['N']:>3} seed {result['seed']}: "
                + ", ".join(f"{m} {result[m]:.1f}%" for m in (*METHODS, "truth"))
                + f"  [{time.perf_counter() - start:.0f} s]",
                flush=True,
            )
    print(f"# grid study took {time.perf_counter() - start:.0f} s\n", flush=True)
    summarise(results, n_grid**2)
    return results


def scale_study(args: argparse.Namespace, results: list[dict]) -> None:
    norm = args.scale_norm
    largest_n = max(r["N"] for r in results)
    results = [r for r in results if r["norm"] == norm and r["N"] == largest_n]
    # the hyperparameters chosen most often for compare at the largest N of the grid study
    params = [tuple(r["compare_params"]) for r in results]
    C, gamma = max(sorted(set(params)), key=params.count)
    exact_sizes = (400, 1000, 2000, 4000) if not args.quick else (400, 1000)
    primal_sizes = (
        (400, 1000, 2000, 4000, 20_000, 100_000) if not args.quick else (400, 1000, 20_000)
    )
    components = (100, 300) if not args.quick else (100,)
    reps = (1, 2) if not args.quick else (1,)
    big = simulate(norm, 2 * (max(primal_sizes) + 20_000) * 2, args.delta, np.random.default_rng(7))
    is_tie = big["y"] == 0
    print(
        f"\n# scale study: r(x) = {norm}, delta={args.delta}, C = {C:.3g}, gamma = {gamma:.3g} "
        f"(chosen for compare at N = {largest_n}), test set 10,000 pairs, "
        f"{len(reps)} repetition(s), fit time in seconds on a shared machine"
    )
    rows = []
    for rep in reps:
        rng = np.random.default_rng([rep, 99])
        free = np.ones(len(big["y"]), dtype=bool)
        test = take(big, half_and_half(is_tie, free, 10_000, rng))
        order = half_and_half(is_tie, free, max(primal_sizes), rng)
        ties, ineq = order[: len(order) // 2], order[len(order) // 2 :]
        exact_over_budget = False  # stop growing the exact fit once one exceeds the budget
        for N in sorted(set(exact_sizes) | set(primal_sizes)):
            train = take(big, np.concatenate([ties[: N // 2], ineq[: N - N // 2]]))
            train_s, test_s = standardise(train, test)
            fits = []
            if N in exact_sizes and not exact_over_budget:
                fits.append(("exact dual", SVMCompare(C=C, gamma=gamma)))
            if N in primal_sizes:
                for k in components:
                    fits.append(
                        (
                            f"primal nystroem {k}",
                            SVMCompare(
                                C=C, gamma=gamma, solver="primal", n_components=k, random_state=rep
                            ),
                        )
                    )
            for name, model in fits:
                start = time.perf_counter()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", ConvergenceWarning)
                    model.fit(train_s["X_left"], train_s["X_right"], train_s["y"])
                seconds = time.perf_counter() - start
                converged = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
                rows.append((name, N, rep, seconds, 100 * error(model, test_s), converged))
                if name == "exact dual" and seconds > args.exact_budget:
                    exact_over_budget = True
                print(
                    f"  rep {rep} {name:20} N={N:>6}: fit {seconds:7.2f} s, "
                    f"test error {rows[-1][4]:5.1f}%{'' if converged else ' (liblinear max_iter)'}",
                    flush=True,
                )
    print("\nScale: fit time (s) and test 0/1 error (%), mean ± sd over repetitions")
    names = sorted({r[0] for r in rows}, key=lambda n: (n != "exact dual", n))
    print(f"{'N':>7}  " + "  ".join(f"{n:>33}" for n in names))
    for N in sorted({r[1] for r in rows}):
        cells = []
        for name in names:
            sel = [r for r in rows if r[0] == name and r[1] == N]
            cells.append(
                f"{mean_sd([r[3] for r in sel])} s {mean_sd([r[4] for r in sel])} %" if sel else "-"
            )
        print(f"{N:>7}  " + "  ".join(f"{c:>33}" for c in cells))
    largest = max(r[1] for r in rows if r[0] == "exact dual")
    exact_t = np.mean([r[3] for r in rows if r[0] == "exact dual" and r[1] == largest])
    for name in names[1:]:
        sel = [r[3] for r in rows if r[0] == name and r[1] == largest]
        if sel:
            print(f"exact / {name} fit-time ratio at N = {largest}: {exact_t / np.mean(sel):.1f}")
    print(
        f"exact dual memory at N = {largest} (m = 1.5 N flipped pairs): about "
        f"{3 * (1.5 * largest) ** 2 * 8 / 1e9:.2f} GB while building M^T K M; "
        f"at N = 10^5 it would be {3 * (1.5e5) ** 2 * 8 / 1e9:.0f} GB."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small grid for development")
    parser.add_argument("--delta", choices=("authors", "gaussian"), default="authors")
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--pool", type=int, default=40_000, help="simulated pairs per norm")
    parser.add_argument("--scale-norm", choices=tuple(NORMS), default="l1")
    parser.add_argument(
        "--cells", default="bench/results/svmcompare_cells.txt", help="per-cell JSON lines"
    )
    parser.add_argument(
        "--summarise", action="store_true", help="read --cells instead of running the grid"
    )
    parser.add_argument("--sizes", type=int, nargs="+", help="training set sizes N")
    parser.add_argument("--seeds", type=int, nargs="+", help="seeds of the grid study")
    parser.add_argument("--norms", choices=tuple(NORMS), nargs="+", help="r(x) of the grid study")
    parser.add_argument("--no-scale", action="store_true", help="skip the scale study")
    parser.add_argument(
        "--exact-budget",
        type=float,
        default=300.0,
        help="seconds: no larger exact fits after one takes longer (scale study)",
    )
    args = parser.parse_args()
    print(f"# bench/svmcompare.py {' '.join(sys.argv[1:])}")
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, shared machine")
    if args.summarise:
        with open(args.cells) as lines:
            results = [json.loads(line) for line in lines]
        print(f"# summary of {len(results)} cells read from {args.cells}")
        summarise(results, 25 if args.quick else 100)
    else:
        results = grid_study(args)
    if not args.no_scale:
        scale_study(args, results)


if __name__ == "__main__":
    main()

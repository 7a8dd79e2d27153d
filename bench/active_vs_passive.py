"""Active CompRF against passive designs at the same numbers of answers (issue 10 §4).

A simulated crowd answers from the data's Euclidean distances, each answer flipped
independently with probability ``noise`` (0, 10, 20%). Half of the objects carry their
label (or target); accuracy (regression: RMSE) is measured on the other half, the
unlabelled objects, after the same numbers of answers for every method:

(a) active CompRF through the service's own strategy code (:mod:`app.active.comprf`):
    the pending pivot questions, shallow nodes first across all trees, are answered in
    rounds of ``--round`` answers and folded in with ``advance``; one answer per
    question (``redundancy=1``) so that answers and questions are the same count;
    predictions are the strategy's leaf-mate predictions, an object still waiting in an
    open node predicted from that node's labelled objects (``anytime``);
(b) random triplets + TripletBoost (5,000 rounds, the service default; classification only;
    an abstention counts as wrong);
(c) random triplets + SOE (2-D, ours) + 1-NN (regression: 1-NN target);
(d) landmark k1 triplets (15 landmarks) + triplet kernel k1 + kernel SVM
    (regression: kernel ridge on the same kernel).

Data sets: digits (a random subsample of ``--digits-n`` of the 1,797 objects, to keep
the grid to minutes), wine (178), diabetes (442, regression). Features are
standardised. One seed per cell unless ``--seeds``.

    .venv/bin/python bench/active_vs_passive.py [--quick] [--http]

``--http`` adds one end-to-end run of (a) through a real ``tripletlab serve`` on a
temporary SQLite file: a project, a comprf plan, ``simulate`` workers, a comprf model
trained by the service; its accuracy is printed beside the in-process one.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

BUDGETS = (2_000, 5_000, 10_000, 20_000, 50_000)
NOISES = (0.0, 0.1, 0.2)
NOTES: set[str] = set()
METHODS = ("a CompRF (active)", "b TripletBoost", "c SOE + 1-NN", "d k1 + kernel SVM")


def load(name: str, digits_n: int, seed: int) -> tuple[np.ndarray, np.ndarray, bool]:
    from sklearn import datasets
    from sklearn.preprocessing import StandardScaler

    if name == "digits":
        X, y = datasets.load_digits(return_X_y=True)
        keep = np.sort(np.random.default_rng(seed).permutation(len(y))[:digits_n])
        X, y = X[keep], y[keep]
        regression = False
    elif name == "wine":
        X, y = datasets.load_wine(return_X_y=True)
        regression = False
    else:
        X, y = datasets.load_diabetes(return_X_y=True)
        regression = True
    return StandardScaler().fit_transform(X), y, regression


def score(pred: np.ndarray, truth: np.ndarray, regression: bool) -> float:
    if regression:
        return float(np.sqrt(np.mean((pred - truth) ** 2)))
    return float(np.mean(pred == truth))


def noisy(T: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    flip = rng.random(len(T)) < noise
    T = T.copy()
    T[flip, 1], T[flip, 2] = T[flip, 2], T[flip, 1].copy()
    return T


def run_comprf(X, y, regression, known, noise, seed, budgets, round_size, n_trees, anytime=True):
    """(a): the strategy's own forest, grown question by question in rounds."""
    from app.active.comprf import Forest, ForestParams, advance, forest_predictions, snapshot

    n = len(y)
    labels = [None if regression or not known[i] else str(y[i]) for i in range(n)]
    targets = [float(y[i]) if regression and known[i] else None for i in range(n)]
    params = ForestParams.parse({"n_trees": n_trees, "redundancy": 1, "seed": seed}, 0)
    forest = Forest.new(params, snapshot(params, labels))
    rng = np.random.default_rng([seed, 1])
    unknown = np.flatnonzero(~known)
    out: dict[int, float] = {}
    given = 0
    for budget in budgets:
        while given < budget:
            pending = forest.pending()[: min(round_size, budget - given)]
            if not pending:
                break
            a = np.array([row[3] for row in pending])
            p1 = np.array([row[4] for row in pending])
            p2 = np.array([row[5] for row in pending])
            closer = np.linalg.norm(X[a] - X[p1], axis=1) < np.linalg.norm(X[a] - X[p2], axis=1)
            closer ^= rng.random(len(a)) < noise
            near, far = np.where(closer, p1, p2), np.where(closer, p2, p1)
            ids = range(given + 1, given + 1 + len(a))
            advance(forest, zip(ids, a.tolist(), near.tolist(), far.tolist(), strict=True))
            given += len(a)
        if given < budget:
            NOTES.add(
                f"(a) {'regression' if regression else 'classification'} on {n} objects, "
                f"noise {noise:.0%}: the trees were complete after {given:,} answers; "
                f"the later columns use no more"
            )
        rows, _ = forest_predictions(forest, labels, targets, anytime=anytime)
        if regression:
            mean = float(np.mean(y[known]))
            pred = np.array(
                [rows[i]["target"] if rows[i]["target"] is not None else mean for i in unknown]
            )
        else:
            pred = np.array(
                [int(rows[i]["label"]) if rows[i]["label"] is not None else -1 for i in unknown]
            )
        out[budget] = score(pred, y[unknown], regression)
    return out, given


def run_passive(method, X, y, regression, known, noise, seed, budget):
    from sklearn.kernel_ridge import KernelRidge
    from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor

    from app.learning.embedding import SOE
    from app.learning.kernel_methods import kernel_svm
    from app.learning.kernels import TripletKernel
    from app.learning.tripletboost import TripletBoost
    from app.learning.triplets import make_landmark_triplets, make_random_triplets

    rng = np.random.default_rng([seed, 2, budget])
    n = len(y)
    train, test = np.flatnonzero(known), np.flatnonzero(~known)
    if method.startswith("b"):
        if regression:
            return None
        T = make_random_triplets(X, n_triplets=budget, noise=noise, random_state=rng)
        y_fit = y.copy()
        y_fit[test] = -1
        model = TripletBoost(n_estimators=5_000, random_state=seed).fit(T, y_fit)
        pred = model.predict(T, test)
        return score(np.array([-1 if p is None else p for p in pred]), y[test], regression)
    if method.startswith("c"):
        T = make_random_triplets(X, n_triplets=budget, noise=noise, random_state=rng)
        Z = SOE(n_components=2, random_state=seed).fit(T, n).embedding_
        knn = KNeighborsRegressor(1) if regression else KNeighborsClassifier(1)
        return score(knn.fit(Z[train], y[train]).predict(Z[test]), y[test], regression)
    n_landmarks = 15
    landmarks = np.sort(rng.choice(n, n_landmarks, replace=False))
    # the design has only so many distinct questions: (n − L)·C(L, 2) + L·C(L − 1, 2)
    distinct = (n - n_landmarks) * n_landmarks * (n_landmarks - 1) // 2 + n_landmarks * (
        n_landmarks - 1
    ) * (n_landmarks - 2) // 2
    if budget > distinct:
        NOTES.add(
            f"(d) on {n} objects: capped at all {distinct:,} distinct questions of its design"
        )
        budget = distinct
    T = make_landmark_triplets(
        X, landmarks, n_triplets=budget, kind="k1", noise=noise, random_state=rng
    )
    kernel = TripletKernel(kind="k1", landmarks=landmarks).fit(T, n)
    if regression:
        ridge = KernelRidge(alpha=1.0, kernel="precomputed")
        ridge.fit(kernel.kernel_block(train, train), y[train])
        return score(ridge.predict(kernel.kernel_block(test, train)), y[test], regression)
    return score(kernel_svm(kernel, train, y[train], test), y[test], regression)


def needed_for_90(curve: dict[int, float | None], regression: bool) -> str:
    """Answers after which the method is within 90% of its final figure."""
    points = [(b, v) for b, v in sorted(curve.items()) if v is not None]
    if not points:
        return "n/a"
    final = points[-1][1]
    for budget, value in points:
        if (value <= final / 0.9) if regression else (value >= 0.9 * final):
            return f"{budget:,}"
    return f"{points[-1][0]:,}"


def http_run(X, y, known, noise, budget, seed, n_trees):
    """(a) end to end: a real server, a comprf plan, simulated workers, a trained model."""
    import socket
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import httpx

    from app.simulate import simulate

    tripletlab = str(Path(sys.executable).with_name("tripletlab"))
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        env = {
            **os.environ,
            "TRIPLETLAB_DATABASE_URL": f"sqlite:///{tmp}/bench.db",
            "TRIPLETLAB_DATA_DIR": f"{tmp}/data",
            "TRIPLETLAB_DEMO": "false",
            "TRIPLETLAB_RUN_JOBS": "true",
        }
        log = open(f"{tmp}/serve.log", "w")  # noqa: SIM115
        server = subprocess.Popen(
            [tripletlab, "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(200):
                try:
                    httpx.get(f"{base}/docs", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.3)
            printed = Path(f"{tmp}/serve.log").read_text().splitlines()
            key = next(line.strip() for line in printed if line.strip().startswith("tl_"))
            headers = {"Authorization": f"Bearer {key}"}
            api = httpx.Client(base_url=base, headers=headers, timeout=120)
            api.post("/api/projects", json={"slug": "bench", "name": "bench"}).raise_for_status()
            objects = [
                {
                    "name": f"o{i}",
                    "features": X[i].round(6).tolist(),
                    **({"label": str(y[i])} if known[i] else {}),
                }
                for i in range(len(y))
            ]
            api.post("/api/projects/bench/objects", json=objects).raise_for_status()
            plan = {
                "strategies": [
                    {
                        "kind": "comprf",
                        "params": {"n_trees": n_trees, "redundancy": 1, "seed": seed},
                    }
                ],
                "queries_per_session": 200,
                "repeat_rate": 0,
            }
            api.put("/api/projects/bench/plan", json=plan).raise_for_status()
            started = time.perf_counter()
            result = simulate(base, "bench", key, workers=4, answers=budget, noise=noise, seed=seed)
            seconds = time.perf_counter() - started
            job = api.post("/api/projects/bench/models", json={"kind": "comprf"}).json()
            for _ in range(600):
                state = api.get(f"/api/jobs/{job['id']}").json()
                if state["status"] in ("succeeded", "failed"):
                    break
                time.sleep(0.5)
            if state["status"] != "succeeded":
                raise RuntimeError(f"the comprf job did not succeed: {state}")
            predictions = api.get(f"/api/models/{state['model_id']}/predictions").json()
            pred = {p["index"]: p["label"] for p in predictions}
            unknown = np.flatnonzero(~known)
            placed = [i for i in unknown if pred.get(i) is not None]
            accuracy = float(np.mean([pred.get(i) == str(y[i]) for i in unknown]))
            return result.answers, accuracy, len(placed), len(unknown), seconds, result.errors
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="wine only, noise 0.1, ≤10k")
    parser.add_argument("--datasets", nargs="+", default=["digits", "wine", "diabetes"])
    parser.add_argument("--digits-n", type=int, default=500)
    parser.add_argument("--n-trees", type=int, default=10)
    parser.add_argument("--round", type=int, default=200, help="answers per CompRF round")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--methods", default="abcd", help="letters of the methods to run")
    parser.add_argument("--http", action="store_true", help="add the end-to-end run")
    parser.add_argument("--http-budget", type=int, default=5_000)
    parser.add_argument("--http-only", action="store_true", help="only the end-to-end run")
    args = parser.parse_args()
    datasets = ["wine"] if args.quick else args.datasets
    if args.http_only:
        datasets, args.http = [], True
    noises = (0.1,) if args.quick else NOISES
    budgets = tuple(b for b in BUDGETS if not args.quick or b <= 10_000)

    print(f"# budgets {budgets}, noise {noises}, {args.n_trees} trees, seeds {args.seeds}")
    print(
        "| data | noise | method | "
        + " | ".join(f"{b:,}" for b in budgets)
        + " | answers to 90% of final | seconds |"
    )
    print("|---|---|---|" + "---|" * len(budgets) + "---|---|")
    for name in datasets:
        for noise in noises:
            for method in (m for m in METHODS if m[0] in args.methods):
                curves: list[dict[int, float | None]] = []
                started = time.perf_counter()
                for seed in range(args.seeds):
                    X, y, regression = load(name, args.digits_n, seed)
                    known = np.zeros(len(y), dtype=bool)
                    known[np.random.default_rng([seed, 9]).permutation(len(y))[: len(y) // 2]] = 1
                    if method.startswith("a"):
                        curve, _ = run_comprf(
                            X, y, regression, known, noise, seed, budgets, args.round, args.n_trees
                        )
                    else:
                        curve = {
                            b: run_passive(method, X, y, regression, known, noise, seed, b)
                            for b in budgets
                        }
                    curves.append(curve)
                mean = {
                    b: (
                        None
                        if any(c[b] is None for c in curves)
                        else float(np.mean([c[b] for c in curves]))
                    )
                    for b in budgets
                }
                cells = ["n/a" if mean[b] is None else f"{mean[b]:.3f}" for b in budgets]
                label = f"{name} ({'RMSE' if regression else 'accuracy'})"
                print(
                    f"| {label} | {noise:.0%} | {method} | "
                    + " | ".join(cells)
                    + f" | {needed_for_90(mean, regression)} | "
                    f"{time.perf_counter() - started:.0f} |",
                    flush=True,
                )
    for note in sorted(NOTES):
        print(f"\nNote: {note}.")
    if args.http:
        X, y, _ = load("wine", args.digits_n, 0)
        known = np.zeros(len(y), dtype=bool)
        known[np.random.default_rng([0, 9]).permutation(len(y))[: len(y) // 2]] = 1
        answers, accuracy, placed, total, seconds, errors = http_run(
            X, y, known, 0.1, args.http_budget, 0, args.n_trees
        )
        inproc, _ = run_comprf(
            X, y, False, known, 0.1, 0, (args.http_budget,), args.round, args.n_trees, anytime=False
        )
        print(
            f"\nHTTP end to end (wine, noise 10%, {answers:,} answers by simulate in "
            f"{seconds:.0f} s, {len(errors)} errors): accuracy {accuracy:.3f} on the "
            f"{total} unlabelled objects ({placed} placed in a leaf; unplaced count as "
            f"wrong); in-process, the same count of answers and the same rule: "
            f"{inproc[args.http_budget]:.3f}"
        )


if __name__ == "__main__":
    main()

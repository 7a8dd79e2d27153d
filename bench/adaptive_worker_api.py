"""Adaptive questions through the worker API of a real server (issue 33).

For each column and seed: a fresh ``tripletlab serve`` (SQLite by default, its job runner on,
as in production), a project of ``blobs30`` (bench/active_embedding.py's 30 points in 2-D,
as feature vectors), a plan of one strategy (``random``, or ``adaptive`` with the params
given; no gold questions, no repeats, so that every answer is a question of the column),
and a simulated crowd (``app.simulate``: ``--workers`` concurrent workers, each answer
flipped with probability ``--noise``) answering ``--budget`` questions through the worker
API, each worker pausing ``--think-ms`` between answers (a crowd's pace: refits run while
the workers answer, and a refit that lands late leaves the workers on the old batch).
The answers are then exported in the order they were stored; at each checkpoint a t-STE
(seed 0, best of 3 starts) is fit on the first k and scored on 3,000 noiseless random
triplets of the true points (held-out accuracy), as bench/active_embedding.py scores.

Columns are given as NAME or NAME:PARAMS_JSON, e.g. ``random``,
``adaptive``, ``'adaptive:{"refresh_every": 10}'``.

Run: ``nice -n 10 .venv/bin/python bench/adaptive_worker_api.py --columns random adaptive
[--seeds 3] [--budget 900] [--workers 5] [--think-ms 1000] [--noise 0.1]``; output in
``bench/results/adaptive_worker_api.txt``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _server import running_server  # noqa: E402

from app.learning.embedding import TSTE, triplet_accuracy  # noqa: E402
from app.simulate import simulate  # noqa: E402

N_TEST = 3000


def blobs30() -> np.ndarray:
    """bench/active_embedding.py's blobs30."""
    rng = np.random.default_rng(12)
    centres = rng.normal(scale=4.0, size=(3, 2))
    return centres[np.arange(30) % 3] + rng.normal(size=(30, 2))


def parse_column(text: str) -> tuple[str, str, dict]:
    name, _, params = text.partition(":")
    return text, name, json.loads(params) if params else {}


def run(column: str, args, seed: int, X: np.ndarray) -> tuple[np.ndarray, dict]:  # type: ignore[no-untyped-def]
    """The column's answers, as (anchor, near, far) rows in the order stored; and figures."""
    for attempt in range(3):  # a server that did not start in 120 s (a loaded machine): again
        try:
            return _run(column, args, seed, X)
        except RuntimeError as error:
            if attempt == 2:
                raise
            print(f"# seed {seed} {column}: the server did not start, again ({error!s:.80})")
    raise AssertionError("unreachable")


def _run(column: str, args, seed: int, X: np.ndarray) -> tuple[np.ndarray, dict]:  # type: ignore[no-untyped-def]
    _, kind, params = parse_column(column)
    with running_server(args.database_url, run_jobs="true") as server:
        headers = {"Authorization": f"Bearer {server.key}"}
        with httpx.Client(base_url=server.base, timeout=60) as client:
            assert client.post(
                "/api/projects", json={"slug": "blobs", "name": "blobs"}, headers=headers
            ).status_code == 201  # fmt: skip
            objects = [{"name": f"o{i}", "features": X[i].tolist()} for i in range(len(X))]
            assert client.post(
                "/api/projects/blobs/objects", json=objects, headers=headers
            ).status_code == 201  # fmt: skip
            spec = {"kind": kind, "weight": 1, "params": params}
            plan = {
                "strategies": [spec],
                "queries_per_session": 5000,
                "gold_rate": 0.0,
                "repeat_rate": 0.0,
                "seed": seed,
                "quality": {"reliability_every": 0},
            }
            response = client.put("/api/projects/blobs/plan", json=plan, headers=headers)
            assert response.status_code == 200, response.text
            started = time.perf_counter()
            result = simulate(
                server.base, "blobs", server.key, workers=args.workers, answers=args.budget,
                noise=args.noise, seed=seed, think_ms=args.think_ms,
                objects=(X, np.full(len(X), np.nan)),
            )  # fmt: skip
            seconds = time.perf_counter() - started
            rows = client.get("/api/projects/blobs/answers", headers=headers).json()
            jobs = client.get("/api/projects/blobs/jobs?limit=1000", headers=headers).json()
    triplets = np.array([(r["a"], r["b"], r["c"]) for r in rows if r["kind"] == "triplet"])
    done = [j for j in jobs["data"] if j["finished_at"] and j["started_at"]]

    def seconds_between(a: str, b: str) -> float:
        return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()

    figures = {
        "answers": len(triplets),
        "seconds": seconds,
        "errors": len(result.errors),
        "jobs": {
            status: sum(j["status"] == status for j in jobs["data"])
            for status in {j["status"] for j in jobs["data"]}
        },
        "p50_ms": float(np.median(result.latencies_ms)) if result.latencies_ms else 0.0,
        "job_s": float(
            np.median([seconds_between(j["started_at"], j["finished_at"]) for j in done])
        )
        if done
        else None,
        "queued_s": float(
            np.median([seconds_between(j["created_at"], j["started_at"]) for j in done])
        )
        if done
        else None,
    }
    return triplets, figures


def answers_to_reach(rows: list[tuple[int, float]], target: float) -> float:
    previous = None
    for answers, accuracy in rows:
        if accuracy >= target:
            if previous is None or previous[1] >= target:
                return float(answers)
            a0, y0 = previous
            return a0 + (target - y0) / (accuracy - y0) * (answers - a0)
        previous = (answers, accuracy)
    return float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--columns", nargs="+", default=["random", "adaptive"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budget", type=int, default=900)
    parser.add_argument("--workers", type=int, default=5)
    parser.add_argument("--think-ms", type=float, default=1000.0)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--every", type=int, default=30, help="answers between checkpoints")
    parser.add_argument("--database-url", default=None, help="PostgreSQL (default: SQLite)")
    parser.add_argument(
        "--save", type=Path, default=None, help="keep each run's answers here; reuse them if there"
    )
    args = parser.parse_args()
    X = blobs30()
    n = len(X)
    checkpoints = list(range(args.every, args.budget + 1, args.every))
    curves: dict[str, list[list[tuple[int, float]]]] = {c: [] for c in args.columns}
    for seed in range(args.seeds):
        test_rng = np.random.default_rng([seed, 99])
        test = np.array([test_rng.choice(n, 3, replace=False) for _ in range(N_TEST)])
        near = ((X[test[:, 0]] - X[test[:, 1]]) ** 2).sum(1) < (
            (X[test[:, 0]] - X[test[:, 2]]) ** 2
        ).sum(1)
        test = np.where(near[:, None], test, test[:, [0, 2, 1]])
        for column in args.columns:
            saved = args.save / f"{column.replace('/', '_')}-{seed}.npy" if args.save else None
            if saved is not None and saved.exists():
                triplets, figures = np.load(saved), {"loaded": str(saved)}
            else:
                triplets, figures = run(column, args, seed, X)
                if saved is not None:
                    saved.parent.mkdir(parents=True, exist_ok=True)
                    np.save(saved, triplets)
            rows = []
            for k in checkpoints:
                if k > len(triplets):
                    break
                fit = TSTE(n_components=2, n_init=3, random_state=0).fit(triplets[:k], n)
                rows.append((k, triplet_accuracy(fit.embedding_, test)))
            curves[column].append(rows)
            print(f"# seed {seed} {column}: {figures}", flush=True)
    report(args, curves)


def report(args, curves: dict) -> None:  # type: ignore[no-untyped-def]
    mean = {
        c: [
            (runs[0][i][0], float(np.mean([r[i][1] for r in runs])))
            for i in range(min(len(r) for r in runs))
        ]
        for c, runs in curves.items()
    }
    print(
        f"\n## blobs30 through the worker API, noise {args.noise:.0%}, {args.seeds} seeds, "
        f"{args.workers} workers, think {args.think_ms:.0f} ms"
    )
    print("answers  " + "  ".join(f"{c:>28}" for c in mean))
    for i in range(len(next(iter(mean.values())))):
        cells = [f"{mean[c][i][1]:.3f}".rjust(28) if i < len(mean[c]) else " " * 28 for c in mean]
        print(f"{next(iter(mean.values()))[i][0]:>7}  " + "  ".join(cells))
    if "random" in mean:
        target = mean["random"][-1][1]
        reach = {c: answers_to_reach(rows, target) for c, rows in mean.items()}
        text = "  ".join(
            f"{c} {'>' + str(args.budget) if not np.isfinite(v) else f'{v:.0f}'}"
            for c, v in reach.items()
        )
        print(f"answers to random's final accuracy {target:.3f}: {text}")
        for c, v in reach.items():
            if c != "random" and np.isfinite(v):
                print(f"  random/{c}: {reach['random'] / v:.2f}")


if __name__ == "__main__":
    main()

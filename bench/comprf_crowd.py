"""CompRF built by a simulated crowd through the worker API, against the library's forest.

Wine (178 objects, standardised features), 51 objects unlabelled (seeded), 10 trees,
redundancy 3, a simulated crowd (``tripletlab simulate``'s workers: Euclidean answers, each
flipped with probability 10 %) answering through a real ``tripletlab serve``. Every
``--every`` answers a ``comprf`` model is trained by the server and its predictions of the 51
unlabelled objects scored: how many have a prediction, how accurate, the share of
(object, tree) placements in leaves, whether the trees are complete. Until they are.

The reference: the library's ``ComparisonForestClassifier`` (10 trees, redundancy 3, the same
noisy oracle) fitted on the 127 labelled objects and predicting the 51, and the oracle calls
it makes for that (``n_asks_`` + ``n_predict_asks_``).

    .venv/bin/python bench/comprf_crowd.py [--postgres URL] [--every 1000] [--workers 4]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _server import reset_postgres, running_server

from app.learning.comprf import ComparisonForestClassifier
from app.learning.triplets import make_oracle
from app.simulate import simulate

N_TREES, REDUNDANCY, NOISE, UNLABELLED = 10, 3, 0.1, 51


def wine(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler

    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    hidden = np.sort(np.random.default_rng(seed).permutation(len(y))[:UNLABELLED])
    return X, y, hidden


def library(X: np.ndarray, y: np.ndarray, hidden: np.ndarray, seed: int) -> tuple[float, int]:
    """The library forest's accuracy on the hidden objects and the oracle calls it made."""
    train = np.array(y)
    train[hidden] = -1
    oracle = make_oracle(X, noise=NOISE, random_state=seed)
    forest = ComparisonForestClassifier(
        n_estimators=N_TREES, redundancy=REDUNDANCY, random_state=seed
    ).fit(oracle, train)
    predicted = forest.predict(oracle, hidden)
    return float(np.mean(predicted == y[hidden])), forest.n_asks_ + forest.n_predict_asks_


def train(client: httpx.Client, headers: dict[str, str]) -> dict:
    job = client.post("/api/projects/wine/models", json={"kind": "comprf"}, headers=headers)
    assert job.status_code in (200, 201, 202), job.text
    job_id = job.json()["id"]
    while True:
        state = client.get(f"/api/jobs/{job_id}", headers=headers).json()
        if state["status"] in ("succeeded", "failed"):
            break
        time.sleep(0.2)
    assert state["status"] == "succeeded", state
    model_id = state["model_id"]
    models = client.get("/api/projects/wine/models", headers=headers).json()["data"]
    model = next(m for m in models if m["id"] == model_id)
    predictions = client.get(f"/api/models/{model_id}/predictions", headers=headers).json()
    return {"metrics": model["metrics"], "predictions": predictions["data"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", help="PostgreSQL URL (its schema is emptied)")
    parser.add_argument("--every", type=int, default=1000, help="answers between models")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--most", type=int, default=40_000, help="answers at most")
    args = parser.parse_args()
    X, y, hidden = wine(args.seed)
    reference_accuracy, reference_asks = library(X, y, hidden, args.seed)
    if args.postgres:
        reset_postgres(args.postgres)
    rows = []
    with running_server(args.postgres, run_jobs="true") as server:
        headers = {"Authorization": f"Bearer {server.key}"}
        with httpx.Client(base_url=server.base, timeout=120) as client:
            client.post("/api/projects", json={"slug": "wine", "name": "Wine"}, headers=headers)
            objects = [
                {"name": f"w{i}", "features": X[i].round(6).tolist(),
                 **({} if i in set(hidden) else {"label": str(y[i])})}
                for i in range(len(y))
            ]  # fmt: skip
            assert client.post("/api/projects/wine/objects", json=objects, headers=headers)
            spec = {"kind": "comprf", "params": {"n_trees": N_TREES, "redundancy": REDUNDANCY}}
            plan = {"strategies": [spec], "queries_per_session": 200, "repeat_rate": 0}
            assert client.put("/api/projects/wine/plan", json=plan, headers=headers).is_success
            answered, started = 0, time.monotonic()
            while answered < args.most:
                result = simulate(
                    server.base, "wine", server.key, workers=args.workers, answers=args.every,
                    noise=NOISE, seed=args.seed * 1000 + answered,
                )  # fmt: skip
                answered += result.answers
                trained = train(client, headers)
                metrics = trained["metrics"]
                predicted = {p["index"]: p["label"] for p in trained["predictions"]}
                labelled = [i for i in hidden if predicted.get(int(i)) is not None]
                right = [predicted[int(i)] == str(y[i]) for i in labelled]
                row = (answered, time.monotonic() - started, len(labelled),
                       float(np.mean(right)) if right else float("nan"),
                       metrics.get("share_in_leaves", float("nan")), metrics["complete"],
                       len(result.errors))  # fmt: skip
                rows.append(row)
                n, seconds, got, accuracy, leaves, complete, errors = row
                print(f"answers {n:6d}  {seconds:6.0f} s  predicted {got:2d}/51  accuracy "
                      f"{accuracy:.3f}  in leaves {leaves:.2f}  complete {complete}  "
                      f"errors {errors}", flush=True)  # fmt: skip
                if metrics["complete"] or result.answers == 0:
                    break
    database = "PostgreSQL" if args.postgres else "SQLite"
    print(f"\nCompRF by a simulated crowd (wine, {len(y)} objects, {UNLABELLED} unlabelled, "
          f"{N_TREES} trees, redundancy {REDUNDANCY}, noise {NOISE:.0%}, {args.workers} workers, "
          f"{database}, seed {args.seed})")  # fmt: skip
    print("| answers | predicted | accuracy | in leaves | complete |")
    print("|---:|---:|---:|---:|---|")
    for answered, _, n, accuracy, leaves, complete, _ in rows:
        print(f"| {answered:,} | {n}/{UNLABELLED} | {accuracy:.3f} | {leaves:.2f} | {complete} |")
    final = rows[-1]
    print(
        f"\nlibrary forest: accuracy {reference_accuracy:.3f} with {reference_asks:,} oracle calls"
    )
    print(f"crowd: {final[0]:,} answers = {final[0] / reference_asks:.2f}x the library's calls, "
          f"accuracy {final[3]:.3f} ({final[3] - reference_accuracy:+.3f}); "
          f"trees complete: {final[5]}")  # fmt: skip
    third = [r for r in rows if r[0] >= reference_asks / 3]
    if third:
        print(f"at a third of the library's calls ({third[0][0]:,} answers): predicted "
              f"{third[0][2]}/{UNLABELLED}, accuracy {third[0][3]:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()

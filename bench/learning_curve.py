"""End to end on the digits demo: simulated workers answer, automatic retraining runs,
and the models' honest figures trace the learning curve.

A real `tripletlab serve` (with its job runner and process pool) serves the digits demo
(120 handwritten digits, labels known). Simulated workers answer through the worker API
from the digits' pixels with 10% answer noise, in chunks; retraining policies for
TripletBoost and the k1 kernel fire every chunk. Printed per model: answers seen,
held-out triplet accuracy (kernel) and cross-validated label accuracy (TripletBoost, with
abstentions counted as errors; kernel SVM on the kernel).

    .venv/bin/python bench/learning_curve.py [--answers 20000] [--chunk 2000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import httpx

sys.path.insert(0, os.path.dirname(__file__))
from _server import running_server

from app.simulate import simulate


def wait_idle(client: httpx.Client, headers: dict[str, str], timeout: float = 1800) -> None:
    """Until the project has no queued or running job."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = client.get("/api/projects/digits-demo/jobs", headers=headers).json()["data"]
        if not any(j["status"] in ("queued", "running") for j in jobs):
            return
        time.sleep(2)
    raise TimeoutError("jobs did not finish")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--answers", type=int, default=20_000)
    parser.add_argument("--chunk", type=int, default=2_000)
    parser.add_argument("--workers", type=int, default=20)
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=2000, help="TripletBoost rounds")
    args = parser.parse_args()

    with running_server(None, demo="true", job_workers="1") as (base, key, _):
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=base, timeout=60) as client:
            for kind, params in (("tripletboost", {"n_estimators": args.rounds}), ("kernel", {})):
                policy = {
                    "kind": kind,
                    "params": params,
                    "every_n_answers": args.chunk,
                    "min_interval_s": 0,
                }
                response = client.put(
                    "/api/projects/digits-demo/retrain", json=policy, headers=headers
                )
                assert response.status_code == 200, response.text
            given = 0
            started = time.perf_counter()
            while given < args.answers:
                result = simulate(
                    base, "digits-demo", key, workers=args.workers, answers=args.chunk,
                    noise=args.noise, seed=given,
                )  # fmt: skip
                assert not result.errors, result.errors[:3]
                given += result.answers
                time.sleep(3)  # let the runner see the threshold
                wait_idle(client, headers)
                print(
                    f"{given:>7} answers given, {time.perf_counter() - started:6.0f} s", flush=True
                )
            models = client.get("/api/projects/digits-demo/models", headers=headers).json()["data"]

    print(
        "\nlearning curve on the digits demo (120 digits, 10 classes), simulated workers, "
        f"answer noise {args.noise:.0%}"
    )
    print(
        f"{'model':14s} {'version':>7s} {'answers':>8s} {'held-out triplets':>18s} "
        f"{'CV label acc.':>14s} {'abstain':>8s} {'fit s':>7s}"
    )
    for model in sorted(models, key=lambda m: (m["kind"], m["version"])):
        metrics = model["metrics"]
        heldout = metrics.get("heldout_triplet_accuracy")
        label = metrics.get("cv_label_accuracy")
        abstain = metrics.get("cv_abstention_rate")
        print(
            f"{model['kind']:14s} {model['version']:>7d} {model['n_answers']:>8d} "
            f"{'' if heldout is None else f'{heldout:.3f}':>18s} "
            f"{'' if label is None else f'{label:.3f}':>14s} "
            f"{'' if abstain is None else f'{abstain:.3f}':>8s} {model['training_seconds']:7.1f}"
        )


if __name__ == "__main__":
    main()

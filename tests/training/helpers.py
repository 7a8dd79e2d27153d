"""A committed project with objects, triplets and pairs, for training tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from app.learning.triplets import make_random_triplets
from app.training.executor import Executor
from app.training.runner import JobRunner
from tests.factories import committed_requests


@dataclass
class StudyData:
    slug: str
    X: np.ndarray
    labels: list[str | None]
    triplets: np.ndarray
    pairs: np.ndarray


def committed_client(app, engine: Engine) -> Iterator[tuple[TestClient, dict[str, str]]]:  # type: ignore[no-untyped-def]
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        yield client, headers


def make_study(
    client: TestClient,
    headers: dict[str, str],
    *,
    n: int = 40,
    n_triplets: int = 1500,
    n_pairs: int = 120,
    seed: int = 0,
) -> StudyData:
    """Two Gaussian blobs in 2-D; every third object unlabelled; a quality r(x) = x₀ + x₁."""
    rng = np.random.default_rng(seed)
    centres = np.array([[-2.0, 0.0], [2.0, 0.0]])
    classes = np.arange(n) % 2
    X = (centres[classes] + rng.normal(scale=0.6, size=(n, 2))).round(6)
    labels: list[str | None] = [None if i % 3 == 0 else f"class-{c}" for i, c in enumerate(classes)]
    slug = f"study-{uuid.uuid4().hex[:8]}"
    assert (
        client.post("/api/projects", json={"slug": slug, "name": slug}, headers=headers).status_code
        == 201
    )
    objects = [
        {"name": f"o{i}", "features": X[i].tolist(), **({"label": labels[i]} if labels[i] else {})}
        for i in range(n)
    ]
    assert (
        client.post(f"/api/projects/{slug}/objects", json=objects, headers=headers).status_code
        == 201
    )
    triplets = make_random_triplets(X, n_triplets=n_triplets, random_state=seed)
    left, right = rng.choice(n, size=(2, n_pairs))
    keep = left != right
    left, right = left[keep], right[keep]
    quality = X.sum(axis=1)
    difference = quality[right] - quality[left]
    outcome = np.where(np.abs(difference) < 0.5, 0, np.sign(difference)).astype(int)
    pairs = np.column_stack([left, right, outcome])
    response = client.post(
        f"/api/projects/{slug}/answers",
        json={"triplets": triplets.tolist(), "pairs": pairs.tolist()},
        headers=headers,
    )
    assert response.status_code == 201, response.text
    return StudyData(slug, X, labels, np.asarray(triplets), pairs)


def wait_for(
    client: TestClient,
    headers: dict[str, str],
    job_id: int,
    runner: JobRunner,
    timeout: float = 120,
) -> dict:
    """Drive the runner until the job is finished; its final state."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runner.tick()
        job = client.get(f"/api/jobs/{job_id}", headers=headers).json()
        if job["status"] in ("succeeded", "failed", "cancelled") and job_id not in runner.running:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def make_runner(engine: Engine, executor: Executor) -> JobRunner:
    url = engine.url.render_as_string(hide_password=False)
    return JobRunner(url, executor, capacity=1, poll_s=0.1)

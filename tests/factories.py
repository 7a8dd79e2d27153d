"""Small builders of test data through the public API."""

from __future__ import annotations

from typing import Any

import numpy as np
from fastapi.testclient import TestClient


def make_project(
    client: TestClient, headers: dict[str, str], slug: str = "study", **fields: Any
) -> dict:
    response = client.post(
        "/api/projects", json={"slug": slug, "name": slug.title(), **fields}, headers=headers
    )
    assert response.status_code == 201, response.text
    return response.json()


def make_objects(
    client: TestClient,
    headers: dict[str, str],
    slug: str,
    n: int,
    *,
    n_features: int = 2,
    labels: bool = True,
    seed: int = 0,
) -> list[dict]:
    rng = np.random.default_rng(seed)
    objects = [
        {
            "name": f"object {i}",
            "features": rng.normal(size=n_features).round(6).tolist(),
            **({"label": "ab"[i % 2]} if labels else {}),
        }
        for i in range(n)
    ]
    response = client.post(f"/api/projects/{slug}/objects", json=objects, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()["data"]


def random_triplets(n_objects: int, m: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    rows = np.array([rng.choice(n_objects, 3, replace=False) for _ in range(m)])
    return rows.tolist()

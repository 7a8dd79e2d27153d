"""The simulated crowd answers every shape from the objects' features, with the same noise
model: without noise its answers are the features' own; with noise some are random."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.simulate import simulate
from tests.factories import make_objects, make_project, set_plan


def nearest_answer(X: np.ndarray, row: dict) -> int | list[int]:
    objects = row["objects"]
    if row["kind"] == "odd_one_out":
        pairs = [(0, 1, 2), (0, 2, 1), (1, 2, 0)]
        _, _, odd = min(pairs, key=lambda p: np.linalg.norm(X[objects[p[0]]] - X[objects[p[1]]]))
        return objects[odd]
    distances = np.linalg.norm(X[objects[1:]] - X[objects[0]], axis=1)
    return [objects[1:][i] for i in np.argsort(distances)[: len(row["choice"])]]


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_the_simulated_crowd_answers_every_shape(app, client, auth_headers, noise):
    make_project(client, auth_headers, "sim-shapes")
    objects = make_objects(client, auth_headers, "sim-shapes", 20, n_features=3)
    X = np.array([o["features"] for o in objects])
    strategies = [
        {"kind": "random", "shape": {"type": "odd_one_out"}},
        {"kind": "random", "shape": {"type": "rank", "n": 8, "k": 2}},
    ]
    set_plan(client, auth_headers, "sim-shapes", strategies=strategies, queries_per_session=20)
    result = simulate(
        "http://testserver", "sim-shapes", "", workers=2, answers=60, noise=noise, seed=1,
        objects=(X, np.full(len(X), np.nan)), client_factory=lambda: TestClient(app),
    )  # fmt: skip
    assert result.answers == 60 and not result.errors
    rows = client.get("/api/projects/sim-shapes/answers", headers=auth_headers).json()
    assert {row["shape"] for row in rows} == {"odd_one_out", "8-rank-2"}
    assert {row["source"] for row in rows} == {"simulated"}
    agree = np.mean([nearest_answer(X, row) == row["choice"] for row in rows])
    if noise == 0:
        assert agree == 1.0
    else:
        assert 0.2 < agree < 0.9

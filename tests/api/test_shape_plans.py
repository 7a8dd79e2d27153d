"""A strategy's ``shape``: plans that ask odd-one-outs and ranked grids, and bad shapes
refused with 422 naming the field."""

from __future__ import annotations

import pytest

from tests.factories import make_objects, make_project, set_plan


@pytest.fixture
def project(client, auth_headers):
    make_project(client, auth_headers, "shapes")
    make_objects(client, auth_headers, "shapes", 12)


GOOD = [
    {"kind": "random", "shape": {"type": "rank", "n": 8, "k": 2}},
    {"kind": "random", "shape": {"type": "odd_one_out"}},
    {
        "kind": "landmark_k1",
        "shape": {"type": "rank", "n": 4, "k": 1},
        "params": {"n_landmarks": 6},
    },
    {"kind": "landmark_k2", "shape": {"type": "odd_one_out"}},
    {"kind": "adaptive", "shape": {"type": "rank", "n": 6, "k": 3}},
    {"kind": "gold", "shape": {"type": "odd_one_out"}},
    {"kind": "random", "shape": {"type": "triplet"}},
]


@pytest.mark.parametrize("strategy", GOOD, ids=lambda s: f"{s['kind']}-{s['shape']['type']}")
def test_shaped_plans_are_stored(client, auth_headers, project, strategy):
    sent = set_plan(client, auth_headers, "shapes", strategies=[strategy])
    assert sent["strategies"][0]["shape"]["type"] == strategy["shape"]["type"]
    assert client.get("/api/projects/shapes/plan", headers=auth_headers).json() == sent


BAD = {
    "unknown-type": ({"type": "hexagon"}, "random", "strategies.0.shape"),
    "pair-type": ({"type": "pair"}, "random", "strategies.0.shape"),
    "rank-without-k": ({"type": "rank", "n": 4}, "random", "strategies.0.shape"),
    "rank-k-too-big": ({"type": "rank", "n": 4, "k": 4}, "random", "strategies.0.shape"),
    "rank-n-too-big": ({"type": "rank", "n": 10, "k": 2}, "random", "strategies.0.shape"),
    "n-on-odd-one-out": ({"type": "odd_one_out", "n": 4}, "random", "strategies.0.shape"),
    "extra-field": ({"type": "triplet", "colour": 1}, "random", "strategies.0.shape"),
    "pairs-shaped": ({"type": "odd_one_out"}, "pairs", "strategies.0.shape"),
    "comprf-shaped": ({"type": "rank", "n": 4, "k": 1}, "comprf", "strategies.0.shape"),
    "grid-too-big": ({"type": "rank", "n": 9, "k": 1}, "random", "strategies.0.shape"),
}


@pytest.mark.parametrize("shape,kind,field", BAD.values(), ids=BAD.keys())
def test_bad_shapes_are_422_naming_the_field(client, auth_headers, project, shape, kind, field):
    kept = set_plan(client, auth_headers, "shapes")
    plan = {"strategies": [{"kind": kind, "shape": shape}]}
    if shape.get("n") == 9:  # 10 objects shown, the project has 12: cut it to 8 objects
        plan["strategies"][0]["shape"] = {"type": "rank", "n": 9, "k": 1}
        make_project(client, auth_headers, "few")
        make_objects(client, auth_headers, "few", 8)
        response = client.put("/api/projects/few/plan", json=plan, headers=auth_headers)
    else:
        response = client.put("/api/projects/shapes/plan", json=plan, headers=auth_headers)
    assert response.status_code == 422, response.text
    loc = response.json()["errors"][0]["loc"]
    assert ".".join(str(part) for part in loc[1:4]) == field, response.text
    assert client.get("/api/projects/shapes/plan", headers=auth_headers).json() == kept

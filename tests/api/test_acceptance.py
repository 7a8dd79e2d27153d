"""The foundation issue's acceptance run: 100 objects, 10,000 triplets and 1,000 pairs in,
exactly the same out as CSV and as .npy; bad input afterwards changes no row count."""

from __future__ import annotations

import csv
import io

import numpy as np

from tests.factories import make_project


def test_round_trip_of_a_realistic_import(client, admin_headers):
    rng = np.random.default_rng(42)
    make_project(client, admin_headers, "acceptance")
    features = rng.normal(size=(100, 5)).round(6)
    objects = [
        {"name": f"obj-{i}", "features": features[i].tolist(), "label": f"c{i % 4}"}
        for i in range(100)
    ]
    created = client.post("/api/projects/acceptance/objects", json=objects, headers=admin_headers)
    assert [o["index"] for o in created.json()["data"]] == list(range(100))

    triplets = np.array([rng.choice(100, 3, replace=False) for _ in range(10_000)])
    left, right = rng.choice(100, size=(2, 3000))
    keep = np.flatnonzero(left != right)[:1000]
    pairs = np.column_stack([left[keep], right[keep], rng.integers(-1, 2, size=1000)])
    response = client.post(
        "/api/projects/acceptance/answers",
        json={"triplets": triplets.tolist(), "pairs": pairs.tolist()},
        headers=admin_headers,
    )
    assert response.json() == {"triplets": 10_000, "pairs": 1000}

    exported = client.get("/api/projects/acceptance/answers?format=csv", headers=admin_headers)
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    got_triplets = [[int(r["a"]), int(r["b"]), int(r["c"])] for r in rows if r["kind"] == "triplet"]
    got_pairs = [[int(r["a"]), int(r["b"]), int(r["outcome"])] for r in rows if r["kind"] == "pair"]
    assert got_triplets == triplets.tolist()
    assert got_pairs == pairs.tolist()
    assert all(r["a_name"] == f"obj-{r['a']}" for r in rows)

    npy = client.get("/api/projects/acceptance/answers/triplets.npy", headers=admin_headers)
    np.testing.assert_array_equal(np.load(io.BytesIO(npy.content)), triplets)

    back = client.get("/api/projects/acceptance/objects?limit=100", headers=admin_headers).json()
    assert [o["features"] for o in back["data"]] == features.tolist()
    assert [o["label"] for o in back["data"]] == [f"c{i % 4}" for i in range(100)]

    before = client.get("/api/projects/acceptance", headers=admin_headers).json()
    bad_requests = [
        ("post", "/api/projects/acceptance/answers", {"triplets": [[0, 1, 100]]}),
        ("post", "/api/projects/acceptance/answers", {"pairs": [[0, 1, 5]]}),
        ("post", "/api/projects/acceptance/objects", [{"name": "x", "features": [1.0]}]),
    ]
    for method, path, body in bad_requests:
        assert (
            400 <= client.request(method, path, json=body, headers=admin_headers).status_code < 500
        )
    after = client.get("/api/projects/acceptance", headers=admin_headers).json()
    counts = ("n_objects", "n_answers", "n_triplets", "n_pairs")
    assert {k: after[k] for k in counts} == {k: before[k] for k in counts}

"""Importing comparisons and exporting every answer exactly as it went in."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from app.learning.triplets import check_triplets
from tests.factories import (
    answer_all,
    make_objects,
    make_project,
    open_session,
    random_triplets,
    set_plan,
)


@pytest.fixture
def project(client, auth_headers):
    project = make_project(client, auth_headers, "ans")
    make_objects(client, auth_headers, "ans", 10)
    return project


def n_answers(client, headers) -> int:
    return client.get("/api/projects/ans", headers=headers).json()["n_answers"]


def test_import_triplets_and_pairs(client, auth_headers, project):
    response = client.post(
        "/api/projects/ans/answers",
        json={"triplets": [[0, 1, 2], [3, 4, 5]], "pairs": [[0, 1, -1], [2, 3, 0], [4, 5, 1]]},
        headers=auth_headers,
    )
    assert response.status_code == 201
    assert response.json() == {"triplets": 2, "pairs": 3}
    stats = client.get("/api/projects/ans", headers=auth_headers).json()
    assert (stats["n_triplets"], stats["n_pairs"]) == (2, 3)


def test_export_json_round_trip(client, auth_headers, project):
    triplets = random_triplets(10, 50)
    pairs = [[0, 1, -1], [1, 2, 0], [2, 3, 1]]
    client.post(
        "/api/projects/ans/answers",
        json={"triplets": triplets, "pairs": pairs},
        headers=auth_headers,
    )
    exported = client.get("/api/projects/ans/answers?format=json", headers=auth_headers).json()
    assert [[r["a"], r["b"], r["c"]] for r in exported if r["kind"] == "triplet"] == triplets
    assert [[r["a"], r["b"], r["outcome"]] for r in exported if r["kind"] == "pair"] == pairs
    first = exported[0]
    assert first["source"] == "import"
    assert first["a_name"] == f"object {triplets[0][0]}"
    assert {"participant", "session_id", "server_ms", "client_ms", "created_at"} <= first.keys()


def test_export_csv_round_trip_and_reimport(client, auth_headers, project):
    triplets = random_triplets(10, 30, seed=3)
    pairs = [[5, 6, 0], [7, 8, 1]]
    client.post(
        "/api/projects/ans/answers",
        json={"triplets": triplets, "pairs": pairs},
        headers=auth_headers,
    )
    response = client.get("/api/projects/ans/answers?format=csv", headers=auth_headers)
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert [
        [int(r["a"]), int(r["b"]), int(r["c"])] for r in rows if r["kind"] == "triplet"
    ] == triplets
    assert [
        [int(r["a"]), int(r["b"]), int(r["outcome"])] for r in rows if r["kind"] == "pair"
    ] == pairs
    # An export is a valid import.
    again = client.post(
        "/api/projects/ans/answers",
        files={"file": ("answers.csv", response.content, "text/csv")},
        headers=auth_headers,
    )
    assert again.status_code == 201
    assert again.json() == {"triplets": 30, "pairs": 2}


def test_export_npy(client, auth_headers, project):
    triplets = random_triplets(10, 40, seed=5)
    client.post(
        "/api/projects/ans/answers",
        json={"triplets": triplets, "pairs": [[0, 1, 0]]},
        headers=auth_headers,
    )
    response = client.get("/api/projects/ans/answers/triplets.npy", headers=auth_headers)
    assert response.status_code == 200
    array = np.load(io.BytesIO(response.content), allow_pickle=False)
    assert array.shape == (40, 3)
    assert array.dtype.kind == "i"
    np.testing.assert_array_equal(array, triplets)


def test_export_npy_leaves_out_gold_questions(client, auth_headers, project):
    """Identity checks are rows (a, a, c): attention checks, not triplets in the library's
    format. The npy leaves out every gold question, as training does; the JSON keeps them."""
    set_plan(client, auth_headers, "ans", gold_rate=0.5, queries_per_session=30)
    session_id, headers = open_session(client, "ans")
    answered = answer_all(client, session_id, headers)
    exported = client.get("/api/projects/ans/answers", headers=auth_headers).json()
    gold = [row for row in exported if row["strategy"] == "gold"]
    assert len(exported) == len(answered) == 30 and gold
    assert any(row["a"] == row["b"] for row in gold)  # identity checks among them
    response = client.get("/api/projects/ans/answers/triplets.npy", headers=auth_headers)
    array = np.load(io.BytesIO(response.content), allow_pickle=False)
    assert len(array) == 30 - len(gold)
    check_triplets(array, 10)  # every row three distinct objects


def test_export_of_an_empty_project(client, auth_headers, project):
    assert client.get("/api/projects/ans/answers", headers=auth_headers).json() == []
    empty = client.get("/api/projects/ans/answers/triplets.npy", headers=auth_headers)
    assert np.load(io.BytesIO(empty.content)).shape == (0, 3)


BAD_IMPORTS = {
    "unknown-index": ({"triplets": [[0, 1, 10]]}, "out of range"),
    "negative-index": ({"triplets": [[0, -1, 2]]}, "negative"),
    "repeated-in-triplet": ({"triplets": [[0, 1, 0]]}, "distinct"),
    "repeated-in-pair": ({"pairs": [[3, 3, 0]]}, "itself"),
    "pair-unknown-index": ({"pairs": [[3, 11, 0]]}, "out of range"),
    "bad-outcome": ({"pairs": [[0, 1, 2]]}, "outcome"),
    "ragged": ({"triplets": [[0, 1, 2], [0, 1]]}, "triplets.2"),
    "float-index": ({"triplets": [[0, 1, 2.5]]}, "integer"),
    "string-index": ({"triplets": [[0, 1, "2"]]}, "integer"),
    "bool-index": ({"triplets": [[0, 1, True]]}, "integer"),
    "nothing": ({}, "nothing to import"),
    "unknown-key": ({"quads": [[0, 1, 2, 3]]}, "quads"),
}


@pytest.mark.parametrize("body,expected", BAD_IMPORTS.values(), ids=BAD_IMPORTS.keys())
def test_bad_imports_are_4xx_and_store_nothing(client, auth_headers, project, body, expected):
    client.post("/api/projects/ans/answers", json={"triplets": [[0, 1, 2]]}, headers=auth_headers)
    # A valid row before the bad one must not be stored either.
    for key in ("triplets", "pairs"):
        if key in body:
            body = {**body, key: [[0, 1, 2] if key == "triplets" else [0, 1, 0], *body[key]]}
    response = client.post("/api/projects/ans/answers", json=body, headers=auth_headers)
    assert 400 <= response.status_code < 500, response.text
    assert expected in response.json()["detail"]
    assert n_answers(client, auth_headers) == 1


def test_malformed_json_is_422(client, auth_headers, project):
    response = client.post(
        "/api/projects/ans/answers",
        content=b'{"triplets": [[0, 1, 2]',
        headers={**auth_headers, "content-type": "application/json"},
    )
    assert response.status_code == 422
    assert "malformed JSON" in response.json()["detail"]
    assert n_answers(client, auth_headers) == 0


BAD_CSVS = {
    "missing-columns": (b"a,b,c\n0,1,2\n", "lacks the columns"),
    "bad-kind": (b"kind,a,b,c,outcome\nquad,0,1,2,\n", "kind"),
    "not-a-number": (b"kind,a,b,c,outcome\ntriplet,0,x,2,\n", "line 2"),
    "out-of-range": (b"kind,a,b,c,outcome\ntriplet,0,1,99,\n", "out of range"),
}


@pytest.mark.parametrize("content,expected", BAD_CSVS.values(), ids=BAD_CSVS.keys())
def test_bad_csv_imports(client, auth_headers, project, content, expected):
    response = client.post(
        "/api/projects/ans/answers",
        files={"file": ("a.csv", content, "text/csv")},
        headers=auth_headers,
    )
    assert 400 <= response.status_code < 500
    assert expected in response.json()["detail"]
    assert n_answers(client, auth_headers) == 0


def test_unknown_project_import_is_404(client, auth_headers):
    response = client.post(
        "/api/projects/ghost/answers", json={"triplets": [[0, 1, 2]]}, headers=auth_headers
    )
    assert response.status_code == 404

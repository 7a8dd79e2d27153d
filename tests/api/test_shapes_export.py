"""A study of odd-one-outs and ranked grids exported and trained on: the CSV/JSON export has
a row per answer with its shape and choice; ``triplets.npy`` and the training data hold the
triplets the answers imply (the one rule of ``app.learning.shapes``); ``{shape}.npy`` the
answers as given; every model kind that learns from triplets trains on them."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
from sqlalchemy import select

from app.db.models import Project
from app.learning.shapes import Shape, implied_triplets
from app.training.data import load_training_data
from app.training.kinds import KINDS
from tests.factories import answer_all, make_objects, make_project, open_session, set_plan


@pytest.fixture
def shaped_study(client, auth_headers):
    make_project(client, auth_headers, "shapes-out")
    make_objects(client, auth_headers, "shapes-out", 16)
    strategies = [
        {"kind": "random", "shape": {"type": "odd_one_out"}},
        {"kind": "random", "shape": {"type": "rank", "n": 4, "k": 2}},
        {"kind": "random"},
    ]
    set_plan(
        client, auth_headers, "shapes-out", strategies=strategies, queries_per_session=30,
        gold_rate=0.1, repeat_rate=0,
        # Always the first shown, right or not: nobody flagged, every answer trained on.
        quality={"max_position_bias": 1.0, "min_gold_accuracy": 0.0},
    )  # fmt: skip
    for name in ("p1", "p2"):
        session_id, headers = open_session(client, "shapes-out", participant=name)
        answer_all(client, session_id, headers)


def npy(client, auth_headers, name):  # type: ignore[no-untyped-def]
    response = client.get(f"/api/projects/shapes-out/answers/{name}.npy", headers=auth_headers)
    assert response.status_code == 200, response.text
    return np.load(io.BytesIO(response.content))


def test_exports_have_a_row_per_answer_with_its_shape_and_choice(
    client, auth_headers, shaped_study
):
    rows = client.get("/api/projects/shapes-out/answers", headers=auth_headers).json()
    assert len(rows) == 60
    assert {row["shape"] for row in rows} == {"triplet", "odd_one_out", "4-rank-2"}
    expected = []
    for row in rows:
        if row["shape"] == "4-rank-2":
            assert row["kind"] == "rank" and len(row["objects"]) == 5
            assert isinstance(row["choice"], list) and len(row["choice"]) == 2
            assert row["a"] == row["objects"][0] and row["b"] == row["choice"][0]
            shape = Shape("rank", 4, 2)
        elif row["shape"] == "odd_one_out":
            assert len(row["objects"]) == 3 and row["choice"] == row["c"]
            shape = Shape("odd_one_out")
        else:
            assert row["objects"] == [row["a"], row["b"], row["c"]] and row["choice"] == row["b"]
            shape = Shape()
        if row["strategy"] != "gold":
            expected += implied_triplets(shape, row["objects"], row["choice"])
    text = client.get(
        "/api/projects/shapes-out/answers?format=csv", headers=auth_headers
    ).content.decode()
    table = list(csv.DictReader(io.StringIO(text)))
    assert [json.loads(r["choice"]) for r in table] == [r["choice"] for r in rows]
    assert [r["shape"] for r in table] == [r["shape"] for r in rows]

    triplets = npy(client, auth_headers, "triplets")
    assert triplets.tolist() == [list(t) for t in expected]
    counts = {s: sum(r["shape"] == s and r["strategy"] != "gold" for r in rows)
              for s in ("triplet", "odd_one_out", "4-rank-2")}  # fmt: skip
    assert len(triplets) == counts["triplet"] + 2 * counts["odd_one_out"] + 5 * counts["4-rank-2"]

    odd = npy(client, auth_headers, "odd_one_out")
    assert odd.shape == (counts["odd_one_out"], 3)
    grids = npy(client, auth_headers, "4-rank-2")
    assert grids.shape == (counts["4-rank-2"], 5)
    given = [r for r in rows if r["shape"] == "4-rank-2" and r["strategy"] != "gold"]
    for trial, row in zip(grids.tolist(), given, strict=True):
        assert trial[:3] == [row["objects"][0], *row["choice"]]
        assert sorted(trial[1:]) == sorted(row["objects"][1:])
    assert npy(client, auth_headers, "8-rank-2").shape == (0, 9)
    for bad in ("hexagon", "4-rank-4", "12-rank-2"):
        response = client.get(f"/api/projects/shapes-out/answers/{bad}.npy", headers=auth_headers)
        assert response.status_code == 422, (bad, response.text)


@pytest.mark.parametrize(
    "kind", ["embedding", "kernel", "metricboost", "tripletboost", "reliability"]
)
def test_every_triplet_kind_trains_on_the_implied_triplets(db, shaped_study, kind):
    project = db.scalars(select(Project).where(Project.slug == "shapes-out")).one()
    data = load_training_data(db, project)
    assert data.n_answers <= 60  # gold questions left out
    assert len(data.triplets) == len(data.triplet_ids) == len(data.triplet_sides)
    assert len(data.triplets) > data.n_answers  # a shaped answer gives several
    spec = KINDS[kind]
    params = spec.params(**({"n_estimators": 50} if kind == "tripletboost" else {}))
    assert spec.requirements(data, params) == []
    trained = spec.train(data, params, lambda fraction, text: None)
    assert trained.metrics


def test_the_study_bundle_keeps_every_shape(client, auth_headers, shaped_study):
    import zipfile

    response = client.get("/api/projects/shapes-out/bundle.zip", headers=auth_headers)
    assert response.status_code == 200, response.text
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    name = next(n for n in archive.namelist() if n.endswith("_data.csv"))
    table = list(csv.DictReader(io.StringIO(archive.read(name).decode())))
    exported = client.get("/api/projects/shapes-out/answers", headers=auth_headers).json()
    assert len(table) == len(exported) == 60
    for row, answer in zip(table, exported, strict=True):
        if answer["kind"] == "rank":
            assert json.loads(row["objects"]) == answer["objects"]
            assert json.loads(row["choices"]) == answer["choice"]
        elif answer["kind"] == "odd_one_out":
            assert json.loads(row["objects"]) == answer["objects"] and row["choices"] == ""
        else:
            assert row["objects"] == row["choices"] == ""


@pytest.fixture
def grid_study(client, auth_headers):
    """A study of 4-rank-2 grids only, answered by two participants."""
    make_project(client, auth_headers, "grids-only")
    make_objects(client, auth_headers, "grids-only", 12)
    strategies = [{"kind": "random", "shape": {"type": "rank", "n": 4, "k": 2}}]
    set_plan(
        client, auth_headers, "grids-only", strategies=strategies, queries_per_session=20,
        repeat_rate=0, quality={"max_position_bias": 1.0, "min_gold_accuracy": 0.0},
    )  # fmt: skip
    for name in ("p1", "p2"):
        session_id, headers = open_session(client, "grids-only", participant=name)
        answer_all(client, session_id, headers)


@pytest.mark.parametrize(
    ("method", "likelihood", "used"),
    [("tste", "auto", "shape"), ("soe", "auto", "triplets"), ("tste", "triplets", "triplets")],
)
def test_the_embedding_fits_a_grid_study_with_the_shapes_own_likelihood(
    db, grid_study, method, likelihood, used
):
    project = db.scalars(select(Project).where(Project.slug == "grids-only")).one()
    data = load_training_data(db, project)
    assert len(data.shaped_answers) == 40 and len(data.triplets) == 40 * 5  # 3 + 2 each
    spec = KINDS["embedding"]
    params = spec.params(method=method, likelihood=likelihood, n_init=1)
    assert spec.requirements(data, params) == []
    trained = spec.train(data, params, lambda fraction, text: None)
    assert trained.metrics["likelihood"] == used
    # Held out by answer: each held-out answer's 5 triplets, none of a training answer's.
    assert trained.metrics["heldout_triplets"] == 5 * trained.metrics["heldout_answers"] > 0


def test_a_shape_likelihood_the_method_lacks_is_named(db, grid_study):
    project = db.scalars(select(Project).where(Project.slug == "grids-only")).one()
    data = load_training_data(db, project)
    spec = KINDS["embedding"]
    reasons = spec.requirements(data, spec.params(method="soe", likelihood="shape"))
    assert any("no likelihood of its own" in reason for reason in reasons)

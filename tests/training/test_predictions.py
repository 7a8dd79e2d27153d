"""Each prediction route against the learning library called directly on the same data."""

from __future__ import annotations

import io

import numpy as np
import pytest
from sqlalchemy.orm import Session

from app.learning.embedding import SOE
from app.learning.kernels import TripletKernel
from app.learning.metricboost import MetricBoost
from app.learning.svmcompare import SVMCompare
from app.learning.tripletboost import TripletBoost
from app.training.jobs import claim_next
from app.training.run import run_training
from tests.training.helpers import StudyData, committed_client, make_study


@pytest.fixture(scope="module")
def trained(app, engine):  # type: ignore[no-untyped-def]
    """One study, one model of every kind, trained by the job code in this process."""
    for client, headers in committed_client(app, engine):
        study = make_study(client, headers, n=30, n_triplets=1200, n_pairs=150)
        requests = {
            "tripletboost": {"n_estimators": 300, "cv_folds": 3},
            "kernel": {},
            "embedding": {"method": "soe", "dims": 2},
            "metricboost": {"n_estimators": 10},
            "svmcompare": {"kernel": "linear"},
        }
        models = {}
        for kind, params in requests.items():
            job = client.post(
                f"/api/projects/{study.slug}/models",
                json={"kind": kind, "params": params},
                headers=headers,
            ).json()
            with Session(engine, expire_on_commit=False) as db:
                claimed = claim_next(db)
                assert claimed is not None and claimed.id == job["id"]
                assert run_training(db, claimed.id) == "succeeded"
            models[kind] = client.get(f"/api/jobs/{job['id']}", headers=headers).json()["model_id"]
        yield client, headers, study, models


def labels_array(study: StudyData) -> np.ndarray:
    return np.array(study.labels, dtype=object)


def test_tripletboost_predictions_match_the_library(trained):
    client, headers, study, models = trained
    got = client.get(f"/api/models/{models['tripletboost']}/predictions", headers=headers).json()
    unlabelled = [i for i, label in enumerate(study.labels) if label is None]
    assert [row["index"] for row in got] == unlabelled
    direct = TripletBoost(n_estimators=300, random_state=0).fit(study.triplets, labels_array(study))
    expected = direct.predict(study.triplets, np.array(unlabelled))
    assert [row["label"] for row in got] == [None if e is None else str(e) for e in expected]
    assert all(row["abstained"] == (row["label"] is None) for row in got)
    # Blobs are well separated: most unlabelled objects get their blob's class.
    truth = [f"class-{i % 2}" for i in unlabelled]
    assert np.mean([row["label"] == t for row, t in zip(got, truth, strict=True)]) > 0.8
    posted = client.post(
        f"/api/models/{models['tripletboost']}/predict", json={"objects": [1, 2]}, headers=headers
    ).json()
    assert [row["index"] for row in posted] == [1, 2]
    latest = client.get(
        f"/api/projects/{study.slug}/models/tripletboost/latest/predictions", headers=headers
    )
    assert latest.json() == got


def test_kernel_routes_match_the_library(trained):
    client, headers, study, models = trained
    direct = TripletKernel(kind="k1").fit(study.triplets, len(study.X))
    response = client.get(f"/api/models/{models['kernel']}/kernel?format=npy", headers=headers)
    K = np.load(io.BytesIO(response.content))
    np.testing.assert_allclose(K, direct.kernel_matrix())
    embedding = client.get(
        f"/api/models/{models['kernel']}/embedding?dims=2", headers=headers
    ).json()
    assert np.asarray(embedding["coordinates"]).shape == (len(study.X), 2)
    clusters = client.post(
        f"/api/models/{models['kernel']}/clusters", json={"n_clusters": 2}, headers=headers
    ).json()["labels"]
    truth = np.arange(len(study.X)) % 2
    agreement = np.mean(np.asarray(clusters) == truth)
    assert max(agreement, 1 - agreement) > 0.9
    neighbours = client.get(
        f"/api/models/{models['kernel']}/neighbors/0?k=5", headers=headers
    ).json()
    similarity = direct.features_ @ direct.features_[0].T
    row = np.asarray(similarity.todense()).ravel()
    row[0] = -np.inf
    assert [n["index"] for n in neighbours] == np.argsort(-row, kind="stable")[:5].tolist()


def test_embedding_routes(trained):
    client, headers, study, models = trained
    got = client.get(f"/api/models/{models['embedding']}/embedding?dims=2", headers=headers).json()
    direct = SOE(n_components=2, random_state=0).fit(study.triplets, len(study.X))
    np.testing.assert_allclose(got["coordinates"], direct.embedding_, rtol=1e-6, atol=1e-8)
    labels = client.get(f"/api/models/{models['embedding']}/predictions", headers=headers).json()
    assert len(labels) == sum(label is None for label in study.labels)
    model = client.get(
        f"/api/projects/{study.slug}/models/latest?kind=embedding", headers=headers
    ).json()
    assert model["metrics"]["heldout_triplet_accuracy"] > 0.7


def test_metricboost_routes_match_the_library(trained):
    client, headers, study, models = trained
    X = (study.X - study.X.mean(axis=0)) / study.X.std(axis=0)  # the service standardises
    direct = MetricBoost(n_estimators=10, weak_learner="normalized", random_state=0).fit(
        X, study.triplets
    )
    metric = client.get(f"/api/models/{models['metricboost']}/metric", headers=headers).json()
    np.testing.assert_allclose(metric["metric"], direct.metric_)
    asked = [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    closer = client.post(
        f"/api/models/{models['metricboost']}/triplets", json={"triplets": asked}, headers=headers
    ).json()["closer"]
    assert closer == direct.predict_triplets(X, np.array(asked)).tolist()
    neighbours = client.get(
        f"/api/models/{models['metricboost']}/neighbors/3?k=4", headers=headers
    ).json()
    _, expected = direct.kneighbors(X[3:4], X, n_neighbors=5)
    assert [n["index"] for n in neighbours] == [i for i in expected[0] if i != 3][:4]
    labels = client.get(f"/api/models/{models['metricboost']}/predictions", headers=headers).json()
    assert {row["label"] for row in labels} <= {"class-0", "class-1"}


def test_svmcompare_routes_match_the_library(trained):
    client, headers, study, models = trained
    pairs = study.pairs
    X = (study.X - study.X.mean(axis=0)) / study.X.std(axis=0)  # the service standardises
    direct = SVMCompare(kernel="linear").fit(X[pairs[:, 0]], X[pairs[:, 1]], pairs[:, 2])
    ranking = client.get(f"/api/models/{models['svmcompare']}/ranking", headers=headers).json()
    scores = direct.rank(X)
    assert [r["index"] for r in ranking] == np.argsort(-scores, kind="stable").tolist()
    asked = [[0, 1], [5, 9], [2, 2]]
    outcomes = client.post(
        f"/api/models/{models['svmcompare']}/compare", json={"pairs": asked}, headers=headers
    ).json()["outcomes"]
    expected = direct.predict(X[[0, 5, 2]], X[[1, 9, 2]])
    assert outcomes == expected.tolist()
    assert outcomes[2] == 0  # an object compared with itself is about the same


def test_routes_refuse_models_of_another_kind(trained):
    client, headers, _, models = trained
    response = client.get(f"/api/models/{models['kernel']}/ranking", headers=headers)
    assert response.status_code == 422
    assert "kernel model" in response.json()["detail"]
    assert client.get("/api/models/999999/ranking", headers=headers).status_code == 404
    bad_index = client.get(f"/api/models/{models['kernel']}/neighbors/999?k=3", headers=headers)
    assert bad_index.status_code == 422


def test_learning_curve_lists_every_model_with_its_figures(trained):
    client, headers, study, models = trained
    listed = client.get(f"/api/projects/{study.slug}/models", headers=headers).json()
    assert {m["kind"] for m in listed["data"]} == set(models)
    by_kind = {m["kind"]: m for m in listed["data"]}
    assert "cv_label_accuracy" in by_kind["tripletboost"]["metrics"]
    assert "heldout_pair_accuracy" in by_kind["svmcompare"]["metrics"]
    assert by_kind["svmcompare"]["metrics"]["heldout_pair_accuracy"] > 0.6
    # Two well-separated blobs: every label figure should be high, and none can exceed 1.
    assert 0.8 < by_kind["kernel"]["metrics"]["cv_label_accuracy"] <= 1.0
    assert 0.8 < by_kind["embedding"]["metrics"]["cv_label_accuracy_1nn"] <= 1.0
    assert 0.8 < by_kind["metricboost"]["metrics"]["cv_label_accuracy_1nn"] <= 1.0
    boost = by_kind["tripletboost"]["metrics"]
    # TripletBoost abstains where no selected triplet classifier speaks for an object.
    assert boost["cv_label_accuracy"] + boost["cv_abstention_rate"] <= 1.0
    assert 0.8 < boost["cv_accuracy_when_answered"] <= 1.0


def test_kernel_with_landmarks_learns_from_the_design_triplets_only(app, engine):
    from app.learning.triplets import make_landmark_triplets

    for client, headers in committed_client(app, engine):
        study = make_study(client, headers, n=30, n_triplets=300, n_pairs=0)
        landmarks = [0, 1, 2, 3, 4]
        design = make_landmark_triplets(
            study.X, landmarks, n_triplets=200, kind="k1", random_state=1
        )
        client.post(
            f"/api/projects/{study.slug}/answers",
            json={"triplets": design.tolist()},
            headers=headers,
        )
        job = client.post(
            f"/api/projects/{study.slug}/models",
            json={"kind": "kernel", "params": {"landmarks": landmarks}},
            headers=headers,
        ).json()
        with Session(engine, expire_on_commit=False) as db:
            assert run_training(db, claim_next(db).id) == "succeeded"
        model = client.get(f"/api/jobs/{job['id']}", headers=headers).json()["model_id"]
        figures = client.get(
            f"/api/projects/{study.slug}/models/latest?kind=kernel", headers=headers
        )
        everything = np.vstack([study.triplets, design])
        in_design = everything[np.isin(everything[:, 1:], landmarks).all(axis=1)]
        fitting = TripletKernel(kind="k1", landmarks=landmarks).fit(in_design, len(study.X))
        K = np.load(io.BytesIO(client.get(f"/api/models/{model}/kernel", headers=headers).content))
        np.testing.assert_allclose(K, fitting.kernel_matrix())
        assert len(design) <= len(in_design) < len(everything)
        assert figures.json()["metrics"]["n_triplets"] == len(in_design)

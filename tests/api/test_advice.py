"""The budget adviser route: learning curve, fit, answers still needed, and its 422s."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.db.models import Model, Project
from app.training.kinds import KINDS as REGISTRY
from tests.factories import make_objects, make_project

KINDS = list(REGISTRY)  # every kind the server trains, comprf included
# The figure each kind's curve follows (its trainer's metrics).
MAIN_METRIC = {
    "bradley_terry": "heldout_pair_accuracy",
    "comprf": "loo_accuracy",
    "embedding": "heldout_triplet_accuracy",
    "kernel": "heldout_triplet_accuracy",
    "metricboost": "heldout_triplet_accuracy",
    "reliability": "mean_reliability",
    "svmcompare": "heldout_pair_accuracy",
    "tripletboost": "cv_label_accuracy",
}


@pytest.fixture
def project(client, auth_headers, db):
    make_project(client, auth_headers, "advice")
    make_objects(client, auth_headers, "advice", 16)
    return db.scalars(select(Project).where(Project.slug == "advice")).one()


def add_models(db, project, kind, points, metric="heldout_triplet_accuracy", params=None):
    for version, (n, value) in enumerate(points, start=1):
        db.add(
            Model(
                project_id=project.id,
                kind=kind,
                version=version,
                params=params or {"random_state": 0},
                n_answers=n,
                metrics={metric: value},
                training_seconds=0.1,
                artifact=b"",
            )
        )
    db.commit()


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_gets_an_answer_without_models(client, auth_headers, project, kind):
    response = client.get(
        f"/api/projects/advice/advice?kind={kind}&target=0.9", headers=auth_headers
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "insufficient_data" and body["points"] == []
    assert "3 or more" in body["message"]
    assert (body["reference"] is not None) == (kind == "tripletboost")


def test_a_power_law_curve_is_extrapolated(client, auth_headers, project, db):
    # value = 0.95 − 0.5·n^(−1/2): reaches 0.93 at n = (0.5 / 0.02)² = 625.
    points = [(n, 0.95 - 0.5 * n**-0.5) for n in (50, 100, 200, 400)]
    add_models(db, project, "embedding", points)
    body = client.get(
        "/api/projects/advice/advice?kind=embedding&target=0.93", headers=auth_headers
    ).json()
    assert body["status"] == "reachable"
    assert [p["n_answers"] for p in body["points"]] == [50, 100, 200, 400]
    assert body["fit"]["asymptote"] == pytest.approx(0.95, abs=0.005)
    assert body["answers_needed"] == pytest.approx(625, rel=0.1)
    assert body["further_answers"] == body["answers_needed"]  # the project holds no answers
    assert body["further_answers_low"] <= body["further_answers"] <= body["further_answers_high"]
    assert all(
        p["low"] <= p["value"] + 1e-4 and p["value"] <= p["high"] + 1e-4 for p in body["curve"]
    )


def test_a_target_above_the_plateau_is_not_reachable(client, auth_headers, project, db):
    points = [(n, 0.8 - 0.4 * n**-0.7) for n in (50, 100, 200, 400, 800)]
    add_models(db, project, "kernel", points)
    body = client.get(
        "/api/projects/advice/advice?kind=kernel&target=0.95", headers=auth_headers
    ).json()
    assert body["status"] == "not_reachable"
    assert body["further_answers"] is None
    assert "not reachable at this rate" in body["message"]


def test_a_reached_target_needs_nothing_more(client, auth_headers, project, db):
    points = [(n, 0.92 - 0.3 * n**-0.5) for n in (50, 100, 200)]
    add_models(db, project, "tripletboost", points, metric="cv_label_accuracy")
    body = client.get(
        "/api/projects/advice/advice?kind=tripletboost&target=0.88", headers=auth_headers
    ).json()
    assert body["status"] == "reached" and body["further_answers"] == 0
    assert body["answers_needed"] == 100  # the first model at or above the target
    assert body["reference"]["n_answers"] == 64  # 16·√16


def test_only_models_of_the_latest_params_make_the_curve(client, auth_headers, project, db):
    add_models(db, project, "embedding", [(50, 0.1), (100, 0.2)], params={"method": "soe"})
    db.add(
        Model(
            project_id=project.id, kind="embedding", version=3, params={"method": "tste"},
            n_answers=300, metrics={"heldout_triplet_accuracy": 0.8}, training_seconds=0.1,
            artifact=b"",
        )
    )  # fmt: skip
    db.commit()
    body = client.get(
        "/api/projects/advice/advice?kind=embedding&target=0.9", headers=auth_headers
    ).json()
    assert [p["n_answers"] for p in body["points"]] == [300]
    assert body["params"] == {"method": "tste"}


@pytest.mark.parametrize(
    "query,expected",
    [
        ("kind=embedding&target=1.5", "target"),
        ("kind=embedding&target=0", "target"),
        ("kind=embedding", "target"),
        ("kind=forest&target=0.9", "kind"),
        ("target=0.9", "kind"),
    ],
)
def test_bad_queries_are_422(client, auth_headers, project, query, expected):
    response = client.get(f"/api/projects/advice/advice?{query}", headers=auth_headers)
    assert response.status_code == 422
    assert expected in str(response.json()["detail"])


def test_an_unknown_metric_is_422_naming_the_known_ones(client, auth_headers, project, db):
    add_models(db, project, "kernel", [(50, 0.7)])
    response = client.get(
        "/api/projects/advice/advice?kind=kernel&target=0.9&metric=speed", headers=auth_headers
    )
    assert response.status_code == 422
    assert (
        "speed" in response.json()["detail"]
        and "heldout_triplet_accuracy" in response.json()["detail"]
    )


def test_advice_is_private(client, auth_headers, project):
    assert client.get("/api/projects/advice/advice?kind=kernel&target=0.9").status_code == 401


def test_the_registry_and_this_table_agree():
    assert set(MAIN_METRIC) == set(KINDS)
    assert all(REGISTRY[k].metric == m for k, m in MAIN_METRIC.items())


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_extrapolates_its_own_figure(client, auth_headers, project, db, kind):
    points = [(n, 0.95 - 0.5 * n**-0.5) for n in (50, 100, 200, 400)]
    add_models(db, project, kind, points, metric=MAIN_METRIC[kind])
    response = client.get(
        f"/api/projects/advice/advice?kind={kind}&target=0.93", headers=auth_headers
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["metric"] == MAIN_METRIC[kind]
    assert body["status"] == "reachable"
    assert body["answers_needed"] == pytest.approx(625, rel=0.1)


def test_a_regression_forest_follows_its_error_down(client, auth_headers, project, db):
    # comprf on targets reports loo_rmse (an error: lower is better), not an accuracy:
    # e(n) = 0.1 + 2·n^(-1/2) reaches 0.15 at n = (2 / 0.05)^2 = 1600.
    points = [(n, 0.1 + 2 * n**-0.5) for n in (50, 100, 200, 400)]
    add_models(db, project, "comprf", points, metric="loo_rmse")
    body = client.get(
        "/api/projects/advice/advice?kind=comprf&target=0.15", headers=auth_headers
    ).json()
    assert body["metric"] == "loo_rmse"
    assert body["status"] == "reachable"
    assert body["answers_needed"] == pytest.approx(1600, rel=0.1)
    assert body["fit"]["asymptote"] == pytest.approx(0.1, abs=0.01)
    values = [p["value"] for p in body["curve"]]
    assert values == sorted(values, reverse=True)  # the fitted error falls
    assert all(p["low"] <= p["value"] + 1e-9 <= p["high"] + 2e-9 for p in body["curve"])


def test_an_error_below_its_asymptote_is_not_reachable(client, auth_headers, project, db):
    points = [(n, 0.1 + 2 * n**-0.5) for n in (50, 100, 200, 400)]
    add_models(db, project, "comprf", points, metric="loo_rmse")
    body = client.get(
        "/api/projects/advice/advice?kind=comprf&target=0.05", headers=auth_headers
    ).json()
    assert body["status"] == "not_reachable"
    assert "above the target" in body["message"]
    reached = client.get(
        "/api/projects/advice/advice?kind=comprf&target=0.25", headers=auth_headers
    ).json()
    assert reached["status"] == "reached" and "≤ 0.25" in reached["message"]


def test_an_accuracy_target_above_1_is_422(client, auth_headers, project, db):
    add_models(db, project, "comprf", [(50, 0.5)], metric="loo_accuracy")
    response = client.get("/api/projects/advice/advice?kind=comprf&target=3", headers=auth_headers)
    assert response.status_code == 422
    assert "target 3.0 is above 1" in response.json()["detail"]

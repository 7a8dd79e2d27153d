"""Training requests that cannot succeed get 422 saying what is missing, and queue nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.db.models import Job
from tests.factories import make_project, random_triplets


@pytest.fixture
def project(client, auth_headers):
    make_project(client, auth_headers, "train")


def add(client, headers, objects, triplets=(), pairs=()):  # type: ignore[no-untyped-def]
    client.post("/api/projects/train/objects", json=objects, headers=headers)
    if triplets or pairs:
        body = {"triplets": list(triplets), "pairs": list(pairs)}
        assert (
            client.post("/api/projects/train/answers", json=body, headers=headers).status_code
            == 201
        )


def request(client, headers, kind, **params):  # type: ignore[no-untyped-def]
    return client.post(
        "/api/projects/train/models", json={"kind": kind, "params": params}, headers=headers
    )


def jobs(db) -> int:
    """Jobs of this test's project (other tests leave committed jobs in the database)."""
    from app.db.models import Project

    project = select(Project.id).where(Project.slug == "train").scalar_subquery()
    return db.scalar(select(func.count()).select_from(Job).where(Job.project_id == project))


PLAIN = [{"name": f"o{i}"} for i in range(10)]
LABELLED_ONE_CLASS = [{"name": f"o{i}", "label": "a"} for i in range(10)]
WITH_FEATURES = [{"name": f"o{i}", "features": [i, i % 3], "label": "ab"[i % 2]} for i in range(10)]


CASES = {
    "tripletboost-no-labels": (PLAIN, 30, 0, "tripletboost", {}, "at least 2 classes, found 0"),
    "tripletboost-one-class": (LABELLED_ONE_CLASS, 30, 0, "tripletboost", {}, "found 1"),
    "metricboost-no-features": (PLAIN, 30, 0, "metricboost", {}, "feature vector"),
    "svmcompare-no-features": (PLAIN, 0, 30, "svmcompare", {}, "feature vector"),
    "svmcompare-no-pairs": (WITH_FEATURES, 30, 0, "svmcompare", {}, "at least 20 pair answers"),
    "too-few-triplets": (
        WITH_FEATURES,
        5,
        0,
        "kernel",
        {},
        "at least 20 triplet answers, the project has 5",
    ),
    "unknown-param": (WITH_FEATURES, 30, 0, "kernel", {"bandwidth": 3}, "params.bandwidth"),
    "bad-param-value": (WITH_FEATURES, 30, 0, "embedding", {"method": "umap"}, "params.method"),
    "bad-landmarks": (WITH_FEATURES, 30, 0, "kernel", {"landmarks": [0, 99]}, "landmarks"),
}


@pytest.mark.parametrize(
    "objects,n_triplets,n_pairs,kind,params,expected", CASES.values(), ids=CASES.keys()
)
def test_untrainable_requests_are_422(
    client, auth_headers, project, db, objects, n_triplets, n_pairs, kind, params, expected
):
    pairs = [[i % 10, (i + 1) % 10, (i % 3) - 1] for i in range(n_pairs)]
    add(client, auth_headers, objects, random_triplets(10, n_triplets), pairs)
    response = request(client, auth_headers, kind, **params)
    assert response.status_code == 422, response.text
    assert expected in response.json()["detail"]
    assert jobs(db) == 0


def test_svmcompare_without_ties_is_422_saying_what_it_found(client, auth_headers, project, db):
    pairs = [[i % 10, (i + 1) % 10, 1 if i % 2 else -1] for i in range(30)]
    add(client, auth_headers, WITH_FEATURES, (), pairs)
    response = request(client, auth_headers, "svmcompare")
    assert response.status_code == 422, response.text
    assert "found 0 ties among 30 pair answers (0%)" in response.json()["detail"]
    assert jobs(db) == 0


def test_unknown_kind_is_422(client, auth_headers, project, db):
    response = request(client, auth_headers, "deep-learning")
    assert response.status_code == 422
    assert "kind" in response.json()["detail"]
    assert jobs(db) == 0


def test_flagged_answers_are_left_out_unless_asked(client, auth_headers, project, db):
    from app.db.models import Participant, Project
    from app.training.data import load_training_data
    from tests.factories import answer_all, open_session, set_plan

    add(client, auth_headers, WITH_FEATURES, random_triplets(10, 30))
    set_plan(client, auth_headers, "train", queries_per_session=5)
    session_id, headers = open_session(client, "train", participant="spammer")
    answer_all(client, session_id, headers)
    participant = db.scalar(select(Participant).where(Participant.external_id == "spammer"))
    client.post(f"/api/projects/train/participants/{participant.id}/flag", headers=auth_headers)
    db.rollback()  # a new transaction: the flag the request committed
    project = db.scalar(select(Project).where(Project.slug == "train"))
    assert len(load_training_data(db, project).triplets) == 30
    assert len(load_training_data(db, project, include_flagged=True).triplets) == 35


def test_job_routes_404_for_unknown_and_foreign_jobs(client, auth_headers, db):
    assert client.get("/api/jobs/12345", headers=auth_headers).status_code == 404
    assert client.delete("/api/jobs/12345", headers=auth_headers).status_code == 404


def test_kernel_landmarks_need_enough_design_triplets(client, auth_headers, project, db):
    add(client, auth_headers, WITH_FEATURES, random_triplets(10, 30))
    response = request(client, auth_headers, "kernel", landmarks=[0, 1])
    assert response.status_code == 422
    assert "fit the k1 landmark design" in response.json()["detail"]
    assert jobs(db) == 0


def test_jobs_lists_are_data_and_count_and_span_the_callers_projects(
    client, auth_headers, admin_headers, project, db
):
    from app.services.auth import create_key

    add(client, auth_headers, WITH_FEATURES, random_triplets(10, 30))
    mine = [request(client, auth_headers, "kernel").json() for _ in range(3)]
    assert all(job["project_slug"] == "train" for job in mine)
    _, other = create_key(db, "researcher", "another researcher")
    other_headers = {"Authorization": f"Bearer {other}"}
    make_project(client, other_headers, "theirs")
    client.post("/api/projects/theirs/objects", json=WITH_FEATURES, headers=other_headers)
    body = {"triplets": random_triplets(10, 30), "pairs": []}
    client.post("/api/projects/theirs/answers", json=body, headers=other_headers)
    theirs = client.post(
        "/api/projects/theirs/models", json={"kind": "embedding"}, headers=other_headers
    ).json()

    listed = client.get("/api/jobs", headers=auth_headers).json()
    assert listed == client.get("/api/projects/train/jobs", headers=auth_headers).json()
    assert [j["id"] for j in listed["data"]] == [j["id"] for j in reversed(mine)]
    assert listed["count"] == 3
    page = client.get("/api/jobs?offset=1&limit=1", headers=auth_headers).json()
    assert page["count"] == 3 and [j["id"] for j in page["data"]] == [mine[1]["id"]]
    assert client.get("/api/jobs?status=failed", headers=auth_headers).json() == {
        "data": [],
        "count": 0,
    }
    everything = client.get("/api/jobs", headers=admin_headers).json()
    seen = {j["id"]: j["project_slug"] for j in everything["data"]}
    assert seen[theirs["id"]] == "theirs" and all(seen[j["id"]] == "train" for j in mine)
    assert client.get("/api/jobs?limit=0", headers=auth_headers).status_code == 422
    assert client.get("/api/jobs?status=done", headers=auth_headers).status_code == 422
    assert client.get("/api/jobs").status_code == 401

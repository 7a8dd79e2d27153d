"""Comparison trees built by the crowd: the comprf strategy through the worker API."""

from __future__ import annotations

from collections import Counter

import pytest
from sqlalchemy import delete, func, select

from app.active.comprf import ForestParams, replay
from app.db.models import Answer, Job, Project, Question, StrategyState
from app.services.comprf import forests
from app.services.pool import producer
from app.training.jobs import claim_next
from app.training.retrain import schedule_due
from app.training.run import run_training
from tests.factories import answer, make_project, open_session, set_plan

N = 16


def line_objects(n: int, labelled: int) -> list[dict]:
    """Objects on a line: two groups (left 'a', right 'b'); the first ``labelled`` of each
    group carry their label."""
    objects = []
    for i in range(n):
        group = i % 2
        objects.append(
            {
                "name": f"o{i}",
                "features": [float(group * 10 + i * 0.1)],
                **({"label": "ab"[group]} if i < 2 * labelled else {}),
            }
        )
    return objects


@pytest.fixture
def project(client, auth_headers):
    make_project(client, auth_headers, "crowd")
    response = client.post(
        "/api/projects/crowd/objects", json=line_objects(N, 3), headers=auth_headers
    )
    assert response.status_code == 201, response.text
    return "crowd"


def x_of(index: int) -> float:
    return (index % 2) * 10 + index * 0.1


def nearer(query: dict) -> int:
    anchor, left, right = (o["index"] for o in query["objects"])
    return left if abs(x_of(anchor) - x_of(left)) <= abs(x_of(anchor) - x_of(right)) else right


def crowd_answers(client, slug: str, workers: int, rounds: int, prefix: str = "w") -> int:
    """Workers answer truthfully in turn; returns how many answers were given."""
    given = 0
    for r in range(rounds):
        progressed = False
        for w in range(workers):
            sid, headers = open_session(client, slug, participant=f"{prefix}{w}-{r}")
            for _ in range(10):
                body = client.get(f"/api/w/sessions/{sid}/next", headers=headers).json()
                if body.get("done") or body.get("wait"):  # the trees wait for others' answers
                    break
                query = body["query"]
                response = answer(client, sid, headers, query["token"], nearer(query))
                assert response.status_code == 201, response.text
                given += 1
                progressed = True
        if not progressed:
            break
    return given


COMPRF_PLAN = {
    "strategies": [
        {"kind": "comprf", "params": {"n_trees": 3, "redundancy": 3, "seed": 5}},
    ],
    "queries_per_session": 10,
    "repeat_rate": 0,
}


def test_workers_grow_the_trees_and_each_question_gets_redundancy_answers(
    client, auth_headers, project, db
):
    set_plan(client, auth_headers, project, **COMPRF_PLAN)
    crowd_answers(client, project, workers=4, rounds=40)
    progress = client.get(f"/api/projects/{project}/plan/progress", headers=auth_headers)
    assert progress.status_code == 200, progress.text
    entry = progress.json()["strategies"][0]
    assert entry["kind"] == "comprf"
    assert entry["comprf"]["complete"], entry
    assert len(entry["comprf"]["trees"]) == 3
    assert all(tree["depth"] >= 2 for tree in entry["comprf"]["trees"])
    assert entry["answers"] == entry["comprf"]["answers_used"]
    # each pivot question got exactly its 3 answers, from 3 distinct participants
    per_question = Counter((a.a, min(a.b, a.c), max(a.b, a.c)) for a in db.scalars(select(Answer)))
    assert set(per_question.values()) == {3}
    participants = {}
    for a in db.scalars(select(Answer)):
        participants.setdefault((a.a, min(a.b, a.c), max(a.b, a.c)), set()).add(a.participant_id)
    assert {len(p) for p in participants.values()} == {3}
    assert all(q.answered == 3 and q.wanted == 3 for q in db.scalars(select(Question)))


def test_forest_is_rebuilt_from_answers_alone(client, auth_headers, project, db):
    set_plan(client, auth_headers, project, **COMPRF_PLAN)
    crowd_answers(client, project, workers=3, rounds=6)
    stored_project = db.scalar(select(Project))
    [(_, current)] = forests(db, stored_project)
    before = client.get(f"/api/projects/{project}/plan/progress", headers=auth_headers).json()
    assert db.scalar(select(StrategyState)) is not None
    db.commit()  # the read transaction ends: SQLite's write sees the requests' commits
    db.execute(delete(StrategyState))
    db.commit()
    after = client.get(f"/api/projects/{project}/plan/progress", headers=auth_headers).json()
    assert after == before
    # a replay of the answer log, in any order (ids decide), gives the same trees
    params = ForestParams.parse(COMPRF_PLAN["strategies"][0]["params"], 0)
    setup = stored_project.plan_state["strategies"][0]
    log = [(a.id, a.a, a.b, a.c) for a in db.scalars(select(Answer).order_by(Answer.id))]
    rebuilt = replay(params, setup, log[::-1])
    assert rebuilt.structure() == current.structure()
    assert before["strategies"][0]["comprf"]["nodes_split"] > 3


def test_answers_from_any_source_are_reused(client, auth_headers, project, db):
    set_plan(client, auth_headers, project, **COMPRF_PLAN)
    sid, headers = open_session(client, project, participant="first")
    query = client.get(f"/api/w/sessions/{sid}/next", headers=headers).json()["query"]
    anchor, left, right = (o["index"] for o in query["objects"])
    # an import answers this pivot question three times, mirrored
    near = nearer(query)
    far = right if near == left else left
    response = client.post(
        f"/api/projects/{project}/answers",
        json={"triplets": [[anchor, near, far]] * 3},
        headers=auth_headers,
    )
    assert response.status_code in (200, 201), response.text
    producer(db.get_bind()).wait()  # the pool follows the trees off the request
    # the question is decided: nobody else is asked it
    for w in range(5):
        sid2, headers2 = open_session(client, project, participant=f"other{w}")
        body = client.get(f"/api/w/sessions/{sid2}/next", headers=headers2).json()
        shown = tuple(sorted(o["index"] for o in body["query"]["objects"][1:]))
        assert (body["query"]["objects"][0]["index"], shown) != (
            anchor,
            tuple(sorted((left, right))),
        )


BAD = {
    "n_trees": ({"n_trees": 0}, "n_trees"),
    "n_trees-high": ({"n_trees": 501}, "n_trees"),
    "leaf_size": ({"leaf_size": 0}, "leaf_size"),
    "redundancy": ({"redundancy": 16}, "redundancy"),
    "supervised-type": ({"supervised": "yes"}, "supervised"),
    "unknown": ({"depth": 3}, "unknown params"),
}


@pytest.mark.parametrize("params,expected", BAD.values(), ids=BAD.keys())
def test_bad_comprf_params_are_422_and_keep_the_plan(
    client, auth_headers, project, params, expected
):
    kept = set_plan(client, auth_headers, project)
    plan = {"strategies": [{"kind": "comprf", "params": params}]}
    response = client.put(f"/api/projects/{project}/plan", json=plan, headers=auth_headers)
    assert response.status_code == 422
    assert expected in response.json()["detail"]
    assert client.get(f"/api/projects/{project}/plan", headers=auth_headers).json() == kept


def test_supervised_needs_two_classes_and_comprf_three_objects(client, auth_headers):
    make_project(client, auth_headers, "small")
    objects = [{"name": f"o{i}", "label": "a"} for i in range(5)]
    client.post("/api/projects/small/objects", json=objects, headers=auth_headers)
    plan = {"strategies": [{"kind": "comprf", "params": {"supervised": True}}]}
    response = client.put("/api/projects/small/plan", json=plan, headers=auth_headers)
    assert response.status_code == 422
    assert "supervised" in response.json()["detail"]
    assert client.get("/api/projects/small/plan", headers=auth_headers).status_code == 404
    # without supervised, one class is fine: random pivots
    plan = {"strategies": [{"kind": "comprf"}]}
    assert (
        client.put("/api/projects/small/plan", json=plan, headers=auth_headers).status_code == 200
    )

    make_project(client, auth_headers, "tiny")
    client.post(
        "/api/projects/tiny/objects", json=[{"name": "x"}, {"name": "y"}], headers=auth_headers
    )
    response = client.put("/api/projects/tiny/plan", json=plan, headers=auth_headers)
    assert response.status_code == 422
    assert "at least 3 objects" in response.json()["detail"]


def test_late_objects_are_routed_down_the_trees(client, auth_headers, project, db):
    set_plan(client, auth_headers, project, **COMPRF_PLAN)
    crowd_answers(client, project, workers=3, rounds=40)
    done = client.get(f"/api/projects/{project}/plan/progress", headers=auth_headers).json()
    assert done["strategies"][0]["comprf"]["complete"]
    late = [{"name": "late", "features": [10.05]}]  # index N, on the right
    response = client.post(f"/api/projects/{project}/objects", json=late, headers=auth_headers)
    assert response.status_code == 201, response.text
    assert (
        client.get(f"/api/projects/{project}/plan/progress", headers=auth_headers).json()[
            "strategies"
        ][0]["comprf"]["questions_pending"]
        == 3
    )  # the late object at the root of each tree
    crowd_answers(client, project, workers=3, rounds=20, prefix="late")
    assert N in {a.a for a in db.scalars(select(Answer))}
    progress = client.get(f"/api/projects/{project}/plan/progress", headers=auth_headers).json()
    assert progress["strategies"][0]["comprf"]["complete"]


def train(client, headers, db, slug: str, params: dict | None = None) -> dict:
    response = client.post(
        f"/api/projects/{slug}/models",
        json={"kind": "comprf", "params": params or {}},
        headers=headers,
    )
    assert response.status_code == 202, response.text
    job = db.get(Job, response.json()["id"])
    claimed = claim_next(db)
    assert claimed is not None and claimed.id == job.id
    assert run_training(db, claimed.id) == "succeeded", db.get(Job, job.id).error
    db.rollback()  # the job's row was updated with Core statements, in another transaction
    done = client.get(f"/api/jobs/{job.id}", headers=headers).json()
    assert done["status"] == "succeeded" and done["model_id"] is not None, done
    return done


def test_comprf_model_predicts_from_the_crowd_built_trees(client, auth_headers, project, db):
    refused = client.post(
        f"/api/projects/{project}/models", json={"kind": "comprf"}, headers=auth_headers
    )
    assert refused.status_code == 422
    assert "comprf strategy" in refused.json()["detail"]
    set_plan(client, auth_headers, project, **COMPRF_PLAN)
    crowd_answers(client, project, workers=4, rounds=40)
    late = [{"name": "late", "features": [10.05]}]
    assert (
        client.post(f"/api/projects/{project}/objects", json=late, headers=auth_headers).status_code
        == 201
    )
    job = train(client, auth_headers, db, project)
    models = client.get(f"/api/projects/{project}/models", headers=auth_headers).json()["data"]
    [model] = [m for m in models if m["id"] == job["model_id"]]
    metrics = model["metrics"]
    assert metrics["task"] == "classification"
    assert metrics["n_known"] == 6
    assert metrics["loo_accuracy"] >= 0.8  # the two groups lie far apart
    assert metrics["answers_used"] == db.scalar(select(func.count(Answer.id)))
    assert metrics["complete"] is False  # the late object still waits at the roots
    predictions = client.get(
        f"/api/models/{job['model_id']}/predictions", headers=auth_headers
    ).json()["data"]
    assert [p["index"] for p in predictions] == list(range(6, N + 1))
    by_index = {p["index"]: p for p in predictions}
    # The late object waits at the roots: predicted from them any time (depth 0, no leaf).
    assert by_index[N]["label"] in ("a", "b") and by_index[N]["trees_placed"] == 0
    assert by_index[N]["depth"] == 0 and by_index[N]["in_leaf"] is False
    assert 0 < metrics["share_in_leaves"] < 1
    right = [by_index[i]["label"] == "ab"[i % 2] for i in range(6, N)]
    assert sum(right) >= 8, predictions
    assert all(by_index[i]["trees_placed"] == 3 for i in range(6, N))
    assert all(abs(sum(by_index[i]["shares"].values()) - 1) < 1e-9 for i in range(6, N))
    latest = client.get(
        f"/api/projects/{project}/models/comprf/latest/predictions", headers=auth_headers
    )
    assert latest.json()["data"] == predictions


def test_comprf_regression_gives_mean_target_and_spread(client, auth_headers, db):
    make_project(client, auth_headers, "reg")
    objects = [
        {"name": f"o{i}", "features": [x_of(i)], **({"target": x_of(i)} if i < 8 else {})}
        for i in range(N)
    ]
    client.post("/api/projects/reg/objects", json=objects, headers=auth_headers)
    set_plan(client, auth_headers, "reg", **COMPRF_PLAN)
    crowd_answers(client, "reg", workers=4, rounds=40)
    job = train(client, auth_headers, db, "reg")
    [model] = client.get("/api/projects/reg/models", headers=auth_headers).json()["data"]
    metrics = model["metrics"]
    assert metrics["task"] == "regression" and metrics["loo_rmse"] < 5.0
    predictions = client.get(f"/api/models/{job['model_id']}/predictions", headers=auth_headers)
    rows = predictions.json()["data"]
    assert [r["index"] for r in rows] == list(range(8, N))
    assert all(abs(r["target"] - x_of(r["index"])) < 5 and r["spread"] >= 0 for r in rows)


def test_automatic_retraining_builds_comprf_models(client, auth_headers, project, db):
    set_plan(client, auth_headers, project, **COMPRF_PLAN)
    policy = {"kind": "comprf", "every_n_answers": 20, "min_interval_s": 0}
    response = client.put(f"/api/projects/{project}/retrain", json=policy, headers=auth_headers)
    assert response.status_code == 200, response.text
    crowd_answers(client, project, workers=3, rounds=2)
    [job_id] = schedule_due(db)
    claimed = claim_next(db)
    assert claimed is not None and claimed.id == job_id and claimed.trigger == "auto"
    assert run_training(db, job_id) == "succeeded", db.get(Job, job_id).error
    latest = client.get(
        f"/api/projects/{project}/models/comprf/latest/predictions", headers=auth_headers
    )
    assert latest.status_code == 200
    assert latest.json()["count"] == len(latest.json()["data"]) == N - 6

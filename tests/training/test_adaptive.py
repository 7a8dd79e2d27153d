"""The adaptive strategy through the service: refits are queued as answers arrive, a model
landing scores the next batch, and workers are handed questions from it."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Job, Model, Project, Question
from app.services.pool import POOL_BATCH
from app.training.executor import ProcessExecutor
from tests.factories import answer, next_query, open_session
from tests.training.helpers import committed_client, make_runner, make_study, wait_for


@pytest.fixture(scope="module")
def pool():
    executor = ProcessExecutor(workers=1)
    yield executor
    executor.shutdown()


@pytest.fixture
def live(app, engine):
    yield from committed_client(app, engine)


def _jobs(engine, slug: str) -> list[Job]:
    with Session(engine) as db:
        project = db.scalars(select(Project).where(Project.slug == slug)).one()
        return list(db.scalars(select(Job).where(Job.project_id == project.id)))


def _state(engine, slug: str) -> dict:
    with Session(engine) as db:
        return db.scalars(select(Project).where(Project.slug == slug)).one().plan_state or {}


@pytest.mark.parametrize(
    "variant,model_kind,params",
    [
        ({}, "embedding", {"method": "tste", "dims": 2}),
        ({"score": "bald"}, "embedding", {"method": "tste", "dims": 2}),
        ({"kind": "k2"}, "kernel", {"kernel": "k2"}),
    ],
)
def test_a_landed_model_feeds_the_workers_questions(
    live, engine, pool, variant, model_kind, params
):
    client, headers = live
    study = make_study(client, headers, n=20, n_triplets=30, n_pairs=0)
    plan = {
        "strategies": [
            {"kind": "adaptive", "params": {"refresh_every": 20, "explore": 0, **variant}}
        ],
        "queries_per_session": 10,
        "repeat_rate": 0,
    }
    response = client.put(f"/api/projects/{study.slug}/plan", json=plan, headers=headers)
    assert response.status_code == 200, response.text
    runner = make_runner(engine, pool)

    # Before any model the strategy asks random questions.
    session_id, worker = open_session(client, study.slug)
    first = next_query(client, session_id, worker)["query"]
    response = answer(client, session_id, worker, first["token"], first["objects"][1]["index"])
    assert response.status_code == 201
    reply = response.json()

    runner.tick()  # 31 triplet answers ≥ refresh_every: a refit is queued
    jobs = [j for j in _jobs(engine, study.slug) if j.trigger == "adaptive"]
    assert len(jobs) == 1 and jobs[0].kind == model_kind and jobs[0].params == params
    done = wait_for(client, headers, jobs[0].id, runner)
    assert done["status"] == "succeeded", done["error"]
    runner.tick()  # no new answers since that model: nothing more queued
    assert len([j for j in _jobs(engine, study.slug) if j.trigger == "adaptive"]) == 1

    state = _state(engine, study.slug)["strategies"][0]
    assert state["model_id"] == done["model_id"] and state["next"] == 0
    assert len(state["batch"]) > 0
    batch = state["batch"]

    # The answer's reply already leased the session's next question (a random one, before
    # the model): it is answered first. Then the questions are the batch's, in order, without
    # any scoring on the way.
    leased = next_query(client, session_id, worker)["query"]
    assert leased["token"] == reply["next"]["query"]["token"]
    assert (
        answer(
            client, session_id, worker, leased["token"], leased["objects"][1]["index"]
        ).status_code
        == 201
    )
    asked = []
    for _ in range(3):
        query = next_query(client, session_id, worker)["query"]
        asked.append(query)
        assert (
            answer(
                client, session_id, worker, query["token"], query["objects"][1]["index"]
            ).status_code
            == 201
        )
    with Session(engine) as db:
        questions = db.scalars(
            select(Question).where(Question.strategy == "adaptive").order_by(Question.id)
        ).all()
        scored = [q for q in questions if (q.strategy_ref or {}).get("scored")]
    shown = [
        [q["objects"][0]["index"], *sorted(o["index"] for o in q["objects"][1:])] for q in asked
    ]
    expected = [[row[0], *sorted(row[1:])] for row in batch[:3]]
    assert shown == expected, (shown, expected, _state(engine, study.slug))
    assert len(scored) >= 3
    # The questions were created from the batch into the pool, a fill's worth at once (the
    # questions of the pool from before the model were dropped when the batch landed).
    assert _state(engine, study.slug)["strategies"][0]["next"] == min(POOL_BATCH, len(batch))
    with Session(engine) as db:
        assert db.get(Model, done["model_id"]).kind == model_kind


def test_adaptive_pairs_follow_a_bradley_terry_ranking(live, engine, pool):
    client, headers = live
    study = make_study(client, headers, n=15, n_triplets=0, n_pairs=40)  # 40 imported pairs
    plan = {
        "strategies": [{"kind": "adaptive", "params": {"kind": "pairs", "refresh_every": 20}}],
        "queries_per_session": 10,
        "repeat_rate": 0,
    }
    response = client.put(f"/api/projects/{study.slug}/plan", json=plan, headers=headers)
    assert response.status_code == 200, response.text
    runner = make_runner(engine, pool)
    runner.tick()  # 40 pair answers >= refresh_every: a Bradley-Terry refit is queued
    jobs = [j for j in _jobs(engine, study.slug) if j.trigger == "adaptive"]
    assert [(j.kind, j.params) for j in jobs] == [("bradley_terry", {})]
    done = wait_for(client, headers, jobs[0].id, runner)
    assert done["status"] == "succeeded", done["error"]
    state = _state(engine, study.slug)["strategies"][0]
    assert state["model_id"] == done["model_id"] and len(state["batch"]) > 0
    assert all(len(row) == 2 for row in state["batch"])

    session_id, worker = open_session(client, study.slug)
    kinds = []
    for _ in range(5):
        query = next_query(client, session_id, worker)["query"]
        kinds.append(query["kind"])
        assert answer(client, session_id, worker, query["token"], 0).status_code == 201
    assert kinds == ["pair"] * 5
    with Session(engine) as db:
        project = db.scalars(select(Project).where(Project.slug == study.slug)).one()
        questions = db.scalars(
            select(Question).where(
                Question.project_id == project.id, Question.strategy == "adaptive"
            )
        )
        scored = [q for q in questions if (q.strategy_ref or {}).get("scored")]
    assert scored and all(q.kind == "pair" for q in scored)
    ranking = client.get(
        f"/api/projects/{study.slug}/models/bradley_terry/latest/ranking", headers=headers
    )
    assert ranking.status_code == 200 and ranking.json()["count"] == 15

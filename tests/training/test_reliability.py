"""The crowd's reliability through the service: the job runner queues a reliability job as
answers arrive, its figures reach the participants' list and the export, the plan's
``quality.min_reliability`` flags by them (and the round trip's review keeps that flag),
and training weighs the answers by them."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Job, Project
from app.training.data import load_answer_weights, load_training_data
from app.training.executor import ProcessExecutor
from tests.factories import answer, next_query, open_session
from tests.training.helpers import committed_client, make_runner, make_study, wait_for

CAREFUL = [f"careful-{i}" for i in range(6)]
SPAMMERS = ["coin-0", "coin-1"]


@pytest.fixture(scope="module")
def pool():
    executor = ProcessExecutor(workers=1)
    yield executor
    executor.shutdown()


@pytest.fixture
def live(app, engine):
    yield from committed_client(app, engine)


def _answer_session(client, slug: str, name: str, X: np.ndarray, count: int, rng) -> None:  # type: ignore[no-untyped-def]
    """``count`` answers of a participant: by the true geometry, or a coin flip."""
    session_id, worker = open_session(client, slug, participant=name)
    for _ in range(count):
        body = next_query(client, session_id, worker)
        if body.get("done"):
            return
        query = body["query"]
        anchor, left, right = (o["index"] for o in query["objects"])
        if name.startswith("coin"):
            choice = left if rng.random() < 0.5 else right
        else:
            near_left = ((X[anchor] - X[left]) ** 2).sum() < ((X[anchor] - X[right]) ** 2).sum()
            choice = left if near_left else right
        response = answer(client, session_id, worker, query["token"], choice, ms=1500)
        assert response.status_code == 201, response.text


def _participants(client, headers, slug: str) -> dict[str, dict]:  # type: ignore[no-untyped-def]
    rows = client.get(f"/api/projects/{slug}/participants", headers=headers).json()["data"]
    return {row["external_id"]: row for row in rows}


def test_reliability_is_learned_off_the_request_path_and_flags(live, engine, pool):
    client, headers = live
    study = make_study(client, headers, n=20, n_triplets=10, n_pairs=0)  # 10 imported
    plan = {
        "strategies": [{"kind": "random"}],
        "queries_per_session": 50,
        "repeat_rate": 0,
        "quality": {"min_answers": 5, "min_reliability": 0.65, "reliability_every": 40},
    }
    response = client.put(f"/api/projects/{study.slug}/plan", json=plan, headers=headers)
    assert response.status_code == 200, response.text
    runner = make_runner(engine, pool)
    rng = np.random.default_rng(0)
    for name in CAREFUL + SPAMMERS:
        _answer_session(client, study.slug, name, study.X, 40, rng)
    before = _participants(client, headers, study.slug)
    assert all(row["reliability"] is None for row in before.values())

    runner.tick()  # 320 answers from participants >= reliability_every: a job is queued
    with Session(engine) as db:
        project = db.scalars(select(Project).where(Project.slug == study.slug)).one()
        jobs = list(db.scalars(select(Job).where(Job.project_id == project.id)))
    assert [(j.kind, j.trigger) for j in jobs] == [("reliability", "reliability")]
    done = wait_for(client, headers, jobs[0].id, runner)
    assert done["status"] == "succeeded", done["error"]
    runner.tick()  # no new answers since: nothing more queued
    with Session(engine) as db:
        assert len(list(db.scalars(select(Job).where(Job.project_id == project.id)))) == 1

    rows = _participants(client, headers, study.slug)
    careful = [rows[n]["reliability"] for n in CAREFUL]
    spam = [rows[n]["reliability"] for n in SPAMMERS]
    assert min(careful) > max(spam), (careful, spam)
    for row in rows.values():
        assert row["reliability_low"] <= row["reliability"] <= row["reliability_high"]
        assert row["flagged"] == (row["reliability"] < 0.65)
        assert ("reliability" in row["flag_reason"]) == row["flagged"]
    assert rows["coin-0"]["flagged"] and rows["coin-1"]["flagged"], spam

    # The round trip's own review (every 5 answers) reads counters, not the reliability:
    # it keeps the flag the reliability job set.
    flagged = next(n for n in SPAMMERS if rows[n]["flagged"])
    _answer_session(client, study.slug, flagged, study.X, 5, rng)
    after = _participants(client, headers, study.slug)[flagged]
    assert after["flagged"] and "reliability" in after["flag_reason"]

    # The export shows each answer's participant's reliability beside the flag.
    exported = client.get(f"/api/projects/{study.slug}/answers", headers=headers).json()
    by_name = {r["participant"]: r["reliability"] for r in exported}
    assert by_name["careful-0"] == pytest.approx(rows["careful-0"]["reliability"])

    # Training weighs each answer by its posterior of being careful: the careful workers'
    # answers weigh more. Flagged participants' answers are left out unless asked for.
    with Session(engine) as db:
        project = db.scalars(select(Project).where(Project.slug == study.slug)).one()
        data = load_training_data(db, project, include_flagged=True)
        assert data.triplet_weights is None
        load_answer_weights(db, project, data)
    ids = {row["id"]: name for name, row in rows.items()}
    names = [ids.get(int(p), "imported") for p in data.triplet_participants]
    spammer = np.array([name.startswith("coin") for name in names])
    careful = np.array([name.startswith("careful") for name in names])
    assert data.triplet_weights[spammer].mean() < data.triplet_weights[careful].mean()
    np.testing.assert_array_equal(data.triplet_weights[data.triplet_participants < 0], 1.0)
    for weighting in ("reliability", "none"):
        response = client.post(
            f"/api/projects/{study.slug}/models",
            json={"kind": "embedding", "params": {"weighting": weighting, "method": "tste"}},
            headers=headers,
        )
        assert response.status_code == 202, response.text
        trained = wait_for(client, headers, response.json()["id"], runner)
        assert trained["status"] == "succeeded", trained["error"]


def test_weighting_is_refused_where_it_cannot_apply(live):
    client, headers = live
    study = make_study(client, headers, n=12, n_triplets=60, n_pairs=0)
    response = client.post(
        f"/api/projects/{study.slug}/models",
        json={"kind": "embedding", "params": {"weighting": "sometimes"}},
        headers=headers,
    )
    assert response.status_code == 422
    assert "weighting" in response.json()["detail"]
    response = client.post(
        f"/api/projects/{study.slug}/models",
        json={"kind": "reliability", "params": {}},
        headers=headers,
    )
    assert response.status_code == 422
    assert "reliability needs at least 20" in response.json()["detail"]

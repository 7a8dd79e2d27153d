"""Training jobs on SQLite and PostgreSQL: succeed, fail, cancel, re-queue, die; Dask too."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.db.models import Job, Project, utcnow
from app.training.executor import DaskExecutor, ProcessExecutor
from tests.training.helpers import committed_client, make_runner, make_study, wait_for


@pytest.fixture(scope="session")
def pool():
    executor = ProcessExecutor(workers=1)
    yield executor
    executor.shutdown()


@pytest.fixture
def live(app, engine):
    yield from committed_client(app, engine)


def train(client, headers, slug, kind, **params):  # type: ignore[no-untyped-def]
    response = client.post(
        f"/api/projects/{slug}/models", json={"kind": kind, "params": params}, headers=headers
    )
    assert response.status_code == 202, response.text
    return response.json()


def test_job_succeeds_in_the_process_pool_and_names_its_model(live, engine, pool):
    client, headers = live
    study = make_study(client, headers)
    job = train(client, headers, study.slug, "kernel")
    assert job["status"] == "queued"
    runner = make_runner(engine, pool)
    done = wait_for(client, headers, job["id"], runner)
    assert done["status"] == "succeeded", done["error"]
    assert done["progress"] == 1.0
    listed = client.get(f"/api/projects/{study.slug}/jobs", headers=headers).json()
    assert [j["id"] for j in listed["data"]] == [job["id"]] and listed["count"] == 1
    assert listed["data"][0]["project_slug"] == study.slug
    assert done["started_at"] and done["finished_at"]
    models = client.get(f"/api/projects/{study.slug}/models", headers=headers).json()["data"]
    assert [m["id"] for m in models] == [done["model_id"]]
    model = models[0]
    assert model["kind"] == "kernel" and model["version"] == 1
    assert model["n_answers"] == len(study.triplets) + len(study.pairs)
    assert model["first_answer_id"] < model["last_answer_id"]
    assert 0.5 < model["metrics"]["heldout_triplet_accuracy"] <= 1.0
    assert model["metrics"]["heldout_triplets"] == round(len(study.triplets) * 0.1)
    assert model["training_seconds"] > 0


def test_a_job_that_raises_is_marked_failed_and_serving_goes_on(live, engine, pool):
    client, headers = live
    study = make_study(client, headers, n_triplets=200)
    job = train(client, headers, study.slug, "kernel")
    with Session(engine) as db:  # parameters broken after the job was accepted
        db.execute(update(Job).where(Job.id == job["id"]).values(params={"kernel": "k9"}))
        db.commit()
    done = wait_for(client, headers, job["id"], make_runner(engine, pool))
    assert done["status"] == "failed"
    assert "kernel" in done["error"]
    assert client.get(f"/api/projects/{study.slug}", headers=headers).status_code == 200


def test_cancel_a_queued_job(live, engine, pool):
    client, headers = live
    study = make_study(client, headers, n_triplets=200)
    job = train(client, headers, study.slug, "kernel")
    cancelled = client.delete(f"/api/jobs/{job['id']}", headers=headers).json()
    assert cancelled["status"] == "cancelled"
    runner = make_runner(engine, pool)
    runner.tick()
    assert job["id"] not in runner.running
    assert client.get(f"/api/jobs/{job['id']}", headers=headers).json()["model_id"] is None


def test_cancel_a_running_job(live, engine, pool):
    client, headers = live
    # Long enough to be caught running on a quiet machine: 21 fits of 10^6 rounds each.
    study = make_study(client, headers, n_triplets=6000)
    job = train(client, headers, study.slug, "tripletboost", n_estimators=1_000_000, cv_folds=20)
    runner = make_runner(engine, pool)
    deadline = time.monotonic() + 60
    while client.get(f"/api/jobs/{job['id']}", headers=headers).json()["progress"] <= 0.0:
        runner.tick()
        assert time.monotonic() < deadline, "the job never reported progress"
        time.sleep(0.2)
    client.delete(f"/api/jobs/{job['id']}", headers=headers)
    done = wait_for(client, headers, job["id"], runner, timeout=60)
    assert done["status"] == "cancelled"
    assert client.get(f"/api/projects/{study.slug}/models", headers=headers).json()["count"] == 0


def test_restart_requeues_a_job_whose_process_is_gone(live, engine, pool):
    client, headers = live
    study = make_study(client, headers, n_triplets=300)
    job = train(client, headers, study.slug, "kernel")
    with Session(engine) as db:  # as a server that died mid-job leaves it
        db.execute(
            update(Job)
            .where(Job.id == job["id"])
            .values(status="running", heartbeat_at=utcnow() - timedelta(minutes=5))
        )
        db.commit()
    done = wait_for(client, headers, job["id"], make_runner(engine, pool))
    assert done["status"] == "succeeded"
    with Session(engine) as db:
        assert db.get(Job, job["id"]).attempts == 1


def test_a_job_whose_process_dies_is_marked_failed(live, engine):
    client, headers = live
    # Long enough to be caught running on a quiet machine: 21 fits of 10^6 rounds each.
    study = make_study(client, headers, n_triplets=6000)
    job = train(client, headers, study.slug, "tripletboost", n_estimators=1_000_000, cv_folds=20)
    executor = ProcessExecutor(workers=1)
    try:
        runner = make_runner(engine, executor)
        deadline = time.monotonic() + 60
        while client.get(f"/api/jobs/{job['id']}", headers=headers).json()["progress"] <= 0.0:
            runner.tick()
            assert time.monotonic() < deadline
            time.sleep(0.2)
        for process in list(executor._pool._processes.values()):
            os.kill(process.pid, signal.SIGKILL)
        done = wait_for(client, headers, job["id"], runner, timeout=60)
        assert done["status"] == "failed"
        assert "process" in done["error"]
        # The pool is rebuilt: the next job runs.
        second = train(client, headers, study.slug, "kernel")
        assert wait_for(client, headers, second["id"], runner)["status"] == "succeeded"
    finally:
        executor.shutdown()


def test_the_dask_path_runs_the_same_job_code(live, engine):
    from distributed import LocalCluster

    client, headers = live
    study = make_study(client, headers, n_triplets=300)
    job = train(client, headers, study.slug, "kernel")
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        executor = DaskExecutor(cluster.scheduler_address)
        try:
            done = wait_for(client, headers, job["id"], make_runner(engine, executor))
        finally:
            executor.shutdown()
    assert done["status"] == "succeeded", done["error"]
    assert done["model_id"] is not None


def test_automatic_retraining_triggers_once_per_threshold(live, engine, pool):
    client, headers = live
    study = make_study(client, headers, n_triplets=100, n_pairs=0)
    policy = {"kind": "kernel", "every_n_answers": 50, "min_interval_s": 0}
    assert (
        client.put(f"/api/projects/{study.slug}/retrain", json=policy, headers=headers).status_code
        == 200
    )
    runner = make_runner(engine, pool)

    def import_triplets(count: int, offset: int) -> None:
        rows = study.triplets[offset : offset + count].tolist()
        client.post(f"/api/projects/{study.slug}/answers", json={"triplets": rows}, headers=headers)

    def auto_jobs() -> list[Job]:
        with Session(engine) as db:
            project = db.query(Project).filter(Project.slug == study.slug).one()
            return db.query(Job).filter(Job.trigger == "auto", Job.project_id == project.id).all()

    before = len(auto_jobs())
    assert before == 0
    import_triplets(49, 0)
    runner.tick()
    assert len(auto_jobs()) == before
    import_triplets(1, 49)
    runner.tick()
    runner.tick()
    created = auto_jobs()
    assert len(created) == before + 1
    wait_for(client, headers, created[-1].id, runner)
    runner.tick()
    assert len(auto_jobs()) == before + 1
    import_triplets(50, 50)
    runner.tick()
    assert len(auto_jobs()) == before + 2
    policies = client.get(f"/api/projects/{study.slug}/retrain", headers=headers).json()
    assert policies["kernel"]["every_n_answers"] == 50

"""Jobs outlive their project's deletion cleanly, and a job id never names two jobs."""

from __future__ import annotations

from concurrent.futures import Future
from pathlib import Path

from sqlalchemy import insert, select, text

from app.db.migrate import upgrade
from app.db.models import Job, Model, Project, utcnow
from app.db.session import make_engine
from app.training.runner import JobRunner
from tests.training.helpers import committed_client, make_study


class PendingExecutor:
    """Takes jobs and never finishes them: a job that is still training."""

    name = "pending"
    stops_jobs_on_shutdown = True

    def __init__(self) -> None:
        self.futures: list[Future] = []

    def submit(self, fn, *args):  # type: ignore[no-untyped-def]
        self.futures.append(Future())
        return self.futures[-1]

    def shutdown(self) -> None:
        pass


def test_deleting_a_project_with_a_running_job(app, engine):
    for client, headers in committed_client(app, engine):
        study = make_study(client, headers, n_triplets=300)
        created = client.post(
            f"/api/projects/{study.slug}/models", json={"kind": "kernel"}, headers=headers
        )
        assert created.status_code == 202, created.text
        executor = PendingExecutor()
        url = engine.url.render_as_string(hide_password=False)
        runner = JobRunner(url, executor, capacity=1, poll_s=0.1)
        runner.tick()
        assert list(runner.running) == [created.json()["id"]]
        deleted = client.delete(f"/api/projects/{study.slug}?force=true", headers=headers)
        assert deleted.status_code == 204
        runner.tick()  # used to raise AttributeError: the job's row is gone
        assert executor.futures[0].cancelled()
        assert client.get(f"/api/jobs/{created.json()['id']}", headers=headers).status_code == 404


def test_a_deleted_job_id_is_never_given_again(app, engine):
    for client, headers in committed_client(app, engine):
        first = make_study(client, headers, n_triplets=300)
        job_id = client.post(
            f"/api/projects/{first.slug}/models", json={"kind": "kernel"}, headers=headers
        ).json()["id"]
        assert (
            client.delete(f"/api/projects/{first.slug}?force=true", headers=headers).status_code
            == 204
        )
        second = make_study(client, headers, n_triplets=300)
        again = client.post(
            f"/api/projects/{second.slug}/models", json={"kind": "kernel"}, headers=headers
        ).json()["id"]
        assert again > job_id
        assert client.get(f"/api/jobs/{job_id}", headers=headers).status_code == 404


def test_migration_to_autoincrement_keeps_models_jobs(tmp_path: Path):
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    now = utcnow()
    try:
        upgrade(engine, "0001")
        with engine.begin() as connection:
            connection.execute(
                insert(Project.__table__).values(
                    id=1, slug="p", name="p", instructions="", consent="", question="q",
                    pair_question="q", n_objects=0, plan_step=0, seed=0,
                    created_at=now, updated_at=now,
                )
            )  # fmt: skip
            connection.execute(
                insert(Job.__table__).values(
                    id=7, project_id=1, kind="kernel", params={}, status="succeeded",
                    progress=1.0, progress_text="", error="", trigger="request", attempts=1,
                    created_at=now,
                )
            )  # fmt: skip
            connection.execute(
                insert(Model.__table__).values(
                    id=3, project_id=1, job_id=7, kind="kernel", version=1, params={},
                    n_answers=1, metrics={}, training_seconds=0.1, artifact=b"x",
                    created_at=now,
                )
            )  # fmt: skip
        upgrade(engine)
        with engine.connect() as connection:
            assert connection.execute(select(Model.job_id)).scalar() == 7
            sql = connection.execute(
                text("SELECT sql FROM sqlite_master WHERE name IN ('jobs', 'models')")
            ).scalars()
            assert all("AUTOINCREMENT" in statement for statement in sql)
    finally:
        engine.dispose()

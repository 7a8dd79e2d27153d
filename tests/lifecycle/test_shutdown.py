"""SIGTERM to `tripletlab serve` while a job trains: the server exits, leaves no process
behind (pool worker, resource tracker), and the job waits in the queue for the next start."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import psutil
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Job
from app.db.session import make_engine
from tests.servers import Server, database_url
from tests.training.helpers import make_study

pytestmark = pytest.mark.slow


def wait_until(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_sigterm_leaves_no_process_and_requeues_the_running_job(kind: str, tmp_path: Path):
    url = database_url(kind, tmp_path, "shutdown")
    server = Server(url, tmp_path / "data", {"TRIPLETLAB_RUN_JOBS": "true"}).start()
    try:
        headers = {"Authorization": f"Bearer {server.admin_key()}"}
        with httpx.Client(base_url=server.base, timeout=30) as client:
            # Long enough to be caught training on a quiet machine: 21 fits of 10^6 rounds.
            study = make_study(client, headers, n_triplets=6000, n_pairs=10)
            params = {"n_estimators": 1_000_000, "cv_folds": 20}
            created = client.post(
                f"/api/projects/{study.slug}/models",
                json={"kind": "tripletboost", "params": params},
                headers=headers,
            )
            assert created.status_code == 202, created.text
            job_id = created.json()["id"]

            def training() -> bool:
                job = client.get(f"/api/jobs/{job_id}", headers=headers).json()
                assert job["status"] in ("queued", "running"), job
                return job["status"] == "running" and job["progress"] > 0

            wait_until(training, 90, "the job to train in the pool")
        children = server.children()
        assert len(children) >= 1  # the pool's worker process (and the resource tracker)

        assert server.terminate(timeout=30)
        _, alive = psutil.wait_procs(children, timeout=10)
        assert alive == [], [(p.pid, p.name(), p.cmdline()) for p in alive]

        engine = make_engine(url)
        try:
            with Session(engine) as db:
                job = db.scalar(select(Job).where(Job.id == job_id))
            assert job.status == "queued"
            assert "server stopped" in job.progress_text
        finally:
            engine.dispose()

        # The next start takes it up again.
        server.start()
        with httpx.Client(base_url=server.base, timeout=30) as client:
            wait_until(
                lambda: (
                    client.get(f"/api/jobs/{job_id}", headers=headers).json()["status"] == "running"
                ),
                60,
                "the restarted server to run the job again",
            )
        children = server.children()
        assert server.terminate(timeout=30)
        assert psutil.wait_procs(children, timeout=10)[1] == []
    finally:
        server.close()

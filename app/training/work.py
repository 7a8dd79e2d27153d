"""The code a job process runs: open the database, beat, train, record the outcome."""

from __future__ import annotations

import threading

from sqlalchemy import update

from app.db.models import Job, utcnow
from app.db.session import make_engine, session_factory

HEARTBEAT_S = 5.0


def run_job(job_id: int, database_url: str) -> str:
    """Run a claimed job in this process (a pool worker or a Dask worker); its status."""
    from threadpoolctl import threadpool_limits

    from app.training.run import run_training

    # One BLAS thread per job: on a small machine the web server keeps a core to itself.
    threadpool_limits(limits=1)
    engine = make_engine(database_url)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_S):
            with engine.begin() as connection:
                connection.execute(
                    update(Job)
                    .where(Job.id == job_id, Job.status == "running")
                    .values(heartbeat_at=utcnow())
                )

    heart = threading.Thread(target=beat, name=f"job-{job_id}-heartbeat", daemon=True)
    heart.start()
    try:
        with session_factory(engine)() as db:
            return run_training(db, job_id)
    finally:
        stop.set()
        heart.join(timeout=HEARTBEAT_S)
        engine.dispose()

"""The job runner of an app process: claims queued jobs and hands them to the executor.

It runs in a thread of the web process but does no training there: jobs run in the
executor's processes (or on a Dask cluster). Jobs are rows, so a restarted server
re-queues what was running (no heartbeat for 30 s) and carries on.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from app.db import faults
from app.db.models import Job
from app.db.session import get_engine, session_factory
from app.services import imports
from app.services.adaptive import schedule_refits
from app.services.preview import release_places
from app.services.reliability import schedule_reliability
from app.services.study_control import check_stop_rules
from app.training import jobs as job_service
from app.training.executor import Executor, make_executor
from app.training.retrain import schedule_due
from app.training.work import run_job

log = logging.getLogger(__name__)
REQUEUE_EVERY_S = 10.0
STOP_RULES_EVERY_S = 5.0  # the studies' stop rules checked
# The places previews took given back: less often (it reads the sessions for previews').
RELEASE_EVERY_S = 30.0


class JobRunner:
    def __init__(
        self, database_url: str, executor: Executor, capacity: int, poll_s: float = 1.0
    ) -> None:
        self.database_url = database_url
        self.executor = executor
        self.capacity = max(1, capacity)
        self.poll_s = poll_s
        self.running: dict[int, Any] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_requeue = 0.0
        self._last_stop_rules = 0.0
        self._last_release = 0.0
        self._sessions = session_factory(get_engine(database_url))
        faults.watch()

    @classmethod
    def from_settings(cls, settings) -> JobRunner:  # type: ignore[no-untyped-def]
        executor = make_executor(settings.job_workers, settings.dask_scheduler)
        capacity = settings.job_workers if not settings.dask_scheduler else 4 * settings.job_workers
        return cls(settings.database_url, executor, capacity)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="job-runner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop claiming jobs and end the executor's processes (or close the Dask client). Jobs
        the pool was running are put back in the queue for the next server; jobs on a Dask
        cluster go on there."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.executor.shutdown()
        if self.running and self.executor.stops_jobs_on_shutdown:
            with self._sessions() as db:
                job_service.requeue(db, list(self.running), "re-queued: the server stopped")
            self.running.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except OperationalError as error:
                # The database is lost, out of space or busy: app.db.faults logs the first
                # two once, when they begin (and a lost one when it is back); a tick a
                # second would otherwise leave a traceback a second. Busy passes by itself.
                if faults.classify(error) is faults.Fault.BUSY:
                    log.info("job runner tick skipped, the database is busy: %s", error.orig)
            except Exception:  # the runner must outlive any one bad tick
                log.exception("job runner tick failed")
            self._stop.wait(self.poll_s)

    def tick(self) -> None:
        """One round: re-queue dead jobs, schedule retraining (policies, adaptive refits, the
        crowd's reliability), stop studies whose stop rule is met, collect results, start
        jobs."""
        with self._sessions() as db:
            now = time.monotonic()
            if now - self._last_requeue >= REQUEUE_EVERY_S:
                self._last_requeue = now
                job_service.requeue_stale(db)
            schedule_due(db)
            schedule_refits(db)
            schedule_reliability(db)
            if now - self._last_stop_rules >= STOP_RULES_EVERY_S:
                self._last_stop_rules = now
                check_stop_rules(db)
            if now - self._last_release >= RELEASE_EVERY_S:
                self._last_release = now
                release_places(db)
            imports.sweep(db)  # uploads whose process died: their hidden rows go
            self._collect(db)
            while len(self.running) < self.capacity:
                job = job_service.claim_next(db)
                if job is None:
                    break
                self.running[job.id] = self.executor.submit(run_job, job.id, self.database_url)

    def _collect(self, db) -> None:  # type: ignore[no-untyped-def]
        for job_id, future in list(self.running.items()):
            if not future.done():
                job = db.get(Job, job_id)
                if job is None or job.status == "cancelled":
                    # Cancelled, or deleted with its project: Dask stops it; a pool process
                    # stops at its next progress report (which finds no running row).
                    future.cancel()
                continue
            del self.running[job_id]
            error = future.exception() if not future.cancelled() else None
            if error is not None:
                job_service.mark_failed(
                    db, job_id, f"the job's process failed: {type(error).__name__}: {error}"
                )

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Block until no job runs or is queued (tests and the CLI use it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.tick()
            with self._sessions() as db:
                queued = db.scalar(
                    select(func.count()).select_from(Job).where(Job.status.in_(job_service.ACTIVE))
                )
            if not self.running and not queued:
                return True
            time.sleep(0.2)
        return False

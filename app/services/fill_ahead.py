"""Filling a project's pool of open questions before it runs dry, off the workers' requests
(PostgreSQL).

A round trip claims one of the questions the plan created ahead (``issuance.fill_pool``).
Without this, the pool was refilled only when a round trip found no question open for its
participant: that round trip, and every other one that found the pool empty at the same
moment, took the usual way (``app.services.known_sessions``), waited for the project's row
and claimed again, and the one that got the row ran the plan for a batch first. Here, each
process notes the questions its one-statement round trips claim and, when fewer than
:data:`LOW_WATER` of the project's questions come after one, has a thread of its own fill a
batch (:func:`top_up`) under the project's row, which those round trips do not need, so
they go on meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from app.db import statistics
from app.db.models import Project
from app.services.comprf import stored_plan_has_comprf
from app.services.issuance import POOL_BATCH, fill_pool
from app.services.projects import lock_project

log = logging.getLogger(__name__)

QUIET_S = 5.0  # after a look that created nothing, the next is this long after
# Questions a fill ahead creates. Larger than a round trip's own fill (issuance.POOL_BATCH):
# it runs off the requests, and with answers sent in batches (app.services.answer_batches)
# 128 at a time ran dry at ~1,600 round trips/s: a fill took ~70 ms in a busy server
# process (its thread waits for the interpreter at each statement), a batch of answers
# that found no question open went the usual way, and at 50 workers 12 % of the answers
# did (bench/results/answer_batches.txt). An adaptive strategy's questions not asked yet
# are dropped when its next batch is scored (adaptive.discard_unasked), however many.
BATCH = 4 * POOL_BATCH
LOW_WATER = BATCH // 2  # questions past the one just claimed below which a batch is added
# The project's last question: claims take the lowest id first, so the ids between the one
# just claimed and this one are about the questions left open. (Counting the open questions
# instead, every few claims, walked the index past every question closed since its last
# vacuum: PostgreSQL's CPU per round trip rose by a third.)
_LAST = text("SELECT max(id) FROM questions WHERE project_id = :project")


def last_question(db: Session, project_id: int) -> int:
    """The id of the project's newest question (0 if it has none)."""
    return db.execute(_LAST, {"project": project_id}).scalar_one() or 0


def top_up(db: Session, project_id: int, claimed: int) -> tuple[int, bool]:
    """If fewer than :data:`LOW_WATER` questions come after ``claimed`` (the question a round
    trip just claimed), free the project's expired leases and let its plan create a batch,
    in a transaction of its own that holds the project. Returns the project's last question
    then, and whether the plan was asked and created none (it has nothing more to ask, for
    now). Looked at again once the project is held: of two processes that look together,
    the second finds the first one's batch."""
    last = last_question(db, project_id)
    if last - claimed >= LOW_WATER:
        db.rollback()
        return last, False
    project = db.get(Project, project_id)
    if project is None or not _fills_ahead(project):
        db.rollback()
        return last, True
    lock_project(db, project)  # its plan re-read: it may have changed
    last = last_question(db, project_id)
    if not _fills_ahead(project) or last - claimed >= LOW_WATER:
        db.commit()
        return last, False
    created = fill_pool(db, project, None, batch=BATCH)
    last = last_question(db, project_id)
    db.commit()
    if created:
        statistics.refresh_if_stale(db)  # a fresh database's tables grow fast
    return last, not created


def _fills_ahead(project: Project) -> bool:
    # comprf: its questions are asked as answers come, one at a time, in the round trip.
    return bool(project.plan) and not stored_plan_has_comprf(project.plan)


class FillAhead:
    """One process's filler: :meth:`claimed` notes the question a round trip claimed and,
    when fewer than :data:`LOW_WATER` of the project's questions that this process knows of
    come after it, hands :func:`top_up` to the filler's one thread, unless that project
    already waits for it there. A failure is logged, never seen by a worker: a round trip
    fills the pool itself if it finds it empty."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="fill-ahead")
        self._lock = threading.Lock()
        self._last: dict[int, int] = {}  # by project: its last question, as last looked up
        self._waiting: set[int] = set()
        # By project: no look before then, after a look whose plan created nothing (near a
        # study's end every claim would otherwise look, and hold the project, again).
        self._quiet_until: dict[int, float] = {}

    def claimed(self, project_id: int, question_id: int) -> None:
        """A round trip of this process claimed the project's question ``question_id``."""
        with self._lock:
            last = self._last.get(project_id)
            if last is not None and last - question_id >= LOW_WATER:
                return
            if project_id in self._waiting:
                return
            if time.monotonic() < self._quiet_until.get(project_id, 0.0):
                return
            self._waiting.add(project_id)
        self._executor.submit(self._top_up, project_id, question_id)

    def wait(self) -> None:
        """Until the looks handed to the thread so far are done (tests)."""
        self._executor.submit(lambda: None).result()

    def _top_up(self, project_id: int, claimed: int) -> None:
        try:
            with Session(self._engine, expire_on_commit=False) as db:
                last, nothing_more = top_up(db, project_id, claimed)
            with self._lock:
                self._last[project_id] = last
                if nothing_more:
                    self._quiet_until[project_id] = time.monotonic() + QUIET_S
        except Exception:
            log.exception("filling the pool of project %s ahead failed", project_id)
        finally:
            with self._lock:
                self._waiting.discard(project_id)


_fillers: dict[Engine, FillAhead] = {}


def filler(engine: Engine) -> FillAhead:
    """The filler of ``engine``'s database in this process."""
    found = _fillers.get(engine)
    if found is None:
        found = _fillers.setdefault(engine, FillAhead(engine))
    return found

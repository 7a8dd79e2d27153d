"""The pool of open questions, and the producers that fill it ahead of the workers.

Every strategy of a project's plan is a producer: its questions are created ahead, a batch
at a time, as open questions with ``wanted`` places (``redundancy``), under the project's
hold (its row on PostgreSQL, the write lock on SQLite), so budgets are never overrun and the
plan's progress is saved once per batch. A worker's request only claims (see
``app.services.round_trip``). The pool is filled

* ahead, off the requests, by each server process's producer thread (:class:`Producer`):
  when a claimed question has fewer than :data:`LOW_WATER` of the project's questions after
  it, and after an import of answers (for a plan with a ``comprf`` strategy, whose trees
  they may split). A comprf strategy's forest is advanced there, incrementally, from the
  answers since its last fill (``app.services.comprf``), before the project is held;
* on a request's slow path, when it finds nothing to claim (:func:`fill_alone`): that also
  frees the leases that ran out, and gives an open comprf question an extra place when all
  of its trees' questions are out with others (so nobody waits while a vote helps).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, bindparam, delete, exists, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from app.active import rules
from app.active.base import Proposal
from app.active.planner import Planner
from app.config import get_settings
from app.db import statistics
from app.db.driver import first, rows, run
from app.db.models import Project, Query, Question, utcnow
from app.errors import InvalidInput
from app.schemas.plans import Plan
from app.services import comprf, round_trip_sql
from app.services.projects import lock_project

log = logging.getLogger(__name__)

# Questions a request's own fill creates (the slow path: the pool was empty for it).
POOL_BATCH = 128
# Questions a fill ahead creates: at ~1,800 round trips/s a batch of 128 ran dry before the
# next (a fill took ~70 ms in a busy server process, 20 ms alone: bench/results/
# answer_batches.txt).
AHEAD_BATCH = 4 * POOL_BATCH
LOW_WATER = AHEAD_BATCH // 2  # questions after the one just claimed below which one fills
MAX_PROPOSALS = 100  # proposals tried per fill beyond its batch before it gives up
QUIET_S = 5.0  # after a fill ahead that created nothing, the next look is this long after


def planner_for(project: Project, plan: Plan | None = None) -> Planner:
    """The planner of ``project``'s plan; ``ValueError`` if the plan cannot run on it."""
    plan = plan or Plan.model_validate(project.plan)
    specs = [s.model_dump() for s in plan.strategies]
    return Planner(specs, project.n_objects, plan.seed, gold_rate=plan.gold_rate)


def check_plan(project: Project, plan: Plan) -> None:
    """Refuse a plan its project cannot run (422 naming the strategy and the reason)."""
    try:
        planner_for(project, plan)
    except ValueError as error:
        raise InvalidInput(str(error), getattr(error, "loc", None)) from error


@dataclass(frozen=True)
class Filled:
    """What a fill did: questions created and places freed (leases that ran out), and
    whether the plan waits for answers being given now (a comprf tree: ``waiting``)."""

    created: int
    freed: int
    waiting: bool

    @property
    def available(self) -> bool:
        """Whether the fill made a question available that was not before."""
        return bool(self.created or self.freed)


def fill(db: Session, project: Project, batch: int | None = None) -> Filled:
    """Free the project's expired leases and let its plan create up to ``batch`` (default
    :data:`POOL_BATCH`) new open questions. The transaction must hold the project
    (:func:`lock_project`)."""
    batch = batch or POOL_BATCH
    freed = expire_leases(db, project.id)
    plan = Plan.model_validate(project.plan)
    planner = planner_for(project, plan)
    state: dict[str, Any] = project.plan_state or planner.initial_state()
    waiting = comprf.prepare_strategies(db, project, planner, state)
    step = project.plan_step
    created = 0
    proposals_left = batch + MAX_PROPOSALS
    exhausted = False  # the planner proposed nothing more
    while created < batch and proposals_left and not exhausted:
        # What is still wanted, proposed as if each were new, then created in one statement;
        # a proposal the project has already is uncounted and another one asked.
        proposed: list[tuple[int, dict[str, Any]]] = []
        while len(proposed) < batch - created and proposals_left:
            proposal = planner.propose(state, step)
            step += 1
            proposals_left -= 1
            if proposal is None:
                exhausted = True
                break
            position, question = proposal
            proposed.append((position, _question_row(question, position, planner, plan)))
            state = _counted(state, position, +1)
        if not proposed:
            break
        new = new_questions(db, project.id, [row for _, row in proposed])
        for position, row in proposed:
            if row["key"] in new:
                new.discard(row["key"])  # a key proposed twice in the batch counts once
                created += 1
            else:
                state = _counted(state, position, -1)
    db.execute(_SAVE_PLAN_PROGRESS, {"project": project.id, "state": state, "step": step})
    set_committed_value(project, "plan_state", state)
    set_committed_value(project, "plan_step", step)
    return Filled(created, freed, waiting and not created)


def fill_alone(db: Session, project_id: int, batch: int | None = None) -> Filled | None:
    """:func:`fill` in a transaction of its own that holds the project (taken before any
    other row: a round trip holds rows that freeing leases may wait for, so it must not wait
    for the project while holding them); None if the project has no plan (or is gone)."""
    project = db.get(Project, project_id)
    if project is None:
        db.rollback()
        return None
    if comprf.stored_plan_has_comprf(project.plan):
        # Its forests are brought up to date from the answers before the project is held
        # (on SQLite, before the database's write lock is taken): under it, only the answers
        # that arrived meanwhile are left to apply.
        comprf.advance_forests(db, project)
        db.rollback()
    lock_project(db, project)  # its plan re-read: it may have changed
    if not project.plan:
        db.commit()
        return None
    filled = fill(db, project, batch)
    db.commit()
    if filled.created:
        statistics.refresh_if_stale(db)  # a fresh database's tables grow fast
    return filled


def new_questions(db: Session, project_id: int, batch: list[dict[str, Any]]) -> set[str]:
    """Create the questions of ``batch`` (rows of ``round_trip_sql.QUESTION_FIELDS``), in
    its order, open, no place taken; the keys of those created."""
    values = json.dumps(
        [{name: row.get(name) for name in round_trip_sql.QUESTION_FIELDS} for row in batch]
    )
    params = {"project": project_id, "rows": values, "now": utcnow()}
    return {row.key for row in rows(db.connection(), round_trip_sql.NEW_QUESTIONS, params)}


def expire_leases(db: Session, project_id: int) -> int:
    """Give back the places of the project's leases that ran out; how many ran out."""
    params = {"project": project_id, "now": utcnow()}
    expired = rows(db.connection(), round_trip_sql.EXPIRE_LEASES, params)
    # A repeat never held a place among its question's wanted answers.
    freed = Counter(row.question_id for row in expired if not row.is_repeat)
    for question_id, n in freed.items():
        run(db.connection(), round_trip_sql.FREE_PLACES, {"question": question_id, "n": n})
    return len(expired)


_q = Question.__table__.c
_UNASKED = (
    delete(Question.__table__)
    .where(
        _q.project_id == bindparam("project"),
        _q.live == 0,
        _q.answered == 0,
        ~exists().where(Query.__table__.c.question_id == _q.id),
    )
    .returning(_q.strategy_position)
)


def discard_unasked(db: Session, project: Project, position: int | None = None) -> int:
    """Delete the questions of the pool no one was ever given (of the strategy at
    ``position``, or all): when the plan changes, or a strategy's proposals do (an adaptive
    strategy's new batch), they would be asked in place of its new ones. Their places in the
    budget are given back. The caller holds the project; how many were discarded."""
    statement = _UNASKED
    if position is not None:
        statement = statement.where(_q.strategy_position == position)
    positions = db.scalars(statement, {"project": project.id}).all()
    state = project.plan_state
    if positions and state and "created" in state:
        created = [*state["created"]]
        for at, count in Counter(positions).items():
            if 0 <= at < len(created):
                created[at] = max(created[at] - count, 0)
        project.plan_state = {**state, "created": created}
    return len(positions)


_projects = Project.__table__
_SAVE_PLAN_PROGRESS = (
    update(_projects)
    .where(_projects.c.id == bindparam("project"))
    .values(
        plan_state=bindparam("state", type_=_projects.c.plan_state.type),
        plan_step=bindparam("step"),
    )
)


def _counted(state: dict[str, Any], position: int, change: int) -> dict[str, Any]:
    """``state`` with ``change`` more questions created by the strategy at ``position`` (a
    new dict: the project's stored state is not changed in place)."""
    if position < 0:
        return state
    created = [*state["created"]]
    created[position] += change
    return {**state, "created": created}


def _question_row(
    proposal: Proposal, position: int, planner: Planner, plan: Plan
) -> dict[str, Any]:
    """The row of the question of ``proposal`` (see ``round_trip_sql.NEW_QUESTIONS``)."""
    strategy = planner.planned[position].strategy if position >= 0 else planner.gold_source
    wanted = strategy.answers_wanted(proposal, plan.redundancy) if strategy is not None else 1
    objects = [*proposal.objects, None][:3]
    return {
        "key": proposal.key,
        "kind": proposal.kind,
        "o1": objects[0],
        "o2": objects[1],
        "o3": objects[2],
        "strategy": proposal.strategy,
        "strategy_position": position,
        "strategy_ref": json.dumps(proposal.ref or None),
        "gold_choice": proposal.gold_choice,
        "wanted": wanted,
        # A shaped question lists every object (canonical); o1..o3 are its first three.
        "objects": list(proposal.objects) if proposal.kind in rules.SHAPED else None,
        "k": proposal.k,
    }


_LAST = select(_q.id).where(_q.project_id == bindparam("project")).order_by(_q.id.desc()).limit(1)


class Producer:
    """One server process's producer: a thread that fills projects' pools ahead of demand.

    :meth:`claimed` notes the question a round trip claimed and, when fewer than
    :data:`LOW_WATER` of the project's questions come after it (claims take the lowest id
    first), queues a fill of :data:`AHEAD_BATCH`; :meth:`answered` queues one after answers
    of a project whose plan grows with its answers (comprf). A project waits in the queue
    once. A failure is logged, never seen by a worker: a request that finds the pool empty
    fills it itself (:func:`fill_alone`)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="producer")
        self._lock = threading.Lock()
        self._last: dict[int, int] = {}  # by project: its last question, as last looked up
        self._queued: set[int] = set()
        self._quiet_until: dict[int, float] = {}  # after a fill that created nothing

    def claimed(self, project_id: int, question_id: int) -> None:
        with self._lock:
            last = self._last.get(project_id)
            if last is not None and last - question_id >= LOW_WATER:
                return
            if time.monotonic() < self._quiet_until.get(project_id, 0.0):
                return
        self._queue(project_id)

    def answered(self, project_id: int) -> None:
        self._queue(project_id)

    def _queue(self, project_id: int) -> None:
        if not get_settings().fill_ahead:
            return
        with self._lock:
            if project_id in self._queued:
                return
            self._queued.add(project_id)
        self._executor.submit(self._fill, project_id)

    def wait(self) -> None:
        """Until the fills queued so far are done (tests)."""
        self._executor.submit(lambda: None).result()

    def _fill(self, project_id: int) -> None:
        with self._lock:
            self._queued.discard(project_id)
        try:
            with Session(self._engine, expire_on_commit=False) as db:
                filled = fill_alone(db, project_id, AHEAD_BATCH)
                last = db.scalar(_LAST, {"project": project_id}) or 0
                db.rollback()
            with self._lock:
                self._last[project_id] = last
                if filled is None or not filled.created:
                    self._quiet_until[project_id] = time.monotonic() + QUIET_S
        except Exception:
            log.exception("filling the pool of project %s ahead failed", project_id)


_producers: dict[Engine, Producer] = {}


def answers_arrived(engine: Engine, project_id: int, plan: dict[str, Any] | None) -> None:
    """New answers of the project are committed (a worker's, an import's): a plan whose
    questions follow from its answers (a comprf strategy's trees) is refilled ahead now."""
    if comprf.stored_plan_has_comprf(plan):
        producer(engine).answered(project_id)


def producer(engine: Engine) -> Producer:
    """The producer of ``engine``'s database in this process."""
    found = _producers.get(engine)
    if found is None:
        found = _producers.setdefault(engine, Producer(engine))
    return found


def first_open(db: Session, project_id: int, participant_id: int, max_views: int | None) -> Any:
    """The first open question ``participant_id`` may be given (claimed on PostgreSQL), or
    None: (id, kind, o1, o2, o3, objects, k)."""
    params = {"project": project_id, "participant": participant_id, "max_views": max_views}
    return first(db.connection(), round_trip_sql.OPEN_QUESTION, params)

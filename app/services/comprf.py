"""The glue of crowd-built comparison forests: their stored state, kept current from answers.

A comprf strategy's forest (:mod:`app.active.comprf`) is derived data: the plan fixes its
parameters and object snapshot (in ``project.plan_state``), and the answers build it. It
is a producer of the project's pool (``app.services.pool``): after answers are stored, a
server process's producer thread advances the forest from the new answers, under the
project's hold, and adds the questions its open nodes wait for to the pool, each with the
places it still needs; a worker's request never touches the forest. The process keeps the
forest it advanced in memory (a pass reads only the answers since), and stores it in
``strategy_states`` every :data:`SAVE_EVERY_S` seconds with the answers it has applied; it is
rebuilt by replaying every answer whenever the row is missing.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import bindparam, delete, func, or_, select, update
from sqlalchemy.orm import Session

from app.active.comprf import ComparisonForestStrategy, Forest, question_key
from app.active.planner import Planner
from app.db.models import Answer, Object, Project, Query, Question, StrategyState, utcnow
from app.errors import InvalidInput
from app.schemas.plans import Plan
from app.services.imports import visible_answers, visible_objects

KIND = "comprf"
RECENT_SECONDS = 30.0  # answers are read again for this long: they may commit out of id order
QUEUE_SIZE = 512  # pending questions handed to the planner per fill
EXTRA_VOTES = 16  # questions given an extra place at once when nothing else can be asked
SAVE_EVERY_S = 2.0  # the forest in memory is stored at most this often
_CHUNK = 400

_answers = Answer.__table__
_queries = Query.__table__
_NEW_ANSWERS = (
    select(_answers.c.id, _answers.c.a, _answers.c.b, _answers.c.c, _answers.c.created_at)
    .select_from(_answers.outerjoin(_queries, _queries.c.id == _answers.c.query_id))
    .where(
        _answers.c.project_id == bindparam("project"),
        _answers.c.kind == "triplet",
        _answers.c.id > bindparam("floor"),
        _answers.c.gold_correct.is_(None),  # attention checks are not data
        visible_answers(_answers),
        or_(_queries.c.id.is_(None), ~_queries.c.is_repeat),  # a repeat is the same worker
    )
    .order_by(_answers.c.id)
)


def comprf_positions(plan: Plan) -> list[int]:
    return [i for i, spec in enumerate(plan.strategies) if spec.kind == KIND]


def stored_plan_has_comprf(plan: dict[str, Any] | None) -> bool:
    """Whether a project's stored plan (its JSON, not validated: a worker's request asks
    before anything else) has a comprf strategy, as :func:`comprf_positions` would say."""
    return any(spec.get("kind") == KIND for spec in (plan or {}).get("strategies") or [])


def object_labels(db: Session, project: Project) -> list[str | None]:
    rows = db.execute(
        select(Object.index, Object.label).where(
            Object.project_id == project.id, visible_objects(project.id)
        )
    ).all()
    labels: list[str | None] = [None] * project.n_objects
    for index, label in rows:
        if index < len(labels):
            labels[index] = label
    return labels


def initial_plan_state(db: Session, project: Project, plan: Plan) -> dict[str, Any] | None:
    """The planner's first state, with each comprf strategy's object snapshot; 422 for a
    comprf strategy that cannot run on the project (e.g. ``supervised`` without classes)."""
    positions = comprf_positions(plan)
    if not positions:
        return None
    planner = _planner(project, plan)
    state = planner.initial_state()
    labels = object_labels(db, project)
    for position in positions:
        strategy = planner.planned[position].strategy
        assert isinstance(strategy, ComparisonForestStrategy)
        try:
            state["strategies"][position] = strategy.setup(labels)
        except ValueError as error:
            raise InvalidInput(f"strategy {position} ({KIND}): {error}") from error
    return state


def forget_forests(db: Session, project: Project) -> None:
    """Drop the stored forests (a new plan starts new trees)."""
    db.execute(delete(StrategyState).where(StrategyState.project_id == project.id))


def _planner(project: Project, plan: Plan) -> Planner:
    specs = [s.model_dump() for s in plan.strategies]
    try:
        return Planner(specs, project.n_objects, plan.seed, gold_rate=plan.gold_rate)
    except ValueError as error:
        raise InvalidInput(str(error)) from error


def _setup(
    db: Session,
    project: Project,
    strategy: ComparisonForestStrategy,
    state: dict[str, Any],
    pos: int,
) -> dict[str, Any]:
    """The strategy's object snapshot from the planner state, taken now if it has none."""
    setup = state["strategies"][pos]
    if "n_objects" not in setup:
        setup = strategy.setup(object_labels(db, project))
        state["strategies"][pos] = setup  # saved with the planner's progress
    return setup


@dataclass
class _Kept:
    """A forest this process advanced: the answers it applied (``floor``, ``recent``) and
    the stored row's ``updated_at`` it started from or last wrote (another process's write
    since means it is read again)."""

    forest: Forest
    floor: int
    recent: set[int]
    stored_at: Any
    saved: float


_kept: dict[tuple[int, Any, int], _Kept] = {}


def forget() -> None:
    """Forget the forests kept in memory (tests that empty the database)."""
    _kept.clear()


_STORED_AT = select(StrategyState.updated_at).where(
    StrategyState.project_id == bindparam("project"),
    StrategyState.position == bindparam("position"),
)


def current_forest(
    db: Session,
    project: Project,
    strategy: ComparisonForestStrategy,
    position: int,
    setup: dict[str, Any],
    *,
    save: bool,
) -> Forest:
    """The strategy's forest with every committed answer applied; stored when ``save`` (at
    most every :data:`SAVE_EVERY_S` seconds).

    Without a stored row (or one of another plan) the forest is replayed from all answers.
    """
    with _forests_lock:
        return _current_forest(db, project, strategy, position, setup, save=save)


# The forests kept are advanced in place: by the producer thread, a request's fill and the
# progress route of one process. One at a time (an answer applied twice by two threads was
# counted twice); held by the callers that read a forest after advancing it.
_forests_lock = threading.RLock()


def _current_forest(
    db: Session,
    project: Project,
    strategy: ComparisonForestStrategy,
    position: int,
    setup: dict[str, Any],
    *,
    save: bool,
) -> Forest:
    key = (project.id, project.created_at, position)  # an id SQLite reuses is another project
    stored_at = db.scalar(_STORED_AT, {"project": project.id, "position": position})
    kept = _kept.get(key)
    if (
        kept is None
        or kept.stored_at != stored_at
        or kept.forest.params != strategy.forest_params
        or kept.forest.setup != setup
    ):
        kept = _load(db, project, strategy, position, setup, stored_at)
    forest = kept.forest
    now = utcnow()
    rows = db.execute(_NEW_ANSWERS, {"project": project.id, "floor": kept.floor}).all()
    fresh = [(r.id, r.a, r.b, r.c) for r in rows if r.id not in kept.recent]
    old_n_objects = sum(len(r) for r in forest.routed)
    forest.add_objects(project.n_objects)
    if fresh or old_n_objects != sum(len(r) for r in forest.routed):
        forest.add_votes(fresh)
        forest.resolve()
    cutoff = now - timedelta(seconds=RECENT_SECONDS)
    settled = [r.id for r in rows if r.created_at < cutoff]
    kept.floor = max([kept.floor, *settled])
    kept.recent = {r.id for r in rows if r.id > kept.floor}
    if save and time.monotonic() - kept.saved >= SAVE_EVERY_S:
        kept.stored_at = _store(db, project, position, kept, now)
        kept.saved = time.monotonic()
    _kept[key] = kept
    return forest


def _load(
    db: Session,
    project: Project,
    strategy: ComparisonForestStrategy,
    position: int,
    setup: dict[str, Any],
    stored_at: Any,
) -> _Kept:
    """The stored forest (or a new one, if none fits), and the answers it applied."""
    row = db.get(StrategyState, (project.id, position))
    forest = None
    if row is not None:
        try:
            forest = Forest.from_dict(row.state)
        except (ValueError, KeyError, TypeError):
            forest = None
        if forest is not None and (
            forest.params != strategy.forest_params or forest.setup != setup
        ):
            forest = None
    if forest is None or row is None:
        return _Kept(Forest.new(strategy.forest_params, setup), 0, set(), stored_at, 0.0)
    return _Kept(forest, row.floor_id, set(row.recent), stored_at, time.monotonic())


def _store(db: Session, project: Project, position: int, kept: _Kept, now: Any) -> Any:
    values = {
        "kind": KIND,
        "state": kept.forest.to_dict(),
        "floor_id": kept.floor,
        "recent": sorted(kept.recent),
        "updated_at": now,
    }
    row = db.get(StrategyState, (project.id, position))
    if row is None:
        db.add(StrategyState(project_id=project.id, position=position, **values))
    else:
        for name, value in values.items():
            setattr(row, name, value)
    db.flush()
    return now


def advance_forests(db: Session, project: Project) -> None:
    """Bring the forests of the project's comprf strategies up to date from its answers, in
    this process's memory, without writing (the next :func:`prepare_strategies` has only the
    answers since to apply)."""
    if not project.plan:
        return
    plan = Plan.model_validate(project.plan)
    planner = _planner(project, plan)
    state = project.plan_state or planner.initial_state()
    for position in comprf_positions(plan):
        strategy = planner.planned[position].strategy
        assert isinstance(strategy, ComparisonForestStrategy)
        setup = state["strategies"][position]
        if "n_objects" in setup:
            current_forest(db, project, strategy, position, setup, save=False)


def prepare_strategies(
    db: Session, project: Project, planner: Planner, state: dict[str, Any]
) -> bool:
    """Bring each comprf strategy of ``planner`` up to date and give it the questions to
    propose (under the project's hold, before the planner proposes). Whether a tree is
    unfinished: it waits for answers, and will have new questions once they come (a worker
    who has seen every question it asks now may have one of those)."""
    waiting = False
    for position, planned in enumerate(planner.planned):
        strategy = planned.strategy
        if not isinstance(strategy, ComparisonForestStrategy):
            continue
        setup = _setup(db, project, strategy, state, position)
        with _forests_lock:
            forest = current_forest(db, project, strategy, position, setup, save=True)
            pending = forest.pending()
            _close_decided(db, project, position, pending)
            askable = _askable(db, project, forest, pending)
        strategy.attach(forest, askable, len(pending))
        waiting = waiting or bool(pending)
    return waiting


def _close_decided(
    db: Session,
    project: Project,
    position: int,
    pending: Sequence[tuple[int, int, str, int, int, int, int]],
) -> None:
    """Stop asking this strategy's open questions that no tree waits for any more (their
    answers came from elsewhere, an import say): never asked again for nothing."""
    open_questions = db.execute(
        select(Question.id, Question.key).where(
            Question.project_id == project.id,
            Question.is_open,
            Question.strategy == KIND,
            Question.strategy_position == position,
        )
    ).all()
    if not open_questions:
        return
    waiting = {f"t:{a}:{min(p1, p2)}:{max(p1, p2)}" for _, _, _, a, p1, p2, _ in pending}
    done = [q.id for q in open_questions if q.key not in waiting]
    if done:
        db.execute(
            update(Question)
            .where(Question.id.in_(done))
            .values(wanted=Question.answered + Question.live, is_open=False)
        )


def _askable(
    db: Session,
    project: Project,
    forest: Forest,
    pending: Sequence[tuple[int, int, str, int, int, int, int]],
) -> list[tuple[int, int, str, int, int, int, int]]:
    """The first pending questions a worker may be asked now: new ones, open ones, and
    those whose answers fell short (a tie, or fewer than needed): their ``wanted`` grows.

    A question whose missing answers are all leased out waits.
    """
    chosen: list[Any] = []
    keys_seen: set[str] = set()

    def votes(row: tuple[int, int, str, int, int, int, int]) -> int:
        return len(forest.votes.get(question_key(*row[3:6]), ()))

    for start in range(0, len(pending), _CHUNK):
        chunk = []
        for row in pending[start : start + _CHUNK]:
            _, _, _, anchor, p1, p2, _ = row
            low, high = sorted((p1, p2))
            key = f"t:{anchor}:{low}:{high}"
            if key not in keys_seen:
                keys_seen.add(key)
                chunk.append((key, row))
        existing = {
            q.key: q
            for q in db.execute(
                select(
                    Question.id,
                    Question.key,
                    Question.wanted,
                    Question.answered,
                    Question.live,
                    Question.is_open,
                ).where(
                    Question.project_id == project.id,
                    Question.key.in_([key for key, _ in chunk]),
                )
            )
        }
        for key, row in chunk:
            question = existing.get(key)
            needed = row[-1]
            if question is None or question.is_open:
                chosen.append(row)
            elif needed > question.live and votes(row) >= question.answered:
                # (the forest has seen every answer the question got: not a stale read)
                wanted = question.answered + needed
                if wanted > question.wanted:
                    db.execute(
                        update(Question)
                        .where(Question.id == question.id)
                        .values(wanted=wanted, is_open=Question.answered + Question.live < wanted)
                    )
                    chosen.append(row)
            if len(chosen) >= QUEUE_SIZE:
                return chosen
    if not chosen and pending:
        _extra_votes(db, project, forest, pending)
    return chosen


def _extra_votes(
    db: Session,
    project: Project,
    forest: Forest,
    pending: Sequence[tuple[int, int, str, int, int, int, int]],
) -> None:
    """Every question the trees wait for is out with someone: give the
    :data:`EXTRA_VOTES` whose votes so far are the most split (the narrowest margin) one
    more place, so a worker who asks now has something worth answering rather than a wait."""

    def margin(row: tuple[int, int, str, int, int, int, int]) -> tuple[int, int]:
        votes = forest.votes.get(question_key(*row[3:6]), ())
        low = sum(1 for v in votes if v > 0)
        return abs(2 * low - len(votes)), row[0]

    keys = [
        f"t:{row[3]}:{min(row[4], row[5])}:{max(row[4], row[5])}"
        for row in sorted(pending, key=margin)[:EXTRA_VOTES]
    ]
    db.execute(
        update(Question)
        .where(Question.project_id == project.id, Question.key.in_(keys), ~Question.is_open)
        .values(wanted=Question.wanted + 1, is_open=True)
    )


def forests(db: Session, project: Project, *, save: bool = False) -> list[tuple[int, Forest]]:
    """``(plan position, current forest)`` of each comprf strategy of the project's plan."""
    if not project.plan:
        return []
    plan = Plan.model_validate(project.plan)
    positions = comprf_positions(plan)
    if not positions:
        return []
    planner = _planner(project, plan)
    state = project.plan_state or planner.initial_state()
    out = []
    for position in positions:
        strategy = planner.planned[position].strategy
        assert isinstance(strategy, ComparisonForestStrategy)
        setup = state["strategies"][position]
        if "n_objects" not in setup:
            setup = strategy.setup(object_labels(db, project))
        with _forests_lock:  # a copy: the forest kept goes on growing in other threads
            forest = current_forest(db, project, strategy, position, setup, save=save)
            out.append((position, copy.deepcopy(forest)))
    return out


def plan_progress(db: Session, project: Project) -> list[dict[str, Any]]:
    """Per strategy of the plan: questions created and answers received, its budget, and
    for comprf the state of each tree."""
    plan = Plan.model_validate(project.plan)
    counts = {
        position: (created, answered or 0)
        for position, created, answered in db.execute(
            select(Question.strategy_position, func.count(Question.id), func.sum(Question.answered))
            .where(Question.project_id == project.id)
            .group_by(Question.strategy_position)
        )
    }
    trees = dict(forests(db, project))
    out = []
    for position, spec in enumerate(plan.strategies):
        created, answered = counts.get(position, (0, 0))
        entry: dict[str, Any] = {
            "position": position,
            "kind": spec.kind,
            "budget": spec.budget,
            "questions_asked": created,
            "answers": int(answered),
        }
        if position in trees:
            forest = trees[position]
            per_tree = forest.progress()
            entry["comprf"] = {
                "nodes_split": sum(t["nodes_split"] for t in per_tree),
                "nodes_waiting": sum(t["nodes_waiting"] for t in per_tree),
                "questions_pending": len(forest.pending()),
                "answers_used": forest.n_answers,
                "complete": all(t["nodes_waiting"] == 0 for t in per_tree) and not forest.pending(),
                "trees": per_tree,
            }
        out.append(entry)
    return out


def forest_snapshot(db: Session, project: Project, position: int | None) -> dict[str, Any] | None:
    """The current forest of the plan's comprf strategy at ``position`` (default: the first)
    and what it cost: questions asked and answers used; None when the plan has none."""
    current = dict(forests(db, project))
    if not current:
        return None
    if position is None:
        position = min(current)
    if position not in current:
        return None
    asked = db.scalar(
        select(func.count(Question.id)).where(
            Question.project_id == project.id, Question.strategy_position == position
        )
    )
    return {"position": position, "forest": current[position], "questions_asked": int(asked or 0)}

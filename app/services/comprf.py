"""The glue of crowd-built comparison forests: their stored state, kept current from answers.

A comprf strategy's forest (:mod:`app.active.comprf`) is derived data: the plan fixes its
parameters and object snapshot (in ``project.plan_state``), and the answers build it.
The forest is stored in ``strategy_states`` with the answers it has applied, advanced
under the project's lock when questions are issued, and rebuilt by replaying every
answer whenever the row is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
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
QUEUE_SIZE = 100  # pending questions handed to the planner per issue
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


def current_forest(
    db: Session,
    project: Project,
    strategy: ComparisonForestStrategy,
    position: int,
    setup: dict[str, Any],
    *,
    save: bool,
) -> Forest:
    """The strategy's forest with every committed answer applied; stored when ``save``.

    Without a stored row (or one of another plan) the forest is replayed from all answers.
    """
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
    floor, recent = (row.floor_id, set(row.recent)) if forest is not None and row else (0, set())
    rebuilt = forest is None
    if forest is None:
        forest = Forest.new(strategy.forest_params, setup)
    now = utcnow()
    rows = db.execute(_NEW_ANSWERS, {"project": project.id, "floor": floor}).all()
    fresh = [(r.id, r.a, r.b, r.c) for r in rows if r.id not in recent]
    old_n_objects = sum(len(r) for r in forest.routed)
    forest.add_objects(project.n_objects)
    changed = bool(fresh) or rebuilt or old_n_objects != sum(len(r) for r in forest.routed)
    if changed:
        forest.add_votes(fresh)
        forest.resolve()
    cutoff = now - timedelta(seconds=RECENT_SECONDS)
    settled = [r.id for r in rows if r.created_at < cutoff]
    new_floor = max([floor, *settled])
    new_recent = sorted(r.id for r in rows if r.id > new_floor)
    if save and (changed or new_floor != floor):
        values = {
            "kind": KIND,
            "state": forest.to_dict(),
            "floor_id": new_floor,
            "recent": new_recent,
            "updated_at": now,
        }
        if row is None:
            db.add(StrategyState(project_id=project.id, position=position, **values))
        else:
            for name, value in values.items():
                setattr(row, name, value)
        db.flush()
    return forest


def prepared_planner(db: Session, project: Project, plan: Plan) -> Planner | None:
    """The plan's planner with its comprf strategies brought up to date (under the project's
    lock, before a question is issued); None, at no cost, for plans without one."""
    if not comprf_positions(plan):
        return None
    planner = _planner(project, plan)
    prepare_strategies(db, project, planner, project.plan_state or planner.initial_state())
    return planner


def waiting_for_answers(planner: Planner | None) -> bool:
    """Whether a comprf strategy's next questions wait for answers being given now."""
    return planner is not None and any(
        isinstance(p.strategy, ComparisonForestStrategy) and p.strategy.n_pending > 0
        for p in planner.planned
    )


def prepare_strategies(
    db: Session, project: Project, planner: Planner, state: dict[str, Any]
) -> None:
    """Bring each comprf strategy of ``planner`` up to date and give it the questions to
    propose. Called under the project's lock, before the planner proposes."""
    for position, planned in enumerate(planner.planned):
        strategy = planned.strategy
        if not isinstance(strategy, ComparisonForestStrategy):
            continue
        setup = _setup(db, project, strategy, state, position)
        forest = current_forest(db, project, strategy, position, setup, save=True)
        pending = forest.pending()
        _close_decided(db, project, position, pending)
        strategy.attach(forest, _askable(db, project, forest, pending), len(pending))


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
    return chosen


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
        out.append((position, current_forest(db, project, strategy, position, setup, save=save)))
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

"""Uploads written in short transactions, invisible until the last one.

A 40 MiB upload is over a million rows. Written in one transaction it holds SQLite's only
write lock for seconds, and every worker's answer waits for it. So an import is written a
chunk of :data:`CHUNK_ROWS` rows per transaction, and a worker's transaction can run between
two chunks; yet no reader — the planner, issuing, exports, training, counts — sees any of its
rows before the import ends, and then sees all of them at once:

* an import is a row of ``imports``, committed before its first chunk;
* its objects take the indices from the project's ``n_objects`` on, which every reader of
  objects bounds by (:func:`visible_objects`): they appear when the last transaction raises
  ``n_objects``; one objects import runs per project at a time (the indices are its);
* its answers carry its id in ``import_id``, and readers of answers skip the rows of an
  import whose ``imports`` row still exists (:func:`visible_answers`): they appear when the
  last transaction deletes it.

That last transaction is short whatever the size of the import. An import that fails is
cleaned up at once (:func:`discard`, a chunk per transaction again); one whose process died
stops updating ``heartbeat_at``, and :func:`sweep` (the job runner's tick, and the next
objects import into the project) removes it.

An import is a generator of steps (see :func:`run`): each ``next()`` runs one step and
yields whether the step after it writes (so a caller can give writing steps their turn with
the workers' requests); its return value is the import's result; closing it early discards
the import.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import and_, delete, func, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from app.db.models import Answer, Import, Model, Object, Project, StrategyState, utcnow
from app.db.session import begin_write
from app.db.statistics import analyze_after_bulk
from app.errors import Conflict

# Rows per transaction: a worker waits for one chunk at most (measured on SQLite at load
# average 14: 5,000 imported answers per transaction took 54 ms; 2,000 take less).
CHUNK_ROWS = 2000
STALE_AFTER = timedelta(seconds=120)  # an import whose heartbeat is older died
_DISCARDED = datetime(1970, 1, 1, tzinfo=UTC)  # the heartbeat of an import being discarded
T = TypeVar("T")
Steps = Generator[bool, None, T]


def visible_answers(answers: Any = Answer.__table__) -> ColumnElement[bool]:
    """The condition every reader of answers adds: not a row of an unfinished import, nor a
    researcher's preview (``app.services.preview``: counted nowhere, exported never)."""
    return and_(
        or_(answers.c.import_id.is_(None), answers.c.import_id.not_in(select(Import.id))),
        answers.c.source != "preview",
    )


def visible_objects(project_id: Any) -> ColumnElement[bool]:
    """The condition every reader of a project's objects adds: an index below its
    ``n_objects`` (read in the same statement, so consistent with it)."""
    n_objects = select(Project.n_objects).where(Project.id == project_id).scalar_subquery()
    return Object.index < n_objects


def run(steps: Steps[T]) -> T:
    """Run an import's steps one after the other, here; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def step(steps: Steps[T]) -> tuple[bool, Any]:
    """One step: ``(False, whether the next step writes)``, or ``(True, result)`` at the end
    (a StopIteration must not cross a thread or a coroutine)."""
    try:
        return False, next(steps)
    except StopIteration as done:
        return True, done.value


def begin(db: Session, project: Project, kind: str, n_rows: int, first_index: int | None) -> int:
    """Record an import in ``db``'s writing transaction (the caller commits); its id."""
    record = Import(project_id=project.id, kind=kind, n_rows=n_rows, first_index=first_index)
    db.add(record)
    db.flush()
    return record.id


def touch(db: Session, import_id: int) -> None:
    """Renew the import's heartbeat in the current writing transaction, before it writes a
    chunk; :class:`Conflict` if the import is gone or being discarded (swept as dead after
    a stall, or its project deleted): no chunk can land after :func:`discard` began."""
    now = utcnow()
    renewed = db.execute(
        update(Import)
        .where(Import.id == import_id, Import.heartbeat_at >= now - STALE_AFTER)
        .values(heartbeat_at=now)
    ).rowcount
    if not renewed:
        raise Conflict("the upload was interrupted (its import was cleaned up); send it again")


def end(db: Session, import_id: int) -> Import:
    """Delete the import's row in the current writing transaction (which shows its rows when
    it commits); the row as it was."""
    record = db.get(Import, import_id, populate_existing=True)
    if record is None:
        raise Conflict("the upload was interrupted (its import was cleaned up); send it again")
    db.delete(record)
    db.flush()
    return record


def lower_watermarks(db: Session, project: Project, first_id: int) -> None:
    """After answers from ``first_id`` on became visible, in the current transaction: every
    record of "all answers up to id W are counted" with W past ``first_id`` is lowered
    below it (the import's ids interleave with the answers that arrived while it ran).

    Models' ``last_answer_id`` (adaptive refits count from it) and retraining policies count
    a few answers twice, which only brings a refit earlier; a comprf forest whose floor
    passed ``first_id`` is dropped and replayed from every answer (derived data).
    """
    floor = first_id - 1
    db.execute(
        update(Model)
        .where(Model.project_id == project.id, Model.last_answer_id > floor)
        .values(last_answer_id=floor)
    )
    if project.retrain:
        project.retrain = {
            kind: {**policy, "last_answer_id": min(policy["last_answer_id"], floor)}
            for kind, policy in project.retrain.items()
        }
    db.execute(
        delete(StrategyState).where(
            StrategyState.project_id == project.id, StrategyState.floor_id > floor
        )
    )


def discard(db: Session, import_id: int, *, if_dead: bool = False) -> bool:
    """Remove an unfinished import (``if_dead``: only if its heartbeat is stale, checked
    under the lock): mark it discarded (no chunk is written after that), then delete its
    rows a chunk per transaction, then its record. Whether it was discarded."""
    db.rollback()
    begin_write(db)
    marked = update(Import).where(Import.id == import_id).values(heartbeat_at=_DISCARDED)
    if if_dead:
        marked = marked.where(Import.heartbeat_at < utcnow() - STALE_AFTER)
    if not db.execute(marked).rowcount:
        db.rollback()
        return False
    record = db.get(Import, import_id, populate_existing=True)
    assert record is not None
    db.commit()
    if record.kind == "answers":
        _discard_answers(db, import_id)
    else:
        _discard_objects(db, record)
    begin_write(db)
    db.execute(delete(Import).where(Import.id == import_id))
    db.commit()
    # Rows written then deleted: autovacuum may have counted them meanwhile.
    analyze_after_bulk(db, {"answers" if record.kind == "answers" else "objects": record.n_rows})
    return True


def _discard_answers(db: Session, import_id: int) -> None:
    while True:
        begin_write(db)
        chunk = select(Answer.id).where(Answer.import_id == import_id).limit(CHUNK_ROWS)
        removed = db.execute(delete(Answer).where(Answer.id.in_(chunk))).rowcount
        db.commit()
        if not removed:
            return


def _discard_objects(db: Session, record: Import) -> None:
    assert record.first_index is not None
    for start in range(record.first_index, record.first_index + record.n_rows, CHUNK_ROWS):
        begin_write(db)
        db.execute(
            delete(Object).where(
                Object.project_id == record.project_id,
                Object.index >= start,
                Object.index < start + CHUNK_ROWS,
                ~visible_objects(record.project_id),
            )
        )
        db.commit()


def sweep(db: Session, project_id: int | None = None) -> int:
    """Discard the imports (of one project, or all) whose process died; how many."""
    statement = select(Import.id).where(Import.heartbeat_at < utcnow() - STALE_AFTER)
    if project_id is not None:
        statement = statement.where(Import.project_id == project_id)
    dead = list(db.scalars(statement))
    db.rollback()
    return sum(discard(db, import_id, if_dead=True) for import_id in dead)


def pending_objects_import(db: Session, project: Project) -> Import | None:
    """The project's unfinished objects import, read in the current transaction."""
    return db.scalar(
        select(Import).where(Import.project_id == project.id, Import.kind == "objects")
    )


def first_answer_id(db: Session, import_id: int) -> int | None:
    return db.scalar(select(func.min(Answer.id)).where(Answer.import_id == import_id))

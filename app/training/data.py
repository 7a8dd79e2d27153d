"""What a training job learns from: a project's answers and objects, as arrays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Answer, Object, Participant, Project
from app.services.imports import visible_answers, visible_objects


@dataclass
class TrainingData:
    """A project's comparisons and object attributes.

    ``triplets`` rows (a, b, c): a is closer to b than to c. ``pairs`` rows (a, b, outcome)
    with outcome −1 (a better), 0 (about the same), 1 (b better). ``labels`` holds None for
    unlabelled objects; ``targets`` NaN for objects without a target; ``features`` is None
    unless every object has a feature vector.
    """

    n_objects: int
    triplets: np.ndarray
    pairs: np.ndarray
    labels: np.ndarray
    targets: np.ndarray
    features: np.ndarray | None
    n_answers: int
    first_answer_id: int | None
    last_answer_id: int | None
    #: comprf: the crowd-built forest and the plan's figures (see app.services.comprf)
    forest: Any = None

    @property
    def labelled(self) -> np.ndarray:
        return np.flatnonzero(np.array([label is not None for label in self.labels], dtype=bool))


def load_training_data(
    db: Session, project: Project, *, include_flagged: bool = False
) -> TrainingData:
    """Every triplet and pair answer of ``project`` that training may use.

    Gold questions (identity checks and researcher-supplied gold) are attention checks,
    not data, and are left out; so are flagged participants' answers unless
    ``include_flagged``. Imported answers are included.
    """
    statement = (
        select(Answer.id, Answer.kind, Answer.a, Answer.b, Answer.c, Answer.outcome)
        .where(Answer.project_id == project.id, visible_answers())
        .where((Answer.strategy.is_(None)) | (Answer.strategy != "gold"))
        .order_by(Answer.id)
    )
    if not include_flagged:
        flagged = select(Participant.id).where(
            Participant.project_id == project.id, Participant.flagged
        )
        statement = statement.where(
            Answer.participant_id.is_(None) | Answer.participant_id.not_in(flagged)
        )
    rows = db.execute(statement).all()
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    triplets = np.array([(r[2], r[3], r[4]) for r in rows if r[1] == "triplet"], dtype=np.intp)
    pairs = np.array([(r[2], r[3], r[5]) for r in rows if r[1] == "pair"], dtype=np.intp)
    objects = db.execute(
        select(Object.label, Object.target, Object.features)
        .where(Object.project_id == project.id, visible_objects(project.id))
        .order_by(Object.index)
    ).all()
    labels = np.array([o[0] for o in objects], dtype=object)
    targets = np.array([np.nan if o[1] is None else o[1] for o in objects], dtype=float)
    has_features = bool(objects) and all(o[2] is not None for o in objects)
    features = np.array([o[2] for o in objects], dtype=float) if has_features else None
    return TrainingData(
        n_objects=len(objects),
        triplets=triplets.reshape(-1, 3),
        pairs=pairs.reshape(-1, 3),
        labels=labels,
        targets=targets,
        features=features,
        n_answers=len(rows),
        first_answer_id=int(ids[0]) if len(ids) else None,
        last_answer_id=int(ids[-1]) if len(ids) else None,
    )

"""What a training job learns from: a project's answers and objects, as arrays."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Answer, Model, Object, Participant, Project
from app.services import shaped
from app.services.imports import visible_answers, visible_objects


@dataclass
class TrainingData:
    """A project's comparisons and object attributes.

    ``triplets`` rows (a, b, c): a is closer to b than to c; an odd-one-out's or a ranked
    grid's answer gives the triplets it implies (``app.learning.shapes.implied_triplets``),
    each with its answer's id, participant and side. ``pairs`` rows (a, b, outcome)
    with outcome −1 (a better), 0 (about the same), 1 (b better). ``labels`` holds None for
    unlabelled objects; ``targets`` NaN for objects without a target; ``features`` is None
    unless every object has a feature vector.

    Per answer, in the rows' order: ``*_ids`` the answer's id, ``*_participants`` its
    participant (−1 for an imported answer), ``*_sides`` the side clicked (−1 left, 0 "about
    the same", 1 right; 0 where unknown), and ``*_weights`` how much it counts in the fit
    (None: every answer once; see :func:`app.services.reliability.answer_weights`).
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
    triplet_ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    pair_ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    triplet_participants: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    pair_participants: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    triplet_sides: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    pair_sides: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    triplet_weights: np.ndarray | None = None
    pair_weights: np.ndarray | None = None
    #: every answer but a pair as ``(shape, objects as shown, choice)`` (app.learning.shapes),
    #: for the embeddings' likelihoods of a shape; ``triplet_answers[t]`` is triplet t's answer
    #: in it. Empty when every such answer is a plain triplet (nothing to model beyond them).
    shaped_answers: list = field(default_factory=list)
    triplet_answers: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))

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
        .add_columns(Answer.participant_id, Answer.position, Answer.objects, Answer.choices)
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
    # Every answer but a pair gives its triplets by the one rule (app.learning.shapes): a
    # triplet its own row, an odd-one-out two, an n-rank-k grid k·n − k(k−1)/2; each
    # triplet carries its answer's id, participant and side.
    asked = [r for r in rows if r[1] != "pair"]
    implied = [
        (r, answer, triplet)
        for answer, r in enumerate(asked)
        for triplet in shaped.implied(*r[1:5], *r[8:10])
    ]
    triplets = np.array([triplet for _, _, triplet in implied], dtype=np.intp)
    has_shapes = any(r[1] != "triplet" for r in asked)
    pairs = np.array([(r[2], r[3], r[5]) for r in rows if r[1] == "pair"], dtype=np.intp)

    def column(kind: str, index: int, missing: int) -> np.ndarray:
        if kind == "triplet":
            values = [missing if r[index] is None else r[index] for r, _, _ in implied]
        else:
            values = [missing if r[index] is None else r[index] for r in rows if r[1] == kind]
        return np.array(values, dtype=np.int64)

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
        triplet_ids=column("triplet", 0, -1),
        pair_ids=column("pair", 0, -1),
        triplet_participants=column("triplet", 6, -1),
        pair_participants=column("pair", 6, -1),
        triplet_sides=column("triplet", 7, 0),
        pair_sides=column("pair", 7, 0),
        shaped_answers=[shaped.read(*r[1:5], *r[8:10]) for r in asked] if has_shapes else [],
        triplet_answers=np.array([a for _, a, _ in implied], dtype=np.int64)
        if has_shapes
        else np.empty(0, dtype=np.int64),
    )


def load_answer_weights(db: Session, project: Project, data: TrainingData) -> None:
    """Set ``data.triplet_weights`` and ``data.pair_weights`` from the crowd's reliability.

    An answer the latest ``reliability`` model saw weighs its posterior probability of being
    careful (:class:`app.learning.reliability.CrowdReliability`); a newer answer weighs its
    participant's reliability; an answer of a participant without one (or imported) weighs
    1. Without any reliability yet, the weights stay None: every answer counts once.
    """
    from app.training.run import load_artifact  # run imports this module

    known = dict(
        db.execute(
            select(Participant.id, Participant.reliability).where(
                Participant.project_id == project.id, Participant.reliability.is_not(None)
            )
        ).all()
    )
    latest = db.execute(
        select(Model.artifact)
        .where(Model.project_id == project.id, Model.kind == "reliability")
        .order_by(Model.version.desc())
        .limit(1)
    ).scalar()
    artifact = load_artifact(latest) if latest else {}
    if not known and not artifact:
        return
    seen_ids = np.asarray(artifact.get("answer_ids", np.empty(0)), dtype=np.int64)
    seen_weights = np.asarray(artifact.get("answer_weights", np.empty(0)), dtype=float)
    order = np.argsort(seen_ids)
    seen_ids, seen_weights = seen_ids[order], seen_weights[order]

    def weights(ids: np.ndarray, participants: np.ndarray) -> np.ndarray:
        out = np.array([known.get(int(p), 1.0) if p >= 0 else 1.0 for p in participants])
        if len(seen_ids) and len(ids):
            at = np.minimum(np.searchsorted(seen_ids, ids), len(seen_ids) - 1)
            hit = seen_ids[at] == ids
            out[hit] = seen_weights[at[hit]]
        return out

    data.triplet_weights = weights(data.triplet_ids, data.triplet_participants)
    data.pair_weights = weights(data.pair_ids, data.pair_participants)

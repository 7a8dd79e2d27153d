"""Quality control: per-participant figures, and flags for those below the thresholds."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import Row, case, func, select
from sqlalchemy.orm import Session

from app.db.driver import Statement, run
from app.db.models import Answer, Participant, Project
from app.db.session import begin_write
from app.errors import NotFound
from app.schemas.plans import Plan, QualityThresholds
from app.services.projects import project_plan


@dataclass
class ParticipantQuality:
    id: int
    platform: str
    external_id: str
    flagged: bool
    flag_reason: str
    flag_manual: bool
    n_answers: int
    gold_answers: int
    gold_accuracy: float | None
    fast_share: float | None
    left_share: float | None
    position_bias: float | None
    repeats: int
    consistency: float | None
    #: learned from the answers (app.services.reliability): posterior mean and interval
    reliability: float | None = None
    reliability_low: float | None = None
    reliability_high: float | None = None
    #: the position bias of each shape answered (:func:`position_bias`): answers, bias
    position_bias_by_shape: dict[str, dict[str, float | int | None]] | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def position_bias(counts: dict[int, int], positions: int) -> float | None:
    """How much one shown position is preferred: ``(max share - 1/m) / (1 - 1/m)`` over the
    ``m`` positions a choice can take (a triplet's and a pair's left and right, a pair's tie
    being no side; an odd-one-out's three tiles; a ranked grid's ``n`` candidates, for its
    first pick), 0 when balanced, 1 when always the same. For a triplet or a pair (m = 2)
    it is ``|share of left - ½| × 2``, as ``position_bias``."""
    total = sum(counts.values())
    if not total or positions < 2:
        return None
    share = max(counts.values()) / total
    return (share - 1 / positions) / (1 - 1 / positions)


def _shape_biases(
    db: Session, project: Project, participant_id: int | None
) -> dict[int, dict[str, dict[str, float | int | None]]]:
    """Per participant and shape answered: the answers with a shown position, and their
    position bias. Triplets, pairs and odd-one-outs are counted by their stored
    ``position``; a ranked grid's position is its first pick's among the candidates as
    shown (read from its ``objects`` and ``choices``)."""
    counts: dict[tuple[int, str], dict[int, int]] = {}
    sizes: dict[tuple[int, str], int] = {}
    grouped = (
        select(Answer.participant_id, Answer.kind, Answer.position, func.count())
        .where(Answer.project_id == project.id, Answer.participant_id.is_not(None))
        .where(Answer.position.is_not(None), Answer.kind != "rank")
        .group_by(Answer.participant_id, Answer.kind, Answer.position)
    )
    grids = select(Answer.participant_id, Answer.objects, Answer.choices).where(
        Answer.project_id == project.id, Answer.participant_id.is_not(None), Answer.kind == "rank"
    )
    if participant_id is not None:
        grouped = grouped.where(Answer.participant_id == participant_id)
        grids = grids.where(Answer.participant_id == participant_id)
    for participant, kind, position, n in db.execute(grouped):
        if kind in ("triplet", "pair") and position not in (-1, 1):
            continue  # a tie is no side
        counts.setdefault((participant, kind), {})[position] = n
        sizes[(participant, kind)] = 3 if kind == "odd_one_out" else 2
    for participant, objects, choices in db.execute(grids):
        if not objects or not choices:
            continue
        label = f"{len(objects) - 1}-rank-{len(choices)}"
        at = list(objects[1:]).index(choices[0])
        found = counts.setdefault((participant, label), {})
        found[at] = found.get(at, 0) + 1
        sizes[(participant, label)] = len(objects) - 1
    result: dict[int, dict[str, dict[str, float | int | None]]] = {}
    for (participant, label), by_position in counts.items():
        result.setdefault(participant, {})[label] = {
            "answers": sum(by_position.values()),
            "position_bias": position_bias(by_position, sizes[(participant, label)]),
        }
    return result


def _figures(db: Session, project: Project, min_answer_ms: int, participant_id: int | None = None):  # type: ignore[no-untyped-def]
    elapsed = func.coalesce(Answer.client_ms, Answer.server_ms)
    statement = (
        select(
            Participant,
            func.count(Answer.id),
            func.count(Answer.gold_correct),
            func.sum(case((Answer.gold_correct, 1), else_=0)),
            func.sum(case((elapsed < min_answer_ms, 1), else_=0)),
            func.sum(case((Answer.position == -1, 1), else_=0)),
            func.sum(case((Answer.position.in_((-1, 1)), 1), else_=0)),
            func.count(Answer.consistent),
            func.sum(case((Answer.consistent, 1), else_=0)),
        )
        .outerjoin(Answer, Answer.participant_id == Participant.id)
        .where(Participant.project_id == project.id)
        .group_by(Participant.id)
        .order_by(Participant.id)
    )
    if participant_id is not None:
        statement = statement.where(Participant.id == participant_id)
    else:  # a researcher's previews are nobody's data (app.services.preview)
        statement = statement.where(Participant.platform != "preview")
    biases = _shape_biases(db, project, participant_id)
    for row in db.execute(statement):
        participant, n, gold_n, gold_ok, fast, left, sided, repeat_n, repeat_ok = row
        gold_ok, fast, left, sided, repeat_ok = (
            int(v or 0) for v in (gold_ok, fast, left, sided, repeat_ok)
        )
        left_share = left / sided if sided else None
        yield (
            ParticipantQuality(
                id=participant.id,
                platform=participant.platform,
                external_id=participant.external_id,
                flagged=participant.flagged,
                flag_reason=participant.flag_reason,
                flag_manual=participant.flag_manual,
                n_answers=n,
                gold_answers=gold_n,
                gold_accuracy=gold_ok / gold_n if gold_n else None,
                fast_share=fast / n if n else None,
                left_share=left_share,
                position_bias=abs(left_share - 0.5) * 2 if left_share is not None else None,
                repeats=repeat_n,
                consistency=repeat_ok / repeat_n if repeat_n else None,
                reliability=participant.reliability,
                reliability_low=participant.reliability_low,
                reliability_high=participant.reliability_high,
                position_bias_by_shape=biases.get(participant.id, {}),
            ),
            participant,
        )


def list_quality(db: Session, project: Project) -> list[ParticipantQuality]:
    plan = project_plan(project)
    min_ms = plan.min_answer_ms if plan else 0
    return [quality for quality, _ in _figures(db, project, min_ms)]


def failures(quality: ParticipantQuality, thresholds: QualityThresholds) -> list[str]:
    """The checks ``quality`` fails, in words; empty when it passes or is too early to judge."""
    if quality.n_answers < thresholds.min_answers:
        return []
    reasons = []
    if (
        quality.gold_accuracy is not None
        and quality.gold_answers >= 3
        and quality.gold_accuracy < thresholds.min_gold_accuracy
    ):
        reasons.append(
            f"gold accuracy {quality.gold_accuracy:.0%} < {thresholds.min_gold_accuracy:.0%}"
        )
    if quality.fast_share is not None and quality.fast_share > thresholds.max_fast_share:
        reasons.append(
            f"{quality.fast_share:.0%} of answers too fast (> {thresholds.max_fast_share:.0%})"
        )
    if quality.position_bias is not None and quality.position_bias > thresholds.max_position_bias:
        reasons.append(
            f"position bias {quality.position_bias:.2f} > {thresholds.max_position_bias:.2f}"
        )
    if (
        quality.consistency is not None
        and quality.repeats >= 3
        and quality.consistency < thresholds.min_consistency
    ):
        reasons.append(
            f"self-consistency {quality.consistency:.0%} < {thresholds.min_consistency:.0%}"
        )
    if (
        thresholds.min_reliability is not None
        and quality.reliability is not None
        and quality.reliability < thresholds.min_reliability
    ):
        reasons.append(
            f"{RELIABILITY_REASON} {quality.reliability:.2f} < {thresholds.min_reliability:.2f}"
        )
    return reasons


RELIABILITY_REASON = "reliability"  # the start of the reason the reliability check gives


def kept_reliability_reasons(quality: ParticipantQuality, flag_reason: str) -> list[str]:
    """The reliability reasons of ``flag_reason`` that a review without the reliability
    keeps. The round trip's review reads the participant's counters, not their reliability,
    which only the reliability job (off the request path) computes and judges; so a flag
    that job set stays until it changes it."""
    if quality.reliability is not None:
        return []
    return [r for r in flag_reason.split("; ") if r.startswith(RELIABILITY_REASON + " ")]


def review_participant(db: Session, project: Project, participant_id: int, plan: Plan) -> None:
    """Flag the participant automatically if they fail a check (never after a manual decision)."""
    for quality, participant in _figures(db, project, plan.min_answer_ms, participant_id):
        if participant.flag_manual:
            return
        reasons = failures(quality, plan.quality)
        participant.flagged = bool(reasons)
        participant.flag_reason = "; ".join(reasons)


# Only if the counters it was decided from are still the participant's: a round trip that
# answered in autocommit (app.services.known_sessions) reviews after its commit.
SET_AUTOMATIC_FLAG = Statement(
    """UPDATE participants SET flagged = CAST(:flagged AS BOOLEAN), flag_reason = :reason
    WHERE id = CAST(:participant AS INTEGER) AND NOT flag_manual
    AND n_answers = CAST(:counted AS INTEGER)"""
)


def min_answer_ms(project: Project) -> int:
    """The plan's threshold for too-fast answers (0 without a plan), read without validating
    the whole plan."""
    return int((project.plan or {}).get("min_answer_ms", 0) or 0)


def quality_of(counts: Row, platform: str = "", external_id: str = "") -> ParticipantQuality:
    """The figures of :class:`ParticipantQuality` from a participant's counters."""
    n, gold_n, repeat_n = counts.n_answers, counts.gold_answers, counts.repeats
    sided = counts.sided_answers
    left_share = counts.left_answers / sided if sided else None
    return ParticipantQuality(
        id=counts.id,
        platform=platform,
        external_id=external_id,
        flagged=counts.flagged,
        flag_reason=counts.flag_reason,
        flag_manual=counts.flag_manual,
        n_answers=n,
        gold_answers=gold_n,
        gold_accuracy=counts.gold_correct / gold_n if gold_n else None,
        fast_share=counts.fast_answers / n if n else None,
        left_share=left_share,
        position_bias=abs(left_share - 0.5) * 2 if left_share is not None else None,
        repeats=repeat_n,
        consistency=counts.consistent_repeats / repeat_n if repeat_n else None,
        # Counters from the round trip carry no reliability (kept_reliability_reasons).
        reliability=getattr(counts, "reliability", None),
    )


def flag_change(counts: Row, plan: Plan) -> dict[str, Any] | None:
    """:func:`review_participant` from the counters the round trip returned (each the number
    of the participant's answers that _figures counts, kept up in ``round_trip_sql``): one
    row read, not every answer. The parameters of :data:`SET_AUTOMATIC_FLAG` if the flag
    changes, else None."""
    if counts.flag_manual:
        return None
    quality = quality_of(counts)
    reasons = failures(quality, plan.quality)
    reasons += kept_reliability_reasons(quality, counts.flag_reason)
    flagged, reason = bool(reasons), "; ".join(reasons)
    if (flagged, reason) == (counts.flagged, counts.flag_reason):
        return None
    return {"participant": counts.id, "flagged": flagged, "reason": reason,
            "counted": counts.n_answers}  # fmt: skip


def review_counts(db: Session, counts: Row, plan: Plan) -> None:
    """:func:`flag_change`, written in ``db``'s transaction."""
    change = flag_change(counts, plan)
    if change is not None:
        run(db.connection(), SET_AUTOMATIC_FLAG, change)


def set_flag(
    db: Session, project: Project, participant_id: int, flagged: bool, reason: str
) -> ParticipantQuality:
    begin_write(db)
    participant = db.get(Participant, participant_id)
    if participant is None or participant.project_id != project.id:
        raise NotFound(f"project {project.slug!r} has no participant {participant_id}")
    participant.flagged = flagged
    participant.flag_manual = True
    participant.flag_reason = reason or ("flagged by a researcher" if flagged else "")
    db.commit()
    plan = project_plan(project)
    min_ms = plan.min_answer_ms if plan else 0
    return next(q for q, _ in _figures(db, project, min_ms, participant_id))

"""Running a study: launch, pause, resume and stop it, and its stop rule.

The status itself and the rule issuing asks are in :mod:`app.services.study_state`. A plan's
``stop`` rule is checked off the workers' requests, by the job runner
(:func:`check_stop_rules`): after ``answers`` answers from workers, or once the budget
adviser (:mod:`app.services.advice`) says the latest models of a kind reach the target.
:func:`stop_check` also says when the rule will stop the study: the answers left, and the
adviser's estimate of the further answers the model needs, with the pace of the last hour.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.models import Answer, Project, utcnow
from app.errors import AppError, Conflict, InvalidInput
from app.schemas.advice import AdvicePublic
from app.schemas.plans import Plan
from app.services import advice as advice_service
from app.services import preview, study_state
from app.services.imports import visible_answers
from app.services.projects import project_plan
from app.training.kinds import KINDS

PACE_WINDOW = timedelta(hours=1)  # the pace of answers is read over the last hour


@dataclass
class StopCheck:
    """Where a study stands against its stop rule.

    ``n_answers``: answers from workers so far; ``answers_left``: before the rule on answers
    stops it (None without one); ``advice``: the budget adviser's answer for the rule on a
    model (or why it has none); ``further_answers`` (with a 90% interval for the model):
    the estimate of answers until the first rule stops it; ``per_hour``: answers in the last
    hour; ``reason``: why the rule is met (empty while it is not).
    """

    n_answers: int
    answers_left: int | None
    advice: AdvicePublic | str | None
    further_answers: int | None
    further_low: int | None
    further_high: int | None
    per_hour: int
    reason: str

    @property
    def reached(self) -> bool:
        return bool(self.reason)

    @property
    def hours_left(self) -> float | None:
        if self.further_answers is None or not self.per_hour:
            return None
        return self.further_answers / self.per_hour

    def summary(self) -> str:
        """The estimate in words."""
        if self.reached:
            return f"Stop rule met: {self.reason}."
        if self.further_answers is None:
            if isinstance(self.advice, str):
                return f"No estimate yet: {self.advice}"
            if self.advice is not None:
                return f"No estimate yet: {self.advice.message}"
            return "No estimate yet."
        plural = "answer" if self.further_answers == 1 else "answers"
        text = f"Stops in about {self.further_answers:,} more {plural}"
        if self.further_low is not None and self.further_low != self.further_high:
            high = f"{self.further_high:,}" if self.further_high is not None else "never"
            text += f" (90% interval {self.further_low:,}–{high})"
        hours = self.hours_left
        if hours is not None:
            when = f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h"
            text += f", about {when} at the last hour's pace ({self.per_hour:,} answers)"
        return text + "."

    def as_dict(self) -> dict:
        advice = self.advice.model_dump() if isinstance(self.advice, AdvicePublic) else None
        return {
            "reached": self.reached,
            "reason": self.reason,
            "n_answers": self.n_answers,
            "answers_left": self.answers_left,
            "further_answers": self.further_answers,
            "further_answers_low": self.further_low,
            "further_answers_high": self.further_high,
            "answers_last_hour": self.per_hour,
            "hours_left": self.hours_left,
            "advice": advice,
            "advice_note": self.advice if isinstance(self.advice, str) else None,
            "summary": self.summary(),
        }


def worker_answers(db: Session, project: Project, since: timedelta | None = None) -> int:
    """Answers from workers (crowd and simulated: no preview, no import), in all or over
    the last ``since``."""
    statement = (
        select(func.count())
        .select_from(Answer)
        .where(Answer.project_id == project.id, visible_answers(), Answer.source != "import")
    )
    if since is not None:
        statement = statement.where(Answer.created_at >= utcnow() - since)
    return int(db.scalar(statement) or 0)


def check_stop(plan: Plan) -> None:
    """Refuse a stop rule the adviser cannot evaluate (422 naming the field)."""
    rule = plan.stop
    if rule is None or rule.kind is None or rule.target is None:
        return
    if rule.kind not in KINDS:
        raise InvalidInput(
            f"stop.kind must be a model kind ({', '.join(KINDS)}), got {rule.kind!r}",
            ("stop", "kind"),
        )
    metric = rule.metric or KINDS[rule.kind].metric
    if rule.target > 1 and not advice_service.lower_is_better(metric):
        raise InvalidInput(
            f"stop.target {rule.target:g} is above 1, the best {metric} can be",
            ("stop", "target"),
        )


def stop_check(db: Session, project: Project) -> StopCheck | None:
    """Where the study stands against its plan's stop rule; None without one."""
    plan = project_plan(project)
    if plan is None or plan.stop is None:
        return None
    rule = plan.stop
    n_answers = worker_answers(db, project)
    reasons, estimates = [], []
    answers_left = None
    if rule.answers is not None:
        answers_left = max(rule.answers - n_answers, 0)
        estimates.append((answers_left, answers_left, answers_left))
        if not answers_left:
            reasons.append(f"{n_answers:,} answers, the rule says {rule.answers:,}")
    found: AdvicePublic | str | None = None
    if rule.kind is not None and rule.target is not None:
        try:
            found = advice_service.advise(db, project, rule.kind, rule.target, rule.metric)
        except AppError as error:  # e.g. a metric the models do not report
            found = error.detail
        if isinstance(found, AdvicePublic):
            if found.status == "reached":
                reasons.append(f"{rule.kind} {found.message}")
            elif found.status == "reachable" and found.further_answers is not None:
                estimates.append(
                    (found.further_answers, found.further_answers_low, found.further_answers_high)
                )
    first = min(estimates, key=lambda e: e[0], default=(None, None, None))
    return StopCheck(
        n_answers=n_answers,
        answers_left=answers_left,
        advice=found,
        further_answers=first[0],
        further_low=first[1],
        further_high=first[2],
        per_hour=worker_answers(db, project, PACE_WINDOW),
        reason="; ".join(reasons),
    )


def launch(db: Session, project: Project) -> str:
    """Start (or resume) a study: running. Refused while its stop rule is met. The places
    previews took among the questions' answers are given back first."""
    if not project.plan:
        raise Conflict(f"project {project.slug!r} has no plan yet: set one first")
    check = stop_check(db, project)
    if check is not None and check.reached:
        raise Conflict(
            f"the stop rule is met ({check.reason}): change or remove plan.stop to go on"
        )
    preview.release_places(db, project.id)
    study_state.set_status(db, project, "running")
    return "running"


def pause(db: Session, project: Project) -> str:
    """No new question for any worker until :func:`launch`; their sessions go on then."""
    if study_state.status(project) != "running":
        raise Conflict(
            f"only a running study can be paused; this one is {study_state.status(project)}"
        )
    study_state.set_status(db, project, "paused")
    return "paused"


def stop(db: Session, project: Project) -> str:
    """End the study: workers get their completion code at their next question."""
    study_state.set_status(db, project, "stopped")
    return "stopped"


def check_stop_rules(db: Session) -> list[str]:
    """Stop every running study whose stop rule is met (the job runner's tick); their slugs."""
    stopped = []
    for project in db.scalars(select(Project).where(Project.plan.is_not(None))).all():
        plan = project.plan or {}
        if not plan.get("stop") or study_state.status(project) != "running":
            continue
        check = stop_check(db, project)
        db.rollback()  # end the read: the status is written under the project's lock
        # Only if the plan is still the one checked (a researcher may have just changed it).
        if (
            check is not None
            and check.reached
            and study_state.set_status(db, project, "stopped", only_if=plan) is not None
        ):
            stopped.append(project.slug)
    return stopped

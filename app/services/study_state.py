"""Whether a study is taking answers now: its status, and the one rule issuing asks.

A study's status is part of its plan (``Plan.status``): ``draft`` (set up, not launched),
``running``, ``paused`` or ``stopped``. It lives in the plan's JSON on purpose: a round trip
taken the known way (``app.services.known_sessions``) goes on only while the project's plan
is the one it remembered, so changing the status sends every such round trip the usual way,
through :func:`accepting`, on every server process at once.

:func:`accepting` is the one rule: the issuing code asks it before giving a session a new
question (``issuance.next_query``, ``issuance.ticket_after_answer``,
``known_sessions.remember``). A question already given stays the worker's to answer. A
preview session (``source="preview"``, opened from the dashboard) is served whatever the
status, so a researcher can try a study before launching it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.db.models import Project
from app.errors import Conflict
from app.schemas.plans import STUDY_STATUSES
from app.services.projects import lock_project

NO_PLAN = "no_plan"  # the status of a project without a plan: nothing to ask yet
PREVIEW = "preview"  # the source of a preview session's answers (never counted)
MESSAGES = {
    NO_PLAN: "This study is not collecting answers right now.",
    "draft": "This study has not started yet. Please come back later.",
    "paused": "This study is paused for now. Your answers so far are saved; please come "
    "back later to go on.",
    "stopped": "This study has ended: it has collected the answers it needs. Thank you!",
}


def status(project: Project) -> str:
    """The study's status: one of ``STUDY_STATUSES``, or ``no_plan``."""
    plan: dict[str, Any] | None = project.plan
    if not plan:
        return NO_PLAN
    return str(plan.get("status") or "running")


def accepting(project: Project, source: str = "crowd") -> bool:
    """Whether a session of ``source`` may be given a new question now: the project has a
    plan and is running (a preview: has a plan)."""
    if not project.plan:
        return False
    return source == PREVIEW or status(project) == "running"


def come_back_later(project: Project, source: str = "crowd") -> bool:
    """Whether the study takes no new answers now but will: not launched yet, or paused (a
    worker keeps their session, and is told to come back)."""
    return not accepting(project, source) and status(project) in ("draft", "paused")


def ended(project: Project) -> bool:
    """Whether the study was stopped: its sessions end with their completion code."""
    return status(project) == "stopped"


def closed_message(project: Project) -> str:
    """What a worker is told when :func:`accepting` says no."""
    return MESSAGES.get(status(project), MESSAGES[NO_PLAN])


def set_status(
    db: Session, project: Project, new: str, *, only_if: dict[str, Any] | None = None
) -> str | None:
    """Write ``new`` as the study's status (holding the project); the status before.
    ``only_if``: only if the plan is still this one (else nothing changes: None)."""
    if new not in STUDY_STATUSES:
        raise ValueError(f"status must be one of {', '.join(STUDY_STATUSES)}, got {new!r}")
    lock_project(db, project)  # the plan re-read: it may have changed
    if not project.plan:
        db.rollback()
        raise Conflict(f"project {project.slug!r} has no plan yet: set one first")
    if only_if is not None and project.plan != only_if:
        db.rollback()
        return None
    before = status(project)
    project.plan = {**project.plan, "status": new}
    db.commit()
    return before

"""Researcher routes for what to collect: the plan, and the links to hand to workers."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request

from app.api.deps import OwnedProject, SessionDep, SettingsDep
from app.errors import NotFound
from app.schemas.plans import Plan, WorkerLinks
from app.services.comprf import forget_forests, initial_plan_state, plan_progress
from app.services.pool import check_plan, discard_unasked
from app.services.projects import lock_project
from app.services.study_control import check_stop

router = APIRouter(prefix="/api/projects/{slug}", tags=["plans"])


@router.put("/plan", response_model=Plan)
def update_plan(project: OwnedProject, plan: Plan, db: SessionDep) -> Plan:
    """Set what to collect. Questions already issued stay valid; budgets count afresh; the
    questions prepared for the old plan and never asked are dropped. Without a ``status``,
    the study's current one is kept (``running`` for a first plan)."""
    check_plan(project, plan)
    check_stop(plan)
    lock_project(db, project)
    if "status" not in plan.model_fields_set and project.plan:
        plan.status = Plan.model_validate(project.plan).status
    discard_unasked(db, project)
    state = initial_plan_state(db, project, plan)  # comprf: the objects its trees are built on
    project.plan = plan.model_dump(mode="json")
    project.plan_state = state
    forget_forests(db, project)
    db.commit()
    return plan


@router.get("/plan/progress")
def read_plan_progress(project: OwnedProject, db: SessionDep) -> dict:
    """Per strategy: questions asked, answers received and its budget; for comprf, the
    nodes split and waiting and the depth of each tree."""
    if project.plan is None:
        raise NotFound(f"project {project.slug!r} has no plan yet: PUT one first")
    return {"strategies": plan_progress(db, project)}


@router.get("/plan", response_model=Plan)
def read_plan(project: OwnedProject) -> Plan:
    if project.plan is None:
        raise NotFound(f"project {project.slug!r} has no plan yet: PUT one first")
    return Plan.model_validate(project.plan)


@router.get("/link", response_model=WorkerLinks)
def read_links(project: OwnedProject, request: Request, settings: SettingsDep) -> WorkerLinks:
    base = (settings.public_url or str(request.base_url)).rstrip("/")
    worker_url = f"{base}/w/{quote(project.slug)}"
    prolific = (
        f"{worker_url}?PROLIFIC_PID={{{{%PROLIFIC_PID%}}}}"
        f"&STUDY_ID={{{{%STUDY_ID%}}}}&SESSION_ID={{{{%SESSION_ID%}}}}"
    )
    external_question = (
        '<ExternalQuestion xmlns="http://mechanicalturk.amazonaws.com/'
        'AWSMechanicalTurkDataSchemas/2006-07-14/ExternalQuestion.xsd">'
        f"<ExternalURL>{worker_url}</ExternalURL><FrameHeight>0</FrameHeight></ExternalQuestion>"
    )
    return WorkerLinks(
        worker_url=worker_url,
        prolific_url=prolific,
        mturk_url=worker_url,
        mturk_external_question=external_question,
        notes=(
            "Prolific: paste prolific_url as the study URL and set the completion redirect in "
            "the plan's completion.redirect_url. Mechanical Turk: create an ExternalQuestion "
            'HIT with mturk_external_question and set the plan\'s "mturk": true (only then '
            "may MTurk's hosts show the page in a frame); MTurk appends workerId, "
            "assignmentId, hitId and turkSubmitTo itself, and the page submits the "
            "assignment when the worker is done. "
            "Any other channel: share worker_url (optionally with ?participant=ID)."
        ),
    )

"""The dashboard's pages for setting up and running a study: a new project, its details,
its objects, its plan and its launch.

They read what they show on the server, as the dashboard's other pages do, and change
nothing themselves: their script (``frontend/static/dashboard/study.js``) sends what the
researcher does to the researcher API with the dashboard's session and its CSRF token
(``deps.get_current_key``), and shows the API's refusals beside the fields they name. The
plan builder's form is generated in the page from the plan's JSON schema and the strategy
registry, embedded as JSON.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2.utils import htmlsafe_json_dumps
from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.active.planner import STRATEGIES
from app.api.dashboard import CheckedForm, DashboardKey, DashboardProject, done, render
from app.api.deps import SessionDep, SettingsDep
from app.api.pages import paragraphs
from app.api.plans import read_links
from app.api.plans import update_plan as store_plan
from app.db.models import ApiKey, Job, Model, Participant, Project
from app.errors import AppError, NotFound
from app.schemas.plans import Plan
from app.schemas.projects import SLUG_PATTERN
from app.services import preview, study_control, study_state
from app.services.objects import list_objects
from app.services.pool import check_plan
from app.services.projects import count_answers, get_project
from app.training.kinds import KINDS

router = APIRouter(prefix="/dashboard", include_in_schema=False)
PAGE_SIZE = 48  # objects per page of the gallery


def _shown_project(db: Session, key: ApiKey, slug: str) -> Project | None:
    try:
        return get_project(db, slug, key)
    except NotFound:
        return None


def _head(project: Project, tab: str) -> dict[str, Any]:
    """What every project page's header shows: the project, its tab, its status."""
    return {"project": project, "tab": tab, "status": study_state.status(project)}


@router.get("/new", response_class=HTMLResponse)
def read_new_project(request: Request, key: DashboardKey) -> HTMLResponse:
    """The form that creates a project (POST /api/projects)."""
    columns = Project.__table__.c
    context = {
        "key": key,
        "slug_pattern": SLUG_PATTERN.strip("^$"),
        # The wording a project gets unless the form says otherwise.
        "question": columns.question.default.arg,
        "pair_question": columns.pair_question.default.arg,
    }
    return render(request, "new_project.html", context)


@router.get("/projects/{slug}/details", response_class=HTMLResponse)
def read_details(
    request: Request, db: SessionDep, key: DashboardKey, slug: Annotated[str, Path(max_length=64)]
) -> HTMLResponse:
    """The project's texts (PATCH /api/projects/{slug}) and its deletion, which names what
    is lost."""
    project = _shown_project(db, key, slug)
    if project is None:
        return render(request, "missing.html", {"key": key, "what": "project"}, 404)
    counts = count_answers(db, project)

    def rows(model: Any) -> int:
        statement = select(func.count()).select_from(model).where(model.project_id == project.id)
        return int(db.scalar(statement) or 0)

    lost = {
        "objects": project.n_objects,
        "answers": sum(counts.values()),
        "participants": rows(Participant),
        "models": rows(Model),
        "jobs": rows(Job),
    }
    context = {"key": key, **_head(project, "details"), "lost": lost}
    return render(request, "details.html", context)


@router.get("/projects/{slug}/objects", response_class=HTMLResponse)
def read_objects_page(
    request: Request,
    db: SessionDep,
    key: DashboardKey,
    slug: Annotated[str, Path(max_length=64)],
    page: Annotated[int, Query(ge=1, le=10**6)] = 1,
) -> HTMLResponse:
    """The upload (objects by drag and drop: CSV, JSON or a ZIP of images) and the objects
    as a gallery, whose label, target and text can be edited."""
    project = _shown_project(db, key, slug)
    if project is None:
        return render(request, "missing.html", {"key": key, "what": "project"}, 404)
    pages = max(1, math.ceil(project.n_objects / PAGE_SIZE))
    page = min(page, pages)
    objects = list_objects(db, project, (page - 1) * PAGE_SIZE, PAGE_SIZE)
    context = {
        "key": key,
        **_head(project, "objects"),
        "objects": objects,
        "page": page,
        "pages": pages,
        "with_features": any(o.features for o in objects),
    }
    return render(request, "objects.html", context)


def _plan_schema() -> dict[str, Any]:
    """What the builder generates its form from: the plan's JSON schema, the strategies
    with their declared params, and the model kinds a stop rule may follow."""
    return {
        "plan": Plan.model_json_schema(),
        "strategies": [cls.describe() for cls in STRATEGIES.values()],
        "model_kinds": {name: {"metric": spec.metric} for name, spec in KINDS.items()},
    }


@router.get("/projects/{slug}/plan", response_class=HTMLResponse)
def read_plan_page(
    request: Request, db: SessionDep, key: DashboardKey, slug: Annotated[str, Path(max_length=64)]
) -> HTMLResponse:
    """The plan builder (PUT /api/projects/{slug}/plan), with its JSON one click away."""
    project = _shown_project(db, key, slug)
    if project is None:
        return render(request, "missing.html", {"key": key, "what": "project"}, 404)
    return render(request, "plan.html", plan_context(key, project))


def plan_context(key: ApiKey, project: Project) -> dict[str, Any]:
    return {
        "key": key,
        **_head(project, "plan"),
        # As JSON in the page, in the schema's order (Jinja's tojson sorts the keys).
        "schema_json": htmlsafe_json_dumps(_plan_schema()),
        "plan_current": htmlsafe_json_dumps(project.plan),
        "plan": project.plan,
        "plan_json": json.dumps(project.plan, indent=2) if project.plan else "",
    }


@router.post("/projects/{slug}/plan", response_class=HTMLResponse)
def update_plan_json(
    request: Request, db: SessionDep, key: DashboardKey, project: DashboardProject,
    form: CheckedForm,
) -> Response:  # fmt: skip
    """The plan as JSON, from the builder's JSON view (a plain form: it works without the
    page's script too); a refusal is shown beside the JSON, which keeps what was typed."""
    text = form.get("plan", "")
    error = ""
    try:
        plan = Plan.model_validate(json.loads(text))
        check_plan(project, plan)  # here too, so that its refusal shows beside the plan
        study_control.check_stop(plan)
    except json.JSONDecodeError as exc:
        error = f"not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
    except ValidationError as exc:
        error = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'plan'}: {e['msg']}" for e in exc.errors()[:5]
        )
    except AppError as exc:
        error = exc.detail
    if not error:
        store_plan(project, plan, db)  # the API's own route: the same checks and effects
        return done(request, f"/dashboard/projects/{project.slug}/plan")
    context = plan_context(key, project)
    context.update(plan_json=text, plan_error=error)
    return render(request, "plan.html", context, status_code=422)


def _checklist(project: Project, previewed: int) -> list[dict[str, Any]]:
    """The launch checklist: each item ``ok`` (done), ``warn`` (may go, but look) or
    ``todo`` (needed first), with what it says and where to fix it."""
    plan = Plan.model_validate(project.plan) if project.plan else None
    base = f"/dashboard/projects/{project.slug}"
    items = []

    def item(name: str, state: str, text: str, href: str) -> None:
        items.append({"name": name, "state": state, "text": text, "href": href})

    item(
        "Objects",
        "ok" if project.n_objects >= 3 else "todo",
        f"{project.n_objects:,} objects" + ("" if project.n_objects >= 3 else ": add at least 3"),
        f"{base}/objects",
    )
    if plan is None:
        item("Plan", "todo", "no plan yet: build one", f"{base}/plan")
    else:
        kinds = ", ".join(s.kind for s in plan.strategies)
        text = (
            f"{kinds}; {plan.queries_per_session} questions a session, each asked "
            f"{plan.redundancy}×"
        )
        item("Plan", "ok", text, f"{base}/plan")
    item(
        "Instructions",
        "ok" if project.instructions.strip() else "warn",
        "shown before the first question"
        if project.instructions.strip()
        else "none: workers see a generic text",
        f"{base}/details",
    )
    item(
        "Consent",
        "ok" if project.consent.strip() else "warn",
        "workers agree before they start"
        if project.consent.strip()
        else "none: workers are not asked to agree to anything",
        f"{base}/details",
    )
    redirect = plan.completion.redirect_url if plan else None
    item(
        "Completion",
        "ok" if redirect else "warn",
        f"finished workers are sent to {redirect}"
        if redirect
        else "finished workers are shown a completion code to paste (no redirect set)",
        f"{base}/plan",
    )
    item(
        "Preview",
        "ok" if previewed else "warn",
        f"{previewed:,} questions answered in previews (not counted)"
        if previewed
        else "not previewed yet: answer a few questions as a worker first",
        f"{base}/preview",
    )
    rule = plan.stop if plan else None
    if rule is None:
        item("Stop rule", "warn", "none: the study runs until you stop it", f"{base}/plan")
    else:
        parts = []
        if rule.answers:
            parts.append(f"after {rule.answers:,} answers")
        if rule.kind:
            parts.append(f"when {rule.kind} reaches {rule.target:g}")
        item("Stop rule", "ok", "stops " + " or ".join(parts), f"{base}/plan")
    return items


@router.get("/projects/{slug}/launch", response_class=HTMLResponse)
def read_launch_page(
    request: Request,
    db: SessionDep,
    settings: SettingsDep,
    key: DashboardKey,
    slug: Annotated[str, Path(max_length=64)],
) -> HTMLResponse:
    """The launch checklist, the links for Prolific and MTurk, the study's status with
    launch / pause / resume / stop, the stop rule's estimate and the bundle."""
    project = _shown_project(db, key, slug)
    if project is None:
        return render(request, "missing.html", {"key": key, "what": "project"}, 404)
    previewed = preview.answers_previewed(db, project)
    items = _checklist(project, previewed)
    context = {
        "key": key,
        **_head(project, "launch"),
        "refresh_url": f"/dashboard/projects/{project.slug}/launch",
        "items": items,
        "ready": all(i["state"] != "todo" for i in items),
        "links": read_links(project, request, settings) if project.plan else None,
        "instructions": paragraphs(project.instructions),
        "consent": paragraphs(project.consent),
        "check": study_control.stop_check(db, project),
    }
    return render(request, "launch.html", context)


@router.get("/projects/{slug}/preview")
def open_preview(project: DashboardProject) -> RedirectResponse:
    """The worker page as a preview: a fresh preview token in its link (a link the
    dashboard opens in a new tab; the token is signed, nothing is stored)."""
    token, _ = preview.make_token(project)
    return RedirectResponse(f"/w/{project.slug}?preview={token}", status_code=303)

"""The dashboard: server-rendered pages for researchers and admins, signed in with an API key.

Pages are Jinja2 templates (autoescaped) with one static script and one stylesheet under the
worker page's strict Content-Security-Policy. Figures are SVG drawn on the server; the script
refreshes the parts marked ``data-live`` by fetching the page again every few seconds.
Every POST needs the session's CSRF token (a form field or the ``X-CSRF-Token`` header):
without it, 403 and nothing changes. The role rules are the API's: a researcher sees their
own projects only (another's is 404), an admin sees all.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)

from app.api import timings
from app.api.deps import SessionDep, SettingsDep
from app.api.pages import PAGE_HEADERS, static_version, templates
from app.api.plans import read_links
from app.db.models import ApiKey, Project
from app.errors import AppError, Forbidden, InvalidInput, NotFound
from app.services import answers as answer_service
from app.services import charts, quality, signin, study_control, study_state
from app.services import dashboard as figures
from app.services.auth import ROLES, create_key, list_keys, revoke_key
from app.services.projects import get_project, list_projects
from app.training import jobs as job_service
from app.training.kinds import KINDS

SESSION_COOKIE = signin.SESSION_COOKIE
SIGNIN_COOKIE = "tl_signin"
DASHBOARD_HEADERS = {
    **PAGE_HEADERS,
    # The worker page's policy, except that nobody may frame the dashboard (clickjacking).
    "Content-Security-Policy": PAGE_HEADERS["Content-Security-Policy"].replace(
        "frame-ancestors *", "frame-ancestors 'none'"
    ),
}

router = APIRouter(prefix="/dashboard", tags=["dashboard"], include_in_schema=False)
redirects = APIRouter(include_in_schema=False)


class SignedOut(Exception):
    """No live dashboard session: pages send the browser to the sign-in form."""


def _key_or_none(request: Request, db: SessionDep) -> ApiKey | None:
    return signin.session_key(db, request.cookies.get(SESSION_COOKIE))


def _key(request: Request, db: SessionDep) -> ApiKey:
    key = _key_or_none(request, db)
    if key is None:
        if request.method == "GET":
            raise SignedOut()
        raise Forbidden("not signed in to the dashboard, or the session ended")
    return key


DashboardKey = Annotated[ApiKey, Depends(_key)]


def _admin(key: DashboardKey) -> ApiKey:
    if key.role != "admin":
        raise NotFound("no such page")
    return key


AdminDashboardKey = Annotated[ApiKey, Depends(_admin)]


async def _checked_form(request: Request) -> dict[str, str]:
    """The POST's form fields, after checking its CSRF token against the session (403)."""
    form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
    sent = request.headers.get("x-csrf-token") or form.get("csrf")
    if not signin.check_csrf(request.cookies.get(SESSION_COOKIE), sent):
        raise Forbidden("missing or wrong CSRF token: reload the page and try again")
    return form


CheckedForm = Annotated[dict[str, str], Depends(_checked_form)]
"""A POST's form fields, its CSRF token checked (403 without)."""


def _project(
    db: SessionDep, key: DashboardKey, slug: Annotated[str, Path(max_length=64)]
) -> Project:
    return get_project(db, slug, key)


DashboardProject = Annotated[Project, Depends(_project)]


def render(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200
) -> HTMLResponse:
    key: ApiKey | None = context.get("key")
    token = request.cookies.get(SESSION_COOKIE)
    base = {
        "css_version": static_version("dashboard/dashboard.css"),
        "js_version": static_version("dashboard/dashboard.js"),
        "study_js_version": static_version("dashboard/study.js"),
        "csrf": signin.csrf_token(token) if token and key else "",
    }
    return templates.TemplateResponse(
        request, f"dashboard/{name}", {**base, **context}, status_code=status_code,
        headers=DASHBOARD_HEADERS,
    )  # fmt: skip


def done(request: Request, back: str, body: dict[str, Any] | None = None) -> Response:
    """A script's POST gets JSON; a plain form's gets sent back to the page it came from."""
    if "application/json" in request.headers.get("accept", ""):
        return JSONResponse(body or {"ok": True})
    return RedirectResponse(back, status_code=303)


def install_dashboard(app: Any) -> None:
    """Routes plus the handler that turns "signed out" into the sign-in page."""

    @app.exception_handler(SignedOut)
    async def handle_signed_out(request: Request, exc: SignedOut) -> Response:
        response = RedirectResponse("/dashboard", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    app.include_router(router)
    app.include_router(redirects)


@redirects.get("/")
def read_root() -> RedirectResponse:
    return RedirectResponse("/dashboard", status_code=307)


@redirects.get("/admin")
def read_admin_shortcut() -> RedirectResponse:
    return RedirectResponse("/dashboard/admin", status_code=307)


# --- sign-in ------------------------------------------------------------------------------


def _signin_page(request: Request, error: str = "", status_code: int = 200) -> HTMLResponse:
    nonce = secrets.token_urlsafe(24)
    response = render(
        request, "signin.html", {"signin_csrf": signin.csrf_token(nonce), "error": error},
        status_code=status_code,
    )  # fmt: skip
    response.set_cookie(
        SIGNIN_COOKIE, nonce, max_age=3600, path="/dashboard", httponly=True,
        samesite="strict", secure=request.url.scheme == "https",
    )  # fmt: skip
    return response


@router.get("", response_class=HTMLResponse)
def read_home(request: Request, db: SessionDep) -> HTMLResponse:
    """The projects the key may see, with today's answers, active participants and jobs;
    the sign-in form without a session."""
    key = _key_or_none(request, db)
    if key is None:
        return _signin_page(request)
    rows = figures.project_rows(db, list_projects(db, key))
    recent = figures.recent_minutes(db, [r.project.id for r in rows])
    sparks = {project_id: charts.sparkline(counts) for project_id, counts in recent.items()}
    totals = {
        "answers_today": sum(r.answers_today for r in rows),
        "answers_total": sum(r.answers_total for r in rows),
        "active": sum(r.active_participants for r in rows),
        "jobs": sum(r.jobs_running + r.jobs_queued for r in rows),
    }
    statuses = {r.project.id: study_state.status(r.project) for r in rows}
    context = {
        "key": key, "rows": rows, "totals": totals, "sparks": sparks, "refresh_url": "/dashboard",
        "statuses": statuses,
    }  # fmt: skip
    return render(request, "home.html", context)


@router.post("/signin")
async def sign_in(request: Request, db: SessionDep, settings: SettingsDep) -> Response:
    form = {k: v for k, v in (await request.form()).items() if isinstance(v, str)}
    if not signin.check_csrf(request.cookies.get(SIGNIN_COOKIE), form.get("csrf")):
        return _signin_page(request, "The form expired; paste the key again.", status_code=403)
    api_key = form.get("api_key", "")
    if not api_key.strip():
        return _signin_page(request, "Paste an API key to sign in.", status_code=422)
    try:
        token, _ = signin.sign_in(db, api_key[:200], settings.dashboard_session_hours)
    except AppError:
        return _signin_page(request, "Unknown or revoked API key.", status_code=401)
    response = RedirectResponse("/dashboard", status_code=303)
    response.set_cookie(
        SESSION_COOKIE, token, max_age=int(settings.dashboard_session_hours * 3600), path="/",
        httponly=True, samesite="strict", secure=request.url.scheme == "https",
    )  # fmt: skip
    response.delete_cookie(SIGNIN_COOKIE, path="/dashboard")
    return response


@router.post("/signout")
def sign_out(request: Request, db: SessionDep, _form: CheckedForm) -> Response:
    signin.sign_out(db, request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/dashboard", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


# --- a project ----------------------------------------------------------------------------


# The budget adviser's target on the learning curves unless the page's ?target= says otherwise.
DEFAULT_TARGET = 0.9


def _project_context(
    request: Request, db: SessionDep, settings: SettingsDep, key: ApiKey, project: Project,
    target: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    objects = figures.objects_of(db, project)
    with_images = any(o.image_url for o in objects)
    scatter = figures.scatter(db, project, objects)
    gallery = figures.gallery(db, project)
    curves = figures.learning_curves(db, project)
    summaries = figures.model_summaries(db, project)
    charted = [m["kind"] for m in summaries if KINDS[m["kind"]].learning_curve]
    advice = figures.advice_by_kind(db, project, charted, target or DEFAULT_TARGET)
    links = read_links(project, request, settings) if project.plan is not None else None
    shown, n_participants, n_flagged = figures.participants(db, project)
    page = f"/dashboard/projects/{project.slug}"
    return {
        "key": key,
        "project": project,
        "refresh_url": page if target is None else f"{page}?target={target:g}",
        "rows": figures.project_rows(db, [project])[0],
        "timeline": charts.timeline(figures.answers_timeline(db, project)),
        "client_hist": charts.histogram(figures.response_times(db, project, "client")),
        "server_hist": charts.histogram(figures.response_times(db, project, "server")),
        "participants": shown,
        "n_participants": n_participants,
        "n_flagged": n_flagged,
        "links": links,
        "tab": "monitor",
        "status": study_state.status(project),
        "check": study_control.stop_check(db, project),
        "progress": figures.strategy_progress(db, project),
        "curves": {
            kind: charts.lines(
                [(c.metric, c.points) for c in curves.get(kind, [])],
                advice[kind].model_dump() if not isinstance(advice[kind], str) else None,
            )
            for kind in sorted(advice)
        },
        "advice": advice,
        "target": target or DEFAULT_TARGET,
        "summaries": summaries,
        "scatter": scatter,
        "scatter_chart": charts.scatter(scatter["points"], with_images) if scatter else None,
        "gallery": gallery,
        "objects": objects,
        "ranking": figures.ranking(db, project),
        "jobs": figures.jobs_of(db, project),
        "kinds": list(KINDS),
    }


@router.get("/projects/{slug}", response_class=HTMLResponse)
def read_project_page(
    request: Request, db: SessionDep, settings: SettingsDep, key: DashboardKey,
    slug: Annotated[str, Path(max_length=64)],
    target: Annotated[
        float | None,
        Query(gt=0, le=1, description="The budget adviser's target figure (default 0.9)."),
    ] = None,
) -> HTMLResponse:  # fmt: skip
    try:
        project = get_project(db, slug, key)
    except NotFound:
        return render(request, "missing.html", {"key": key, "what": "project"}, 404)
    context = _project_context(request, db, settings, key, project, target)
    return render(request, "project.html", context)


@router.post("/projects/{slug}/participants/{participant_id}/{action}")
def flag_participant(
    request: Request, db: SessionDep, project: DashboardProject, form: CheckedForm,
    participant_id: int, action: str,
) -> Response:  # fmt: skip
    if action not in ("flag", "unflag"):
        raise NotFound(f"no action {action!r}: flag or unflag")
    flagged = action == "flag"
    reason = form.get("reason", "")[:1000] if flagged else ""
    result = quality.set_flag(db, project, participant_id, flagged, reason)
    return done(request, f"/dashboard/projects/{project.slug}#participants", result.as_dict())


@router.post("/projects/{slug}/train")
def train(
    request: Request, db: SessionDep, project: DashboardProject, form: CheckedForm
) -> Response:
    kind = form.get("kind", "")
    if kind not in KINDS:
        raise InvalidInput(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    job = job_service.create_job(db, project, kind, {}, trigger="request")
    return done(request, f"/dashboard/projects/{project.slug}#jobs", {"job": job.id})


@router.post("/jobs/{job_id}/cancel")
def cancel_job(
    request: Request, db: SessionDep, key: DashboardKey, _form: CheckedForm, job_id: int
) -> Response:
    visible = None if key.role == "admin" else {p.id for p in list_projects(db, key)}
    job = job_service.cancel_job(db, job_service.get_job(db, job_id, visible))
    back = request.headers.get("referer", "/dashboard")
    if not back.startswith(str(request.base_url)):
        back = "/dashboard"
    return done(request, back, {"job": job.id, "status": job.status})


@router.get("/projects/{slug}/answers.{fmt}")
def export_answers(project: DashboardProject, db: SessionDep, fmt: str) -> StreamingResponse:
    if fmt == "csv":
        return StreamingResponse(
            answer_service.stream_csv(db, project), media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{project.slug}-answers.csv"'},
        )  # fmt: skip
    if fmt == "json":
        return StreamingResponse(
            answer_service.stream_json(db, project), media_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="{project.slug}-answers.json"'},
        )  # fmt: skip
    raise NotFound(f"no export format {fmt!r}: csv or json")


# --- admin --------------------------------------------------------------------------------


def _admin_context(db: SessionDep, key: ApiKey) -> dict[str, Any]:
    keys = list_keys(db)
    return {
        "key": key,
        "refresh_url": "/dashboard/admin",
        "rows": figures.project_rows(db, list_projects(db, key)),
        "keys": keys,
        "owners": {k.id: k.name or f"key #{k.id}" for k in keys},
        "jobs": figures.jobs_of(db, None, limit=50),
        "projects_by_id": {p.id: p for p in list_projects(db, key)},
        "database_size": figures.database_size(db),
        "database_kind": db.get_bind().dialect.name,
        "roles": ROLES,
        "timings": timings.summary(),
    }


@router.get("/admin", response_class=HTMLResponse)
def read_admin(request: Request, db: SessionDep, key: AdminDashboardKey) -> HTMLResponse:
    return render(request, "admin.html", _admin_context(db, key))


@router.post("/admin/keys", response_class=HTMLResponse)
def create_api_key(
    request: Request, db: SessionDep, key: AdminDashboardKey, form: CheckedForm
) -> HTMLResponse:
    name = form.get("name", "").strip()[:200]
    created, secret = create_key(db, form.get("role", ""), name)
    context = _admin_context(db, key)
    context.update(new_key=created, new_secret=secret)
    return render(request, "admin.html", context, status_code=201)


@router.post("/admin/keys/{key_id}/revoke")
def revoke_api_key(
    request: Request, db: SessionDep, key: AdminDashboardKey, _form: CheckedForm, key_id: int
) -> Response:
    revoked = revoke_key(db, key_id)
    if revoked.id == key.id:
        response = RedirectResponse("/dashboard", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response
    return done(request, "/dashboard/admin#keys", {"key": revoked.id, "revoked": True})

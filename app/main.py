"""The application factory."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from app.api import (
    advice,
    answers,
    dashboard,
    objects,
    pages,
    participants,
    plans,
    predictions,
    projects,
    study,
    study_pages,
    training,
    worker,
)
from app.api.edge import ClientPresence, NoSniff, RejectNul
from app.api.ratelimit import WorkerLimits
from app.api.timings import RouteTimings
from app.api.uploads import BodySizeLimit
from app.config import Settings, get_settings
from app.db import faults, loop_connections
from app.errors import install_error_handlers
from app.schemas.common import ErrorBody, ValidationErrorBody
from app.supervisor import runs_jobs_here, stop_with_supervisor

FRONTEND = Path(__file__).resolve().parents[1] / "frontend"
FRONTEND_STATIC = FRONTEND / "static"


def _error(description: str, model: type = ErrorBody) -> dict:
    return {"model": model, "description": description}


# What a refusal looks like, documented on every API route (the handlers in app/errors.py).
API_ERRORS: dict[int | str, dict] = {
    400: _error("The body could not be parsed at all (not UTF-8, broken multipart)."),
    401: _error("No key, or a key (or session token) that is not valid."),
    403: _error("The key's role (or the session) may not do this."),
    404: _error("No such project, object, model, job or session (or someone else's)."),
    409: _error("Conflicts with what is stored (a taken slug, another answer to a question)."),
    413: _error(
        "The request body is larger than TRIPLETLAB_MAX_UPLOAD_MB (on the worker API, "
        "TRIPLETLAB_MAX_WORKER_BODY_KB)."
    ),
    422: _error(
        "Invalid input: the summary in `detail`, the first issues in `errors`.",
        ValidationErrorBody,
    ),
    503: _error(
        "The server is overloaded, or the database busy or unavailable; nothing was changed: "
        "retry after `Retry-After` seconds."
    ),
}
WORKER_ERRORS: dict[int | str, dict] = {
    **API_ERRORS,
    410: _error("The question's lease expired: ask for the next one."),
    429: _error("Too many requests from this session or address: wait `Retry-After` seconds."),
}


def _job_runner(settings: Settings) -> Any:
    from app.training.runner import JobRunner

    runner = JobRunner.from_settings(settings)
    runner.start()
    return runner


JOB_RUNNER_POLL_S = 2.0  # how often a worker process looks whether the job runner is free


async def _take_over_jobs(app: FastAPI, settings: Settings) -> None:
    """In a worker process that does not run the job runner: start it once the process
    that runs it is gone. A replacement for a dead worker takes it over as it starts, but a
    restart (SIGHUP, ``app.supervisor``) starts each new process before stopping the old
    one, so the process that held it may stop after every new one has started."""
    while not runs_jobs_here(settings.data_dir):
        await asyncio.sleep(JOB_RUNNER_POLL_S)
    # Started in a thread: its first start imports the learning library (~1 s).
    app.state.job_runner = await asyncio.to_thread(_job_runner, settings)


def create_app(settings: Settings | None = None, *, freeze_heap: bool = False) -> FastAPI:
    """The application. ``freeze_heap``: once it is started, move every object the process
    holds then into the collector's permanent generation (see :func:`serve_app`)."""
    settings = settings or get_settings()
    stop_with_supervisor()
    faults.watch()  # the database's faults logged once each (app.db.faults)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.job_runner = None
        waiting = None
        if settings.run_jobs:
            if runs_jobs_here(settings.data_dir):
                app.state.job_runner = _job_runner(settings)
            else:  # another worker process runs it: take over when that one stops
                waiting = asyncio.create_task(_take_over_jobs(app, settings))
        if freeze_heap:
            gc.freeze()
        yield
        loop_connections.close_all()
        if waiting is not None:
            waiting.cancel()
        if app.state.job_runner is not None:
            app.state.job_runner.stop()

    app = FastAPI(
        lifespan=lifespan,
        title="Triplet Lab",
        summary="Collect human comparisons, ask the next question actively, learn from answers.",
        version="0.1.0",
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(app)
    app.state.worker_limits = WorkerLimits(
        settings.worker_rate_session,
        settings.worker_burst_session,
        settings.worker_rate_address,
        settings.worker_burst_address,
    )
    # The last added is outermost: RejectNul reads bodies through BodySizeLimit, and
    # NoSniff marks every response, the 413 of BodySizeLimit too. ClientPresence, innermost,
    # gives routes the messages RejectNul replays.
    app.add_middleware(ClientPresence)
    app.add_middleware(RejectNul)
    app.add_middleware(
        BodySizeLimit,
        max_bytes=int(settings.max_upload_mb * 2**20),
        worker_max_bytes=int(settings.max_worker_body_kb * 2**10),
    )
    app.add_middleware(RouteTimings)
    app.add_middleware(NoSniff, hsts_seconds=settings.hsts_seconds)
    routers = (  # in the order the API document lists them
        projects.router,
        objects.router,
        answers.router,
        plans.router,
        study.router,
        study.catalog,
        participants.router,
        worker.router,
        worker.session_router,
        pages.router,
        training.router,
        predictions.router,
        advice.router,
    )
    # A request is matched against the routers in turn: the worker session's, which serve
    # nearly every request, come first (callgrind: matching past the routers before them was
    # a fifth of the event loop's instructions per worker round trip). No other router has
    # a path under /api/w/sessions, so the order changes which route matches nothing else.
    for router in sorted(routers, key=lambda r: r is not worker.session_router):
        worker_api = router in (worker.router, worker.session_router)
        responses = WORKER_ERRORS if worker_api else API_ERRORS
        app.include_router(router, responses=responses)
    _document_in_order(app, routers)
    dashboard.install_dashboard(app)
    app.include_router(study_pages.router)
    _add_docs(app)
    media = settings.data_dir / "media"
    media.mkdir(parents=True, exist_ok=True)
    app.mount("/media", StaticFiles(directory=media), name="media")
    app.mount("/static", StaticFiles(directory=FRONTEND_STATIC), name="static")
    app.mount("/vendor", StaticFiles(directory=FRONTEND / "vendor"), name="vendor")
    return app


def serve_app() -> FastAPI:
    """The application as a server process runs it (``tripletlab serve``, ``app.asgi``):
    :func:`create_app` with its startup heap frozen.

    A server process holds ~230,000 objects once started (the libraries, the app and its
    routes), and Python's full collection walks every one of them: ~135 ms, during which the
    process answers nobody. Under load one came every one to three seconds, so they made the
    slowest answers: at 50 workers a process's full collections took up to 291 ms each, and
    p99 was 428 ms on PostgreSQL and 192 ms on SQLite. Frozen objects are left out of every
    collection (``gc.freeze``: they live for the process's life anyway); full collections
    then walk what was made since and took 5-31 ms
    (``bench/results/worker_throughput_gc_freeze.txt``). Not in :func:`create_app` itself:
    a test process makes many apps, and freezing each would keep their garbage cycles.
    """
    return create_app(freeze_heap=True)


def _document_in_order(app: FastAPI, routers: tuple[APIRouter, ...]) -> None:
    """Keep ``/openapi.json`` listing the routers in ``routers``' order, whatever the
    order they are matched in."""
    rank = {id(router): position for position, router in enumerate(routers)}

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            # FastAPI keeps an included router as one entry naming it; an older FastAPI
            # copies its routes instead (those keep the matching order: still correct).
            routes = sorted(
                app.routes, key=lambda r: rank.get(id(getattr(r, "original_router", r)), -1)
            )
            app.openapi_schema = get_openapi(
                title=app.title, version=app.version, summary=app.summary, routes=routes
            )
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _add_docs(app: FastAPI) -> None:
    """Swagger UI at /docs and ReDoc at /redoc, from vendored assets: they work offline."""

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} — API",
            swagger_js_url="/vendor/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url="/vendor/swagger-ui/swagger-ui.css",
            swagger_favicon_url="/vendor/swagger-ui/favicon-32x32.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json",
            title=f"{app.title} — API",
            redoc_js_url="/vendor/redoc/redoc.standalone.js",
            redoc_favicon_url="/vendor/swagger-ui/favicon-32x32.png",
            with_google_fonts=False,
        )

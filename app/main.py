"""The application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.api import (
    answers,
    objects,
    pages,
    participants,
    plans,
    predictions,
    projects,
    training,
    worker,
)
from app.api.uploads import BodySizeLimit
from app.config import Settings, get_settings
from app.errors import install_error_handlers

FRONTEND_STATIC = Path(__file__).resolve().parents[1] / "frontend" / "static"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runner = None
        if settings.run_jobs:
            from app.training.runner import JobRunner

            runner = JobRunner.from_settings(settings)
            runner.start()
        app.state.job_runner = runner
        yield
        if runner is not None:
            runner.stop()

    app = FastAPI(
        lifespan=lifespan,
        title="Triplet Lab",
        summary="Collect human comparisons, ask the next question actively, learn from answers.",
        version="0.1.0",
    )
    install_error_handlers(app)
    app.add_middleware(BodySizeLimit, max_bytes=int(settings.max_upload_mb * 2**20))
    for router in (
        projects.router,
        objects.router,
        answers.router,
        plans.router,
        participants.router,
        worker.router,
        pages.router,
        training.router,
        predictions.router,
    ):
        app.include_router(router)
    media = settings.data_dir / "media"
    media.mkdir(parents=True, exist_ok=True)
    app.mount("/media", StaticFiles(directory=media), name="media")
    app.mount("/static", StaticFiles(directory=FRONTEND_STATIC), name="static")
    return app

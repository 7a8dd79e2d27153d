"""Researcher routes for running a study: its status, pause / resume / stop, a preview
link, and the study bundle; and the strategies a plan may use."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from app.active.planner import STRATEGIES
from app.api.deps import OwnedProject, SessionDep, SettingsDep
from app.db.models import Project
from app.schemas.study import PreviewLink, StrategiesPublic, StrategyPublic, StudyPublic
from app.services import bundle, preview, study_control, study_state

router = APIRouter(prefix="/api/projects/{slug}", tags=["study"])
catalog = APIRouter(prefix="/api", tags=["plans"])


def study_public(db: SessionDep, project: Project) -> StudyPublic:
    check = study_control.stop_check(db, project)
    return StudyPublic(
        status=study_state.status(project),
        accepting=study_state.accepting(project),
        stop=(project.plan or {}).get("stop"),
        stop_check=check.as_dict() if check is not None else None,
    )


@router.get("/study", response_model=StudyPublic)
def read_study(project: OwnedProject, db: SessionDep) -> StudyPublic:
    """The study's status and where it stands against its stop rule."""
    return study_public(db, project)


@router.post("/resume", response_model=StudyPublic)
def resume_study(project: OwnedProject, db: SessionDep) -> StudyPublic:
    """Launch a draft, or resume a paused or stopped study: workers are given questions
    again (409 while its stop rule is met)."""
    study_control.launch(db, project)
    return study_public(db, project)


@router.post("/pause", response_model=StudyPublic)
def pause_study(project: OwnedProject, db: SessionDep) -> StudyPublic:
    """No new question for any worker until it resumes; workers are told it is paused and
    keep their session (a question already shown may still be answered)."""
    study_control.pause(db, project)
    return study_public(db, project)


@router.post("/stop", response_model=StudyPublic)
def stop_study(project: OwnedProject, db: SessionDep) -> StudyPublic:
    """End the study now: workers get their completion code at their next question."""
    study_control.stop(db, project)
    return study_public(db, project)


@router.post("/preview", response_model=PreviewLink)
def create_preview(project: OwnedProject, request: Request, settings: SettingsDep) -> PreviewLink:
    """A link to the worker page as a preview (for two hours): its session is served even
    before launch, and its answers are never counted, exported or trained on."""
    token, expires = preview.make_token(project)
    base = (settings.public_url or str(request.base_url)).rstrip("/")
    url = f"{base}/w/{quote(project.slug)}?preview={quote(token)}"
    return PreviewLink(url=url, token=token, expires_at=expires)


@router.get("/bundle.zip", response_class=StreamingResponse)
def read_bundle(project: OwnedProject, db: SessionDep) -> StreamingResponse:
    """The study bundle (a Psych-DS dataset): the answers (no previews), the objects and
    their images, the plan, the seeds, the software's version, the exclusions with their
    reasons and the models' figures, with a ``dataset_description.json``."""
    return StreamingResponse(
        bundle.chunks(bundle.build(db, project)),
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="{project.slug}-bundle.zip"'},
    )


@catalog.get("/strategies", response_model=StrategiesPublic)
def read_strategies() -> StrategiesPublic:
    """The strategies a plan may mix, each with the params it accepts."""
    rows = [StrategyPublic.model_validate(cls.describe()) for cls in STRATEGIES.values()]
    return StrategiesPublic(data=rows, count=len(rows))

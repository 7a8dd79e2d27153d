"""The budget adviser: the learning curve of a model kind and the answers still needed."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from app.api.deps import OwnedProject, SessionDep
from app.schemas.advice import AdvicePublic
from app.schemas.models import ModelKind
from app.services import advice as advice_service

router = APIRouter(tags=["advice"])


@router.get("/api/projects/{slug}/advice", response_model=AdvicePublic)
def read_advice(
    project: OwnedProject,
    db: SessionDep,
    kind: Annotated[ModelKind, Query(description="The model kind to advise on.")],
    target: Annotated[
        float,
        Query(
            gt=0,
            description="The figure to reach: an accuracy up to 1 (e.g. 0.9), or for an "
            "error figure such as a regression forest's loo_rmse the error to get down to.",
        ),
    ],
    metric: Annotated[
        str | None,
        Query(
            max_length=60,
            description="Which of the models' figures; default: the kind's main accuracy.",
        ),
    ] = None,
) -> AdvicePublic:
    """From the models trained so far: the learning curve, a fitted curve with a 90%
    bootstrap band, and how many more answers reach ``target`` (or that it is not
    reachable at this rate). Accuracies rise toward the target; an error figure (a
    regression forest's ``loo_rmse``) falls toward it."""
    return advice_service.advise(db, project, kind, target, metric)

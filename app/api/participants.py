"""Researcher routes for quality control of a project's participants."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import OwnedProject, RowId, SessionDep
from app.services import quality

router = APIRouter(prefix="/api/projects/{slug}/participants", tags=["participants"])


class FlagRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="", max_length=1000)


class ParticipantsPublic(BaseModel):
    data: list[dict[str, Any]]
    count: int


@router.get("", response_model=ParticipantsPublic)
def read_participants(project: OwnedProject, db: SessionDep) -> ParticipantsPublic:
    """Each participant's answers and quality figures: gold accuracy, share of too-fast
    answers, left/right position bias, self-consistency on mirrored repeats, and flags."""
    rows = [q.as_dict() for q in quality.list_quality(db, project)]
    return ParticipantsPublic(data=rows, count=len(rows))


@router.post("/{participant_id}/flag")
def flag_participant(
    project: OwnedProject, participant_id: RowId, db: SessionDep, body: FlagRequest | None = None
) -> dict[str, Any]:
    """Flag by hand: their answers are left out of training and marked in exports."""
    reason = body.reason if body else ""
    return quality.set_flag(db, project, participant_id, True, reason).as_dict()


@router.post("/{participant_id}/unflag")
def unflag_participant(
    project: OwnedProject, participant_id: RowId, db: SessionDep
) -> dict[str, Any]:
    """Clear a flag by hand; automatic checks leave this participant alone afterwards."""
    return quality.set_flag(db, project, participant_id, False, "").as_dict()

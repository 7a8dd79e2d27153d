"""Request and response shapes of training jobs, models and predictions.

Each kind's ``params`` model is declared by the kind itself (``app/training/kinds``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.training.kinds import KINDS

# The kinds' names, read from the registry (app/training/kinds): one module per kind.
ModelKind = Literal[tuple(KINDS)]  # type: ignore[valid-type]


class TrainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: ModelKind
    params: dict[str, Any] = Field(default_factory=dict)


class JobPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    kind: str
    params: dict[str, Any]
    status: str
    progress: float
    progress_text: str
    error: str
    trigger: str
    model_id: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class ModelPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    kind: str
    version: int
    params: dict[str, Any]
    n_answers: int
    first_answer_id: int | None
    last_answer_id: int | None
    metrics: dict[str, Any]
    training_seconds: float
    job_id: int | None
    created_at: datetime


class ModelsPublic(BaseModel):
    data: list[ModelPublic]
    count: int


class RetrainPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: ModelKind
    params: dict[str, Any] = Field(default_factory=dict)
    every_n_answers: int = Field(default=500, ge=1)
    min_interval_s: float = Field(default=60.0, ge=0, allow_inf_nan=False)


class RetrainPolicies(BaseModel):
    data: list[RetrainPolicy]

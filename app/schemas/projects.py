"""Request and response shapes of projects."""

from __future__ import annotations

import re
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, field_validator

SLUG_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"


class ProjectCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    slug: str = Field(
        description="Lowercase letters, digits and dashes.",
        json_schema_extra={"pattern": SLUG_PATTERN},
    )
    name: str = Field(min_length=1, max_length=200)
    instructions: str = Field(default="", max_length=20_000)
    consent: str = Field(default="", max_length=20_000)
    question: str | None = Field(default=None, min_length=1, max_length=500)
    pair_question: str | None = Field(default=None, min_length=1, max_length=500)

    @field_validator("slug")
    @classmethod
    def _slug(cls, value: str) -> str:
        # The pattern, said in words (a form shows this beside the field).
        if not re.fullmatch(SLUG_PATTERN, value):
            raise ValueError(
                "use 1 to 63 lowercase letters, digits and dashes, starting with a letter or "
                "digit (it names the worker link, /w/<slug>)"
            )
        return value


class ProjectUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    instructions: str | None = Field(default=None, max_length=20_000)
    consent: str | None = Field(default=None, max_length=20_000)
    question: str | None = Field(default=None, min_length=1, max_length=500)
    pair_question: str | None = Field(default=None, min_length=1, max_length=500)


class ProjectPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    slug: str
    name: str
    instructions: str
    consent: str
    question: str
    pair_question: str
    n_objects: int
    feature_dim: int | None
    created_at: datetime
    updated_at: datetime


class ProjectStats(ProjectPublic):
    n_answers: int
    n_triplets: int
    n_pairs: int
    n_odd_one_out: int = Field(default=0, description="Odd-one-out answers.")
    n_rank: int = Field(default=0, description="Ranked-grid answers.")
    n_participants: int


class ProjectsPublic(BaseModel):
    data: list[ProjectPublic]
    count: int

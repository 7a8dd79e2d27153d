"""Request and response shapes of a project's objects."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


class ObjectCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=500)
    text: str | None = Field(default=None, max_length=20_000)
    image_url: str | None = Field(default=None, max_length=2000)
    features: list[FiniteFloat] | None = Field(default=None, min_length=1)
    label: str | None = Field(default=None, max_length=200)
    target: FiniteFloat | None = None


class ObjectPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    index: int
    name: str
    text: str | None
    image_url: str | None
    features: list[float] | None
    label: str | None
    target: float | None


class ObjectsPublic(BaseModel):
    data: list[ObjectPublic]
    count: int


class ObjectsCreated(BaseModel):
    data: list[ObjectPublic]
    count: int

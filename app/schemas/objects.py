"""Request and response shapes of a project's objects."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


def _no_nul(value: str | None) -> str | None:
    if value is not None and "\x00" in value:
        raise ValueError("must not contain a NUL character (\\x00)")
    return value


Text = Annotated[str, AfterValidator(_no_nul)]


class ObjectCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Text = Field(min_length=1, max_length=500)
    text: Text | None = Field(default=None, max_length=20_000)
    image_url: Text | None = Field(default=None, max_length=2000)
    features: list[FiniteFloat] | None = Field(default=None, min_length=1)
    label: Text | None = Field(default=None, max_length=200)
    target: FiniteFloat | None = None


class ObjectUpdate(BaseModel):
    """What a researcher may change of an object; a field given as null is cleared."""

    model_config = ConfigDict(extra="forbid")

    text: Text | None = Field(default=None, max_length=20_000)
    label: Text | None = Field(default=None, max_length=200)
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

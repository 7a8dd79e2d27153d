"""Request and response shapes of imported comparisons."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import Int32

Triplet = Annotated[list[Int32], Field(min_length=3, max_length=3)]
Pair = Annotated[list[Int32], Field(min_length=3, max_length=3)]


class AnswersImport(BaseModel):
    """Comparisons collected elsewhere, by object index."""

    model_config = ConfigDict(extra="forbid")

    triplets: list[Triplet] = Field(
        default_factory=list, description="Rows [a, b, c]: a is closer to b than to c."
    )
    pairs: list[Pair] = Field(
        default_factory=list,
        description="Rows [a, b, outcome]: −1 a better, 0 about the same, 1 b better.",
    )


class AnswersImported(BaseModel):
    triplets: int
    pairs: int

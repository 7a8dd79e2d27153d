"""Request and response shapes of imported comparisons."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt

# An index beyond a 32-bit integer names no object; bounding it here keeps 10**20 from
# reaching NumPy (OverflowError) or the database (out of range) and names the field.
Index = Annotated[StrictInt, Field(ge=-(2**31), le=2**31 - 1)]
Triplet = Annotated[list[Index], Field(min_length=3, max_length=3)]
Pair = Annotated[list[Index], Field(min_length=3, max_length=3)]


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

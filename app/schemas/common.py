"""Shapes shared by every router: bounded integers and the error bodies."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, Field, StrictInt

# The range of a database INTEGER (PostgreSQL's int4): every id, index and count that
# reaches SQL fits it, so a larger value is refused at the edge (422 naming the field)
# instead of overflowing in the driver (a 500 on PostgreSQL, and on SQLite above 2**63).
MAX_INT32 = 2**31 - 1
MIN_INT32 = -(2**31)

Int32 = Annotated[StrictInt, Field(ge=MIN_INT32, le=MAX_INT32)]
"""A JSON body integer that fits a database INTEGER."""

Index = Annotated[StrictInt, Field(ge=0, le=MAX_INT32)]
"""An object index in a JSON body (0, 1, 2, …)."""


class Rows(BaseModel):
    """A list answer, in the one shape every list route uses."""

    data: list[dict[str, Any]]
    count: int

    @classmethod
    def of(cls, rows: list[dict[str, Any]]) -> Rows:
        return cls(data=rows, count=len(rows))


class ErrorBody(BaseModel):
    """Every refusal: what is wrong, in words."""

    detail: str


class ValidationIssue(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorBody(BaseModel):
    """A request that does not match its schema: a summary and the first 20 issues."""

    detail: str
    errors: list[ValidationIssue] = Field(default_factory=list)

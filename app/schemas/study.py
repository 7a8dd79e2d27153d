"""Response shapes of a study's running: its status, a preview link, the strategies."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field


class StudyPublic(BaseModel):
    status: str = Field(description="draft, running, paused, stopped, or no_plan")
    accepting: bool = Field(description="Whether workers are given new questions now.")
    stop: dict[str, Any] | None = Field(description="The plan's stop rule, if it has one.")
    stop_check: dict[str, Any] | None = Field(
        description="Where the study stands against its stop rule: answers so far and left, "
        "the budget adviser's estimate of the further answers until it stops, the pace of the "
        "last hour, and whether (and why) it is met."
    )


class PreviewLink(BaseModel):
    url: str = Field(description="The worker page with the preview token: open it in a browser.")
    token: str
    expires_at: datetime


class StrategyParam(BaseModel):
    name: str
    kind: str = Field(description="int, float, bool, choice, indices or triplets")
    description: str
    default: Any = None
    low: float | None = None
    high: float | None = None
    choices: list[str] = Field(default_factory=list)


class StrategyPublic(BaseModel):
    kind: str
    description: str
    redundant: bool = Field(description="Whether its questions are asked `redundancy` times.")
    shapes: list[str] = Field(
        default_factory=lambda: ["triplet"],
        description="The question shapes its `shape` may name (triplet: the default).",
    )
    params: list[StrategyParam]


class StrategiesPublic(BaseModel):
    data: list[StrategyPublic]
    count: int

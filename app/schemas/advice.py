"""The budget adviser's answer: a learning curve, its fit, and the answers still needed."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CurvePoint(BaseModel):
    model_id: int
    version: int
    n_answers: int
    value: float


class FittedPoint(BaseModel):
    n_answers: int
    value: float
    low: float = Field(description="Lower end of the 90% bootstrap band.")
    high: float = Field(description="Upper end of the 90% bootstrap band.")


class CurveFit(BaseModel):
    formula: str = "value = asymptote − scale · n_answers^(−exponent)"
    asymptote: float
    scale: float
    exponent: float
    asymptote_low: float
    asymptote_high: float
    residual_sd: float


class Reference(BaseModel):
    name: str
    n_answers: int
    source: str


class AdvicePublic(BaseModel):
    kind: str
    metric: str
    target: float
    params: dict | None = Field(description="The model configuration the curve follows.")
    n_answers: int = Field(description="Answers the project holds now (gold checks left out).")
    points: list[CurvePoint]
    fit: CurveFit | None
    curve: list[FittedPoint]
    status: str = Field(
        description="reached | reachable | not_reachable | insufficient_data (fewer than "
        "3 models at different answer counts)"
    )
    answers_needed: int | None = Field(
        description="Estimated total answers at which the fitted curve reaches the target."
    )
    further_answers: int | None = Field(description="answers_needed − n_answers, at least 0.")
    further_answers_low: int | None
    further_answers_high: int | None = Field(
        description="90% bootstrap interval of further_answers; null high: some fits never "
        "reach the target."
    )
    message: str
    reference: Reference | None = None

"""Request and response shapes of collection plans and worker links."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class StrategySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(description="random, landmark_k1, landmark_k2, pairs, gold or adaptive")
    # Bounded: two weights near the float maximum summed to inf, and issuing then failed.
    weight: float = Field(default=1.0, gt=0, le=1e6, allow_inf_nan=False)
    budget: int | None = Field(
        default=None,
        ge=1,
        le=10**9,
        description="Most distinct questions this strategy creates.",
    )
    params: dict[str, Any] = Field(default_factory=dict)


class Completion(BaseModel):
    model_config = ConfigDict(extra="forbid")

    redirect_url: str | None = Field(
        default=None,
        max_length=2000,
        description="Where a finished worker is sent; `{code}` is replaced by the session's "
        "completion code (e.g. Prolific's https://app.prolific.com/submissions/complete?cc=…).",
    )

    @field_validator("redirect_url")
    @classmethod
    def _http_only(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("https://", "http://")):
            raise ValueError("redirect_url must start with https:// or http://")
        return value


class QualityThresholds(BaseModel):
    model_config = ConfigDict(extra="forbid")

    min_answers: int = Field(
        default=10, ge=1, le=10**9, description="Answers before a worker is judged."
    )
    min_gold_accuracy: float = Field(default=0.7, ge=0, le=1)
    max_fast_share: float = Field(default=0.5, ge=0, le=1)
    max_position_bias: float = Field(
        default=0.8,
        ge=0,
        le=1,
        description="|share of left choices − ½| × 2: 0 balanced, 1 always the same side.",
    )
    min_consistency: float = Field(default=0.5, ge=0, le=1)
    min_reliability: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Flag a participant whose learned reliability (the probability of "
        "answering carefully, from the reliability model) is below this; none by default.",
    )
    reliability_every: int = Field(
        default=50,
        ge=0,
        le=10**9,
        description="Recompute the participants' reliability (a background job) after this "
        "many new answers from participants; 0 never.",
    )


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    strategies: list[StrategySpec] = Field(min_length=1)
    redundancy: int = Field(default=1, ge=1, le=50)
    queries_per_session: int = Field(default=50, ge=1, le=5000)
    gold_rate: float = Field(default=0.0, ge=0, lt=1)
    repeat_rate: float = Field(
        default=0.05, ge=0, le=0.5, description="Share of questions re-asked mirrored."
    )
    min_answer_ms: int = Field(default=0, ge=0, le=600_000)
    completion: Completion = Field(default_factory=Completion)
    quality: QualityThresholds = Field(default_factory=QualityThresholds)
    seed: int = Field(default=0, ge=0, lt=2**31)
    mturk: bool = Field(
        default=False,
        description="The study runs on Mechanical Turk: its hosts (and only they) may show "
        "the worker page in a frame. Otherwise the page refuses every frame.",
    )


class WorkerLinks(BaseModel):
    worker_url: str
    prolific_url: str
    mturk_url: str
    mturk_external_question: str
    notes: str

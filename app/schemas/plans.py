"""Request and response shapes of collection plans and worker links."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# What a study does now: draft (set up, not launched), running (workers are given questions),
# paused (none are given until it resumes), stopped (ended, by hand or by its stop rule).
STUDY_STATUSES = ("draft", "running", "paused", "stopped")
StudyStatus = Literal["draft", "running", "paused", "stopped"]


class ShapeSpec(BaseModel):
    """The shape of a strategy's questions (``app.learning.shapes``): a triplet, an
    odd-one-out of three, or a ranked grid of an anchor and ``n`` candidates, ``k`` picked
    in order."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["triplet", "odd_one_out", "rank"] = Field(
        default="triplet",
        description="triplet (which of two is closer to the anchor), odd_one_out (which of "
        "three does not belong) or rank (pick the k of n candidates most similar, in order)",
    )
    n: int | None = Field(default=None, ge=3, le=9, description="rank: candidates, 3 … 9.")
    k: int | None = Field(default=None, ge=1, le=8, description="rank: picks, 1 … n − 1.")

    @model_validator(mode="after")
    def _complete(self) -> ShapeSpec:
        if self.type != "rank":
            if self.n is not None or self.k is not None:
                raise ValueError(f"only a rank shape takes n and k, not {self.type}")
        elif self.n is None or self.k is None:
            raise ValueError("a rank shape needs n (candidates) and k (picks)")
        elif self.k >= self.n:
            raise ValueError(f"a rank shape's k must be 1 … n − 1 = {self.n - 1}, got {self.k}")
        return self


class StrategySpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(
        description="random, landmark_k1, landmark_k2, pairs, gold, adaptive or comprf "
        "(GET /api/strategies lists them with their params)"
    )
    # Bounded: two weights near the float maximum summed to inf, and issuing then failed.
    weight: float = Field(
        default=1.0,
        gt=0,
        le=1e6,
        allow_inf_nan=False,
        description="Its share of the questions, relative to the other strategies' weights.",
    )
    budget: int | None = Field(
        default=None,
        ge=1,
        le=10**9,
        description="Most distinct questions this strategy creates.",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="The strategy's own parameters (see its kind)."
    )
    shape: ShapeSpec | None = Field(
        default=None,
        description="The shape of its questions (default: triplets; pairs for `pairs`): "
        "random, landmark_k1, landmark_k2, adaptive and gold ask every shape.",
    )


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


class StopRule(BaseModel):
    """When the study stops by itself (checked by the job runner, off the workers' requests):
    after ``answers`` answers, or once the budget adviser says the latest models of
    ``kind`` reach ``target`` on ``metric``, whichever comes first."""

    model_config = ConfigDict(extra="forbid")

    answers: int | None = Field(
        default=None,
        ge=1,
        le=10**9,
        description="Stop after this many answers from workers (previews and imports are "
        "not counted).",
    )
    # A model kind's name, checked against the registry where the plan is stored (the
    # registry imports the services that import this module).
    kind: str | None = Field(
        default=None,
        max_length=20,
        description="Stop when this model kind's figure reaches `target` (according to the "
        "budget adviser, GET /api/projects/{slug}/advice).",
    )
    target: float | None = Field(
        default=None,
        gt=0,
        le=1e9,
        allow_inf_nan=False,
        description="The figure to reach: an accuracy up to 1, or an error figure to get down to.",
    )
    metric: str | None = Field(
        default=None, max_length=60, description="Which figure (default: the kind's main one)."
    )

    @model_validator(mode="after")
    def _complete(self) -> StopRule:
        if (self.kind is None) != (self.target is None):
            raise ValueError("a stop on a model needs both kind and target")
        if self.metric is not None and self.kind is None:
            raise ValueError("metric applies to a stop on a model: give kind and target")
        if self.answers is None and self.kind is None:
            raise ValueError("give answers, or kind and target (or no stop rule at all)")
        return self


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    strategies: list[StrategySpec] = Field(min_length=1)
    redundancy: int = Field(
        default=1, ge=1, le=50, description="Answers wanted per question, by different workers."
    )
    queries_per_session: int = Field(
        default=50, ge=1, le=5000, description="Questions a worker answers in one session."
    )
    gold_rate: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="Share of questions that are attention checks with a known answer.",
    )
    repeat_rate: float = Field(
        default=0.05, ge=0, le=0.5, description="Share of questions re-asked mirrored."
    )
    min_answer_ms: int = Field(
        default=0,
        ge=0,
        le=600_000,
        description="Answers faster than this (ms) count as too fast in the quality checks.",
    )
    max_object_views: int | None = Field(
        default=None,
        ge=1,
        le=10**6,
        description="Most times one participant is shown the same object (in any question, "
        "repeats included); null: no cap.",
    )
    completion: Completion = Field(default_factory=Completion)
    quality: QualityThresholds = Field(default_factory=QualityThresholds)
    seed: int = Field(
        default=0, ge=0, lt=2**31, description="Seeds every draw: the same seed, the same study."
    )
    mturk: bool = Field(
        default=False,
        description="The study runs on Mechanical Turk: its hosts (and only they) may show "
        "the worker page in a frame. Otherwise the page refuses every frame.",
    )
    stop: StopRule | None = Field(default=None, description="When the study stops by itself.")
    status: StudyStatus = Field(
        default="running",
        description="draft (set up, not launched), running (workers are given questions), "
        "paused (none are given until it resumes; workers are told so) or stopped (ended: "
        "workers get their completion code). Left out of a PUT, the study's current status "
        "is kept; POST …/pause, …/resume and …/stop change it.",
    )

    @property
    def shaped(self) -> bool:
        """Whether a strategy asks odd-one-outs or ranked grids (gold_rate's identity
        checks then take that shape too)."""
        return any(s.shape is not None and s.shape.type != "triplet" for s in self.strategies)


class WorkerLinks(BaseModel):
    worker_url: str
    prolific_url: str
    mturk_url: str
    mturk_external_question: str
    notes: str

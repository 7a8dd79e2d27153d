"""Request and response shapes of training jobs, models and predictions."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ModelKind = Literal["tripletboost", "kernel", "embedding", "metricboost", "svmcompare", "comprf"]


class _Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_flagged: bool = Field(
        default=False, description="Also learn from flagged participants' answers."
    )
    random_state: int = Field(default=0, ge=0, lt=2**31)


class TripletBoostParams(_Params):
    n_estimators: int = Field(default=5000, ge=1, le=1_000_000)
    cv_folds: int = Field(default=5, ge=2, le=20)


class KernelParams(_Params):
    kernel: Literal["k1", "k2"] = "k1"
    landmarks: list[int] | None = Field(
        default=None, description="Landmark indices of a landmark design (kernel paper §2.4)."
    )


class EmbeddingParams(_Params):
    method: Literal["soe", "tste", "ckl", "gnmds"] = "soe"
    dims: int = Field(default=2, ge=1, le=50)


class MetricBoostParams(_Params):
    n_estimators: int = Field(default=20, ge=1, le=1000)
    weak_learner: Literal["binary", "normalized"] = "normalized"
    standardize: bool = Field(
        default=True,
        description="z-score the features first: MetricBoost is not scale-invariant, and "
        "only standardised features reproduce the paper's results.",
    )


class SVMCompareParams(_Params):
    C: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    kernel: Literal["rbf", "linear"] = "rbf"
    gamma: float | Literal["scale"] = "scale"
    solver: Literal["auto", "dual", "primal"] = Field(
        default="auto",
        description="dual: the exact kernel SVM (memory grows as pairs²); primal: linear or "
        "Nystroem features with liblinear, for many pairs; auto: dual up to 3,000 pairs.",
    )
    standardize: bool = Field(
        default=True, description="z-score the features first, as the paper's authors do."
    )


class ComprfParams(_Params):
    position: int | None = Field(
        default=None,
        ge=0,
        description="Which strategy of the plan (its position) built the forest; default: "
        "the first comprf strategy.",
    )


PARAMS: dict[str, type[_Params]] = {
    "tripletboost": TripletBoostParams,
    "kernel": KernelParams,
    "embedding": EmbeddingParams,
    "metricboost": MetricBoostParams,
    "svmcompare": SVMCompareParams,
    "comprf": ComprfParams,
}


class TrainRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: ModelKind
    params: dict[str, Any] = Field(default_factory=dict)


class JobPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    kind: str
    params: dict[str, Any]
    status: str
    progress: float
    progress_text: str
    error: str
    trigger: str
    model_id: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class ModelPublic(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    kind: str
    version: int
    params: dict[str, Any]
    n_answers: int
    first_answer_id: int | None
    last_answer_id: int | None
    metrics: dict[str, Any]
    training_seconds: float
    job_id: int | None
    created_at: datetime


class ModelsPublic(BaseModel):
    data: list[ModelPublic]
    count: int


class RetrainPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: ModelKind
    params: dict[str, Any] = Field(default_factory=dict)
    every_n_answers: int = Field(default=500, ge=1)
    min_interval_s: float = Field(default=60.0, ge=0, allow_inf_nan=False)


class RetrainPolicies(BaseModel):
    data: list[RetrainPolicy]

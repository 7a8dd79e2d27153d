"""Request and response shapes of the worker API."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import Int32


class PublicProject(BaseModel):
    slug: str
    name: str
    instructions: str
    consent: str
    question: str
    pair_question: str
    accepting: bool
    status: str = Field(
        description="draft (not launched yet), running, paused, stopped, or no_plan"
    )


class SessionCreate(BaseModel):
    """Platform parameters from the worker's URL; give one family (or none: anonymous)."""

    model_config = ConfigDict(extra="forbid")

    PROLIFIC_PID: str | None = None
    STUDY_ID: str | None = None
    SESSION_ID: str | None = None
    workerId: str | None = None  # noqa: N815 - Mechanical Turk's own spelling
    assignmentId: str | None = None  # noqa: N815
    hitId: str | None = None  # noqa: N815
    turkSubmitTo: str | None = None  # noqa: N815
    participant: str | None = None
    anonymous_id: str | None = None
    resume_secret: str | None = Field(
        default=None,
        min_length=16,
        max_length=200,
        description="A random secret the browser keeps (the worker page: localStorage). The "
        "same secret (or the same MTurk assignmentId / Prolific SESSION_ID) resumes this "
        "session; a participant id alone opens a separate one.",
    )
    simulated: bool = Field(
        default=False, description="Answers come from a simulated worker (tripletlab simulate)."
    )
    preview: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="A preview token from POST /api/projects/{slug}/preview: the session is "
        "a researcher's preview (served even before launch; its answers are never counted, "
        "exported or trained on).",
    )


class SessionOpened(BaseModel):
    session_id: str
    session_token: str
    total: int
    answered: int


class ShownObject(BaseModel):
    index: int
    name: str
    text: str | None
    image_url: str | None


class ShownQuery(BaseModel):
    token: str
    kind: str = Field(description="triplet, pair, odd_one_out or rank")
    objects: list[ShownObject] = Field(
        description="In the order shown: the anchor first (triplet, rank), then the "
        "candidates; a pair's left and right; an odd-one-out's three"
    )
    k: int | None = Field(default=None, description="rank: how many candidates to pick, in order")
    position: int = Field(description="1-based number of this question in the session")
    total: int


class MTurkSubmit(BaseModel):
    url: str
    assignmentId: str  # noqa: N815


class NextQuery(BaseModel):
    query: ShownQuery | None = None
    done: bool = False
    wait: bool = Field(
        default=False,
        description="Nothing to ask right now, but the study goes on: its next questions wait "
        "for answers others are giving, or it is paused or not launched yet (`paused`): ask "
        "again after `retry_after` seconds.",
    )
    retry_after: int | None = None
    paused: bool = Field(
        default=False,
        description="The study is paused or not launched yet (with `wait`): the session goes "
        "on when it resumes.",
    )
    completion_code: str | None = None
    redirect_url: str | None = None
    message: str | None = None
    mturk_submit: MTurkSubmit | None = None


class AnswerCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # A token is what rules.query_token makes (digits, dots, URL-safe base64): one with
    # another character cannot name a query (a NUL byte, say, which PostgreSQL's text refuses).
    token: str = Field(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z._-]+$")
    choice: Int32 | Annotated[list[Int32], Field(max_length=9)] = Field(
        description="The chosen object's index (triplet; odd_one_out: the odd one), -1 / 0 / 1 "
        "(pair: left better, about the same, right better), or the k picked candidates' "
        "indices in order (rank)",
        union_mode="left_to_right",
    )
    client_ms: float | None = Field(default=None, allow_inf_nan=False)


class AnswerRecorded(BaseModel):
    answered: int
    total: int
    done: bool
    next: NextQuery | None = Field(
        default=None,
        description="the session's next question (as GET …/next gives it), or its end",
    )

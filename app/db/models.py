"""The tables of Triplet Lab (SQLAlchemy 2 declarative models).

Answers are the log: an append-only table from which everything else can be
rebuilt. A triplet answer is stored normalised as ``(a, b, c)`` meaning
"a is closer to b than to c"; a pair answer as ``(a, b)`` with ``outcome``
−1 (a better), 0 (about the same) or 1 (b better).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# SQLite only auto-increments INTEGER PRIMARY KEY columns, so big ids are plain
# integers there and BIGINT elsewhere.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every database (SQLite drops the zone on storage)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_result_value(self, value: datetime | None, dialect: object) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    role: Mapped[str] = mapped_column(String(20))  # admin | researcher
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(12))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    # Refreshed at most once a minute (see services/auth.py), so reads stay reads.
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class DashboardSession(Base):
    """A browser signed in to the dashboard with an API key; the cookie holds the token,
    the table only its hash. Revoking the key ends the session (checked on every request)."""

    __tablename__ = "dashboard_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the cookie
    key_id: Mapped[int] = mapped_column(ForeignKey("api_keys.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    instructions: Mapped[str] = mapped_column(Text, default="")
    consent: Mapped[str] = mapped_column(Text, default="")
    question: Mapped[str] = mapped_column(
        Text, default="Which of these two is more similar to the top one?"
    )
    pair_question: Mapped[str] = mapped_column(
        Text, default="Which of these two is better, or are they about the same?"
    )
    owner_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_keys.id", ondelete="SET NULL"), index=True
    )
    feature_dim: Mapped[int | None] = mapped_column(Integer)
    n_objects: Mapped[int] = mapped_column(Integer, default=0)
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # The planner's state (questions created per strategy, strategies' own state) and step.
    plan_state: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    plan_step: Mapped[int] = mapped_column(Integer, default=0)
    seed: Mapped[int] = mapped_column(Integer, default=0)
    retrain: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)


class Object(Base):
    __tablename__ = "objects"
    __table_args__ = (UniqueConstraint("project_id", "index"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(500))
    text: Mapped[str | None] = mapped_column(Text)
    image_url: Mapped[str | None] = mapped_column(String(2000))
    features: Mapped[list[Any] | None] = mapped_column(JSON)
    label: Mapped[str | None] = mapped_column(String(200))
    target: Mapped[float | None] = mapped_column(Float)


class Participant(Base):
    __tablename__ = "participants"
    __table_args__ = (UniqueConstraint("project_id", "platform", "external_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    platform: Mapped[str] = mapped_column(String(20))  # prolific | mturk | link | anonymous
    external_id: Mapped[str] = mapped_column(String(200))
    platform_params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    flagged: Mapped[bool] = mapped_column(Boolean, default=False)
    flag_reason: Mapped[str] = mapped_column(Text, default="")
    # Set when a researcher flags or unflags by hand: automatic checks then leave it alone.
    flag_manual: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Quality counters, added to by each answer in its transaction (see services/quality):
    # the automatic review reads them instead of every answer.
    n_answers: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    gold_answers: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    gold_correct: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    fast_answers: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    left_answers: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    sided_answers: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    repeats: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    consistent_repeats: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Learned from the answers by the reliability model (app/services/reliability.py), off
    # the request path: the posterior mean of the probability of answering carefully and
    # its interval; NULL until a model of this participant exists.
    reliability: Mapped[float | None] = mapped_column(Float)
    reliability_low: Mapped[float | None] = mapped_column(Float)
    reliability_high: Mapped[float | None] = mapped_column(Float)


class WorkSession(Base):
    """One sitting of a participant: a token, a quota of questions, a completion code."""

    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    participant_id: Mapped[int] = mapped_column(
        ForeignKey("participants.id", ondelete="CASCADE"), index=True
    )
    token_hash: Mapped[str] = mapped_column(String(64))
    # Hash of what resumes this session from another page load: the platform's
    # per-assignment id (MTurk assignmentId, Prolific SESSION_ID) or the browser's resume
    # secret. A participant id alone never resumes a session: it is no password.
    resume_hash: Mapped[str | None] = mapped_column(String(64))
    # The platform parameters this session was opened with (an MTurk worker doing several
    # HITs has one session, and one assignmentId to submit, per assignment).
    platform_params: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    source: Mapped[str] = mapped_column(String(10), default="crowd")  # crowd | simulated
    total: Mapped[int] = mapped_column(Integer)
    answered: Mapped[int] = mapped_column(Integer, default=0)
    completion_code_hash: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class Question(Base):
    """A comparison a strategy wants answered, ``wanted`` times by different participants."""

    __tablename__ = "questions"
    __table_args__ = (
        UniqueConstraint("project_id", "key"),
        Index("ix_questions_open", "project_id", "is_open", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    # The same in either orientation: "t:anchor:low:high", "p:low:high", "g:…" (gold).
    key: Mapped[str] = mapped_column(String(80))
    kind: Mapped[str] = mapped_column(String(12))  # triplet | pair | odd_one_out | rank
    # The first three objects (a shaped question's first three of ``objects``).
    o1: Mapped[int] = mapped_column(Integer)
    o2: Mapped[int] = mapped_column(Integer)
    o3: Mapped[int | None] = mapped_column(Integer)
    # odd_one_out, rank: every object, canonical (app.active.base.Proposal); NULL otherwise.
    objects: Mapped[list[Any] | None] = mapped_column(JSON)
    k: Mapped[int | None] = mapped_column(SmallInteger)  # rank: the picks asked
    strategy: Mapped[str] = mapped_column(String(40))
    strategy_position: Mapped[int] = mapped_column(Integer)
    strategy_ref: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    gold_choice: Mapped[int | None] = mapped_column(Integer)
    wanted: Mapped[int] = mapped_column(Integer, default=1)
    live: Mapped[int] = mapped_column(Integer, default=0)  # issued, lease running
    answered: Mapped[int] = mapped_column(Integer, default=0)
    # answered + live < wanted: someone else may be asked
    is_open: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Query(Base):
    """One question issued to one session; its token authenticates the answer."""

    __tablename__ = "queries"
    __table_args__ = (
        Index("ix_queries_session_status", "session_id", "status"),
        Index("ix_queries_lease", "project_id", "status", "expires_at"),
        # A question is asked of a participant once, and again at most once as a repeat:
        # the database refuses a second query (see migration 0004).
        Index(
            "uq_queries_participant_question",
            "participant_id",
            "question_id",
            "is_repeat",
            unique=True,
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    question_id: Mapped[int] = mapped_column(ForeignKey("questions.id", ondelete="CASCADE"))
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    participant_id: Mapped[int] = mapped_column(ForeignKey("participants.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(12))  # triplet | pair | odd_one_out | rank
    # Objects in the order shown: anchor, left, right (triplet) or left, right (pair); the
    # first three shown of a shaped question, whose ``objects`` lists them all as shown.
    o1: Mapped[int] = mapped_column(Integer)
    o2: Mapped[int] = mapped_column(Integer)
    o3: Mapped[int | None] = mapped_column(Integer)
    objects: Mapped[list[Any] | None] = mapped_column(JSON)
    k: Mapped[int | None] = mapped_column(SmallInteger)
    status: Mapped[str] = mapped_column(String(10), default="issued")  # issued|answered|expired
    is_repeat: Mapped[bool] = mapped_column(Boolean, default=False)
    token: Mapped[str] = mapped_column(String(64), unique=True)
    issued_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
    answered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class Answer(Base):
    """An append-only record of one comparison (crowd, import or simulated)."""

    __tablename__ = "answers"
    __table_args__ = (
        Index("ix_answers_project_kind", "project_id", "kind", "id"),
        Index(
            "ix_answers_import_id",
            "import_id",
            sqlite_where=text("import_id IS NOT NULL"),
            postgresql_where=text("import_id IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    query_id: Mapped[int | None] = mapped_column(
        ForeignKey("queries.id", ondelete="SET NULL"), unique=True
    )
    kind: Mapped[str] = mapped_column(String(12))  # triplet | pair | odd_one_out | rank
    # odd_one_out: a, b the two kept (as shown), c the odd one; rank: a the anchor, b the
    # first pick, c NULL (``objects`` as shown and ``choices`` in order say the rest).
    a: Mapped[int] = mapped_column(Integer)
    b: Mapped[int] = mapped_column(Integer)
    c: Mapped[int | None] = mapped_column(Integer)
    outcome: Mapped[int | None] = mapped_column(SmallInteger)
    # Which shown position the worker chose: -1 left, 0 middle ("same"), 1 right (an
    # odd-one-out's three tiles alike); NULL for a ranked grid.
    position: Mapped[int | None] = mapped_column(SmallInteger)
    # The chosen object (triplet, odd_one_out), the outcome (pair), the first pick (rank).
    choice: Mapped[int | None] = mapped_column(Integer)
    objects: Mapped[list[Any] | None] = mapped_column(JSON)  # shaped: every object as shown
    choices: Mapped[list[Any] | None] = mapped_column(JSON)  # rank: the picks in order
    source: Mapped[str] = mapped_column(String(10))  # crowd | import | simulated
    strategy: Mapped[str | None] = mapped_column(String(40))
    # Quality control: right or wrong on a gold question; agreeing with the first answer
    # on a mirrored repeat; None where it does not apply.
    gold_correct: Mapped[bool | None] = mapped_column(Boolean)
    consistent: Mapped[bool | None] = mapped_column(Boolean)
    session_id: Mapped[str | None] = mapped_column(
        ForeignKey("sessions.id", ondelete="SET NULL"), index=True
    )
    participant_id: Mapped[int | None] = mapped_column(
        ForeignKey("participants.id", ondelete="SET NULL"), index=True
    )
    server_ms: Mapped[float | None] = mapped_column(Float)
    client_ms: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Set on the rows of an import while it is written: they stay hidden while their
    # ``imports`` row exists (see app/services/imports.py); NULL for every other answer.
    import_id: Mapped[int | None] = mapped_column(BigInteger)


class Import(Base):
    """An upload being written in short transactions; its rows are hidden until it ends.

    Objects: the rows at ``first_index`` and after (past the project's ``n_objects``, so
    hidden); answers: the rows whose ``import_id`` is this id. Ending the import (deleting
    this row, with ``n_objects`` raised for objects) shows them all at once; a row whose
    ``heartbeat_at`` went stale belongs to an import that died, and is cleaned up.
    """

    __tablename__ = "imports"
    __table_args__ = {"sqlite_autoincrement": True}  # an id never names two imports

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(10))  # objects | answers
    first_index: Mapped[int | None] = mapped_column(Integer)
    n_rows: Mapped[int] = mapped_column(Integer)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class StrategyState(Base):
    """What a learning strategy of a project's plan knows (a crowd-built comprf forest).

    Derived data: it can always be rebuilt by replaying the answers. ``floor_id``: every
    answer up to it is applied; ``recent``: the ids above it already applied (answers
    may commit out of id order on PostgreSQL, so the last few seconds are read again).
    """

    __tablename__ = "strategy_states"

    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    state: Mapped[dict[str, Any]] = mapped_column(JSON)
    floor_id: Mapped[int] = mapped_column(BigInteger, default=0)
    recent: Mapped[list[Any]] = mapped_column(JSON, default=list)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class Job(Base):
    __tablename__ = "jobs"
    # SQLite: never reuse the id of a deleted job (it names the job in the API).
    __table_args__ = {"sqlite_autoincrement": True}

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(20))
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    status: Mapped[str] = mapped_column(String(12), default="queued", index=True)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    progress_text: Mapped[str] = mapped_column(String(200), default="")
    error: Mapped[str] = mapped_column(Text, default="")
    trigger: Mapped[str] = mapped_column(String(12), default="request")  # request | auto | cli
    model_id: Mapped[int | None] = mapped_column(Integer)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Written every few seconds by the process running the job; a stale one means it died.
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class Model(Base):
    __tablename__ = "models"
    __table_args__ = (
        UniqueConstraint("project_id", "kind", "version"),
        {"sqlite_autoincrement": True},  # never reuse a deleted model's id (see Job)
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    kind: Mapped[str] = mapped_column(String(20))
    version: Mapped[int] = mapped_column(Integer)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    n_answers: Mapped[int] = mapped_column(Integer)
    first_answer_id: Mapped[int | None] = mapped_column(BigInteger)
    last_answer_id: Mapped[int | None] = mapped_column(BigInteger)
    metrics: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    training_seconds: Mapped[float] = mapped_column(Float)
    artifact: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

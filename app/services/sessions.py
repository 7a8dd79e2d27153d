"""Participants and their sessions: who is answering, with which token, and their code."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db import driver
from app.db.models import Participant, Project, WorkSession
from app.db.session import begin_write
from app.errors import InvalidInput, NotFound, Unauthorized

MTURK_PREVIEW = "ASSIGNMENT_ID_NOT_AVAILABLE"
MTURK_SUBMIT_HOSTS = ("https://www.mturk.com", "https://workersandbox.mturk.com")
_PLATFORM_KEYS = {
    "prolific": ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID"),
    "mturk": ("workerId", "assignmentId", "hitId", "turkSubmitTo"),
}


@dataclass
class Identity:
    platform: str
    external_id: str
    params: dict[str, str]
    # What may resume one of this participant's sessions, strongest first: the platform's
    # per-assignment id, an anonymous browser's own random id, the browser's resume secret.
    resume_keys: list[str] = field(default_factory=list)


def identify(params: dict[str, Any]) -> Identity:
    """Who is asking, from the platform parameters of the worker's URL."""
    clean = {}
    for key, value in params.items():
        if value is None:
            continue
        if not isinstance(value, str) or not 0 < len(value) <= 200 or not value.isprintable():
            raise InvalidInput(f"{key} must be a printable string of 1 to 200 characters")
        clean[key] = value
    secret = clean.pop("resume_secret", None)
    if "PROLIFIC_PID" in clean:
        platform, external = "prolific", clean["PROLIFIC_PID"]
    elif "workerId" in clean:
        if clean.get("assignmentId") == MTURK_PREVIEW:
            raise InvalidInput("this is a Mechanical Turk preview: accept the HIT to start")
        submit = clean.get("turkSubmitTo")
        if submit is not None and not submit.rstrip("/").startswith(MTURK_SUBMIT_HOSTS):
            raise InvalidInput(f"turkSubmitTo must be one of {', '.join(MTURK_SUBMIT_HOSTS)}")
        platform, external = "mturk", clean["workerId"]
    elif "participant" in clean:
        platform, external = "link", clean["participant"]
    elif "anonymous_id" in clean:
        platform, external = "anonymous", clean["anonymous_id"]
    else:
        platform, external = "anonymous", secrets.token_urlsafe(12)
    kept = {k: v for k, v in clean.items() if k in sum(_PLATFORM_KEYS.values(), ())}
    keys = []
    if platform == "mturk" and "assignmentId" in clean:
        keys.append(f"mturk-assignment:{clean['assignmentId']}")
    elif platform == "prolific" and "SESSION_ID" in clean:
        keys.append(f"prolific-session:{clean['SESSION_ID']}")
    elif platform == "anonymous":
        keys.append(f"anonymous:{external}")  # a random id only that browser knows
    if secret is not None:
        keys.append(f"secret:{secret}")
    return Identity(platform, external, kept, keys)


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def open_session(
    db: Session, project: Project, identity: Identity, total: int, source: str = "crowd"
) -> tuple[WorkSession, str]:
    """The participant's session and a fresh token for it.

    A session is resumed only when the request shows what it was opened with: the same
    platform assignment id (MTurk ``assignmentId``, Prolific ``SESSION_ID``), the same
    anonymous browser id, or the same resume secret. A participant id alone (anyone can
    type ``participant=alice``) opens a separate session and leaves the others alone.
    """
    begin_write(db)
    try:
        return _open_session(db, project, identity, total, source)
    except IntegrityError:
        # On PostgreSQL a project deleted after the check below fails the foreign key.
        db.rollback()
        if db.scalar(select(Project.id).where(Project.id == project.id)) is None:
            raise NotFound(f"no project with slug {project.slug!r}") from None
        raise


def _open_session(
    db: Session, project: Project, identity: Identity, total: int, source: str
) -> tuple[WorkSession, str]:
    if db.scalar(select(Project.id).where(Project.id == project.id)) is None:
        raise NotFound(f"no project with slug {project.slug!r}")  # deleted meanwhile
    participant = db.scalar(
        select(Participant).where(
            Participant.project_id == project.id,
            Participant.platform == identity.platform,
            Participant.external_id == identity.external_id,
        )
    )
    if participant is None:
        participant = Participant(
            project_id=project.id,
            platform=identity.platform,
            external_id=identity.external_id,
            platform_params=identity.params,
        )
        db.add(participant)
        db.flush()
        existing = False
    else:
        existing = True
    resume_hashes = [_hash(key) for key in identity.resume_keys]
    work = None
    if existing and resume_hashes:
        work = db.scalar(
            select(WorkSession)
            .where(
                WorkSession.participant_id == participant.id,
                WorkSession.resume_hash.in_(resume_hashes),
            )
            .order_by(WorkSession.created_at.desc())
            .limit(1)
        )
    token = secrets.token_urlsafe(32)
    if work is None:
        work = WorkSession(
            id=str(uuid.uuid4()),
            project_id=project.id,
            participant_id=participant.id,
            token_hash=_hash(token),
            resume_hash=resume_hashes[0] if resume_hashes else None,
            platform_params=identity.params,
            source=source,
            total=total,
            answered=0,
        )
        db.add(work)
    else:
        # Resuming hands out a new token; the old browser tab's token stops working.
        work.token_hash = _hash(token)
        if work.total == 0 and work.finished_at is None:
            work.total = total  # opened before the project had a plan
        if identity.params:
            # Each session keeps the parameters it was opened with (what a stranger types
            # changes no one else's session): the MTurk assignment it submits is its own.
            work.platform_params = {**(work.platform_params or {}), **identity.params}
            participant.platform_params = {**participant.platform_params, **identity.params}
    db.commit()
    return work, token


def authenticate_session(db: Session, session_id: str, authorization: str | None) -> WorkSession:
    """The session named in the path, if the bearer token is its own."""
    token = _bearer(authorization)
    return _check_token(db.scalar(_SESSION, {"session": session_id}), session_id, token)


# Built once (hot path: every question and answer): Session.get builds its SELECT anew.
_SESSION = select(WorkSession).where(WorkSession.id == bindparam("session"))
# Every hot request starts with this (the first step of a round trip, see round_trip_sql),
# run on the driver's cursor: the ORM's loading of two objects cost more than the statement.
_SESSION_AND_PROJECT = f"""
SELECT {driver.columns(WorkSession)}, {driver.columns(Project, "project__")}
FROM sessions JOIN projects ON projects.id = sessions.project_id
"""
_THE_SESSION = "WHERE sessions.id = CAST(:session AS VARCHAR)\n"
_SESSION_IN_PROJECT = _SESSION_AND_PROJECT + _THE_SESSION
_SESSION_IN_PROJECT_READ = driver.Statement(_SESSION_IN_PROJECT)
# PostgreSQL: the session's and its participant's rows locked as they are read (sessions
# before participants, in every transaction that takes both: no deadlock), never the
# project's (see round_trip_sql); a locked row is read as committed last (READ COMMITTED
# re-reads it once the lock is granted), so both are current. The participant is held so
# that two sessions of one participant are never given the same question.
# SQLite: the write lock, taken when the transaction began, holds them.
_SESSION_IN_PROJECT_HELD = driver.Statement(
    _SESSION_AND_PROJECT
    + "JOIN participants ON participants.id = sessions.participant_id\n"
    + _THE_SESSION
    + "FOR NO KEY UPDATE OF sessions, participants",
    _SESSION_IN_PROJECT,
)
_N_SESSION_COLUMNS = len(WorkSession.__table__.columns)
_PROJECT_PREFIX = len("project__")


def authenticate_session_in_project(
    db: Session, session_id: str, authorization: str | None, *, hold: bool = False
) -> tuple[WorkSession, Project]:
    """:func:`authenticate_session` and the session's project, read in one statement.

    ``hold``: in a writing transaction, hold the session and its participant until commit,
    so that what follows is serialised per participant (as issuing is): on SQLite the write
    lock held already does it, on PostgreSQL the statement locks both rows.
    """
    token = _bearer(authorization)
    statement = _SESSION_IN_PROJECT_HELD if hold else _SESSION_IN_PROJECT_READ
    db.flush()  # as the ORM's autoflush would: the rows read are loaded into their objects
    connection = db.connection()
    row = driver.first(connection, statement, {"session": session_id})
    if row is None:
        raise NotFound(f"no session {session_id!r}")
    dialect = connection.dialect.name
    values = row._asdict()
    work_values = dict(list(values.items())[:_N_SESSION_COLUMNS])
    project_values = {k[_PROJECT_PREFIX:]: v for k, v in values.items() if k not in work_values}
    work = _check_token(driver.loaded(db, WorkSession, work_values, dialect), session_id, token)
    return work, driver.loaded(db, Project, project_values, dialect)


def token_hash(authorization: str | None) -> str | None:
    """The hash of the session token an ``Authorization`` header carries (as the session's
    row keeps it), or None if it carries none."""
    try:
        return _hash(_bearer(authorization))
    except Unauthorized:
        return None


def _bearer(authorization: str | None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized("send the session token as 'Authorization: Bearer <session_token>'")
    return authorization.split(" ", 1)[1].strip()


def _check_token(work: WorkSession | None, session_id: str, token: str) -> WorkSession:
    if work is None:
        raise NotFound(f"no session {session_id!r}")
    if not hmac.compare_digest(work.token_hash, _hash(token)):
        raise Unauthorized(
            "this token does not belong to this session (it may have been resumed elsewhere)"
        )
    return work


@lru_cache
def _secret(data_dir: str, configured: str) -> bytes:
    if configured:
        return configured.encode()
    path = Path(data_dir) / "secret.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(32))
    return path.read_text().strip().encode()


def completion_code(session_id: str) -> str:
    """The session's completion code: derived from the server's secret, so it can be shown
    again without being stored; only its hash is kept, for checking codes."""
    settings = get_settings()
    digest = hmac.new(
        _secret(str(settings.data_dir), settings.secret_key), session_id.encode(), "sha256"
    )
    return base64.b32encode(digest.digest()).decode()[:10]


def completion_code_hash(code: str) -> str:
    return _hash(code)


def session_code_hash(session_id: str) -> str:
    """The hash of the session's completion code (what its row keeps once it finishes)."""
    settings = get_settings()
    return _session_code_hash(str(settings.data_dir), settings.secret_key, session_id)


@lru_cache(maxsize=4096)
def _session_code_hash(data_dir: str, configured: str, session_id: str) -> str:
    # Every answer passes it to the SQL that may finish its session: kept per session, not
    # derived again for each answer (profiled: 2 % of a round trip's interpreter time).
    # The secret is part of the key, as it is of the code.
    return completion_code_hash(completion_code(session_id))


def participant_of(db: Session, work: WorkSession) -> Participant:
    participant = db.get(Participant, work.participant_id)
    assert participant is not None  # a foreign key guarantees it
    return participant

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

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db.models import Participant, Project, WorkSession, utcnow
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


@dataclass(frozen=True)
class Opened:
    """A session opened or resumed: its id, its new token, its quota and answers so far."""

    session_id: str
    token: str
    total: int
    answered: int


def open_session(db: Session, slug: str, identity: Identity, source: str = "crowd") -> Opened:
    """Open the session of the participant ``identity`` names in the project ``slug``, or
    resume one of theirs, with a fresh token, in one short writing transaction.

    A session is resumed only when the request shows what it was opened with: the same
    platform assignment id (MTurk ``assignmentId``, Prolific ``SESSION_ID``), the same
    anonymous browser id, or the same resume secret. A participant id alone (anyone can
    type ``participant=alice``) opens a separate session and leaves the others alone.

    Core statements built once, not the ORM's unit of work: at a study's launch hundreds of
    these come at once, and the ORM's loading and flushes were most of the open's time
    (profiled).
    """
    begin_write(db)
    try:
        opened = _open_session(db, slug, identity, source)
    except IntegrityError:
        # On PostgreSQL a project deleted after it was read fails the foreign key.
        db.rollback()
        raise NotFound(f"no project with slug {slug!r}") from None
    db.commit()
    return opened


_projects = Project.__table__
_participants = Participant.__table__
_sessions = WorkSession.__table__
_PROJECT_BY_SLUG = select(_projects.c.id, _projects.c.plan).where(
    _projects.c.slug == bindparam("slug")
)
_PARTICIPANT = select(_participants.c.id, _participants.c.platform_params).where(
    _participants.c.project_id == bindparam("project"),
    _participants.c.platform == bindparam("platform"),
    _participants.c.external_id == bindparam("external_id"),
)
_RESUMABLE = (
    select(_sessions.c.id, _sessions.c.total, _sessions.c.answered, _sessions.c.finished_at)
    .where(
        _sessions.c.participant_id == bindparam("participant"),
        _sessions.c.resume_hash.in_(bindparam("hashes", expanding=True)),
    )
    .order_by(_sessions.c.created_at.desc())
    .limit(1)
)


def _new_participant(dialect: str) -> Any:
    """INSERT of a participant, passed over if it exists (two opens of a new participant
    at once: the second waits for the first's commit, then finds its row)."""
    insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
    return insert(_participants).on_conflict_do_nothing(
        index_elements=["project_id", "platform", "external_id"]
    )


def _open_session(db: Session, slug: str, identity: Identity, source: str) -> Opened:
    project = db.execute(_PROJECT_BY_SLUG, {"slug": slug}).first()
    if project is None:
        raise NotFound(f"no project with slug {slug!r}")
    total = int(project.plan["queries_per_session"]) if project.plan else 0
    who = {
        "project": project.id,
        "platform": identity.platform,
        "external_id": identity.external_id,
    }
    participant = db.execute(_PARTICIPANT, who).first()
    if participant is None:
        values = {
            "project_id": project.id,
            "platform": identity.platform,
            "external_id": identity.external_id,
            "platform_params": identity.params,
        }
        db.execute(_new_participant(db.get_bind().dialect.name), values)
        participant = db.execute(_PARTICIPANT, who).one()
        resumed = None  # a new participant has no session to resume
    elif identity.resume_keys:
        hashes = [_hash(key) for key in identity.resume_keys]
        resumed = db.execute(_RESUMABLE, {"participant": participant.id, "hashes": hashes}).first()
    else:
        resumed = None
    token = secrets.token_urlsafe(32)
    if resumed is None:
        session_id = str(uuid.uuid4())
        db.execute(
            insert(_sessions),
            {
                "id": session_id,
                "project_id": project.id,
                "participant_id": participant.id,
                "token_hash": _hash(token),
                "resume_hash": _hash(identity.resume_keys[0]) if identity.resume_keys else None,
                "platform_params": identity.params,
                "source": source,
                "total": total,
                "answered": 0,
            },
        )
        return Opened(session_id, token, total, 0)
    # Resuming hands out a new token; the old browser tab's token stops working.
    changes: dict[str, Any] = {"token_hash": _hash(token)}
    if resumed.total == 0 and resumed.finished_at is None:
        changes["total"] = total  # opened before the project had a plan
    if identity.params:
        # Each session keeps the parameters it was opened with (what a stranger types
        # changes no one else's session): the MTurk assignment it submits is its own.
        stored = db.scalar(select(_sessions.c.platform_params).where(_sessions.c.id == resumed.id))
        changes["platform_params"] = {**(stored or {}), **identity.params}
        db.execute(
            update(_participants)
            .where(_participants.c.id == participant.id)
            .values(platform_params={**participant.platform_params, **identity.params})
        )
    db.execute(update(_sessions).where(_sessions.c.id == resumed.id).values(**changes))
    return Opened(resumed.id, token, changes.get("total", resumed.total), resumed.answered)


_HELD_SESSION = (
    select(
        _sessions.c.id,
        _sessions.c.project_id,
        _sessions.c.participant_id,
        _sessions.c.token_hash,
        _sessions.c.total,
        _sessions.c.answered,
        _sessions.c.finished_at,
        _sessions.c.platform_params,
        _sessions.c.source,
        _projects.c.plan,
    )
    .join(_projects, _projects.c.id == _sessions.c.project_id)
    .join(_participants, _participants.c.id == _sessions.c.participant_id)
    .where(_sessions.c.id == bindparam("session"))
)
# PostgreSQL: the session's and its participant's rows held until commit (sessions before
# participants, as every transaction that takes both: no deadlock), so that what follows is
# serialised per participant: two sessions of one participant are never given the same
# question. SQLite: the write lock, taken when the transaction began, holds them.
_HELD_SESSION_LOCKED = _HELD_SESSION.with_for_update(of=[_sessions, _participants], key_share=True)


def held_session(
    db: Session, session_id: str, authorization: str | None, *, hold: bool = True
) -> Any:
    """The session named in the path, with its project's plan, if the bearer token is its
    own (401 otherwise; 404 if there is no such session); held until commit if ``hold``."""
    token = _bearer(authorization)
    statement = _HELD_SESSION_LOCKED if hold else _HELD_SESSION
    row = db.execute(statement, {"session": session_id}).first()
    if row is None:
        raise NotFound(f"no session {session_id!r}")
    if not hmac.compare_digest(row.token_hash, _hash(token)):
        raise Unauthorized(
            "this token does not belong to this session (it may have been resumed elsewhere)"
        )
    return row


def finish(db: Session, session_id: str) -> None:
    """End the session now (its quota reached, or the plan has nothing more for it)."""
    db.execute(
        update(_sessions)
        .where(_sessions.c.id == session_id, _sessions.c.finished_at.is_(None))
        .values(finished_at=utcnow(), completion_code_hash=session_code_hash(session_id))
    )


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

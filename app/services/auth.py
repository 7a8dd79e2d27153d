"""API keys: create them, store only their hash, and recognise them on requests."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from app.db.models import ApiKey, DashboardSession, utcnow
from app.db.session import begin_write, writing
from app.errors import InvalidInput, NotFound, Unauthorized

ROLES = ("admin", "researcher")
KEY_PREFIX = "tl_"
# A key's last use is written at most this often, so that reads stay (almost always) reads.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_key(key: str) -> str:
    # Keys are 256 random bits, so a fast unsalted hash is enough: nothing to brute-force.
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(db: Session, role: str, name: str = "") -> tuple[ApiKey, str]:
    """Store a new key and return it with its secret, which is shown only this once."""
    if role not in ROLES:
        raise InvalidInput(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    begin_write(db)
    key = ApiKey(name=name, role=role, key_hash=hash_key(secret), prefix=secret[:10])
    db.add(key)
    db.commit()
    return key, secret


def ensure_admin_key(db: Session) -> str | None:
    """Create the first admin key if there is none; return its secret, or None."""
    exists = db.scalar(select(func.count()).select_from(ApiKey).where(ApiKey.role == "admin"))
    if exists:
        return None
    _, secret = create_key(db, "admin", name="first admin")
    return secret


def authenticate(db: Session, authorization: str | None) -> ApiKey:
    """The key named by an ``Authorization: Bearer <key>`` header, or 401."""
    if not authorization:
        raise Unauthorized("missing Authorization header: send 'Authorization: Bearer <api key>'")
    scheme, _, secret = authorization.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("the Authorization header must read 'Bearer <api key>'")
    key = db.scalar(select(ApiKey).where(ApiKey.key_hash == hash_key(secret.strip())))
    if key is None or key.revoked:
        raise Unauthorized("unknown or revoked API key")
    touch_key(db, key)
    return key


def touch_key(db: Session, key: ApiKey) -> None:
    """Record that ``key`` was used now, if its last use is older than a minute.

    The write is its own short transaction (a conditional UPDATE, so two requests racing
    write once); the request's later reads start a fresh one.
    """
    now = utcnow()
    if key.last_used_at is not None and now - key.last_used_at < LAST_USED_RESOLUTION:
        return
    if writing(db):  # the caller is mid-write: leave its transaction alone
        return
    begin_write(db)
    stale = now - LAST_USED_RESOLUTION
    db.execute(
        update(ApiKey)
        .where(ApiKey.id == key.id)
        .where((ApiKey.last_used_at.is_(None)) | (ApiKey.last_used_at < stale))
        .values(last_used_at=now)
        .execution_options(synchronize_session=False)
    )
    db.commit()
    key.last_used_at = now


def list_keys(db: Session) -> list[ApiKey]:
    """Every key, newest first (secrets are never stored, only their first characters)."""
    return list(db.scalars(select(ApiKey).order_by(ApiKey.id.desc())))


def revoke_key(db: Session, key_id: int) -> ApiKey:
    """Revoke a key: its API requests get 401 and its dashboard sessions end at once."""
    begin_write(db)
    key = db.get(ApiKey, key_id)
    if key is None:
        raise NotFound(f"no API key {key_id}")
    key.revoked = True
    db.execute(DashboardSession.__table__.delete().where(DashboardSession.key_id == key_id))
    db.commit()
    return key

"""API keys: create them, store only their hash, and recognise them on requests."""

from __future__ import annotations

import hashlib
import secrets

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.db.models import ApiKey
from app.db.session import begin_write
from app.errors import InvalidInput, Unauthorized

ROLES = ("admin", "researcher")
KEY_PREFIX = "tl_"


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
    return key

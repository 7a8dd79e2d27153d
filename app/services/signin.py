"""Dashboard sign-in: an API key pasted once becomes a server-side session.

The browser holds a random token in an HttpOnly cookie; the table holds only its hash, the
key it belongs to and when it expires. Every request looks the session up with its key, so
revoking the key (or signing out) ends the session at once. Form POSTs carry a CSRF token
derived from the session token with the server's secret (HMAC), so it needs no storage.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.config import get_settings
from app.db.models import ApiKey, DashboardSession, utcnow
from app.db.session import begin_write
from app.errors import Forbidden, Unauthorized
from app.services.auth import authenticate, touch_key
from app.services.sessions import _secret

SESSION_COOKIE = "tl_dashboard"  # the browser's session token (HttpOnly, SameSite=strict)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _server_secret() -> bytes:
    settings = get_settings()
    return _secret(str(settings.data_dir), settings.secret_key)


def sign_in(db: Session, api_key: str, hours: float) -> tuple[str, ApiKey]:
    """A new session for ``api_key`` (401 if unknown or revoked); returns its cookie token."""
    key = authenticate(db, f"Bearer {api_key.strip()}" if api_key.strip() else None)
    token = secrets.token_urlsafe(32)
    begin_write(db)
    now = utcnow()
    # Sign-ins are rare: sweep the expired sessions of every key here.
    db.execute(delete(DashboardSession).where(DashboardSession.expires_at < now))
    db.add(
        DashboardSession(
            id=_hash(token), key_id=key.id, created_at=now, expires_at=now + timedelta(hours=hours)
        )
    )
    db.commit()
    return token, key


def session_key(db: Session, token: str | None) -> ApiKey | None:
    """The key of the live session ``token``, or None (no session, expired, key revoked)."""
    if not token or len(token) > 100:
        return None
    row = db.execute(
        select(ApiKey, DashboardSession.expires_at)
        .join(DashboardSession, DashboardSession.key_id == ApiKey.id)
        .where(DashboardSession.id == _hash(token))
    ).first()
    if row is None:
        return None
    key, expires_at = row
    if key.revoked or expires_at <= utcnow():
        return None
    touch_key(db, key)
    return key


def require_key(db: Session, token: str | None) -> ApiKey:
    key = session_key(db, token)
    if key is None:
        raise Unauthorized("not signed in to the dashboard, or the session ended")
    return key


def sign_out(db: Session, token: str | None) -> None:
    if not token:
        return
    begin_write(db)
    db.execute(delete(DashboardSession).where(DashboardSession.id == _hash(token)))
    db.commit()


def csrf_token(token: str) -> str:
    """The CSRF token of session ``token`` (or of a sign-in form's pre-session nonce)."""
    return hmac.new(_server_secret(), b"csrf:" + token.encode(), "sha256").hexdigest()[:40]


def check_csrf(token: str | None, sent: str | None) -> bool:
    return bool(token) and bool(sent) and hmac.compare_digest(csrf_token(token), sent)


def api_key_of_session(
    db: Session, token: str | None, method: str, sent_csrf: str | None
) -> ApiKey | None:
    """The key of a dashboard session calling the researcher API from its pages (no
    ``Authorization`` header; the cookie ``token``), or None without a live session. A
    request that changes something must also send the session's CSRF token
    (``X-CSRF-Token``), as the dashboard's own forms do: 403 without it."""
    key = session_key(db, token)
    if key is None:
        return None
    if method.upper() not in SAFE_METHODS and not check_csrf(token, sent_csrf):
        raise Forbidden("missing or wrong X-CSRF-Token: reload the dashboard page and try again")
    return key

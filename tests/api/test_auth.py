"""API keys: missing, malformed, unknown and revoked keys get 401; keys are stored hashed."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.db.models import ApiKey


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "tl_nothing"},
        {"Authorization": "Bearer "},
        {"Authorization": "Bearer tl_wrong"},
    ],
    ids=["missing", "no-scheme", "empty", "unknown"],
)
def test_bad_keys_get_401(client, headers):
    response = client.get("/api/projects", headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert isinstance(response.json()["detail"], str)


def test_revoked_key_gets_401(client, db, auth_headers):
    key = db.scalars(select(ApiKey).where(ApiKey.role == "researcher")).one()
    key.revoked = True
    db.commit()
    assert client.get("/api/projects", headers=auth_headers).status_code == 401


def test_keys_are_stored_hashed(db, auth_headers):
    secret = auth_headers["Authorization"].removeprefix("Bearer ")
    stored = db.scalars(select(ApiKey)).all()
    assert stored
    assert all(secret not in (k.key_hash, k.prefix) for k in stored)
    assert all(len(k.key_hash) == 64 for k in stored)


def test_ensure_admin_key_creates_one_once(db):
    from app.services.auth import ensure_admin_key

    first = ensure_admin_key(db)
    assert first is not None and first.startswith("tl_")
    assert ensure_admin_key(db) is None

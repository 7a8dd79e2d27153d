"""PostgreSQL: a pooled connection that died while the pool sat idle is replaced before it is
lent (app.db.session._ping_when_idle), without a ping on every request."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from app.db import session as db_session
from tests.conftest import POSTGRES_URL


def _engine_named(name: str):  # type: ignore[no-untyped-def]
    separator = "&" if "?" in POSTGRES_URL else "?"
    return db_session.make_engine(f"{POSTGRES_URL}{separator}application_name={name}")


def _drop_connections(engine, name: str) -> int:  # type: ignore[no-untyped-def]
    """End every server connection of ``name``, as a restart of the server would."""
    with engine.connect() as other:  # a connection of another name does it
        ended = other.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = :name"
            ),
            {"name": name},
        ).scalar_one()
        other.commit()
    return ended


@pytest.mark.parametrize("idle", [True, False])
def test_a_connection_dropped_while_idle_is_replaced(engine, monkeypatch, idle):
    if engine.dialect.name != "postgresql":
        return  # SQLite has no server connection to lose
    name = f"idle-{uuid.uuid4().hex[:8]}"
    named = _engine_named(name)
    try:
        with named.connect() as connection:
            pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
        assert _drop_connections(engine, name) == 1
        # As if the connection had sat in the pool longer than IDLE_PING_S, or not at all.
        monkeypatch.setattr(db_session, "IDLE_PING_S", 0.0 if idle else 3600.0)
        if idle:
            with named.connect() as connection:
                new_pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
            assert new_pid != pid  # checked, found dead, replaced: the request went through
        else:
            # In use a moment ago: lent unchecked (no round trip per request); the request
            # that finds it dead fails, and the pool starts anew for the next one.
            with pytest.raises(OperationalError), named.connect() as connection:
                connection.execute(text("SELECT 1"))
            with named.connect() as connection:
                assert connection.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        named.dispose()

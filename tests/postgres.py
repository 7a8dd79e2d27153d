"""The suite's PostgreSQL database: ``TRIPLETLAB_TEST_POSTGRES_URL`` (default the local
``test``), or, when the suite runs on several pytest-xdist workers, a database of each
worker's own beside it (``<name>_gw0``, ``<name>_gw1`` …, created when missing), so that one
worker's tests never empty another's tables. Servers the tests start get databases of their
own beside this one (``tests.servers.postgres_database``)."""

from __future__ import annotations

import os

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

_CONFIGURED = os.environ.get(
    "TRIPLETLAB_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _worker_url() -> str:
    if not _WORKER:
        return _CONFIGURED
    base = make_url(_CONFIGURED)
    return base.set(database=f"{base.database}_{_WORKER}").render_as_string(hide_password=False)


POSTGRES_URL = _worker_url()


def ensure_database() -> None:
    """Create this worker's database if it is missing (an unreachable server is left for
    the tests to report: they fail in CI and skip elsewhere)."""
    if not _WORKER:
        return
    name = make_url(POSTGRES_URL).database
    engine = create_engine(_CONFIGURED, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            found = connection.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": name}
            ).first()
            if found is None:
                connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception:  # reported by the tests that need it (fail in CI, skip elsewhere)
        pass
    finally:
        engine.dispose()

"""Fixtures shared by the whole suite: databases (SQLite and PostgreSQL), sessions, clients."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Settings are read once per process: point the data directory somewhere private first.
_DATA_DIR = Path(tempfile.mkdtemp(prefix="tripletlab-test-"))
os.environ["TRIPLETLAB_DATA_DIR"] = str(_DATA_DIR)
os.environ["TRIPLETLAB_DEMO"] = "false"
os.environ["TRIPLETLAB_MAX_UPLOAD_MB"] = "2"
os.environ["TRIPLETLAB_RUN_JOBS"] = "false"
# Tests (and the servers they start) drive the worker API far faster than people do; the
# rate limits are tested on their own app (tests/api/test_worker_limits.py).
os.environ["TRIPLETLAB_WORKER_RATE_SESSION"] = "0"
os.environ["TRIPLETLAB_WORKER_RATE_ADDRESS"] = "0"

from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import Engine, text  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from app.api.deps import get_db  # noqa: E402
from app.config import get_settings  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.db.session import make_engine  # noqa: E402
from app.main import create_app  # noqa: E402
from app.services.auth import create_key  # noqa: E402
from tests.postgres import POSTGRES_URL, ensure_database  # noqa: E402

DATABASES = ("sqlite", "postgresql")


def pytest_configure(config: pytest.Config) -> None:
    ensure_database()


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"databases: SQLite (temporary file) and PostgreSQL at {POSTGRES_URL}",
        f"data directory: {_DATA_DIR}",
    ]


def reset_postgres(url: str) -> Engine:
    """An engine on an empty PostgreSQL schema; fails (never skips) in CI if unreachable."""
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
            connection.execute(text("CREATE SCHEMA public"))
    except Exception as error:  # the driver's own connection errors vary
        engine.dispose()
        message = f"PostgreSQL at {url} is unreachable: {error}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return engine


def fresh_engine(kind: str, tmp_dir: Path) -> Engine:
    """An engine on an empty database of ``kind``, migrated to head."""
    if kind == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_dir / 'test.db'}")
    else:
        engine = reset_postgres(POSTGRES_URL)
    upgrade(engine)
    return engine


@pytest.fixture(scope="session", params=DATABASES)
def engine(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    engine = fresh_engine(request.param, tmp_path_factory.mktemp(request.param))
    yield engine
    engine.dispose()


@pytest.fixture
def db(engine: Engine) -> Iterator[Session]:
    """A session on the test database; what it and the test's requests commit is real, and
    every table is emptied at the end of the test."""
    session = Session(bind=engine, expire_on_commit=False)
    yield session
    session.close()
    empty_database(engine)


def empty_database(engine: Engine) -> None:
    """Every table of the test database emptied (ids go on, as in production), and what
    this process keeps of its projects forgotten."""
    from app.db.models import Base
    from app.services import comprf, pool, round_trip

    pool.producer(engine).wait()  # a fill ahead still running writes nothing afterwards
    round_trip.forget()
    comprf.forget()
    tables = [table.name for table in reversed(Base.metadata.sorted_tables)]
    with engine.begin() as connection:
        if engine.dialect.name == "postgresql":
            connection.execute(text(f"TRUNCATE {', '.join(tables)} CASCADE"))
        else:
            for table in tables:
                connection.execute(text(f'DELETE FROM "{table}"'))


@pytest.fixture(scope="session")
def app():  # type: ignore[no-untyped-def]
    return create_app(get_settings())


@pytest.fixture
def client(app, db: Session, engine: Engine) -> Iterator[TestClient]:  # type: ignore[no-untyped-def]
    """A client of the app on the test database: each request has its own session, which
    commits for real, as on a server (the production path, the event loop's own
    connections on PostgreSQL included)."""

    def real_session() -> Iterator[Session]:
        with Session(engine, expire_on_commit=False) as session:
            yield session

    app.dependency_overrides[get_db] = real_session
    with TestClient(app) as test_client:
        yield test_client
    app.dependency_overrides.clear()


@pytest.fixture
def admin_headers(db: Session) -> dict[str, str]:
    _, secret = create_key(db, "admin", "test admin")
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def auth_headers(db: Session) -> dict[str, str]:
    _, secret = create_key(db, "researcher", "test researcher")
    return {"Authorization": f"Bearer {secret}"}

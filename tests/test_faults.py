"""Database faults named as such (app.db.faults): a full disk is a 503 saying so, logged
once per episode with its path; a lost database is logged once when lost and once when
back; the job runner logs no traceback while the database is away. Real databases: a
SQLite file made full with ``PRAGMA max_page_count`` (as a full disk, it answers
``SQLITE_FULL``; bench/fault_probes.py fills a real filesystem), PostgreSQL connections
ended by the server, a port nobody listens on."""

from __future__ import annotations

import errno
import logging
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from app.api.deps import get_db
from app.config import get_settings
from app.db import faults
from app.db.migrate import upgrade
from app.db.session import make_engine
from app.main import create_app
from app.services.auth import create_key
from app.training.executor import make_executor
from app.training.runner import JobRunner
from tests.conftest import POSTGRES_URL, reset_postgres
from tests.servers import free_port


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, *loggers: str) -> list[str]:
        return [r.getMessage() for r in self.records if r.name in loggers]


@pytest.fixture
def logged() -> Iterator[Lines]:
    """What the server's log (and the job runner's) receives during the test."""
    lines = Lines()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "app.training.runner")]
    for logger in loggers:
        logger.addHandler(lines)
    yield lines
    for logger in loggers:
        logger.removeHandler(lines)


def full_sqlite(path: Path) -> Engine:
    """A migrated SQLite database that cannot grow by a page: every insert that needs one
    fails with SQLITE_FULL, "database or disk is full"."""
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    with engine.connect() as connection:
        pages = connection.execute(text("PRAGMA page_count")).scalar_one()
    engine.dispose()

    @event.listens_for(engine, "connect")
    def _no_growth(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

    return engine


def test_a_full_sqlite_disk_is_a_503_saying_so_logged_once_with_its_path(tmp_path, logged):
    path = tmp_path / "full.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    with Session(engine) as db:
        _, secret = create_key(db, "researcher", "disk full")
    engine.dispose()
    engine = full_sqlite(path)
    app = create_app(get_settings())

    def session() -> Iterator[Session]:
        with Session(engine, expire_on_commit=False) as db:
            yield db

    app.dependency_overrides[get_db] = session
    headers = {"Authorization": f"Bearer {secret}"}
    try:
        with TestClient(app) as client:
            replies = [
                client.post(
                    "/api/projects",
                    json={"slug": f"full-{i}", "name": "n", "instructions": "x" * 19_000},
                    headers=headers,
                )
                for i in range(3)
            ]
            listed = client.get("/api/projects", headers=headers)  # reading still works
    finally:
        engine.dispose()
    for reply in replies:
        assert reply.status_code == 503, reply.text
        assert reply.json() == {"detail": faults.DISK_FULL_DETAIL}
        assert reply.headers["retry-after"] == "30"
    assert listed.status_code == 200 and listed.json()["count"] == 0
    said = logged.messages("uvicorn.error")
    assert said == [
        f"out of disk space at {path} (OperationalError: database or disk is full): writes "
        "are refused with 503 until space is freed"
    ]


def test_a_disk_full_episode_is_logged_again_after_a_quiet_spell(monkeypatch, logged):
    where = f"/nowhere/{uuid.uuid4().hex}"
    error = OSError(errno.ENOSPC, "No space left on device", where)
    assert faults.report_disk_full(where, error)
    assert not faults.report_disk_full(where, error)
    monkeypatch.setattr(faults, "EPISODE_GAP_S", 0.0)
    assert faults.report_disk_full(where, error)
    assert len(logged.messages("uvicorn.error")) == 2


def test_every_kind_of_full_disk_is_named_as_such(tmp_path):
    engine = full_sqlite(tmp_path / "full.db")
    try:
        with pytest.raises(OperationalError) as sqlite_full, engine.begin() as connection:
            connection.execute(text("CREATE TABLE grown (x BLOB)"))
            connection.execute(text("INSERT INTO grown VALUES (zeroblob(2000000))"))
    finally:
        engine.dispose()
    full = [
        sqlite_full.value,
        OSError(errno.ENOSPC, "No space left on device"),
        OSError(errno.EDQUOT, "Disk quota exceeded"),
        psycopg.errors.DiskFull('could not extend file "base/16384/16385"'),
        psycopg.OperationalError('could not write to file "pg_wal/x": No space left on device'),
    ]
    assert [faults.classify(error) for error in full] == [faults.Fault.DISK_FULL] * len(full)
    assert faults.classify(OSError(errno.EACCES, "Permission denied")) is faults.Fault.BUSY


def test_a_locked_sqlite_database_is_busy_not_lost(tmp_path):
    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0)
    try:
        with pytest.raises(sqlite3.OperationalError) as locked:
            other.execute("INSERT INTO t VALUES (1)")
    finally:
        other.close()
        holder.close()
    assert "locked" in str(locked.value)
    assert faults.classify(locked.value) is faults.Fault.BUSY


@pytest.fixture
def postgres() -> Iterator[Engine]:
    engine = reset_postgres(POSTGRES_URL)
    yield engine
    engine.dispose()


def named_engine(name: str) -> Engine:
    separator = "&" if "?" in POSTGRES_URL else "?"
    return make_engine(f"{POSTGRES_URL}{separator}application_name={name}")


def test_a_postgresql_connection_ended_by_the_server_is_lost_then_back(postgres, logged):
    faults.watch()
    name = f"faults-{uuid.uuid4().hex[:8]}"
    engine = named_engine(name)
    try:
        for _ in range(2):  # two episodes: each said when lost and when back
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
                with postgres.connect() as other:
                    other.execute(
                        text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE application_name = :name"),
                        {"name": name},
                    )  # fmt: skip
                    other.commit()
                with pytest.raises(OperationalError) as ended:
                    connection.execute(text("SELECT 1"))
                assert faults.classify(ended.value) is faults.Fault.LOST
                assert faults.lost(engine)
            with engine.connect() as connection:  # a new connection: the database is back
                assert connection.execute(text("SELECT 1")).scalar_one() == 1
            assert not faults.lost(engine)
    finally:
        engine.dispose()
    said = logged.messages("uvicorn.error")
    shown = engine.url.render_as_string(hide_password=True)
    assert len(said) == 4, said
    for lost, back in (said[:2], said[2:]):
        assert lost == (
            f"database {shown} lost (AdminShutdown: terminating connection due to "
            "administrator command): requests answer 503 until it is back"
        )
        assert back.startswith(f"database {shown} back after ")


def test_a_postgresql_lock_timeout_is_busy(postgres):
    with postgres.connect() as holder, postgres.connect() as waiter:
        holder.execute(text("CREATE TABLE IF NOT EXISTS faults_lock (x int)"))
        holder.commit()
        holder.execute(text("LOCK TABLE faults_lock IN ACCESS EXCLUSIVE MODE"))
        waiter.execute(text("SET lock_timeout = '50ms'"))
        with pytest.raises(OperationalError) as timed_out:
            waiter.execute(text("SELECT * FROM faults_lock"))
        holder.rollback()
    assert faults.classify(timed_out.value) is faults.Fault.BUSY


def test_the_job_runner_logs_one_line_not_a_traceback_a_tick_while_the_database_is_away(
    logged,
):
    unreachable = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nowhere"
    runner = JobRunner(unreachable, make_executor(1), capacity=1, poll_s=0.01)
    runner.start()
    deadline = time.monotonic() + 30
    try:
        while len(logged.records) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # ~30 more ticks, every one failing
    finally:
        runner.stop()
    said = [(r.name, r.levelno, r.getMessage()) for r in logged.records]
    assert len(said) == 1, said
    name, level, message = said[0]
    assert (name, level) == ("uvicorn.error", logging.ERROR)
    assert message.startswith(f"database {unreachable} lost (OperationalError: connection ")
    assert not any(r.exc_info for r in logged.records)


def test_a_full_disk_outside_the_database_is_the_same_503_and_other_os_errors_stay_500s(
    logged,
):
    app = create_app(get_settings())
    where = f"/data/media/{uuid.uuid4().hex}.png"

    def write_media() -> None:  # as a write of an uploaded image would fail
        raise OSError(errno.ENOSPC, "No space left on device", where)

    def read_media() -> None:
        raise OSError(errno.EACCES, "Permission denied", where)

    app.add_api_route("/full", write_media, methods=["POST"])
    app.add_api_route("/denied", read_media)
    with TestClient(app, raise_server_exceptions=False) as client:
        full = [client.post("/full") for _ in range(2)]
        denied = client.get("/denied")
    for reply in full:
        assert reply.status_code == 503
        assert reply.json() == {"detail": faults.DISK_FULL_DETAIL}
    assert denied.status_code == 500
    said = logged.messages("uvicorn.error")
    assert said == [
        f"out of disk space at {where} (OSError: [Errno {errno.ENOSPC}] No space left on "
        f"device: '{where}'): writes are refused with 503 until space is freed"
    ]

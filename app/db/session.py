"""Engines and sessions: SQLite in WAL mode with foreign keys, or PostgreSQL, same code."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and real transactions."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)

    database = parsed.database
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        # Let SQLAlchemy, not pysqlite, open transactions (see "Serializable
        # isolation / Savepoints / Transactional DDL" in SQLAlchemy's SQLite docs).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        # synchronous=NORMAL in WAL mode: a commit is in the WAL file (handed to the OS)
        # before it returns, so an acknowledged answer survives the app process crashing
        # or being killed; only an OS crash or power loss can roll back the last commits,
        # which the WAL keeps consistent. FULL would fsync every commit: 3-4 ms each on
        # the 2-core benchmark machine's disk (measured), more than a worker round trip's
        # CPU, and taken while holding SQLite's single write lock. Deployments that must survive a
        # machine failure run PostgreSQL, which fsyncs each commit (with group commit).
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:  # type: ignore[no-untyped-def]
        # A transaction that will write takes the write lock up front (see
        # begin_write), so two writers wait for each other through busy_timeout
        # instead of failing when a read turns into a write.
        immediate = connection.get_execution_options().get("sqlite_immediate", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


@lru_cache
def get_engine(url: str) -> Engine:
    return make_engine(url)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def iter_session(engine: Engine) -> Iterator[Session]:
    with session_factory(engine)() as session:
        yield session


def begin_write(db: Session) -> None:
    """End the current (read) transaction and start one that will write.

    On SQLite the new transaction holds the database's write lock from its first
    statement; on PostgreSQL it is an ordinary transaction and callers lock the
    rows they change. Objects already loaded stay usable (``expire_on_commit``
    is off) but may be stale: refresh what the write depends on.
    """
    if db.in_transaction():
        db.commit()
    db.connection(execution_options={"sqlite_immediate": True})
    db.info["write_transaction"] = db.get_transaction()


def writing(db: Session) -> bool:
    """Whether ``db``'s current transaction was started by :func:`begin_write`."""
    return db.in_transaction() and db.info.get("write_transaction") is db.get_transaction()


def ensure_write(db: Session) -> None:
    """:func:`begin_write`, unless the current transaction already is a writing one.

    The worker's hot routes start writing before their first read, so that what they read
    is current (on SQLite, read under the write lock) and no read transaction has to end.
    """
    if not writing(db):
        begin_write(db)

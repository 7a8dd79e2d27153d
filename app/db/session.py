"""Engines and sessions: SQLite in WAL mode with foreign keys, or PostgreSQL, same code."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app.db.driver import run_text

IDLE_PING_S = 10.0  # a pooled connection unused this long is checked before it is lent
# Connections an engine keeps, and may open beyond them. Requests with a session of their own
# take at most REQUEST_SESSIONS of them at once (app.api.deps.get_db); the rest serve the
# worker routes' turns (app.api.turns), the pool's fill ahead and the job runner's threads.
POOL_SIZE = 10
MAX_OVERFLOW = 20
REQUEST_SESSIONS = POOL_SIZE


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and real transactions."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        engine = create_engine(url, pool_size=POOL_SIZE, max_overflow=MAX_OVERFLOW)
        _ping_when_idle(engine)

        @event.listens_for(engine, "connect")
        def _no_jit(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
            # As on the loop's connections (app/db/loop_connections.py): the service's
            # statements touch a few rows, and a plan estimated above jit_above_cost was
            # compiled at every run (hundreds of ms each).
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SET jit = off")
            dbapi_connection.commit()

        return engine

    database = parsed.database
    writer = None  # a database in memory is one connection's: no other writer to wait for
    if database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
        writer = writer_lock(database)
    engine = create_engine(
        url,
        connect_args={"check_same_thread": False, "timeout": 30, "factory": WriterLockedConnection},
        pool_size=POOL_SIZE,
        max_overflow=MAX_OVERFLOW,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
        # Let SQLAlchemy, not pysqlite, open transactions (see "Serializable
        # isolation / Savepoints / Transactional DDL" in SQLAlchemy's SQLite docs).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        # WAL with synchronous=NORMAL for most commits: they reach the WAL file (the OS)
        # before returning, so they survive the app process crashing or being killed,
        # and only an OS crash or power loss can roll back the last of them. Commits
        # that store answers run with FULL instead (see begin_write's ``durable``): they
        # wait for the WAL to reach the disk, which also makes every earlier commit in
        # it durable, so an acknowledged answer survives a power loss too. FULL costs
        # 3-4 ms of fsync per commit on the benchmark machine (measured); paying it on
        # answers only keeps the next-question commits fast.
        cursor.execute("PRAGMA synchronous=NORMAL")
        _record.info["synchronous"] = "NORMAL"
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()
        dbapi_connection.writer = writer

    @event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:  # type: ignore[no-untyped-def]
        # A transaction that will write takes the write lock up front (see
        # begin_write): first the WriterLock, then SQLite's own, so writers wait in line
        # instead of failing when a read turns into a write.
        options = connection.get_execution_options()
        # SQLite refuses to change the safety level inside a transaction: set it first.
        level = "FULL" if options.get("sqlite_durable", False) else "NORMAL"
        if connection.info.get("synchronous") != level:
            run_text(connection, f"PRAGMA synchronous={level}")
            connection.info["synchronous"] = level
        immediate = options.get("sqlite_immediate", False)
        if not immediate:
            run_text(connection, "BEGIN")
            return
        locked = connection.connection.dbapi_connection
        try:
            locked.lock_writer()
        except sqlite3.OperationalError as error:
            raise OperationalError("BEGIN IMMEDIATE", None, error) from error
        try:
            run_text(connection, "BEGIN IMMEDIATE")
        except BaseException:
            locked.unlock_writer()
            raise

    return engine


class WriterLock:
    """The writer lock of one SQLite database in this process: a thread lock, then
    ``flock`` on ``<database>-writer`` for the other processes.

    SQLite lets one writer at a time in, and one that finds the database locked polls: its
    busy handler sleeps 1, 2, 5, 10 … ms between tries, so with two server processes a
    writer slept for milliseconds after the lock was free and two processes served no
    more round trips than one (README, worker throughput). A writer waiting here is woken
    the moment the lock is released (the kernel's ``flock``, the interpreter's lock).
    SQLite's own lock stays the guarantee; this one only makes the wait for it short.

    Threads wait at most :data:`WRITER_WAIT_S`, as long as SQLite's busy timeout, so a
    thread that opened a second write transaction while its first is open fails as it did
    with SQLite alone rather than waiting forever. A process that dies releases its
    ``flock`` with its files."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.threads = threading.Lock()
        self.file: int | None = None  # opened at first use, in each process

    def acquire(self) -> None:
        if not self.threads.acquire(timeout=WRITER_WAIT_S):
            raise sqlite3.OperationalError(f"database is locked ({WRITER_WAIT_S:.0f} s)")
        try:
            if self.file is None:
                self.file = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self.file, fcntl.LOCK_EX)  # type: ignore[arg-type]
        except BaseException:
            self.threads.release()
            raise

    def release(self) -> None:
        fcntl.flock(self.file, fcntl.LOCK_UN)  # type: ignore[arg-type]
        self.threads.release()


WRITER_WAIT_S = 30.0  # SQLite's busy timeout (PRAGMA busy_timeout)
_writer_locks: dict[str, WriterLock] = {}
_writer_locks_made = threading.Lock()


def _forked() -> None:
    """In a forked child, which has one thread: its locks as new. The parent's threads
    that held them are not here to release them, and a ``flock`` on the parent's open
    file would be shared with the parent rather than exclude it."""
    global _writer_locks_made
    _writer_locks_made = threading.Lock()
    for lock in _writer_locks.values():
        lock.threads = threading.Lock()
        lock.file = None


os.register_at_fork(after_in_child=_forked)


def writer_lock(database: str) -> WriterLock:
    """The one :class:`WriterLock` of the SQLite file ``database`` in this process."""
    path = os.path.realpath(database) + "-writer"
    with _writer_locks_made:
        return _writer_locks.setdefault(path, WriterLock(path))


class WriterLockedConnection(sqlite3.Connection):
    """A SQLite connection whose write transactions hold its database's
    :class:`WriterLock` from before ``BEGIN IMMEDIATE`` until they commit or roll back."""

    writer: WriterLock | None = None  # None: a database in memory
    _holding = False

    def lock_writer(self) -> None:
        if self.writer is not None:
            self.writer.acquire()
            self._holding = True

    def unlock_writer(self) -> None:
        if self._holding:
            self._holding = False
            self.writer.release()  # type: ignore[union-attr]

    def commit(self) -> None:
        try:
            super().commit()
        finally:
            self.unlock_writer()

    def rollback(self) -> None:
        try:
            super().rollback()
        finally:
            self.unlock_writer()

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.unlock_writer()


def _ping_when_idle(engine: Engine) -> None:
    """Check a pooled connection before lending it only if it sat unused for
    :data:`IDLE_PING_S`: a server restarted or a connection dropped while the pool was idle
    is then found and replaced, as ``pool_pre_ping`` would, but a busy server does not pay a
    round trip to the database on every request (profiled: the ping was 6% of the
    instructions and 15% of the wall time of a worker's round trip on PostgreSQL). A
    connection lost while in use still fails that request (503) and the pool starts anew
    (SQLAlchemy's handling of disconnects)."""

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["returned_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        returned_at = record.info.get("returned_at")
        if returned_at is None or time.monotonic() - returned_at < IDLE_PING_S:
            return  # new, or in use a moment ago
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as error:
            raise DisconnectionError from error  # the pool connects anew and retries
        if not alive:
            raise DisconnectionError


@lru_cache
def get_engine(url: str) -> Engine:
    return make_engine(url)


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False)


def begin_write(db: Session, *, durable: bool = False) -> None:
    """End the current (read) transaction and start one that will write.

    On SQLite the new transaction holds the database's write lock from its first
    statement; on PostgreSQL it is an ordinary transaction and callers lock the
    rows they change. Objects already loaded stay usable (``expire_on_commit``
    is off) but may be stale: refresh what the write depends on.

    ``durable=True`` is for transactions that store answers: on SQLite their commit
    waits for the disk (synchronous=FULL), so it survives a power loss, as every
    PostgreSQL commit does.
    """
    if db.in_transaction():
        db.commit()
    db.connection(execution_options={"sqlite_immediate": True, "sqlite_durable": durable})
    db.info["write_transaction"] = db.get_transaction()


def writing(db: Session) -> bool:
    """Whether ``db``'s current transaction was started by :func:`begin_write`."""
    return db.in_transaction() and db.info.get("write_transaction") is db.get_transaction()


def ensure_write(db: Session, *, durable: bool = False) -> None:
    """:func:`begin_write`, unless the current transaction already is a writing one.

    The worker's hot routes start writing before their first read, so that what they read
    is current (on SQLite, read under the write lock) and no read transaction has to end.
    ``durable`` only takes effect when a transaction starts here: a caller that stores
    answers starts its transaction with it (see ``answer_and_next``).
    """
    if not writing(db):
        begin_write(db, durable=durable)

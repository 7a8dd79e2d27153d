"""SQLite's writer lock across threads and processes (``app.db.session.WriterLock``): a write
transaction holds ``<database>-writer`` until it ends however it ends, a writer elsewhere
waits for it and then goes in, and a thread never waits longer than SQLite's busy timeout."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from app.db import session as db_session
from app.db.session import begin_write, make_engine, writer_lock


@pytest.fixture
def database(tmp_path: Path) -> Iterator[tuple[Engine, Path]]:
    path = tmp_path / "locks.db"
    engine = make_engine(f"sqlite:///{path}")
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE marks (who TEXT)"))
    yield engine, path
    engine.dispose()


def held_elsewhere(path: Path) -> bool:
    """Whether another open file of the lock (as another process has) cannot take it now."""
    other = os.open(f"{path}-writer", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(other)  # closing the file releases a lock it took
    return False


@pytest.mark.parametrize("end", ["commit", "rollback", "close"])
def test_a_write_transaction_holds_the_lock_until_it_ends(database, end: str) -> None:
    engine, path = database
    db = Session(engine)
    db.execute(text("SELECT count(*) FROM marks"))
    assert not held_elsewhere(path)  # a read takes no writer lock
    begin_write(db)
    db.execute(text("INSERT INTO marks VALUES ('a')"))
    assert held_elsewhere(path)
    getattr(db, end)()
    assert not held_elsewhere(path)
    begin_write(db)  # and the next write takes it again
    assert held_elsewhere(path)
    db.close()
    assert not held_elsewhere(path)
    with Session(engine) as check:
        stored = check.execute(text("SELECT count(*) FROM marks")).scalar()
    assert stored == (1 if end == "commit" else 0)


def test_a_writer_in_another_process_waits_then_goes_in(database) -> None:
    engine, path = database
    with Session(engine) as db:
        begin_write(db)
        db.execute(text("INSERT INTO marks VALUES ('first')"))
        other = subprocess.Popen(
            [sys.executable, "-c", _OTHER_WRITER, str(path)],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert other.stdout is not None
        assert other.stdout.readline().strip() == "waiting"
        time.sleep(0.3)
        assert other.poll() is None  # it cannot write while this transaction is open
        db.commit()
    assert other.wait(timeout=60) == 0
    with Session(engine) as check:
        rows = check.execute(text("SELECT who FROM marks ORDER BY rowid")).scalars().all()
    assert rows == ["first", "second"]


_OTHER_WRITER = """
import sys
from sqlalchemy import text
from sqlalchemy.orm import Session
from app.db.session import begin_write, make_engine

with Session(make_engine(f"sqlite:///{sys.argv[1]}")) as db:
    print("waiting", flush=True)
    begin_write(db)
    db.execute(text("INSERT INTO marks VALUES ('second')"))
    db.commit()
"""


def test_a_thread_waits_no_longer_than_the_busy_timeout(database, monkeypatch) -> None:
    """A second write transaction opened while the first is open in the same thread fails
    (503 through the app's handler) as it did with SQLite's busy timeout alone."""
    engine, _path = database
    monkeypatch.setattr(db_session, "WRITER_WAIT_S", 0.2)
    with Session(engine) as first, Session(engine) as second:
        begin_write(first)
        first.execute(text("INSERT INTO marks VALUES ('first')"))
        with pytest.raises(OperationalError, match="database is locked"):
            begin_write(second)
        first.commit()
        begin_write(second)  # free again once the first has ended
        second.execute(text("INSERT INTO marks VALUES ('second')"))
        second.commit()
        assert second.execute(text("SELECT count(*) FROM marks")).scalar() == 2


def test_a_forked_child_waits_for_its_parent_then_goes_in(database, monkeypatch) -> None:
    """The child inherits neither the parent's hold of the thread lock (it would wait for a
    thread it does not have) nor its open lock file (a ``flock`` on it would be shared with
    the parent, not wait for it). (SQLite itself must not be used across a fork: the
    child takes the lock alone.)"""
    engine, path = database
    monkeypatch.setattr(db_session, "WRITER_WAIT_S", 5.0)
    lock = writer_lock(str(path))
    reader, writer = os.pipe()
    with Session(engine) as db:
        begin_write(db)  # a thread of the parent holds the lock while it forks
        pid = os.fork()
        if pid == 0:
            status = 1
            try:
                entered = threading.Event()

                def write() -> None:
                    lock.acquire()
                    entered.set()

                thread = threading.Thread(target=write)
                thread.start()
                os.write(writer, b"1" if entered.wait(0.5) else b"0")
                thread.join(timeout=30)
                if entered.is_set():
                    lock.release()
                    status = 0
            finally:
                os._exit(status)
        entered_while_held = os.read(reader, 1)
        db.commit()
        _, status = os.waitpid(pid, 0)
    assert entered_while_held == b"0"
    assert os.waitstatus_to_exitcode(status) == 0  # it went in once the parent let go

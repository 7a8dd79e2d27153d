"""Backups of the database while the service runs: SQLite's online backup API, or
``pg_dump`` / ``pg_restore`` for PostgreSQL.

A backup is one file: a SQLite database, or a ``pg_dump`` archive in its custom format. It
is a consistent snapshot taken without stopping the service (SQLite copies under a read
transaction, which WAL lets writers go on beside; ``pg_dump`` reads in one repeatable-read
transaction). Restoring replaces every table of the configured database in one transaction,
then applies the migrations (a backup may come from an older version).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import tempfile
from pathlib import Path

from sqlalchemy.engine import URL, make_url

from app.errors import InvalidInput

SQLITE_MAGIC = b"SQLite format 3\x00"
PG_DUMP_MAGIC = b"PGDMP"


class BackupError(InvalidInput):
    """The backup or restore could not be done; the message says why."""


def backup(database_url: str, path: Path) -> str:
    """Write a snapshot of ``database_url`` to ``path``; the kind of backup written."""
    url = make_url(database_url)
    path = Path(path)
    if path.is_dir():
        raise BackupError(f"{path} is a directory; give the backup file's name")
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written beside the target and renamed: a failed backup never leaves a truncated file.
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    os.close(fd)
    try:
        if url.get_backend_name() == "sqlite":
            kind = "SQLite online backup"
            _sqlite_copy(_sqlite_file(url, must_exist=True), Path(partial))
        else:
            kind = "pg_dump (custom format)"
            _run(["pg_dump", "--format=custom", "--no-owner", f"--file={partial}"], url)
        os.replace(partial, path)
    finally:
        Path(partial).unlink(missing_ok=True)
    return kind


def restore(database_url: str, path: Path) -> None:
    """Replace the contents of ``database_url`` by the backup at ``path``, then migrate."""
    url = make_url(database_url)
    path = Path(path)
    if not path.is_file():
        raise BackupError(f"no backup file at {path}")
    with path.open("rb") as file:
        head = file.read(len(SQLITE_MAGIC))
    sqlite = url.get_backend_name() == "sqlite"
    if head.startswith(PG_DUMP_MAGIC) and sqlite:
        raise BackupError(f"{path} is a PostgreSQL backup (pg_dump); the database is SQLite")
    if head == SQLITE_MAGIC and not sqlite:
        raise BackupError(f"{path} is a SQLite backup; the database is PostgreSQL")
    if not head.startswith(PG_DUMP_MAGIC) and head != SQLITE_MAGIC:
        raise BackupError(f"{path} is not a Triplet Lab backup (neither SQLite nor pg_dump)")
    if sqlite:
        _check_sqlite_backup(path)
        _sqlite_copy(path, _sqlite_file(url, must_exist=False))
    else:
        _pg_restore(url, path)
    from app.db.migrate import upgrade
    from app.db.session import make_engine

    engine = make_engine(database_url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def _sqlite_file(url: URL, *, must_exist: bool) -> Path:
    if not url.database or url.database == ":memory:":
        raise BackupError("the database is in memory; there is nothing to back up")
    file = Path(url.database)
    if must_exist and not file.is_file():
        raise BackupError(f"no database at {file}")
    return file


def _sqlite_copy(source: Path, target: Path) -> None:
    """Copy with SQLite's online backup API: a consistent snapshot, writers are not stopped."""
    target.parent.mkdir(parents=True, exist_ok=True)
    # Read-only for the source (it may be a backup file someone wants kept as it is).
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(target, timeout=30)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def _check_sqlite_backup(path: Path) -> None:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        ok = connection.execute("PRAGMA quick_check").fetchone()[0]
    except sqlite3.DatabaseError as error:
        raise BackupError(f"{path} is not a readable SQLite database: {error}") from error
    finally:
        connection.close()
    if "alembic_version" not in tables or "answers" not in tables:
        raise BackupError(f"{path} is a SQLite database but not a Triplet Lab backup")
    if ok != "ok":
        raise BackupError(f"{path} is damaged: {ok}")


def _pg_restore(url: URL, path: Path) -> None:
    """The archive as SQL, run by ``psql`` in one transaction after emptying the schema:
    either the database is the backup's, or (on any error) it is left as it was."""
    script = subprocess.run(
        ["pg_restore", "--no-owner", "--no-privileges", "--file=-", str(path)],
        capture_output=True,
        check=False,
    )
    if script.returncode != 0:
        raise BackupError(f"pg_restore could not read {path}: {script.stderr.decode().strip()}")
    reset = b"DROP SCHEMA IF EXISTS public CASCADE;\nCREATE SCHEMA public;\n"
    _run(
        ["psql", "--quiet", "--no-psqlrc", "--single-transaction", "-v", "ON_ERROR_STOP=1"],
        url,
        stdin=reset + script.stdout,
    )


def _run(command: list[str], url: URL, stdin: bytes | None = None) -> None:
    """Run a PostgreSQL client with the connection in libpq's environment variables
    (the password never appears on a command line)."""
    env = {**os.environ}
    for variable, value in (
        ("PGHOST", url.host),
        ("PGPORT", url.port),
        ("PGUSER", url.username),
        ("PGPASSWORD", url.password),
        ("PGDATABASE", url.database),
    ):
        if value is not None:
            env[variable] = str(value)
    try:
        done = subprocess.run(command, env=env, input=stdin, capture_output=True, check=False)
    except FileNotFoundError as error:
        raise BackupError(
            f"{command[0]} is not installed (Debian: apt-get install postgresql-client)"
        ) from error
    if done.returncode != 0:
        raise BackupError(f"{command[0]} failed: {done.stderr.decode().strip()}")

"""Statements of the hot path run on the driver's cursor: SQL written once, no ORM, no Core.

SQLAlchemy's ``Session.execute`` costs several times what SQLite takes to run a small
statement (profiled: compiling-cache lookup, bind processing, result and row objects); the
worker's round trip runs a dozen of them per answer. :func:`run` hands the SQL text to the
driver's cursor through the transaction's connection, so it still runs in the session's
transaction, still fires the engine's ``before_cursor_execute`` listeners (tests count and
read statements with them) and still raises SQLAlchemy's exceptions (``IntegrityError``).

The SQL of a :class:`Statement` is written for PostgreSQL with ``:name`` parameters, every
parameter cast where PostgreSQL could not infer its type. The SQLite text is derived from
it: timestamps and JSON are text there, so their casts are dropped (SQLite would read
``CAST(x AS TIMESTAMPTZ)`` as a number). Values pass as the driver takes them, except that
on SQLite timestamps are written as SQLAlchemy writes them (``2026-01-31 12:00:00.000000``,
UTC, no zone: compared as text) and read back with :func:`timestamp`.
"""

from __future__ import annotations

import re
from collections import namedtuple
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection

_PARAMETER = re.compile(r"(?<![:\w]):(\w+)")
_TEXT_CAST = re.compile(r"CAST\((:\w+) AS (?:TIMESTAMPTZ|JSON)\)")
SQLITE_TIMESTAMP = "%Y-%m-%d %H:%M:%S.%f"  # SQLAlchemy's storage format for SQLite


class Statement:
    """One SQL statement, in each dialect's text, both written with ``:name`` parameters
    (psycopg's ``%(name)s`` are made here). ``sqlite=None``: SQLite runs PostgreSQL's text
    (casts to text types dropped); ``postgresql=None``: a statement only SQLite runs, and
    ``sqlite=""`` one only PostgreSQL runs."""

    __slots__ = ("postgresql", "sqlite")

    def __init__(self, postgresql: str | None, sqlite: str | None = None) -> None:
        self.postgresql = None
        if postgresql is not None:
            self.postgresql = _PARAMETER.sub(r"%(\1)s", postgresql.replace("%", "%%"))
        if sqlite is None:
            sqlite = postgresql
        self.sqlite = _TEXT_CAST.sub(r"\1", sqlite) if sqlite else None

    def text(self, dialect: str) -> str:
        sql = self.postgresql if dialect == "postgresql" else self.sqlite
        if sql is None:
            raise ValueError(f"this statement has no {dialect} text")
        return sql


def run(connection: Connection, statement: Statement, params: dict[str, Any]) -> Any:
    """Run ``statement`` on ``connection`` (a session's: ``db.connection()``), in its
    transaction; the driver's cursor, to fetch from (see :func:`first`, :func:`rows`) or
    close."""
    dialect = connection.dialect.name
    if dialect == "sqlite":
        params = {
            k: v.strftime(SQLITE_TIMESTAMP) if type(v) is datetime else v for k, v in params.items()
        }
    cursor = connection.connection.cursor()
    # SQLAlchemy's own way to run a text on a cursor: listeners, logging, its exceptions.
    connection._cursor_execute(cursor, statement.text(dialect), params)
    return cursor


def timestamp(value: datetime | str | None) -> datetime | None:
    """A timestamp read by :func:`run` (SQLite: text), as the ORM reads it: UTC-aware."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


_row_types: dict[tuple[str, ...], type] = {}


def _row_type(cursor: Any) -> type:
    names = tuple(column[0] for column in cursor.description)
    row_type = _row_types.get(names)
    if row_type is None:
        row_type = _row_types[names] = namedtuple("Row", names)
    return row_type


def first(cursor: Any) -> Any:
    """The cursor's first row as a named tuple (columns by name), or None; closes it."""
    row = cursor.fetchone()
    result = None if row is None else _row_type(cursor)._make(row)
    cursor.close()
    return result


def rows(cursor: Any) -> Sequence[Any]:
    """Every row of the cursor as named tuples; closes it."""
    fetched = cursor.fetchall()
    result = [_row_type(cursor)._make(row) for row in fetched] if fetched else []
    cursor.close()
    return result

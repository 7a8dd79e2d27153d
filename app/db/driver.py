"""The worker round trip's statements, run as the driver takes them.

A :class:`Statement` is written once with ``:name`` parameters, for PostgreSQL, every
parameter cast where PostgreSQL could not infer its type; SQLite's text drops the casts to
text types (timestamps and JSON are text there: it would read ``CAST(x AS TIMESTAMPTZ)`` as a
number). On SQLite timestamps are written as SQLAlchemy writes them (``2026-01-31
12:00:00.000000``, UTC, no zone: compared as text) and read back with :func:`timestamp`.

In a SQLAlchemy transaction (:func:`run`, :func:`first`, :func:`rows`) a statement runs on the
driver's cursor (``app.internals.cursor_execute``), or with ``TRIPLETLAB_PRIVATE_CURSOR`` off
through ``Connection.execute(text(...))``; either way in the session's transaction, with
SQLAlchemy's listeners and exceptions. On the event loop's own PostgreSQL connections
(:func:`rows_async`) it runs on psycopg's ``AsyncRawCursor``, which sends the server's own
``$1, $2, …`` text as it is: psycopg's usual cursor parses a query for its ``%(name)s``
parameters, again on every run for a text over 4 kB (profiled as the largest cost of a round
trip on PostgreSQL).
"""

from __future__ import annotations

import re
from collections import namedtuple
from datetime import UTC, datetime
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
from sqlalchemy import Connection, text

from app import internals

_PARAMETER = re.compile(r"(?<![:\w]):(\w+)")
_TEXT_CAST = re.compile(r"CAST\((:\w+) AS (?:TIMESTAMPTZ|JSON)\)")
SQLITE_TIMESTAMP = "%Y-%m-%d %H:%M:%S.%f"  # SQLAlchemy's storage format for SQLite


class Statement:
    """One statement in each dialect's text. ``sqlite=None``: SQLite runs PostgreSQL's text
    (its casts to text types dropped); ``postgresql=None``: SQLite only; ``sqlite=""``:
    PostgreSQL only."""

    __slots__ = ("names", "numbered", "postgresql", "row_types", "sqlite")

    def __init__(self, postgresql: str | None, sqlite: str | None = None) -> None:
        self.postgresql = postgresql
        self.numbered = None  # PostgreSQL's text with $1, $2, … for the raw cursors
        self.names: tuple[str, ...] = ()  # the parameters of $1, $2, …
        if postgresql is not None:
            names: list[str] = []

            def number(match: re.Match[str]) -> str:
                if match[1] not in names:
                    names.append(match[1])
                return f"${names.index(match[1]) + 1}"

            self.numbered = _PARAMETER.sub(number, postgresql)
            self.names = tuple(names)
        if sqlite is None:
            sqlite = postgresql
        self.sqlite = _TEXT_CAST.sub(r"\1", sqlite) if sqlite else None
        self.row_types: dict[str, type] = {}  # dialect -> the named tuple of its rows

    def text(self, dialect: str) -> str:
        sql = self.postgresql if dialect == "postgresql" else self.sqlite
        if sql is None:
            raise ValueError(f"this statement has no {dialect} text")
        return sql


def bind(connection: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` as the driver of ``connection`` takes them (SQLite: timestamps as text)."""
    if connection.dialect.name != "sqlite":
        return params
    return {
        k: v.strftime(SQLITE_TIMESTAMP) if type(v) is datetime else v for k, v in params.items()
    }


def _cursor(connection: Connection, statement: Statement, params: dict[str, Any]) -> Any:
    """The driver's cursor that ran ``statement`` (``app.internals.cursor_execute``)."""
    dialect = connection.dialect.name
    if dialect == "postgresql":
        cursor = _raw_cursor(connection.connection.driver_connection)
        values: Any = tuple(params[name] for name in statement.names)
        internals.cursor_execute(connection, cursor, statement.numbered, values)
        return cursor
    cursor = connection.connection.cursor()
    internals.cursor_execute(connection, cursor, statement.text(dialect), bind(connection, params))
    return cursor


_raw_cursors: WeakKeyDictionary[psycopg.Connection[Any], psycopg.RawCursor[Any]] = (
    WeakKeyDictionary()
)


def _raw_cursor(driver_connection: psycopg.Connection[Any]) -> psycopg.RawCursor[Any]:
    """The one ``RawCursor`` of a psycopg connection, kept: a cursor's adapters cache which
    loader reads each column type, and a new cursor per statement looked them all up again
    (profiled: ~5 % of the server's interpreter time on PostgreSQL)."""
    cursor = _raw_cursors.get(driver_connection)
    if cursor is None or cursor.closed:
        cursor = _raw_cursors[driver_connection] = psycopg.RawCursor(driver_connection)
    return cursor


def _done(cursor: Any) -> None:
    if not isinstance(cursor, psycopg.RawCursor):
        cursor.close()  # a RawCursor is kept (see _raw_cursor)


def _stock(connection: Connection, statement: Statement, params: dict[str, Any]) -> Any:
    """``statement`` through SQLAlchemy's public ``Connection.execute``."""
    sql = text(statement.text(connection.dialect.name))
    return connection.execute(sql, bind(connection, params))


def run(connection: Connection, statement: Statement, params: dict[str, Any]) -> None:
    """Run ``statement`` on ``connection`` (a session's: ``db.connection()``), in its
    transaction."""
    if not internals.private_cursor():
        _stock(connection, statement, params)
        return
    _done(_cursor(connection, statement, params))


def first(connection: Connection, statement: Statement, params: dict[str, Any]) -> Any:
    """:func:`run`, and its first row (columns by name), or None."""
    if not internals.private_cursor():
        return _stock(connection, statement, params).first()
    cursor = _cursor(connection, statement, params)
    row = cursor.fetchone()
    found = (
        None if row is None else _row_type(connection.dialect.name, statement, cursor)._make(row)
    )
    _done(cursor)
    return found


def rows(connection: Connection, statement: Statement, params: dict[str, Any]) -> list[Any]:
    """:func:`run`, and its rows (columns by name)."""
    if not internals.private_cursor():
        return list(_stock(connection, statement, params))
    cursor = _cursor(connection, statement, params)
    fetched = cursor.fetchall()
    row_type = _row_type(connection.dialect.name, statement, cursor)
    _done(cursor)
    return [row_type._make(row) for row in fetched]


async def rows_async(
    connection: psycopg.AsyncConnection[Any], statement: Statement, params: dict[str, Any]
) -> list[Any]:
    """:func:`rows` on a connection of psycopg's asyncio driver (PostgreSQL, autocommit; see
    ``app.db.loop_connections``), outside SQLAlchemy: psycopg's exceptions, no listeners."""
    cursor = _async_raw_cursors.get(connection)
    if cursor is None or cursor.closed:
        cursor = _async_raw_cursors[connection] = psycopg.AsyncRawCursor(connection)
    await cursor.execute(statement.numbered, [params[n] for n in statement.names])
    fetched = await cursor.fetchall()
    row_type = _row_type("postgresql", statement, cursor)
    return [row_type._make(row) for row in fetched]


_async_raw_cursors: WeakKeyDictionary[psycopg.AsyncConnection[Any], psycopg.AsyncRawCursor[Any]] = (
    WeakKeyDictionary()
)  # as _raw_cursors: a cursor's adapters, looked up once per connection


def _row_type(dialect: str, statement: Statement, cursor: Any) -> type:
    row_type = statement.row_types.get(dialect)
    if row_type is None:
        names = [column[0] for column in cursor.description]
        row_type = statement.row_types[dialect] = namedtuple("Row", names)
    return row_type


def timestamp(value: datetime | str | None) -> datetime | None:
    """A timestamp as read (SQLite: text), as the ORM reads it: UTC-aware."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def run_text(connection: Connection, sql: str) -> None:
    """``sql`` without parameters (``BEGIN``, ``PRAGMA``, ``SAVEPOINT``) in ``connection``'s
    transaction: on the driver's cursor (``exec_driver_sql`` cost more than SQLite takes to
    begin, profiled), or stock."""
    if not internals.private_cursor():
        connection.exec_driver_sql(sql)
        return
    cursor = connection.connection.cursor()
    internals.cursor_execute(connection, cursor, sql, ())
    cursor.close()

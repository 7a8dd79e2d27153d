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

import json
import re
from collections import namedtuple
from datetime import UTC, datetime
from typing import Any
from weakref import WeakKeyDictionary

import psycopg
from sqlalchemy import JSON, Connection
from sqlalchemy.orm import Session, make_transient_to_detached
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.instrumentation import manager_of_class

from app.db.models import Base, UTCDateTime

_PARAMETER = re.compile(r"(?<![:\w]):(\w+)")
_TEXT_CAST = re.compile(r"CAST\((:\w+) AS (?:TIMESTAMPTZ|JSON)\)")
SQLITE_TIMESTAMP = "%Y-%m-%d %H:%M:%S.%f"  # SQLAlchemy's storage format for SQLite


class Statement:
    """One SQL statement, in each dialect's text, both written with ``:name`` parameters.
    ``sqlite=None``: SQLite runs PostgreSQL's text (casts to text types dropped);
    ``postgresql=None``: a statement only SQLite runs, and ``sqlite=""`` one only PostgreSQL
    runs.

    PostgreSQL's text gets the server's own ``$1, $2, …`` parameters, run by psycopg's
    ``RawCursor``, which sends the text as it is: its usual cursor parses every query for
    its ``%(name)s`` parameters, and does it again on every run for a text longer than 4 kB
    (``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``; the answer's statement is 5.5 kB),
    profiled as the largest cost of a round trip on PostgreSQL."""

    __slots__ = ("names", "postgresql", "row_types", "sqlite")

    def __init__(self, postgresql: str | None, sqlite: str | None = None) -> None:
        self.postgresql = None
        self.names: tuple[str, ...] = ()  # the parameters of $1, $2, …
        if postgresql is not None:
            names: list[str] = []

            def number(match: re.Match[str]) -> str:
                if match[1] not in names:
                    names.append(match[1])
                return f"${names.index(match[1]) + 1}"

            self.postgresql = _PARAMETER.sub(number, postgresql)
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


class _Bound(dict):  # type: ignore[type-arg]
    """Parameters :func:`bind` made ready for SQLite's driver: not converted again."""

    __slots__ = ()


def bind(connection: Connection, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` as the driver of ``connection`` takes them (SQLite: timestamps as text).
    :func:`run` does it; a step that runs several statements with the same values may do
    it once first, and add values that need no converting (numbers, text) to what it
    returns: :func:`run` then passes them as they are (converting them again for each
    statement was a tenth of SQLite's writer hold per answer, profiled)."""
    if connection.dialect.name != "sqlite" or type(params) is _Bound:
        return params
    return _Bound(
        (k, v.strftime(SQLITE_TIMESTAMP) if type(v) is datetime else v) for k, v in params.items()
    )


def _cursor(connection: Connection, statement: Statement, params: dict[str, Any]) -> Any:
    """The cursor that ran ``statement``; hand it to :func:`_done` once read."""
    dialect = connection.dialect.name
    values: Any
    if dialect == "postgresql":
        cursor = _raw_cursor(connection.connection.driver_connection)
        values = tuple(params[name] for name in statement.names)
    else:
        cursor = connection.connection.cursor()
        values = bind(connection, params)
    execute(connection, cursor, statement.text(dialect), values)
    return cursor


_raw_cursors: WeakKeyDictionary[psycopg.Connection[Any], psycopg.RawCursor[Any]] = (
    WeakKeyDictionary()
)


def _raw_cursor(driver_connection: psycopg.Connection[Any]) -> psycopg.RawCursor[Any]:
    """The one ``RawCursor`` of a psycopg connection, kept for its statements: a cursor's
    adapters cache which loader reads each column type and which dumper writes each
    parameter, and a new cursor per statement looked them all up again (profiled: ~5 % of
    the server's interpreter time on PostgreSQL). A connection is used by one thread at a
    time, and so is its cursor; its result is the client's copy, dropped by the next run."""
    cursor = _raw_cursors.get(driver_connection)
    if cursor is None or cursor.closed:
        cursor = _raw_cursors[driver_connection] = psycopg.RawCursor(driver_connection)
    return cursor


def _done(cursor: Any) -> None:
    """Close a cursor of :func:`_cursor` (PostgreSQL's is kept: see :func:`_raw_cursor`)."""
    if not isinstance(cursor, psycopg.RawCursor):
        cursor.close()


def execute(connection: Connection, cursor: Any, sql: str, values: Any = ()) -> None:
    """``sql`` on the driver's ``cursor`` of ``connection``, as SQLAlchemy runs a text on a
    cursor: its listeners, logging and exceptions (the one use of its private
    ``Connection._cursor_execute``)."""
    connection._cursor_execute(cursor, sql, values)


def run_text(connection: Connection, sql: str) -> None:
    """Run ``sql``, without parameters, on the driver's cursor (``BEGIN``, ``PRAGMA``,
    ``SAVEPOINT``: ``exec_driver_sql`` cost more than SQLite takes to begin, profiled)."""
    cursor = connection.connection.cursor()
    execute(connection, cursor, sql)
    cursor.close()


def run(connection: Connection, statement: Statement, params: dict[str, Any]) -> None:
    """Run ``statement`` on ``connection`` (a session's: ``db.connection()``), in its
    transaction."""
    _done(_cursor(connection, statement, params))


def first(connection: Connection, statement: Statement, params: dict[str, Any]) -> Any:
    """:func:`run`, and its first row as a named tuple (columns by name), or None."""
    cursor = _cursor(connection, statement, params)
    row = cursor.fetchone()
    dialect = connection.dialect.name
    result = None if row is None else _row_type(dialect, statement, cursor)._make(row)
    _done(cursor)
    return result


def rows(connection: Connection, statement: Statement, params: dict[str, Any]) -> list[Any]:
    """:func:`run`, and its rows as named tuples."""
    cursor = _cursor(connection, statement, params)
    fetched = cursor.fetchall()
    row_type = _row_type(connection.dialect.name, statement, cursor)
    _done(cursor)
    return [row_type._make(row) for row in fetched]


async def _cursor_async(
    connection: psycopg.AsyncConnection[Any], statement: Statement, params: dict[str, Any]
) -> psycopg.AsyncRawCursor[Any]:
    cursor = _async_raw_cursors.get(connection)
    if cursor is None or cursor.closed:
        cursor = _async_raw_cursors[connection] = psycopg.AsyncRawCursor(connection)
    await cursor.execute(statement.text("postgresql"), [params[n] for n in statement.names])
    return cursor


async def run_async(
    connection: psycopg.AsyncConnection[Any], statement: Statement, params: dict[str, Any]
) -> None:
    """:func:`run` on a connection of psycopg's asyncio driver (PostgreSQL; see
    ``app.db.loop_connections``), outside SQLAlchemy: psycopg's exceptions, no listeners."""
    await _cursor_async(connection, statement, params)


async def first_async(
    connection: psycopg.AsyncConnection[Any], statement: Statement, params: dict[str, Any]
) -> Any:
    """:func:`first` as :func:`run_async` runs a statement."""
    cursor = await _cursor_async(connection, statement, params)
    row = await cursor.fetchone()
    return None if row is None else _row_type("postgresql", statement, cursor)._make(row)


async def rows_async(
    connection: psycopg.AsyncConnection[Any], statement: Statement, params: dict[str, Any]
) -> list[Any]:
    """:func:`rows` as :func:`run_async` runs a statement."""
    cursor = await _cursor_async(connection, statement, params)
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
    """A timestamp read by :func:`run` (SQLite: text), as the ORM reads it: UTC-aware."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value).replace(tzinfo=UTC)


def columns(cls: type[Base], prefix: str = "") -> str:
    """The columns of ``cls``'s table for a SELECT list (``prefix``: aliased with it)."""
    table = cls.__tablename__
    return ", ".join(
        f'{table}."{c.name}"' + (f' AS "{prefix}{c.name}"' if prefix else "")
        for c in cls.__table__.columns
    )


def loaded(db: Session, cls: type[Base], values: dict[str, Any], dialect: str) -> Any:
    """The persistent object of ``cls`` with these column ``values`` (all of them, as read
    by :func:`run`), as if the ORM had loaded it (populating an object it holds already),
    without its loading machinery (profiled: it cost more than SQLite's statement). Changes
    to the object are flushed as usual; call ``db.flush()`` before the read if some may be
    pending."""
    if dialect == "sqlite":
        for name in _json_columns(cls):
            if values[name] is not None:
                values[name] = json.loads(values[name])
        for name in _timestamp_columns(cls):
            values[name] = timestamp(values[name])
    held = db.identity_map.get(db.identity_key(cls, values["id"]))
    if held is not None:
        known = held.__dict__
        for name, value in values.items():
            if name not in known or known[name] != value:
                set_committed_value(held, name, value)
        return held
    # Built as the ORM builds what it loads: the values put in place, not set one by one
    # through the attributes' events (as the constructor does), then marked as read.
    instance = manager_of_class(cls).new_instance()
    instance.__dict__.update(values)
    make_transient_to_detached(instance)  # its values committed, not changes; its identity
    db.add(instance)
    return instance


_column_kinds: dict[type[Base], tuple[list[str], list[str]]] = {}


def _kinds(cls: type[Base]) -> tuple[list[str], list[str]]:
    kinds = _column_kinds.get(cls)
    if kinds is None:
        table_columns = cls.__table__.columns
        kinds = _column_kinds[cls] = (
            [c.name for c in table_columns if isinstance(c.type, JSON)],
            [c.name for c in table_columns if isinstance(c.type, UTCDateTime)],
        )
    return kinds


def _json_columns(cls: type[Base]) -> list[str]:
    return _kinds(cls)[0]


def _timestamp_columns(cls: type[Base]) -> list[str]:
    return _kinds(cls)[1]

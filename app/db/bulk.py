"""Insert many rows at the driver's speed, inside the caller's transaction.

An import of two million answers through SQLAlchemy's executemany spends most of its time
in Python, per row and per value, while it holds SQLite's one write lock (every worker's
answer waits) and the interpreter lock. Here each column's bind processor is looked up once
and applied only where the column has one (JSON, timestamps), and the rows go to the
driver's ``executemany`` as tuples: about eight times faster on SQLite (200,000 answers
into a fresh file: 3.0 s against 23.3 s through ``insert(Answer)``, one run of a throwaway
script at load average 25, so the ratio is the figure to keep).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.orm import Session

CHUNK_ROWS = 20_000


def prepare_insert(
    db: Session, table: Table, columns: Sequence[str], rows: Iterable[tuple]
) -> tuple[str, list[tuple]]:
    """The statement and the rows as the driver takes them (JSON encoded, timestamps
    formatted): the costly part of an insert, which needs no lock."""
    dialect = db.get_bind().dialect
    processors = []
    for name in columns:
        column_type = table.c[name].type
        processors.append(column_type.dialect_impl(dialect).bind_processor(dialect))
    converting = [(i, p) for i, p in enumerate(processors) if p is not None]
    quoted = ", ".join(dialect.identifier_preparer.quote(name) for name in columns)
    mark = "?" if dialect.paramstyle == "qmark" else "%s"  # else format / pyformat (psycopg)
    marks = ", ".join(mark for _ in columns)
    table_name = dialect.identifier_preparer.format_table(table)
    statement = f"INSERT INTO {table_name} ({quoted}) VALUES ({marks})"
    if not converting:
        return statement, list(rows)
    prepared = []
    for row in rows:
        values: list[Any] = list(row)
        for i, process in converting:
            if values[i] is not None:
                values[i] = process(values[i])
        prepared.append(tuple(values))
    return statement, prepared


def bind_value(db: Session, table: Table, column: str, value: Any) -> Any:
    """``value`` as the driver takes it for ``table.column`` (to encode a constant once)."""
    dialect = db.get_bind().dialect
    process = table.c[column].type.dialect_impl(dialect).bind_processor(dialect)
    return value if process is None else process(value)


def execute_insert(db: Session, statement: str, rows: list[tuple]) -> int:
    """Run a :func:`prepare_insert` statement over ``rows`` in the current transaction."""
    connection = db.connection()
    for start in range(0, len(rows), CHUNK_ROWS):
        connection.exec_driver_sql(statement, rows[start : start + CHUNK_ROWS])
    return len(rows)

"""questions, queries, answers: question shapes (odd-one-out, ranked grids)

The ``kind`` of a question, a query and an answer widens to 12 characters (``odd_one_out``);
questions and queries get ``objects`` (every object of a shaped question, as JSON: a
question's in canonical order, a query's in the order shown) and ``k`` (a ranked grid's
picks); answers get ``objects`` (as shown) and ``choices`` (a ranked grid's picks in order).
Triplets and pairs leave the new columns NULL: ``o1``…``o3`` and ``a``…``c`` say it all, and
today's rows stay as they are.

PostgreSQL widens the columns with ALTER COLUMN TYPE (a VARCHAR widened is not rewritten).
SQLite has no ALTER COLUMN: its declared type is edited in the schema text, the documented
way for a change that leaves the stored format alone (VARCHAR(10) and VARCHAR(12) are both
TEXT affinity, and SQLite checks no length), never a batch copy of the table (on SQLite,
dropping the old table would delete or unlink the rows that reference it through their
foreign keys, as in 0002_throughput). New columns are plain ADD COLUMN on both.

Revision ID: 0006_shapes
Revises: 0005_reliability
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_shapes"
down_revision: str | None = "0005_reliability"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("questions", "queries", "answers")
COLUMNS = {
    "questions": (("objects", sa.JSON()), ("k", sa.SmallInteger())),
    "queries": (("objects", sa.JSON()), ("k", sa.SmallInteger())),
    "answers": (("objects", sa.JSON()), ("choices", sa.JSON())),
}


def _kind_length(old: int, new: int) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        for table in TABLES:
            op.alter_column(
                table, "kind", type_=sa.String(length=new), existing_type=sa.String(length=old),
                existing_nullable=False,
            )  # fmt: skip
        return
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar()
    bind.exec_driver_sql("PRAGMA writable_schema=ON")
    for table in TABLES:
        bind.execute(
            sa.text(
                "UPDATE sqlite_master SET sql = replace(sql, :old, :new) "
                "WHERE type = 'table' AND name = :table"
            ),
            {"old": f"kind VARCHAR({old})", "new": f"kind VARCHAR({new})", "table": table},
        )
    bind.exec_driver_sql(f"PRAGMA schema_version={int(version) + 1}")
    bind.exec_driver_sql("PRAGMA writable_schema=OFF")


def upgrade() -> None:
    _kind_length(10, 12)
    for table, columns in COLUMNS.items():
        for name, type_ in columns:
            op.add_column(table, sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    # A shaped question's rows cannot be told as triplets or pairs: they go with the shapes.
    bind = op.get_bind()
    for table in ("answers", "queries", "questions"):
        bind.execute(sa.text(f"DELETE FROM {table} WHERE kind NOT IN ('triplet', 'pair')"))
    for table, columns in COLUMNS.items():
        for name, _ in columns:
            op.drop_column(table, name)
    _kind_length(12, 10)

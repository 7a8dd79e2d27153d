"""imports: uploads written in short transactions, hidden until they end

Revision ID: 0003_imports
Revises: 0002_comprf
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_imports"
down_revision: str | None = "0002_comprf"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "imports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("first_index", sa.Integer(), nullable=True),
        sa.Column("n_rows", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_imports_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_imports")),
        sqlite_autoincrement=True,
    )
    op.create_index(op.f("ix_imports_project_id"), "imports", ["project_id"])
    op.add_column("answers", sa.Column("import_id", sa.BigInteger(), nullable=True))
    op.create_index(
        "ix_answers_import_id",
        "answers",
        ["import_id"],
        sqlite_where=sa.text("import_id IS NOT NULL"),
        postgresql_where=sa.text("import_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_answers_import_id", table_name="answers")
    with op.batch_alter_table("answers") as batch:
        batch.drop_column("import_id")
    op.drop_index(op.f("ix_imports_project_id"), table_name="imports")
    op.drop_table("imports")

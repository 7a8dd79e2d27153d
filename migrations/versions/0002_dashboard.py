"""dashboard: API keys' last use, dashboard sign-in sessions

Revision ID: 0002_dashboard
Revises: 0001
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_dashboard"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "dashboard_sessions",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["key_id"],
            ["api_keys.id"],
            name=op.f("fk_dashboard_sessions_key_id_api_keys"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dashboard_sessions")),
    )
    op.create_index(
        op.f("ix_dashboard_sessions_key_id"), "dashboard_sessions", ["key_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_dashboard_sessions_key_id"), table_name="dashboard_sessions")
    op.drop_table("dashboard_sessions")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("last_used_at")

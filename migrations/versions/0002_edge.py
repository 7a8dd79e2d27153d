"""sessions.resume_hash (what resumes a session) and sessions.platform_params

Revision ID: 0002_edge
Revises: 0001
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_edge"
down_revision: str | None = "0002_dashboard"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Sessions opened before this revision have none: they are never resumed, a returning
    # participant gets a new session (their answers stay theirs).
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("resume_hash", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("platform_params", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("platform_params")
        batch.drop_column("resume_hash")

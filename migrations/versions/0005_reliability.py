"""participants: the reliability learned from the answers, with its interval

Three nullable columns, written by the reliability model's training job
(``app.services.reliability``) off the request path; NULL until a model of the participant
exists. A plain ADD COLUMN on both databases: no row is rewritten or lost.

Revision ID: 0005_reliability
Revises: 0004_one_query_per_question
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_reliability"
down_revision: str | None = "0004_one_query_per_question"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS = ("reliability", "reliability_low", "reliability_high")


# Plain ADD / DROP COLUMN on both databases (SQLite has both since 3.35), never a batch copy
# of the table: on SQLite, dropping the old participants table would empty or unlink the
# rows that reference it through their foreign keys (as in 0002_throughput).


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column("participants", sa.Column(name, sa.Float(), nullable=True))


def downgrade() -> None:
    for name in COLUMNS:
        op.drop_column("participants", name)

"""quality counters on the participant row

Revision ID: 0002_throughput
Revises: 0001
Create Date: 2026-11-23

Each answer adds to its participant's counters (in the answer's transaction), so the
automatic quality review reads one row instead of re-reading every answer. Existing
participants are counted from their answers here, with their project's current plan.
"""

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_throughput"
down_revision: str | None = "0002_edge"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COUNTERS = (
    "n_answers",
    "gold_answers",
    "gold_correct",
    "fast_answers",
    "left_answers",
    "sided_answers",
    "repeats",
    "consistent_repeats",
)


# Plain ADD / DROP COLUMN on both databases (SQLite has both since 3.35), never a batch
# copy of the table: on SQLite, dropping the old participants table would empty or unlink
# the rows that reference it (sessions, queries, answers) through their foreign keys.


def upgrade() -> None:
    for name in COUNTERS:
        op.add_column(
            "participants", sa.Column(name, sa.Integer(), server_default="0", nullable=False)
        )
    bind = op.get_bind()
    projects = bind.execute(sa.text("SELECT id, plan FROM projects")).all()
    for project_id, plan in projects:
        if isinstance(plan, str):  # SQLite hands JSON back as text
            plan = json.loads(plan)
        min_ms = int((plan or {}).get("min_answer_ms", 0) or 0)
        bind.execute(
            sa.text(
                """
                UPDATE participants SET
                  n_answers = (SELECT count(*) FROM answers a
                               WHERE a.participant_id = participants.id),
                  gold_answers = (SELECT count(a.gold_correct) FROM answers a
                                  WHERE a.participant_id = participants.id),
                  gold_correct = (SELECT count(*) FROM answers a
                                  WHERE a.participant_id = participants.id AND a.gold_correct),
                  fast_answers = (SELECT count(*) FROM answers a
                                  WHERE a.participant_id = participants.id
                                  AND coalesce(a.client_ms, a.server_ms) < :min_ms),
                  left_answers = (SELECT count(*) FROM answers a
                                  WHERE a.participant_id = participants.id AND a.position = -1),
                  sided_answers = (SELECT count(*) FROM answers a
                                   WHERE a.participant_id = participants.id
                                   AND a.position IN (-1, 1)),
                  repeats = (SELECT count(a.consistent) FROM answers a
                             WHERE a.participant_id = participants.id),
                  consistent_repeats = (SELECT count(*) FROM answers a
                                        WHERE a.participant_id = participants.id AND a.consistent)
                WHERE project_id = :project
                """
            ),
            {"project": project_id, "min_ms": min_ms},
        )


def downgrade() -> None:
    for name in COUNTERS:
        op.drop_column("participants", name)

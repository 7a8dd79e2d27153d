"""queries: a participant is asked a question once, and again at most once as a repeat

The index on (participant_id, question_id) becomes unique with is_repeat, so the database
itself refuses a second query of a question to one participant, whichever round trip asks:
a round trip on PostgreSQL that claims its next question in the answer's own statement
(``app.services.known_sessions``) reads the participant's queries as of the statement's
start, and relies on this index when another session of the participant races it.

Revision ID: 0004_one_query_per_question
Revises: 0003_imports
Create Date: 2026-11-25
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0004_one_query_per_question"
down_revision: str | None = "0003_imports"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "uq_queries_participant_question",
        "queries",
        ["participant_id", "question_id", "is_repeat"],
        unique=True,
    )
    op.drop_index("ix_queries_participant_question", table_name="queries")


def downgrade() -> None:
    op.create_index("ix_queries_participant_question", "queries", ["participant_id", "question_id"])
    op.drop_index("uq_queries_participant_question", table_name="queries")

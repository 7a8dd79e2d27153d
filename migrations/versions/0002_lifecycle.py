"""job and model ids are never reused on SQLite (AUTOINCREMENT)

SQLite hands out ``max(rowid) + 1`` to a plain ``INTEGER PRIMARY KEY``: after the newest job
was deleted (with its project), the next job took its id, and a client polling
``/api/jobs/{id}`` saw a different job. ``AUTOINCREMENT`` never reuses an id. PostgreSQL's
sequences never did, so nothing changes there.

Revision ID: 0002_lifecycle
Revises: 0001
Create Date: 2026-11-23
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002_lifecycle"
down_revision: str | None = "0002_throughput"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("jobs", "models")


def _rebuild(autoincrement: bool) -> None:
    """Rebuild the tables with or without AUTOINCREMENT (SQLite cannot alter it in place)."""
    if op.get_bind().dialect.name != "sqlite":
        return
    # Dropping the old ``jobs`` table (foreign keys are on, and cannot be switched off inside
    # the migration's transaction) sets ``models.job_id`` to NULL: keep it and put it back.
    op.execute("CREATE TEMP TABLE _model_jobs AS SELECT id, job_id FROM models")
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass
    op.execute(
        "UPDATE models SET job_id = "
        "(SELECT _model_jobs.job_id FROM _model_jobs WHERE _model_jobs.id = models.id)"
    )
    op.execute("DROP TABLE _model_jobs")


def upgrade() -> None:
    _rebuild(autoincrement=True)


def downgrade() -> None:
    _rebuild(autoincrement=False)

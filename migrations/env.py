"""Alembic environment: runs migrations on the URL given by the caller or the settings."""

from __future__ import annotations

from alembic import context

from app.config import get_settings
from app.db.models import Base, UTCDateTime
from app.db.session import make_engine

config = context.config
target_metadata = Base.metadata


def run_migrations() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = config.get_main_option("sqlalchemy.url") or get_settings().database_url
    engine = make_engine(url)
    with engine.connect() as connection:
        _run(connection)
    engine.dispose()


def _render_item(type_: str, obj: object, autogen_context: object) -> str | bool:
    """Write the models' own column types as the plain SQLAlchemy types they store as."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_item=_render_item,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run `tripletlab db upgrade`")
run_migrations()

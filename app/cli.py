"""The ``tripletlab`` command line: one group of thin commands over the services."""

from __future__ import annotations

from typing import Annotated

import typer

from app.config import get_settings

app = typer.Typer(
    help="Triplet Lab: collect human comparisons and learn from them.",
    no_args_is_help=True,
    add_completion=False,
)
db_app = typer.Typer(help="Manage the database schema.", no_args_is_help=True)
keys_app = typer.Typer(help="Manage API keys.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(keys_app, name="keys")


def _engine():  # type: ignore[no-untyped-def]
    from app.db.session import get_engine

    return get_engine(get_settings().database_url)


def _session():  # type: ignore[no-untyped-def]
    from app.db.session import session_factory

    return session_factory(_engine())()


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
) -> None:
    """Apply the Alembic migrations to the configured database."""
    from app.db.migrate import upgrade

    upgrade(_engine(), revision)
    typer.echo(f"database at {revision}: {get_settings().database_url}")


@keys_app.command("create")
def keys_create(
    role: Annotated[str, typer.Option(help="admin or researcher.")] = "researcher",
    name: Annotated[str, typer.Option(help="A note saying whose key this is.")] = "",
) -> None:
    """Create an API key and print it alone on the last line (it is not shown again)."""
    from app.errors import AppError
    from app.services.auth import create_key

    with _session() as db:
        try:
            key, secret = create_key(db, role, name)
        except AppError as error:
            typer.echo(f"error: {error.detail}", err=True)
            raise typer.Exit(2) from error
    typer.echo(f"created {key.role} key #{key.id} ({key.prefix}…); store it now:")
    typer.echo(secret)


@app.command()
def demo() -> None:
    """Create the digits demo project (if it does not exist) and print its worker link."""
    from app.services.demo import DEMO_SLUG, create_demo

    with _session() as db:
        created = create_demo(db)
    settings = get_settings()
    state = "created" if created else "already exists"
    typer.echo(f"demo project {DEMO_SLUG!r} {state}")
    typer.echo(f"worker page: http://{settings.host}:{settings.port}/w/{DEMO_SLUG}")


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default: settings).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: settings).")] = None,
) -> None:
    """Apply migrations, create the first admin key and the demo, then serve HTTP."""
    import uvicorn

    from app.db.migrate import upgrade
    from app.services.auth import ensure_admin_key
    from app.services.demo import DEMO_SLUG, create_demo

    settings = get_settings()
    host = host or settings.host
    port = port or settings.port
    upgrade(_engine())
    with _session() as db:
        secret = ensure_admin_key(db)
        if settings.demo:
            create_demo(db)
    if secret:
        typer.echo("First start: created an admin API key. Store it now; it is not shown again:")
        typer.echo(f"    {secret}")
    typer.echo(f"Triplet Lab on http://{host}:{port}  (API docs: http://{host}:{port}/docs)")
    if settings.demo:
        typer.echo(f"Demo worker page: http://{host}:{port}/w/{DEMO_SLUG}")
    uvicorn.run("app.main:create_app", factory=True, host=host, port=port, log_level="warning")


if __name__ == "__main__":
    app()

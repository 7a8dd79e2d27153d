"""The ``tripletlab`` command line: one group of thin commands over the services."""

from __future__ import annotations

from typing import Annotated

import typer

from app.config import get_settings
from app.training.kinds import kind_names

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


def _parse_params(pairs: list[str]) -> dict:
    import json

    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"expected NAME=VALUE, got {pair!r}")
        try:
            params[name] = json.loads(value)
        except json.JSONDecodeError:
            params[name] = value
    return params


@app.command()
def train(
    project: Annotated[str, typer.Argument(help="Project slug.")],
    kind: Annotated[str, typer.Argument(help=f"One of: {', '.join(kind_names())}.")],
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", help="A training parameter NAME=VALUE (repeatable)."),
    ] = None,
) -> None:
    """Train a model now, in this process, with a progress bar; prints the model's figures."""
    import json

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from app.db.models import Job, Model
    from app.errors import AppError
    from app.services.projects import get_project
    from app.training.jobs import claim_job, create_job
    from app.training.run import run_training

    params = _parse_params(param or [])
    with _session() as db:
        try:
            found = get_project(db, project)
            job = create_job(db, found, kind, params, trigger="cli")
        except AppError as error:
            typer.echo(f"error: {error.detail}", err=True)
            raise typer.Exit(2) from error
        claim_job(db, job.id)
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.percentage:>3.0f}%"),
        )
        with Progress(*columns, TimeElapsedColumn()) as bar:
            task = bar.add_task(f"{kind} on {project}", total=1.0)

            def show(fraction: float, text: str) -> None:
                bar.update(task, completed=fraction, description=f"{kind}: {text}"[:60])

            status = run_training(db, job.id, extra_progress=show)
        db.expire_all()  # the job's row was updated by the training code's own statements
        finished = db.get(Job, job.id)
        if status != "succeeded":
            typer.echo(f"job {job.id} {status}: {finished.error if finished else ''}", err=True)
            raise typer.Exit(1)
        model = db.get(Model, finished.model_id)
        typer.echo(
            f"model {model.id} ({kind}, version {model.version}) from {model.n_answers} answers"
        )
        typer.echo(json.dumps(model.metrics, indent=2))


@app.command()
def simulate(
    project: Annotated[str, typer.Argument(help="Project slug.")],
    workers: Annotated[int, typer.Option(help="Concurrent simulated workers.")] = 20,
    answers: Annotated[int, typer.Option(help="Answers to give in all.")] = 2000,
    noise: Annotated[float, typer.Option(help="Probability that an answer is flipped.")] = 0.1,
    url: Annotated[str, typer.Option(help="Base URL of the running server.")] = "",
    api_key: Annotated[
        str,
        typer.Option(envvar="TRIPLETLAB_API_KEY", help="A researcher key (to read features)."),
    ] = "",
    seed: Annotated[int, typer.Option(help="Seed of the simulated answers.")] = 0,
) -> None:
    """Play simulated crowd workers against a running server through the worker API,
    answering from the objects' feature vectors (answers are recorded as `simulated`)."""
    from rich.progress import Progress

    from app.simulate import simulate as run_simulation

    if not api_key:
        typer.echo("error: give --api-key or set TRIPLETLAB_API_KEY", err=True)
        raise typer.Exit(2)
    settings = get_settings()
    base = url or f"http://{settings.host}:{settings.port}"
    with Progress() as bar:
        task = bar.add_task(f"simulating {workers} workers", total=answers)
        result = run_simulation(
            base, project, api_key, workers=workers, answers=answers, noise=noise, seed=seed,
            on_answer=lambda done: bar.update(task, completed=done),
        )  # fmt: skip
    latencies = sorted(result.latencies_ms) or [0.0]
    typer.echo(
        f"{result.answers} answers in {result.sessions} sessions; "
        f"round trip p50 {latencies[len(latencies) // 2]:.1f} ms, "
        f"p99 {latencies[int(len(latencies) * 0.99)]:.1f} ms"
    )
    if result.errors:
        typer.echo(f"{len(result.errors)} errors, first: {result.errors[0]}", err=True)
        raise typer.Exit(1)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default: settings).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: settings).")] = None,
    workers: Annotated[
        int | None, typer.Option(help="Server processes (default: settings' web_workers).")
    ] = None,
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
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers or settings.web_workers,
        log_level="warning",
    )


if __name__ == "__main__":
    app()

"""The ``tripletlab`` command line: one group of thin commands over the services."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from app.config import get_settings
from app.supervisor import SUPERVISOR_PID
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


@keys_app.command("list")
def keys_list() -> None:
    """List the API keys: id, role, name, first characters, created, last used, revoked."""
    from app.services.auth import list_keys

    with _session() as db:
        keys = list_keys(db)
    typer.echo(f"{'id':>4}  {'role':<10}  {'key':<12}  {'created':<16}  {'last used':<16}  name")
    for key in keys:
        used = f"{key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never"
        state = "  (revoked)" if key.revoked else ""
        typer.echo(
            f"{key.id:>4}  {key.role:<10}  {key.prefix + '…':<12}  "
            f"{key.created_at:%Y-%m-%d %H:%M}  {used:<16}  {key.name}{state}"
        )


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[int, typer.Argument(help="The key's id (see `tripletlab keys list`).")],
) -> None:
    """Revoke a key: its API calls get 401 and its dashboard sessions end at once."""
    from app.errors import AppError
    from app.services.auth import revoke_key

    with _session() as db:
        try:
            key = revoke_key(db, key_id)
        except AppError as error:
            typer.echo(f"error: {error.detail}", err=True)
            raise typer.Exit(2) from error
    typer.echo(f"revoked {key.role} key #{key.id} ({key.prefix}…) {key.name}".rstrip())


@app.command()
def backup(
    path: Annotated[Path, typer.Argument(help="File to write the backup to.")],
) -> None:
    """Back up the database to PATH while the service runs (SQLite: online backup API;
    PostgreSQL: pg_dump's custom format). Media files are not in it: copy the data directory."""
    from app.services.backup import BackupError
    from app.services.backup import backup as run_backup

    try:
        kind = run_backup(get_settings().database_url, path)
    except BackupError as error:
        typer.echo(f"error: {error.detail}", err=True)
        raise typer.Exit(2) from error
    typer.echo(f"backed up to {path} ({kind}, {path.stat().st_size:,} bytes)")


@app.command()
def restore(
    path: Annotated[Path, typer.Argument(help="A file written by `tripletlab backup`.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Replace every table of the database by the backup at PATH (in one transaction), then
    apply the migrations."""
    from sqlalchemy.engine import make_url

    from app.services.backup import BackupError
    from app.services.backup import restore as run_restore

    url = get_settings().database_url
    shown = make_url(url).render_as_string(hide_password=True)
    if not yes:
        typer.confirm(f"Replace everything in {shown} by {path}?", abort=True)
    try:
        run_restore(url, path)
    except BackupError as error:
        typer.echo(f"error: {error.detail}", err=True)
        raise typer.Exit(2) from error
    typer.echo(f"restored {path} into {shown}")


@app.command()
def demo(
    simulate: Annotated[
        int,
        typer.Option(
            min=0,
            max=100_000,
            help="Also give N simulated answers (in this process, through the worker API) and "
            "train every kind the answers allow at N/4, N/2 and N answers: a learning curve.",
        ),
    ] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the simulated answers.")] = 0,
) -> None:
    """Create the digits demo project (if it does not exist) and print its worker link."""
    from app.services.demo import DEMO_SLUG, create_demo

    with _session() as db:
        created = create_demo(db)
    settings = get_settings()
    state = "created" if created else "already exists"
    typer.echo(f"demo project {DEMO_SLUG!r} {state}")
    if simulate:
        _fill_demo(DEMO_SLUG, simulate, seed)
    typer.echo(f"worker page: http://{settings.host}:{settings.port}/w/{DEMO_SLUG}")


def _fill_demo(slug: str, answers: int, seed: int) -> None:
    """Simulated answers in three rounds, each followed by one model of every trainable kind."""
    import numpy as np
    from rich.progress import Progress
    from sqlalchemy import select

    from app.db.models import Model, Object
    from app.errors import AppError
    from app.services.imports import visible_objects
    from app.services.projects import get_project
    from app.simulate import simulate_in_process
    from app.training.kinds import KINDS
    from app.training.run import train_now

    with _session() as db:
        project = get_project(db, slug)
        rows = db.scalars(
            select(Object)
            .where(Object.project_id == project.id, visible_objects(project.id))
            .order_by(Object.index)
        ).all()
    features = np.array([o.features for o in rows], dtype=float)
    targets = np.array([np.nan if o.target is None else o.target for o in rows])
    skipped: dict[str, str] = {}
    given = 0
    for round_number, goal in enumerate(sorted({max(1, answers * k // 4) for k in (1, 2, 4)})):
        wanted = goal - given
        with Progress(transient=True) as bar:
            task = bar.add_task(f"simulating answers {given + 1}–{goal}", total=wanted)
            result = simulate_in_process(
                slug, (features, targets), answers=wanted, seed=seed * 1000 + round_number,
                on_answer=lambda done, task=task: bar.update(task, completed=done),
            )  # fmt: skip
        if result.errors:
            typer.echo(f"error: a simulated answer was refused: {result.errors[0]}", err=True)
            raise typer.Exit(1)
        given += result.answers
        typer.echo(f"{given} simulated answers")
        with _session() as db:
            project = get_project(db, slug)
            for kind in KINDS:
                try:
                    job = train_now(db, project, kind, {})
                except AppError as error:
                    skipped[kind] = error.detail
                    continue
                skipped.pop(kind, None)
                if job.status != "succeeded":
                    typer.echo(f"  {kind}: job {job.id} {job.status}: {job.error}", err=True)
                    continue
                model = db.get(Model, job.model_id)
                figures = ", ".join(
                    f"{name} {value:.3f}"
                    for name, value in model.metrics.items()
                    if "accuracy" in name and isinstance(value, float)
                )
                typer.echo(f"  {kind} v{model.version} from {model.n_answers} answers: {figures}")
        if result.answers < wanted:
            break  # the plan has nothing more to ask
    for kind, reason in skipped.items():
        typer.echo(f"  {kind} not trained: {reason}")
    typer.echo(f"learning curves: GET /api/projects/{slug}/models")


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
    tie_margin: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Pairs whose quality differs by less than this many standard deviations are "
            "answered 'about the same' (1.0: about half of random pairs, as people give ties).",
        ),
    ] = 1.0,
) -> None:
    """Play simulated crowd workers against a running server through the worker API,
    answering from the objects' feature vectors (answers are recorded as `simulated`)."""
    from rich.progress import Progress

    from app.simulate import SimulationError
    from app.simulate import simulate as run_simulation

    if not api_key:
        typer.echo("error: give --api-key or set TRIPLETLAB_API_KEY", err=True)
        raise typer.Exit(2)
    settings = get_settings()
    base = url or f"http://{settings.host}:{settings.port}"
    try:
        with Progress() as bar:
            task = bar.add_task(f"simulating {workers} workers", total=answers)
            result = run_simulation(
                base, project, api_key, workers=workers, answers=answers, noise=noise, seed=seed,
                tie_margin=tie_margin, on_answer=lambda done: bar.update(task, completed=done),
            )  # fmt: skip
    except SimulationError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from error
    latencies = sorted(result.latencies_ms) or [0.0]
    typer.echo(
        f"{result.answers} answers in {result.sessions} sessions; "
        f"round trip p50 {latencies[len(latencies) // 2]:.1f} ms, "
        f"p99 {latencies[int(len(latencies) * 0.99)]:.1f} ms"
    )
    if result.errors:
        typer.echo(f"{len(result.errors)} errors, first: {result.errors[0]}", err=True)
        raise typer.Exit(1)


def _tls_files(certfile: str, keyfile: str) -> dict[str, str]:
    """uvicorn's TLS arguments for the settings' certificate and key (none: plain HTTP); a
    missing or half-given pair stops ``serve`` with a message saying which."""
    if not certfile and not keyfile:
        return {}
    if not (certfile and keyfile):
        given, missing = (
            ("TRIPLETLAB_SSL_CERTFILE", "TRIPLETLAB_SSL_KEYFILE")
            if certfile
            else ("TRIPLETLAB_SSL_KEYFILE", "TRIPLETLAB_SSL_CERTFILE")
        )
        typer.echo(f"error: {given} is set but {missing} is not: give both, or neither", err=True)
        raise typer.Exit(2)
    for name, path in (("TRIPLETLAB_SSL_CERTFILE", certfile), ("TRIPLETLAB_SSL_KEYFILE", keyfile)):
        if not Path(path).is_file():
            typer.echo(f"error: {name}: no file at {path}", err=True)
            raise typer.Exit(2)
    return {"ssl_certfile": certfile, "ssl_keyfile": keyfile}


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (default: settings).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default: settings).")] = None,
    workers: Annotated[
        int | None,
        typer.Option(help="Server processes (default: web_workers, or 2)."),
    ] = None,
) -> None:
    """Apply migrations, create the first admin key and the demo, then serve HTTP (HTTPS
    with TRIPLETLAB_SSL_CERTFILE and TRIPLETLAB_SSL_KEYFILE)."""
    import uvicorn

    from app.db.migrate import upgrade
    from app.internals import http_protocol
    from app.services.auth import ensure_admin_key
    from app.services.demo import DEMO_SLUG, create_demo
    from app.supervisor import PortInUse, serve_processes

    settings = get_settings()
    host = host or settings.host
    port = port or settings.port
    tls = _tls_files(settings.ssl_certfile, settings.ssl_keyfile)
    scheme = "https" if tls else "http"
    upgrade(_engine())
    with _session() as db:
        secret = ensure_admin_key(db)
        if settings.demo:
            create_demo(db)
    if secret:
        typer.echo("First start: created an admin API key. Store it now; it is not shown again:")
        typer.echo(f"    {secret}")
    base = f"{scheme}://{host}:{port}"
    typer.echo(f"Triplet Lab on {base}  (API docs: {base}/docs)")
    typer.echo(f"Dashboard: {base}/dashboard  (sign in with an API key)")
    if settings.demo:
        typer.echo(f"Demo worker page: {base}/w/{DEMO_SLUG}")
    processes = workers or settings.server_processes()
    config = {
        "app": "app.main:serve_app",
        "factory": True,
        "host": host,
        "port": port,
        "log_level": "warning",
        "access_log": False,  # hidden at "warning" anyway, but each line was still formatted
        "http": http_protocol(),  # a response in one write (app.internals)
        "proxy_headers": True,
        "forwarded_allow_ips": settings.forwarded_allow_ips,
        **tls,
    }
    if processes == 1:
        uvicorn.run(**config)
        return
    # The worker processes stop with this one, even when it is killed (app.supervisor).
    os.environ[SUPERVISOR_PID] = str(os.getpid())
    try:
        status = serve_processes(config, processes)
    except PortInUse as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    raise typer.Exit(status)


if __name__ == "__main__":
    app()

"""Settings of the service: one class, read from the environment with the prefix TRIPLETLAB_."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob of Triplet Lab. The docs' settings table is generated from these fields and
    their descriptions (docs/hooks/reference.py; tests/test_docs.py checks every field has one)."""

    model_config = SettingsConfigDict(env_prefix="TRIPLETLAB_", env_file=".env", extra="ignore")

    database_url: str = Field(
        default="sqlite:///./data/tripletlab.db",
        description="SQLAlchemy URL of the database. SQLite (WAL mode, foreign keys on) by "
        "default: a commit that stores answers waits for the disk (`synchronous=FULL`), the "
        "others do not (`NORMAL`: safe against a crash of the app, not of the machine). "
        "`postgresql+psycopg://user@host:5432/db` in production.",
    )
    host: str = Field(default="127.0.0.1", description="Address `tripletlab serve` binds to.")
    port: int = Field(default=8000, description="Port `tripletlab serve` listens on.")
    forwarded_allow_ips: str = Field(
        default="127.0.0.1",
        description="Addresses (comma-separated, or *) of the reverse proxies whose "
        "X-Forwarded-For and X-Forwarded-Proto `tripletlab serve` trusts: a request from one "
        "of them counts as from the address the proxy names (rate limits per address, the "
        "scheme of worker links). Behind a proxy on another host, name it here, or every "
        "client has the proxy's address and shares its rate limit (`docker-compose.yml` sets "
        "`*`: only its nginx reaches the app containers, and it sets X-Forwarded-For to the "
        "client's address, replacing any the client sent).",
    )
    web_workers: int | None = Field(
        default=None,
        ge=1,
        description="Server processes `tripletlab serve` starts (`--workers`); default 2, "
        "on PostgreSQL and on SQLite (bench/worker_throughput.py). Each is a uvicorn server "
        "listening on a socket of its own (`SO_REUSEPORT`: connections spread evenly; "
        "app/supervisor.py); a dead one is replaced, `kill -HUP` replaces them one by one "
        "without downtime, and they stop with `serve`, even when it is killed outright. One "
        "of them runs the job runner unless `TRIPLETLAB_RUN_JOBS` is false, so trainings do "
        "not double with the processes. On SQLite they write one at a time, in line on the "
        "writer lock (`<database>-writer`).",
    )
    data_dir: Path = Field(
        default=Path("./data"),
        description="Directory for uploaded media (object images) and the server's secret.",
    )
    public_url: str = Field(
        default="",
        description="Base URL workers reach the server at, used in worker links "
        "(default: the URL of the request).",
    )
    max_upload_mb: float = Field(
        default=50.0, description="Largest request body accepted, in MiB; larger ones get 413."
    )
    max_worker_body_kb: float = Field(
        default=8.0,
        gt=0,
        description="Largest request body accepted on the worker API (paths under `/api/w/`), "
        "in KiB; larger ones get 413 before any of it is read (from `Content-Length`, or "
        "as soon as a streamed body passes it). A worker's answer or session is under 1 KiB.",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="`tripletlab serve` closes a connection whose request line and headers "
        "have not all arrived this many seconds after the connection opened (or after the "
        "request's first byte), answering 408 if part of a request came: a client sending "
        "its headers a byte at a time holds no connection longer.",
    )
    body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="`tripletlab serve` answers 408 and closes a connection whose request "
        "body stops arriving for this many seconds (the longest pause between two pieces, "
        "not the whole upload's time: a large upload over a slow link still passes).",
    )
    stock_http_protocol: bool = Field(
        default=False,
        description="Serve with uvicorn's own HTTP protocol instead of `app/internals.py`"
        "'s (a response in one write; the header and body timeouts): a fallback should a "
        "uvicorn release change the internals that module relies on. The timeouts then do "
        "not apply.",
    )
    ssl_certfile: str = Field(
        default="",
        description="PEM certificate (chain) for `tripletlab serve` to serve HTTPS itself; "
        "with `TRIPLETLAB_SSL_KEYFILE`. Empty: plain HTTP (behind a reverse proxy that "
        "terminates TLS, as `docker-compose.yml`'s Caddy does).",
    )
    ssl_keyfile: str = Field(
        default="",
        description="PEM private key of `TRIPLETLAB_SSL_CERTFILE`.",
    )
    hsts_seconds: int = Field(
        default=31_536_000,
        ge=0,
        description="`max-age` of the `Strict-Transport-Security` header sent on responses "
        "served over HTTPS (directly, or through a trusted proxy's `X-Forwarded-Proto: "
        "https`), so browsers use HTTPS for the host from then on; 0 sends no header.",
    )
    upload_process_mb: float = Field(
        default=1.0,
        ge=0,
        description="Uploads (CSV or JSON) larger than this, in MiB, are parsed in a process "
        "spawned for them, so their CPU does not slow the workers' requests; smaller ones in "
        "a worker thread.",
    )
    max_zip_entry_mb: float = Field(
        default=32.0,
        gt=0,
        description="Largest unpacked size of one entry of an uploaded ZIP of images, in MiB; "
        "a larger entry gets 413 naming it (the entry is unpacked in a stream that stops "
        "there, whatever its header claims).",
    )
    max_zip_total_mb: float = Field(
        default=512.0,
        gt=0,
        description="Largest unpacked size of all entries of an uploaded ZIP together, in MiB; "
        "past it the upload gets 413 naming the entry where the limit was passed.",
    )
    max_zip_entries: int = Field(
        default=10_000,
        gt=0,
        description="Most entries (files and folders) in an uploaded ZIP of images; more get "
        "413 naming the limit, before anything is unpacked or written.",
    )
    max_image_pixels: int = Field(
        default=50_000_000,
        gt=0,
        description="Most pixels (width × height, read from the header before anything is "
        "written) of an image in an uploaded ZIP; a larger one gets 422 naming the entry.",
    )
    lease_seconds: int = Field(
        default=300,
        description="How long an issued question is reserved for its worker before it may be "
        "re-issued to someone else.",
    )
    queue_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Longest a request waits for its turn at the database in a server "
        "process (worker routes) or for a database session (other routes) before it gets "
        "503 with Retry-After: under a burst (a study's launch) requests wait in line on "
        "the event loop, holding no connection, and are refused cleanly past this.",
    )
    job_workers: int = Field(
        default=1, description="Size of the process pool that runs training jobs."
    )
    run_jobs: bool = Field(
        default=True,
        description="Run the job runner in this server process (it hands training jobs to "
        "the process pool or Dask). Set false for extra web-only processes.",
    )
    dask_scheduler: str = Field(
        default="",
        description="Address of a Dask distributed scheduler (e.g. `tcp://10.0.0.5:8786`); "
        "when set, training jobs run on that cluster instead of the local process pool.",
    )
    secret_key: str = Field(
        default="",
        description="Secret from which completion codes are derived. Empty: one is generated "
        "and kept in `<data_dir>/secret.key`; set it when several app processes serve "
        "one database.",
    )
    dashboard_session_hours: float = Field(
        default=12.0,
        gt=0,
        le=24 * 30,
        description="How long a dashboard sign-in lasts, in hours (revoking the key or "
        "signing out ends it at once).",
    )
    worker_rate_session: float = Field(
        default=10.0,
        ge=0,
        description="Worker API requests per second one session may send, sustained (a "
        "question is one request: the reply to an answer carries the next question; opening "
        "or resuming a session adds two); over it, 429 with Retry-After. 0: no limit.",
    )
    worker_burst_session: int = Field(
        default=40, ge=1, description="Worker API requests one session may send at once."
    )
    worker_rate_address: float = Field(
        default=100.0,
        ge=0,
        description="Worker API requests per second from one client address, sustained "
        "(all its sessions together, per server process). 0: no limit.",
    )
    worker_burst_address: int = Field(
        default=400, ge=1, description="Worker API requests one client address may send at once."
    )
    claim_with_answer: bool = Field(
        default=True,
        description="The answer's own statement claims the session's next question from the "
        "pool (the fast path). False sends every next question through the slow path "
        "(`GET …/next`'s): for tests that compare the two (tests/api/test_round_trip_paths.py).",
    )
    fill_ahead: bool = Field(
        default=True,
        description="Each server process fills the pool ahead of the workers in a thread of "
        "its own (app/services/pool.py). False: only a request that finds the pool empty "
        "fills it (tests that need fills at fixed points).",
    )
    private_cursor: bool = Field(
        default=True,
        description="Run the worker round trip's statements on the driver's cursor through "
        "SQLAlchemy's private `Connection._cursor_execute` (app/internals.py: several times "
        "cheaper per statement); false: only public SQLAlchemy APIs (`Connection.execute`).",
    )
    demo: bool = Field(
        default=True,
        description="Create the digits demo project on `tripletlab serve` if it does not exist.",
    )

    def server_processes(self) -> int:
        """``web_workers``, or 2: at 50 workers a second process carried 24-43% more answers
        on PostgreSQL, and 37% more on SQLite once its writers waited on
        :class:`app.db.session.WriterLock` (CHANGELOG.md, 2026-11-24); at 1 and 10 workers
        the same within the spread."""
        if self.web_workers is not None:
            return self.web_workers
        return 2


@lru_cache
def get_settings() -> Settings:
    """The settings of this process, read once."""
    return Settings()

"""Start a real `tripletlab serve` on a fresh database for a benchmark, and stop it."""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

TRIPLETLAB = str(Path(sys.executable).with_name("tripletlab"))
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def stop_with_parent() -> None:
    """For ``subprocess.Popen(preexec_fn=...)``: the server started is sent SIGTERM, and
    stops as it does on it, when the benchmark that started it dies, even killed (Linux's
    ``PR_SET_PDEATHSIG``; elsewhere nothing): a killed benchmark left its server serving."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A running server; unpacks as ``(base, key, env)``, and names its process for CPU figures."""

    base: str
    key: str
    env: dict[str, str]
    process: subprocess.Popen

    def __iter__(self) -> Iterator:
        return iter((self.base, self.key, self.env))


@dataclass
class _Process:
    ppid: int
    name: str
    cpu: float  # user + system seconds


def processes() -> dict[int, _Process]:
    """Every process on the machine, by pid (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[int, _Process] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            head, tail = stat.read_text().rsplit(")", 1)
        except (OSError, ValueError):
            continue  # the process ended while we looked
        fields = tail.split()
        name = head.split("(", 1)[1]
        found[int(stat.parent.name)] = _Process(
            int(fields[1]), name, (int(fields[11]) + int(fields[12])) / tick
        )
    return found


def cpu_seconds(pid: int, snapshot: dict[int, _Process] | None = None) -> float:
    """User + system CPU time of process ``pid`` and all its descendants (in ``snapshot``,
    one made by :func:`processes`, or now)."""
    running = snapshot if snapshot is not None else processes()
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, process in running.items():
            if process.ppid == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    return sum(running[p].cpu for p in tree if p in running)


def postgres_cpu_seconds(snapshot: dict[int, _Process] | None = None) -> float:
    """User + system CPU time of every PostgreSQL server process on this machine (its
    backends, WAL writer, autovacuum…): what a benchmark's database costs beside the app,
    when nothing else uses the server."""
    running = snapshot if snapshot is not None else processes()
    return sum(p.cpu for p in running.values() if p.name == "postgres")


@contextmanager
def running_server(database_url: str | None = None, **settings: str) -> Iterator[Server]:
    """Yield the server (``base, key, env``) on a fresh SQLite file (or ``database_url``)."""
    with tempfile.TemporaryDirectory(prefix="tripletlab-bench-") as tmp:
        env = {
            **os.environ,
            "TRIPLETLAB_DATABASE_URL": database_url or f"sqlite:///{tmp}/bench.db",
            "TRIPLETLAB_DATA_DIR": f"{tmp}/data",
            "TRIPLETLAB_DEMO": "false",
            # One client address drives hundreds of sessions: the worker rate limits would
            # measure themselves, not the server (a benchmark may still set them).
            "TRIPLETLAB_WORKER_RATE_SESSION": "0",
            "TRIPLETLAB_WORKER_RATE_ADDRESS": "0",
            **{f"TRIPLETLAB_{k.upper()}": v for k, v in settings.items()},
        }
        port = free_port()
        log = Path(tmp) / "serve.log"
        with log.open("w") as out:
            process = subprocess.Popen(
                [TRIPLETLAB, "serve", "--port", str(port)],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=stop_with_parent,
            )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(f"{base}/docs", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(log.read_text())
                time.sleep(0.3)
            key = next(
                line.strip()
                for line in log.read_text().splitlines()
                if line.strip().startswith("tl_")
            )
            yield Server(base, key, env, process)
        finally:
            process.terminate()
            process.wait(timeout=30)


def reset_postgres(url: str) -> None:
    """An empty schema in the database of ``url``, created first if it does not exist."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    server = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with server.connect() as connection:
        exists = connection.scalar(
            text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": parsed.database}
        )
        if not exists:
            connection.execute(text(f'CREATE DATABASE "{parsed.database}"'))
    server.dispose()
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()

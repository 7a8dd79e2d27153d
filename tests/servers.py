"""Real `tripletlab serve` processes (and their databases) for the tests that need one.

A :class:`Server` is the command a user runs, on a port of its own; it can be stopped
politely (SIGTERM), killed (SIGKILL) and started again on the same database.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from tests.postgres import POSTGRES_URL  # servers get databases of their own beside it

TRIPLETLAB = str(Path(sys.executable).with_name("tripletlab"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sqlite_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'served.db'}"


def postgres_database(suffix: str) -> str:
    """The URL of an empty PostgreSQL database of its own, beside the suite's (``<name>_<suffix>``),
    so a server process can own it while the suite's session-wide database stays untouched."""
    base = make_url(POSTGRES_URL)
    name = f"{base.database}_{suffix}"
    engine = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            connection.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as error:  # the driver's own connection errors vary
        message = f"PostgreSQL at {POSTGRES_URL} is unreachable: {error}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    finally:
        engine.dispose()
    return base.set(database=name).render_as_string(hide_password=False)


def database_url(kind: str, directory: Path, suffix: str) -> str:
    return sqlite_url(directory) if kind == "sqlite" else postgres_database(suffix)


@dataclass
class Server:
    """``tripletlab serve`` on ``database_url``; ``start()`` again after a stop or a kill."""

    database_url: str
    data_dir: Path
    env_extra: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    output: str = ""
    log_path: Path | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "TRIPLETLAB_DATABASE_URL": self.database_url,
            "TRIPLETLAB_DATA_DIR": str(self.data_dir),
            "TRIPLETLAB_DEMO": "false",
            "TRIPLETLAB_RUN_JOBS": "false",
            "TRIPLETLAB_SECRET_KEY": "lifecycle-tests",
            "PYTHONUNBUFFERED": "1",
            **self.env_extra,
        }

    def start(self, timeout: float = 180.0) -> Server:
        self.log_path = self.data_dir / f"serve-{self.port}-{uuid.uuid4().hex[:6]}.log"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("w") as out:
            self.process = subprocess.Popen(
                [TRIPLETLAB, "serve", "--port", str(self.port)],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"server exited: {self.log_path.read_text()}")
            try:
                if httpx.get(f"{self.base}/api/w/-", timeout=10).status_code == 404:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail(f"server did not start: {self.log_path.read_text()}")
        self.output += self.log_path.read_text()
        return self

    def admin_key(self) -> str:
        lines = (line.strip() for line in self.output.splitlines())
        return next(line for line in lines if line.startswith("tl_"))

    def children(self) -> list[psutil.Process]:
        assert self.process is not None
        return psutil.Process(self.process.pid).children(recursive=True)

    def terminate(self, timeout: float = 30.0) -> bool:
        """SIGTERM, as a service manager stops it; whether it exited cleanly (uvicorn shuts
        down, then raises the signal again: the status is -SIGTERM or 0)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout) in (0, -signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.close()

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

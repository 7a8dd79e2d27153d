"""Start a real `tripletlab serve` on a fresh database for a benchmark, and stop it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

TRIPLETLAB = str(Path(sys.executable).with_name("tripletlab"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_server(database_url: str | None = None, **settings: str):  # type: ignore[no-untyped-def]
    """Yield (base_url, admin_key, env) of a server on a fresh SQLite file (or ``database_url``)."""
    with tempfile.TemporaryDirectory(prefix="tripletlab-bench-") as tmp:
        env = {
            **os.environ,
            "TRIPLETLAB_DATABASE_URL": database_url or f"sqlite:///{tmp}/bench.db",
            "TRIPLETLAB_DATA_DIR": f"{tmp}/data",
            "TRIPLETLAB_DEMO": "false",
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
            yield base, key, env
        finally:
            process.terminate()
            process.wait(timeout=30)


def reset_postgres(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    engine.dispose()

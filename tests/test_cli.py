"""The command line, run as a user runs it: a separate process on a fresh SQLite file."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

TRIPLETLAB = str(Path(sys.executable).with_name("tripletlab"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TRIPLETLAB_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
        "TRIPLETLAB_DATA_DIR": str(tmp_path / "data"),
        "TRIPLETLAB_DEMO": "true",
    }


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRIPLETLAB, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_help_lists_every_command(env):
    result = run(env, "--help")
    assert result.returncode == 0
    for command in ("serve", "db", "keys", "demo"):
        assert command in result.stdout


def test_db_upgrade_then_keys_create_prints_the_key_last(env):
    assert run(env, "db", "upgrade").returncode == 0
    result = run(env, "keys", "create", "--role", "researcher", "--name", "alice")
    assert result.returncode == 0, result.stderr
    key = result.stdout.strip().splitlines()[-1]
    assert key.startswith("tl_") and " " not in key


def test_keys_create_refuses_an_unknown_role(env):
    run(env, "db", "upgrade")
    result = run(env, "keys", "create", "--role", "overlord")
    assert result.returncode == 2
    assert "role must be one of" in result.stderr


def test_demo_creates_the_digits_project_once(env):
    run(env, "db", "upgrade")
    first = run(env, "demo")
    assert first.returncode == 0, first.stderr
    assert "created" in first.stdout
    assert "already exists" in run(env, "demo").stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_migrates_prints_the_admin_key_once_and_serves_the_demo(env, tmp_path):
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [TRIPLETLAB, "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/docs", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        else:
            pytest.fail(f"server did not start: {log.read_text()}")
        output = log.read_text()
        key = next(line.strip() for line in output.splitlines() if line.strip().startswith("tl_"))
        projects = httpx.get(
            f"http://127.0.0.1:{port}/api/projects", headers={"Authorization": f"Bearer {key}"}
        ).json()
        assert [p["slug"] for p in projects["data"]] == ["digits-demo"]
        assert projects["data"][0]["n_objects"] > 0
    finally:
        server.terminate()
        server.wait(timeout=20)


def test_demo_plan_is_runnable(env):
    """The demo's plan mixes random triplets, a k1 landmark design and gold checks."""
    from app.db.models import Project
    from app.db.session import make_engine, session_factory
    from app.services.demo import DEMO_SLUG
    from app.services.issuance import planner_for

    run(env, "db", "upgrade")
    run(env, "demo")
    engine = make_engine(env["TRIPLETLAB_DATABASE_URL"])
    with session_factory(engine)() as db:
        project = db.query(Project).filter_by(slug=DEMO_SLUG).one()
        kinds = [s["kind"] for s in project.plan["strategies"]]
        assert kinds == ["random", "landmark_k1"]
        assert project.plan["gold_rate"] > 0
        planner = planner_for(project)
        assert planner.gold_source is not None
    engine.dispose()

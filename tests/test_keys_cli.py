"""`tripletlab keys list` and `keys revoke`, run as a user runs them (separate processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

TRIPLETLAB = str(Path(sys.executable).with_name("tripletlab"))


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TRIPLETLAB_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
        "TRIPLETLAB_DATA_DIR": str(tmp_path / "data"),
    }


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TRIPLETLAB, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_keys_list_and_revoke(env):
    assert run(env, "db", "upgrade").returncode == 0
    created = run(env, "keys", "create", "--role", "researcher", "--name", "Ada")
    assert created.returncode == 0, created.stderr
    secret = created.stdout.strip().splitlines()[-1]
    listed = run(env, "keys", "list")
    assert listed.returncode == 0, listed.stderr
    row = next(line for line in listed.stdout.splitlines() if line.endswith("Ada"))
    key_id = row.split()[0]
    assert "researcher" in row and secret[:10] in row and "never" in row

    revoked = run(env, "keys", "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert f"revoked researcher key #{key_id}" in revoked.stdout
    assert run(env, "keys", "list").stdout.splitlines()[1].endswith("Ada  (revoked)")

    # The revoked key no longer opens the API.
    from app.config import Settings
    from app.main import create_app

    settings = Settings(database_url=env["TRIPLETLAB_DATABASE_URL"], run_jobs=False)
    from app.api.deps import get_db
    from app.db.session import make_engine, session_factory

    engine = make_engine(settings.database_url)

    def override():  # type: ignore[no-untyped-def]
        with session_factory(engine)() as session:
            yield session

    application = create_app(settings)
    application.dependency_overrides[get_db] = override
    with TestClient(application) as client:
        response = client.get("/api/projects", headers={"Authorization": f"Bearer {secret}"})
    engine.dispose()
    assert response.status_code == 401


def test_revoking_an_unknown_key_is_a_one_line_error(env):
    assert run(env, "db", "upgrade").returncode == 0
    result = run(env, "keys", "revoke", "999")
    assert result.returncode == 2
    assert result.stderr.strip() == "error: no API key 999"

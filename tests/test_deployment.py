"""The deployment files agree with each other and with the settings (Docker does not run here)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from sqlalchemy.engine import make_url

from app.config import Settings

ROOT = Path(__file__).resolve().parents[1]


def dockerfile_env() -> dict[str, str]:
    text = (ROOT / "Dockerfile").read_text()
    block = re.search(r"^ENV (.+?)(?=^\S)", text, re.S | re.M).group(1)
    return dict(re.findall(r"(\w+)=(\S+)", block))


def test_dockerfile_runs_as_non_root_and_serves():
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.\d+-slim", text, re.M)
    user = re.search(r"^USER (\S+)", text, re.M).group(1)
    assert user != "root"
    assert 'ENTRYPOINT ["tripletlab"]' in text
    assert 'CMD ["serve"]' in text
    assert re.search(r"^EXPOSE 8000$", text, re.M)


def test_compose_matches_dockerfile_and_settings():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    app, db = compose["services"]["app"], compose["services"]["db"]
    env = app["environment"]
    settings_fields = {f"TRIPLETLAB_{name.upper()}" for name in Settings.model_fields}
    assert set(env) <= settings_fields, set(env) - settings_fields

    url = make_url(env["TRIPLETLAB_DATABASE_URL"])
    assert url.drivername == "postgresql+psycopg"
    assert url.host == "db"
    assert url.username == db["environment"]["POSTGRES_USER"]
    assert url.password == db["environment"]["POSTGRES_PASSWORD"]
    assert url.database == db["environment"]["POSTGRES_DB"]

    port = env["TRIPLETLAB_PORT"]
    assert port == dockerfile_env()["TRIPLETLAB_PORT"]
    assert f"{port}:{port}" in app["ports"] or any(p.endswith(f":{port}") for p in app["ports"])

    data_dir = env["TRIPLETLAB_DATA_DIR"]
    assert data_dir == dockerfile_env()["TRIPLETLAB_DATA_DIR"]
    volume_names = {v.split(":")[0] for v in app["volumes"]}
    assert any(v.endswith(f":{data_dir}") for v in app["volumes"])
    assert volume_names <= set(compose["volumes"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in db["volumes"])

    assert app["depends_on"]["db"]["condition"] == "service_healthy"
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert app["image"].startswith("tripletlab")
    assert app.get("build") == "."

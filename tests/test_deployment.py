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


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def command_of(service: dict) -> list[str]:
    """What the container runs: its entrypoint (the image's, ``tripletlab``, by default)
    followed by its command."""
    return list(service.get("entrypoint", ["tripletlab"])) + list(service.get("command", []))


def test_compose_matches_dockerfile_and_settings():
    spec = compose()
    services = spec["services"]
    db = services["db"]
    settings_fields = {f"TRIPLETLAB_{name.upper()}" for name in Settings.model_fields}
    # Every TRIPLETLAB_ variable any service sets is a real setting, with a valid value.
    for name, service in services.items():
        env = {k: v for k, v in (service.get("environment") or {}).items()}
        tripletlab_env = {k for k in env if k.startswith("TRIPLETLAB_")}
        assert tripletlab_env <= settings_fields, (name, tripletlab_env - settings_fields)
        plain = {
            k.removeprefix("TRIPLETLAB_").lower(): v
            for k, v in env.items()
            if k.startswith("TRIPLETLAB_") and "${" not in str(v)
        }
        Settings.model_validate(plain)  # raises on a value the settings refuse

    app = services["app"]
    env = app["environment"]
    url = make_url(env["TRIPLETLAB_DATABASE_URL"])
    assert url.drivername == "postgresql+psycopg"
    assert url.host == "db"
    assert url.username == db["environment"]["POSTGRES_USER"]
    assert url.password == db["environment"]["POSTGRES_PASSWORD"]
    assert url.database == db["environment"]["POSTGRES_DB"]
    assert any(v.endswith(":/var/lib/postgresql/data") for v in db["volumes"])
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])

    # Several app replicas share one secret (completion codes), the media volume and the
    # Dask scheduler; the image is the Dockerfile's.
    assert app["deploy"]["replicas"] >= 2
    assert env["TRIPLETLAB_SECRET_KEY"].startswith("${TRIPLETLAB_SECRET_KEY:?")
    assert command_of(app) == ["tripletlab", "serve"]
    port = env["TRIPLETLAB_PORT"]
    assert port == dockerfile_env()["TRIPLETLAB_PORT"]
    assert port in [str(p) for p in app["expose"]]
    assert "ports" not in app  # reached through the proxy only
    data_dir = env["TRIPLETLAB_DATA_DIR"]
    assert data_dir == dockerfile_env()["TRIPLETLAB_DATA_DIR"]
    assert any(v.endswith(f":{data_dir}") for v in app["volumes"])
    assert {v.split(":")[0] for v in app["volumes"]} <= set(spec["volumes"])
    assert app["image"].startswith("tripletlab")

    # Migrations run once, before the replicas, from the image built here.
    migrate = services["migrate"]
    assert migrate.get("build") == "."
    assert command_of(migrate) == ["tripletlab", "db", "upgrade"]
    assert migrate["environment"]["TRIPLETLAB_DATABASE_URL"] == env["TRIPLETLAB_DATABASE_URL"]
    assert migrate["depends_on"]["db"]["condition"] == "service_healthy"
    assert app["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_compose_runs_training_on_a_dask_cluster():
    services = compose()["services"]
    app, scheduler, worker = services["app"], services["scheduler"], services["dask-worker"]
    address = make_url(app["environment"]["TRIPLETLAB_DASK_SCHEDULER"].replace("tcp", "http"))
    assert command_of(scheduler)[:2] == ["dask", "scheduler"]
    scheduler_port = command_of(scheduler)[command_of(scheduler).index("--port") + 1]
    assert (address.host, str(address.port)) == ("scheduler", scheduler_port)
    run = command_of(worker)
    assert run[:2] == ["dask", "worker"]
    assert run[2] == app["environment"]["TRIPLETLAB_DASK_SCHEDULER"]
    assert run[run.index("--nthreads") + 1] == "1"
    assert worker["deploy"]["replicas"] >= 2
    # Jobs open the database from the worker: it needs the same URL as the app.
    assert (
        worker["environment"]["TRIPLETLAB_DATABASE_URL"]
        == app["environment"]["TRIPLETLAB_DATABASE_URL"]
    )
    for service in (scheduler, worker):
        assert service["image"] == app["image"]  # the same code on every machine


def test_proxy_spreads_requests_over_the_app_replicas():
    services = compose()["services"]
    proxy, app = services["proxy"], services["app"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in proxy["volumes"]}
    config_path = mounted["/etc/nginx/conf.d/default.conf"]
    conf = (ROOT / config_path).read_text()
    upstream = re.search(r"upstream (\w+) \{(.+?)\}", conf, re.S)
    assert re.search(rf"server app:{app['environment']['TRIPLETLAB_PORT']};", upstream.group(2))
    assert f"proxy_pass http://{upstream.group(1)};" in conf
    listen = re.search(r"listen (\d+);", conf).group(1)
    assert any(p.endswith(f":{listen}") for p in proxy["ports"])
    body_mb = int(re.search(r"client_max_body_size (\d+)m;", conf).group(1))
    assert body_mb >= Settings.model_fields["max_upload_mb"].default
    assert proxy["depends_on"] == ["app"]
    # The app trusts the proxy's X-Forwarded-For (each client its own rate limit), which
    # the proxy sets to the client's address alone (uvicorn, trusting every sender, takes
    # the header's first address: appended to, it would be the client's choice); trusting
    # any sender is safe only as the app publishes no port.
    assert "proxy_set_header X-Forwarded-For $remote_addr;" in conf
    assert "$proxy_add_x_forwarded_for" not in conf
    assert app["environment"]["TRIPLETLAB_FORWARDED_ALLOW_IPS"] == "*"
    assert "ports" not in app

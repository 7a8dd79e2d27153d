"""The deployment files agree with each other and with the settings (Docker does not run here)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
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


Line = tuple[list[str], list]  # a Caddyfile line's tokens, and the lines of its block


def caddyfile(text: str) -> list[Line]:
    """The Caddyfile as a tree of lines (a line ending in ``{`` holds the lines up to its
    ``}``), its braces checked: Caddy is not installed here, this is its syntax as far as
    a test can read it without Caddy."""
    root: list[Line] = []
    stack = [root]
    for raw in text.splitlines():
        tokens = raw.split("#", 1)[0].split() if not raw.lstrip().startswith("#") else []
        if not tokens:
            continue
        if tokens == ["}"]:
            stack.pop()
            assert stack, "a } closes nothing"
            continue
        assert "{" not in tokens[:-1] and "}" not in tokens, raw
        line: Line = (tokens[:-1] if tokens[-1] == "{" else tokens, [])
        stack[-1].append(line)
        if tokens[-1] == "{":
            stack.append(line[1])
    assert len(stack) == 1, "a { is never closed"
    return root


def block(lines: list[Line], *path: str) -> list[Line]:
    """The lines of the block reached by following ``path`` (each a line's first token)."""
    for name in path:
        (found,) = [children for tokens, children in lines if tokens and tokens[0] == name]
        lines = found
    return lines


def option(lines: list[Line], name: str) -> list[str]:
    (found,) = [tokens[1:] for tokens, _ in lines if tokens and tokens[0] == name]
    return found


def seconds(duration: str) -> float:
    value, unit = re.fullmatch(r"(\d+)(s|m|h)", duration).groups()
    return int(value) * {"s": 1, "m": 60, "h": 3600}[unit]


def test_proxy_serves_https_for_the_public_url_and_spreads_requests_over_the_replicas():
    spec = compose()
    services = spec["services"]
    proxy, app = services["proxy"], services["app"]
    assert proxy["image"].startswith("caddy:2")
    mounted = {v.split(":")[1]: v.split(":")[0] for v in proxy["volumes"]}
    tree = caddyfile((ROOT / mounted["/etc/caddy/Caddyfile"]).read_text())
    # Certificates are kept across restarts (Let's Encrypt limits how often it issues).
    assert mounted["/data"] in spec["volumes"]
    # HTTP (the ACME challenge, the redirect) and HTTPS, on the host's standard ports.
    assert {"80:80", "443:443"} <= set(proxy["ports"])
    assert proxy["depends_on"] == ["app"]

    global_options, site = tree[0], tree[1]
    assert global_options[0] == []  # the global options block comes first
    # The site is the URL workers reach, the same the app puts in its worker links.
    (address,) = site[0]
    variable, default = re.fullmatch(r"\{\$(\w+):(\S+)\}", address).groups()
    assert variable == "TRIPLETLAB_PUBLIC_URL"
    assert proxy["environment"][variable] == app["environment"][variable]
    assert app["environment"][variable] == f"${{{variable}:-{default}}}"
    assert default.startswith("https://")

    # Requests go to every replica of the app, on its port.
    upstreams = block(site[1], "reverse_proxy")
    dynamic = block(upstreams, "dynamic")
    assert option(upstreams, "dynamic") == ["a"]
    assert option(dynamic, "name") == ["app"]
    assert option(dynamic, "port") == [app["environment"]["TRIPLETLAB_PORT"]]
    assert option(upstreams, "lb_policy") == ["round_robin"]
    # The app trusts X-Forwarded-For from any sender and takes its first address; Caddy
    # sets it to the client's address alone only while it trusts no proxy before it.
    text = (ROOT / mounted["/etc/caddy/Caddyfile"]).read_text()
    assert "trusted_proxies" not in re.sub(r"#.*", "", text)
    assert "X-Forwarded-For" not in re.sub(r"#.*", "", text)
    assert app["environment"]["TRIPLETLAB_FORWARDED_ALLOW_IPS"] == "*"
    assert "ports" not in app

    # Bodies as large as the app accepts; slow clients cut at the edge as in the app.
    (size,) = option(block(site[1], "request_body"), "max_size")
    assert (
        int(re.fullmatch(r"(\d+)MiB", size).group(1))
        >= Settings.model_fields["max_upload_mb"].default
    )
    timeouts = block(global_options[1], "servers", "timeouts")
    (read_header,) = option(timeouts, "read_header")
    assert seconds(read_header) <= Settings.model_fields["header_timeout_seconds"].default
    (read_body,) = option(timeouts, "read_body")
    assert seconds(read_body) >= 5 * 60  # a 50 MiB upload over a slow link passes


def test_the_caddyfile_reader_refuses_unbalanced_braces():
    with pytest.raises(AssertionError):
        caddyfile("example.org {\n\treverse_proxy app:8000\n")
    with pytest.raises(AssertionError):
        caddyfile("example.org {\n}\n}\n")

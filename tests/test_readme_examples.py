"""The README's curl walk-through, pasted in order into bash, against a live server.

The shell blocks of "Using the API" and "Collecting answers from crowd workers" run as one
script with ``set -euo pipefail`` and ``curl --fail-with-body``: any refusal (4xx) or error
fails the test. Only two things are changed before running: ``KEY=tl_...`` gets a real
key, and ``localhost:8000`` the live server's address.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from sqlalchemy.orm import Session

from app.db.migrate import upgrade
from app.db.session import make_engine
from app.services.auth import create_key

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
SECTIONS = ("## Using the API", "## Collecting answers from crowd workers")


def walkthrough() -> list[str]:
    """The ``sh`` blocks of the walk-through sections, in order."""
    blocks = []
    for heading in SECTIONS:
        section = README.split(heading, 1)[1].split("\n## ", 1)[0]
        blocks += re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return blocks


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[str, str]]:
    port = _free_port()
    env = {
        **os.environ,
        "TRIPLETLAB_DATABASE_URL": f"sqlite:///{tmp_path / 'readme.db'}",
        "TRIPLETLAB_DATA_DIR": str(tmp_path / "data"),
        "TRIPLETLAB_DEMO": "false",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    engine = make_engine(env["TRIPLETLAB_DATABASE_URL"])
    upgrade(engine)
    with Session(engine) as db:
        _, key = create_key(db, "researcher", "readme")
    engine.dispose()
    log = (tmp_path / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                if httpx.get(f"http://{url}/openapi.json", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not start in 120 s"
            time.sleep(0.2)
        yield url, key
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_walkthrough_has_the_steps_it_claims():
    script = "\n".join(walkthrough())
    for step in ("POST localhost:8000/api/projects", "/objects", "/answers", "/plan", "/link"):
        assert step in script


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's examples use curl")
def test_the_readme_walkthrough_runs_pasted_in_order(live, tmp_path):
    url, key = live
    script = "\n".join(walkthrough())
    script, replaced = re.subn(r"^KEY=tl_\.\.\..*$", f"KEY={key}", script, flags=re.M)
    assert replaced == 1
    script = script.replace("localhost:8000", url)
    prelude = 'set -euo pipefail\ncurl() { command curl -sS --fail-with-body "$@"; echo; }\n'
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        ["bash", "-c", prelude + script],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    # What the walk-through says happened did happen.
    assert np.load(work / "triplets.npy").tolist() == [[0, 1, 2]]
    assert "kind,a,b,c" in result.stdout.replace(" ", "")
    assert "/w/faces" in result.stdout


@pytest.mark.slow
def test_out_of_range_values_keep_the_connection_alive(live):
    """An overflowing id used to answer 500 and reset the keep-alive connection."""
    import http.client

    url, key = live
    host, port = url.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    headers = {"Authorization": f"Bearer {key}"}
    try:
        connection.request("GET", f"/api/jobs/{10**20}", headers=headers)
        first = connection.getresponse()
        body = first.read().decode()
        assert first.status == 422 and "job_id" in body
        assert (first.getheader("connection") or "").lower() != "close"
        socket_before = connection.sock
        connection.request("GET", "/api/projects?x=%00", headers=headers)
        second = connection.getresponse()
        assert second.status == 422 and "NUL" in second.read().decode()
        connection.request("GET", "/api/projects", headers=headers)
        third = connection.getresponse()
        assert third.status == 200
        third.read()
        assert connection.sock is socket_before  # the same connection served all three
    finally:
        connection.close()

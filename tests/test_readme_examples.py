"""The README's curl walk-through, pasted in order into bash, against a live server.

The shell blocks of "Using the API" and "Collecting answers from crowd workers" run as one
script with ``set -euo pipefail`` and ``curl --fail-with-body``: any refusal (4xx) or error
fails the test. Only two things are changed before running: ``KEY=tl_...`` gets a real
key, and ``localhost:8000`` the live server's address.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.orm import Session

from app.db.migrate import upgrade
from app.db.session import make_engine
from app.services.auth import create_key
from tests.servers import Server

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
    database_url = f"sqlite:///{tmp_path / 'readme.db'}"
    engine = make_engine(database_url)
    upgrade(engine)
    with Session(engine) as db:
        _, key = create_key(db, "researcher", "readme")
    engine.dispose()
    served = Server(database_url, tmp_path / "data", {"TRIPLETLAB_RUN_JOBS": "true"}).start(
        timeout=120
    )
    try:
        yield f"127.0.0.1:{served.port}", key
    finally:
        served.stop()


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

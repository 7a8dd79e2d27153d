"""The examples of the README and the docs, run as they are written against a live server.

- The curl walk-through of docs/api.md, then the plan of docs/guide/collecting.md, pasted in
  order into bash with ``set -euo pipefail`` and ``curl --fail-with-body``: any refusal (4xx)
  or error fails the test.
- The README's first study, and the Python tutorial (docs/tutorial/python.md) as a notebook:
  its cells run in order in one namespace.
- The Python client page's example (docs/guide/client.md).
- The learning library's examples (docs/learning/index.md), as one notebook, without a server.

Only two things are changed before running: the key (``KEY=tl_...`` in shell, ``"tl_..."`` in
Python) gets a real one, and the address (``localhost:8000``, ``http://127.0.0.1:8000``) the
live server's.
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
DOCS = REPO / "docs"


def blocks(text: str, language: str) -> list[str]:
    """The fenced blocks of ``language`` in ``text``, in order."""
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def walkthrough() -> list[str]:
    """The ``sh`` blocks of the API's walk-through, then the plan of collecting answers."""
    api = section((DOCS / "api.md").read_text(), "## A walk-through with curl")
    collecting = (DOCS / "guide/collecting.md").read_text().split("\n## ", 1)[0]
    return blocks(api, "sh") + blocks(collecting, "sh")


@pytest.fixture(scope="module")
def live(tmp_path_factory) -> Iterator[tuple[str, str]]:
    directory = tmp_path_factory.mktemp("doc-examples")
    database_url = f"sqlite:///{directory / 'docs.db'}"
    engine = make_engine(database_url)
    upgrade(engine)
    with Session(engine) as db:
        _, key = create_key(db, "researcher", "docs")
    engine.dispose()
    served = Server(database_url, directory / "data", {"TRIPLETLAB_RUN_JOBS": "true"}).start(
        timeout=120
    )
    try:
        yield f"127.0.0.1:{served.port}", key
    finally:
        served.stop()


def run_python(cells: list[str], url: str, key: str, cwd: Path, monkeypatch) -> dict:
    """Run ``cells`` in order in one namespace, as a notebook would, in ``cwd``."""
    monkeypatch.chdir(cwd)
    namespace: dict = {"__name__": "__docs__"}
    for number, cell in enumerate(cells):
        source = cell.replace("http://127.0.0.1:8000", f"http://{url}")
        source, replaced = re.subn(r'"tl_\.\.\."', f'"{key}"', source)
        if number == 0:
            assert replaced == 1, "the first cell connects with the key placeholder"
        exec(compile(source, f"<cell {number}>", "exec"), namespace)
    return namespace


def test_the_walkthrough_has_the_steps_it_claims():
    script = "\n".join(walkthrough())
    for step in ("POST localhost:8000/api/projects", "/objects", "/answers", "/plan", "/link"):
        assert step in script


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="the API's examples use curl")
def test_the_api_walkthrough_runs_pasted_in_order(live, tmp_path):
    url, key = live
    script = "\n".join(walkthrough())
    script, replaced = re.subn(r"^KEY=tl_\.\.\..*$", f"KEY={key}", script, flags=re.M)
    assert replaced == 1
    script = script.replace("localhost:8000", url)
    prelude = 'set -euo pipefail\ncurl() { command curl -sS --fail-with-body "$@"; echo; }\n'
    result = subprocess.run(
        ["bash", "-c", prelude + script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    # What the walk-through says happened did happen.
    assert np.load(tmp_path / "triplets.npy").tolist() == [[0, 1, 2]]
    assert "kind,a,b,c" in result.stdout.replace(" ", "")
    assert "/w/faces" in result.stdout


@pytest.mark.slow
def test_the_readme_first_study_runs(live, tmp_path, monkeypatch):
    url, key = live
    cells = blocks(section(README, "## A first study"), "python")
    assert len(cells) == 1 and len(cells[0].splitlines()) <= 25  # "a first study in ~20 lines"
    study = run_python(cells, url, key, tmp_path, monkeypatch)
    assert study["triplets"].shape == (600, 3) and study["triplets"].dtype.kind == "i"
    assert 0 <= study["model"]["metrics"]["heldout_triplet_accuracy"] <= 1
    predictions = study["client"].predictions(study["model"]["id"])
    assert len(predictions) == 89  # the unlabelled half of the 178 wines
    study["client"].close()


@pytest.mark.slow
def test_the_python_tutorial_runs_as_a_notebook(live, tmp_path, monkeypatch):
    url, key = live
    cells = blocks((DOCS / "tutorial/python.md").read_text(), "python")
    notebook = run_python(cells, url, key, tmp_path, monkeypatch)
    assert len(notebook["objects"]) == 80 and (tmp_path / "digit-images/objects.csv").exists()
    assert len(notebook["answers"]) == 800
    assert notebook["triplets"].shape[1] == 3 and len(notebook["triplets"]) > 700
    assert notebook["points"].shape == (80, 2)
    assert sorted(notebook["predictions"]["index"]) == list(range(1, 80, 2))  # the unlabelled
    notebook["client"].close()


@pytest.mark.slow
def test_the_client_page_example_runs(live, tmp_path, monkeypatch, capsys):
    url, key = live
    cells = blocks((DOCS / "guide/client.md").read_text(), "python")
    run_python(cells, url, key, tmp_path, monkeypatch)
    assert capsys.readouterr().out.split()[-1] == "3"
    run_python(cells, url, key, tmp_path, monkeypatch)  # again: the slug is taken, said so
    again = capsys.readouterr().out.splitlines()
    assert again[0].startswith("409 ") and "portraits" in again[0] and again[-1] == "6"


@pytest.mark.slow
def test_the_learning_library_examples_run_as_a_notebook():
    cells = blocks((DOCS / "learning/index.md").read_text(), "python")
    assert len(cells) >= 6  # one per family: TripletBoost, kernels, embeddings, CompRF, ...
    notebook: dict = {"__name__": "__docs__"}
    for number, cell in enumerate(cells):
        exec(compile(cell, f"<cell {number}>", "exec"), notebook)
    X, y, unlabelled = notebook["X"], notebook["y"], notebook["unlabelled"]
    assert notebook["xy"].shape == (len(X), 2) and len(set(notebook["labels"])) == 3
    assert notebook["est"].score(notebook["held_out_triplets"]) > 0.7
    forest = notebook["clf"].predict(notebook["oracle"], unlabelled)
    assert (forest == y[unlabelled]).mean() > 0.6  # three blobs, chance is a third
    assert notebook["ranks"].shape == (len(X),)


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

"""The Python client against a live ``tripletlab serve``, on SQLite and PostgreSQL.

A study from Python, as a researcher runs it in a notebook: create a project, upload
objects three ways (a list, a pandas frame, a folder of images), set the plan, read the
link, let workers answer through the worker API, read the answers as a frame and as a
``triplets.npy`` array, train an embedding and read its predictions. Refusals raise the
client's exception of their status, with the API's ``detail``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from tests.servers import Server, database_url
from tripletlab import (
    Client,
    Conflict,
    InvalidInput,
    NotFound,
    TripletLabError,
    Unauthorized,
)

pytestmark = pytest.mark.slow

# Two clusters on a line; the workers answer from these coordinates.
FEATURES = [[0.0], [0.2], [0.4], [0.6], [0.8], [1.0], [5.0], [5.2], [5.4], [5.6], [5.8], [6.0]]
LABELS = ["left", "left", None, None, None, "left", "right", None, None, "right", None, "right"]


@pytest.fixture(params=["sqlite", "postgres"], scope="module")
def server(request, tmp_path_factory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp(f"client-{request.param}")
    url = database_url(request.param, directory, "client")
    served = Server(url, directory / "data", {"TRIPLETLAB_RUN_JOBS": "true"}).start()
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(server.base, server.admin_key(), progress=True) as opened:
        yield opened


def answer_as_a_worker(base: str, slug: str, participant: str, n: int) -> int:
    """Answer ``n`` questions as the worker page does, each from the features' distances."""
    with httpx.Client(base_url=base, timeout=30) as http:
        opened = http.post(f"/api/w/{slug}/sessions", json={"participant": participant})
        assert opened.status_code == 201, opened.text
        session = opened.json()
        headers = {"Authorization": f"Bearer {session['session_token']}"}
        step = http.get(f"/api/w/sessions/{session['session_id']}/next", headers=headers).json()
        answered = 0
        while answered < n and step.get("query"):
            anchor, left, right = (o["index"] for o in step["query"]["objects"])
            near = (
                left
                if abs(FEATURES[left][0] - FEATURES[anchor][0])
                < abs(FEATURES[right][0] - FEATURES[anchor][0])
                else right
            )
            reply = http.post(
                f"/api/w/sessions/{session['session_id']}/answers",
                json={"token": step["query"]["token"], "choice": near, "client_ms": 1200},
                headers=headers,
            )
            assert reply.status_code == 201, reply.text
            answered += 1
            step = reply.json()["next"]  # the answer's reply carries the next question
        return answered


def write_images(folder: Path) -> None:
    folder.mkdir()
    for name, colour in (
        ("b-red", (200, 30, 30)),
        ("a-green", (30, 200, 30)),
        ("c-blue", (0, 0, 220)),
    ):
        Image.new("RGB", (8, 8), colour).save(folder / f"{name}.png")
    (folder / "notes.txt").write_text("not an image: left out")


def test_a_study_from_python(server: Server, client: Client):
    project = client.create_project("lines", "Lines", instructions="Pick the closer one.")
    assert project["slug"] == "lines" and project["instructions"] == "Pick the closer one."

    # Objects from a list, then from a frame (features as a column of lists, gaps in labels).
    first = client.upload_objects(
        "lines",
        [{"name": f"x{i}", "features": FEATURES[i], "label": LABELS[i]} for i in range(6)],
    )
    assert first["index"].tolist() == [0, 1, 2, 3, 4, 5]
    frame = pd.DataFrame(
        {
            "name": [f"x{i}" for i in range(6, 12)],
            "features": FEATURES[6:],
            "label": [1.0, None, None, 1.0, None, 1.0],  # pandas makes these floats
        }
    )
    second = client.upload_objects("lines", frame)
    assert second["index"].tolist() == [6, 7, 8, 9, 10, 11]
    assert second["label"][0] == "1" and pd.isna(second["label"][1])  # as written, not "1.0"
    assert second["features"].tolist() == FEATURES[6:]
    client.update_project("lines", name="Lines on a line")
    # Give the second cluster its real names (the frame's labels showed the float rule).
    for index in (6, 9, 11):
        client.request("PATCH", f"/api/projects/lines/objects/{index}", json={"label": "right"})
    objects = client.objects("lines")
    assert [None if pd.isna(label) else label for label in objects["label"]] == LABELS

    plan = client.set_plan(
        "lines",
        {"strategies": [{"kind": "random"}], "queries_per_session": 40, "repeat_rate": 0},
    )
    assert plan["strategies"][0]["kind"] == "random" and plan["queries_per_session"] == 40
    link = client.link("lines")
    assert link["worker_url"].endswith("/w/lines")

    answered = answer_as_a_worker(server.base, "lines", "ada", 24)
    answered += answer_as_a_worker(server.base, "lines", "bob", 6)
    assert answered == 30

    answers = client.answers("lines")
    assert len(answers) == 30 and set(answers["kind"]) == {"triplet"}
    assert set(answers["participant"]) == {"ada", "bob"}
    assert str(answers["a"].dtype) == "Int64"
    assert pd.api.types.is_datetime64_any_dtype(answers["created_at"])

    triplets = client.triplets("lines")
    assert triplets.dtype.kind == "i" and triplets.shape == (30, 3)
    assert sorted(map(tuple, triplets.tolist())) == sorted(
        map(tuple, answers[["a", "b", "c"]].astype(int).to_numpy().tolist())
    )
    x = np.asarray(FEATURES)[:, 0]
    a, b, c = triplets.T
    assert (abs(x[a] - x[b]) < abs(x[a] - x[c])).all()  # rows are (anchor, near, far)
    assert len(client.participants("lines")) == 2

    model = client.train("lines", "embedding", {"dims": 2, "method": "soe"})
    assert model["kind"] == "embedding" and model["n_answers"] == 30
    assert 0 <= model["metrics"]["heldout_triplet_accuracy"] <= 1
    predictions = client.predictions(model["id"])
    unlabelled = [i for i, label in enumerate(LABELS) if label is None]
    assert sorted(predictions["index"]) == unlabelled
    assert set(predictions["label"]) <= {"left", "right"}
    assert client.embedding(model["id"]).shape == (12, 2)
    curve = client.models("lines", kind="embedding")
    assert curve["id"].tolist() == [model["id"]] and "metrics.heldout_triplet_accuracy" in curve

    advice = client.advice("lines", "embedding", target=0.9)
    assert len(advice["points"]) == 1  # the one model so far: its answers and its figure
    assert advice["status"] in ("reached", "insufficient_data")  # no curve from one point

    queued = client.train("lines", "embedding", {"dims": 1}, wait=False)
    assert queued["status"] in ("queued", "running", "succeeded")
    assert client.wait(queued["id"])["params"]["dims"] == 1


def test_images_from_a_folder(client: Client, tmp_path: Path):
    client.create_project("pictures", "Pictures")
    folder = tmp_path / "pictures"
    write_images(folder)
    created = client.upload_objects("pictures", folder)
    assert created["name"].tolist() == ["a-green", "b-red", "c-blue"]  # in the names' order
    assert created["image_url"].str.startswith("/media/").all()
    assert len(client.objects("pictures")) == 3
    answers = client.answers("pictures")  # none yet: the export's columns all the same
    assert len(answers) == 0 and {"kind", "a", "b", "c", "outcome"} <= set(answers.columns)
    assert client.triplets("pictures").shape == (0, 3)
    with pytest.raises(ValueError, match="no images"):
        client.upload_objects("pictures", tmp_path)


def test_refusals_carry_the_status_and_the_detail(server: Server, client: Client):
    client.create_project("refusals", "Refusals")
    with pytest.raises(Conflict) as taken:
        client.create_project("refusals", "Again")
    assert taken.value.status_code == 409 and "refusals" in taken.value.detail

    with pytest.raises(InvalidInput) as invalid:
        client.upload_objects("refusals", [{"name": "ok"}, {"name": ""}])
    assert invalid.value.status_code == 422 and "name" in invalid.value.detail
    assert len(client.objects("refusals")) == 0  # a refused upload changes nothing

    with pytest.raises(NotFound) as missing:
        client.project("no-such-project")
    assert missing.value.status_code == 404 and isinstance(missing.value, TripletLabError)

    client.upload_objects("refusals", ["a", "b", "c"])
    with pytest.raises(InvalidInput, match="answers"):
        client.train("refusals", "embedding")  # no answers yet: nothing is queued
    with pytest.raises(ValueError, match="unknown object columns"):
        client.upload_objects("refusals", pd.DataFrame({"name": ["d"], "colour": ["red"]}))

    with Client(server.base, "tl_not-a-key") as stranger, pytest.raises(Unauthorized) as denied:
        stranger.projects()
    assert denied.value.status_code == 401 and denied.value.detail


def test_a_ranked_grid_study_from_python(client: Client):
    client.create_project("grids", "Grids")
    client.upload_objects("grids", [{"name": f"p{i}", "features": f} for i, f in
                                    enumerate(FEATURES)])  # fmt: skip
    plan = {"strategies": [{"kind": "random", "shape": {"type": "rank", "n": 4, "k": 2}}],
            "queries_per_session": 10, "repeat_rate": 0}  # fmt: skip
    client.set_plan("grids", plan)
    assert client.simulate("grids", 20, workers=2, noise=0.0) == 20
    answers = client.answers("grids")
    assert set(answers["shape"]) == {"4-rank-2"}
    assert all(len(choice) == 2 for choice in answers["choice"])
    trials = client.shape_answers("grids", "4-rank-2")
    assert trials.shape == (20, 5)
    assert client.triplets("grids").shape == (20 * 5, 3)  # 3 + 2 triplets per answer

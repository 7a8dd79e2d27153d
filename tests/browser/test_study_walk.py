"""A researcher who has never seen Triplet Lab sets up and runs a study in the browser.

One walk, on SQLite and on PostgreSQL, against a real ``tripletlab serve`` (its job runner
on: it checks the stop rule): sign in → create the project (a refusal first) → upload a ZIP
of images with ``objects.csv`` by drag and drop, a CSV the server refuses (its line named),
then a good CSV → edit a label in the gallery → build the plan (a refusal shown beside the
param it names, the JSON one click away) → preview it as a worker in a new tab → the launch
checklist and its links → launch → two workers answer (one on the worker page, paused and
resumed on the way; one through the worker API) → monitor → the stop rule stops it →
download the study bundle and look inside. Every step is screenshot at 1280 and 390 px into
``test-artifacts/walk-<database>-<step>-<width>.png``.
"""

from __future__ import annotations

import csv
import io
import json
import time
import zipfile
from base64 import b64encode
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image, ImageDraw
from sqlalchemy.orm import Session

from app.db.migrate import upgrade
from app.db.session import make_engine
from app.services.auth import create_key
from tests import servers
from tests.browser.conftest import SERVER_START_TIMEOUT

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SLUG = "shapes-and-words"
COLORS = ("red", "blue", "green", "orange")
SHAPES = [(color, shape) for shape in ("circle", "square") for color in COLORS]
STOP_AFTER = 10  # the plan's stop rule: answers from workers
PER_SESSION = 6
PROLIFIC_DONE = "https://app.prolific.com/submissions/complete?cc=C0DE42"
WIDEST = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > 392)
  .slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id)"""


class Walk:
    """The server, an admin's API client, and the screenshots of one database's walk."""

    def __init__(self, url: str, key: str, database: str, artifacts: Path) -> None:
        self.url = url
        self.api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"})
        self.key = key
        self.database = database
        self.artifacts = artifacts
        self.shots: list[str] = []

    def shoot(self, page: Any, step: str) -> None:
        """Screenshots at 1280 and 390 px; at 390 nothing may make the page scroll sideways."""
        size = page.viewport_size
        for width, height in ((1280, 900), (390, 844)):
            page.set_viewport_size({"width": width, "height": height})
            page.evaluate("() => window.scrollTo(0, 0)")  # a sticky header stays on top
            page.wait_for_timeout(50)
            if width == 390:
                scroll = page.evaluate("() => document.documentElement.scrollWidth")
                assert scroll <= 390, f"{step} is {scroll} px wide: {page.evaluate(WIDEST)}"
            name = f"walk-{self.database}-{step}-{width}.png"
            page.screenshot(path=str(self.artifacts / name), full_page=True)
            self.shots.append(name)
        page.set_viewport_size(size)

    def study(self) -> dict:
        response = self.api.get(f"/api/projects/{SLUG}/study")
        response.raise_for_status()
        return response.json()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def walk(request, tmp_path_factory, artifacts) -> Iterator[Walk]:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp(f"walk-{request.param}")
    database_url = servers.database_url(request.param, root, "walk")
    engine = make_engine(database_url)
    upgrade(engine)
    with Session(engine) as db:
        _, key = create_key(db, "admin", "Study walk")
    engine.dispose()
    served = servers.Server(
        database_url, root / "data", {"TRIPLETLAB_RUN_JOBS": "true", "TRIPLETLAB_PUBLIC_URL": ""}
    ).start(timeout=SERVER_START_TIMEOUT)
    walk = Walk(served.base, key, request.param, artifacts)
    try:
        yield walk
    finally:
        walk.api.close()
        served.stop()


def _png(color: str, shape: str) -> bytes:
    image = Image.new("RGB", (96, 96), "white")
    draw = ImageDraw.Draw(image)
    box = (16, 16, 80, 80)
    (draw.ellipse if shape == "circle" else draw.rectangle)(box, fill=color)
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def _images_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        rows = ["name,label,text"]
        for color, shape in SHAPES:
            archive.writestr(f"{color}-{shape}.png", _png(color, shape))
            rows.append(f"{color}-{shape},{shape},A {color} {shape}")
        archive.writestr("objects.csv", "\n".join(rows) + "\n")
    return out.getvalue()


WORDS_CSV = (
    "name,text,label\nsun,The sun,word\nmoon,The moon,word\nstar,A star,word\ncomet,A comet,word\n"
)
BAD_CSV = "name,text,label\nsun,The sun,word\n,The moon,word\n"


def _drop(page: Any, name: str, content: bytes, kind: str) -> None:
    """Drop a file on the upload area, as a person dragging it from their desktop does."""
    page.evaluate(
        """([name, data, kind]) => {
            const bytes = Uint8Array.from(atob(data), c => c.charCodeAt(0));
            const transfer = new DataTransfer();
            transfer.items.add(new File([bytes], name, {type: kind}));
            const zone = document.getElementById('dropzone');
            for (const type of ['dragenter', 'dragover', 'drop']) {
                zone.dispatchEvent(new DragEvent(type, {dataTransfer: transfer, bubbles: true,
                                                        cancelable: true}));
            }
        }""",
        [name, b64encode(content).decode(), kind],
    )


def _answer_on_page(page: Any, count: int) -> None:
    """Answer ``count`` questions on the worker page, each once it shows."""
    for _ in range(count):
        page.wait_for_selector("#question:not([hidden]) button.choice")
        token = page.get_attribute("#question", "data-token")
        page.locator("#question button.choice").first.click()
        page.wait_for_function(
            "t => document.querySelector('#question').dataset.token !== t"
            " || !document.querySelector('#done').hidden",
            arg=token,
        )


def _answer_by_api(url: str, participant: str) -> int:
    """A worker who answers through the worker API until the session ends; how many."""
    with httpx.Client(base_url=url, timeout=30) as client:
        opened = client.post(f"/api/w/{SLUG}/sessions", json={"participant": participant}).json()
        headers = {"Authorization": f"Bearer {opened['session_token']}"}
        body = client.get(f"/api/w/sessions/{opened['session_id']}/next", headers=headers).json()
        answered = 0
        while not body["done"]:
            query = body["query"]
            reply = client.post(
                f"/api/w/sessions/{opened['session_id']}/answers",
                json={"token": query["token"], "choice": query["objects"][1]["index"],
                      "client_ms": 1200},
                headers=headers,
            )  # fmt: skip
            assert reply.status_code == 201, reply.text
            answered += 1
            body = reply.json()["next"]
        return answered


def test_a_researcher_sets_up_runs_and_downloads_a_study(walk, browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    context.set_default_timeout(30_000)
    errors: list[str] = []
    context.on("weberror", lambda error: errors.append(str(error.error)))
    page = context.new_page()
    page.on("dialog", lambda dialog: dialog.accept())
    page.on("console", lambda m: errors.append(m.text) if "Content Security" in m.text else None)
    try:
        _walk(walk, context, page)
    finally:
        context.close()
    assert errors == [], f"script errors or CSP violations: {errors}"


def _walk(walk: Walk, context: Any, page: Any) -> None:
    url = walk.url
    # 1. Sign in, and start a project from the home page.
    page.goto(f"{url}/dashboard")
    walk.shoot(page, "01-signin")
    page.fill("#api_key", walk.key)
    page.click("#signin")
    page.click("#new-project")
    page.wait_for_selector("#project-form")
    # A project without a name is refused, beside the name (and the short name).
    page.click("#create-project")
    page.wait_for_selector("[data-path='name'] .field-error")
    assert "at least 1 character" in page.text_content("[data-path='name'] .field-error")
    assert page.locator("[data-path='slug'] .field-error").count() == 1
    walk.shoot(page, "02-new-project-refused")
    page.fill("#f-name", "Shapes and words")
    assert page.input_value("#f-slug") == SLUG  # the short name follows the name until typed
    page.fill(
        "#f-instructions",
        "Look at the top picture or word.\n\nPick the one below that is more like it.",
    )
    page.fill("#f-consent", "I agree that my answers are kept for research, without my name.")
    walk.shoot(page, "03-new-project")
    with page.expect_navigation(url=f"**/dashboard/projects/{SLUG}/objects"):
        page.click("#create-project")

    # 2. Objects: a ZIP of images with objects.csv, dropped; a refused CSV; a good CSV.
    assert page.is_visible("#no-objects")
    walk.shoot(page, "04-objects-empty")
    _drop(page, "shapes.zip", _images_zip(), "application/zip")
    page.wait_for_selector("#upload-done:not([hidden])")
    assert page.text_content("#upload-done") == "Added 8 objects from shapes.zip."
    assert page.get_attribute("#upload-bar", "aria-valuenow") == "100"
    page.wait_for_function("() => document.querySelectorAll('#object-grid li').length === 8")
    assert page.locator("#object-grid img").count() == 8
    walk.shoot(page, "05-objects-images")
    page.set_input_files("#upload-file", {"name": "words.csv", "mimeType": "text/csv",
                                          "buffer": BAD_CSV.encode()})  # fmt: skip
    page.wait_for_selector("#upload-error:not([hidden])")
    assert "line 3" in page.text_content("#upload-detail")  # the line the server names
    walk.shoot(page, "06-upload-refused")
    page.set_input_files("#upload-file", {"name": "words.csv", "mimeType": "text/csv",
                                          "buffer": WORDS_CSV.encode()})  # fmt: skip
    page.wait_for_selector("#upload-done:not([hidden])")
    page.wait_for_function("() => document.querySelectorAll('#object-grid li').length === 12")
    assert "12 objects" in page.text_content("#project-facts")
    # Edit a label in the gallery.
    card = page.locator("#object-9")
    card.locator("summary").click()
    card.locator("input[name=label]").fill("night sky")
    card.locator("button[type=submit]").click()
    page.wait_for_function(
        "() => document.querySelector('#object-9 [data-field=label]').textContent === 'night sky'"
    )
    assert walk.api.get(f"/api/projects/{SLUG}/objects/9").json()["label"] == "night sky"
    walk.shoot(page, "07-objects-gallery")

    # 3. The plan builder: a refusal beside the param, then a plan with a stop rule.
    page.click("#tab-plan")
    page.wait_for_selector("#strategy-list .strategy-card")
    walk.shoot(page, "08-plan-builder")
    page.click("#add-strategy")
    second = page.locator("#strategy-list .strategy-card").nth(1)
    second.locator("select[data-role=kind]").select_option("landmark_k1")
    second.locator("[data-path='strategies.1.params.n_landmarks'] input").fill("50")
    page.fill("[data-path='queries_per_session'] input", str(PER_SESSION))
    page.fill("[data-path='repeat_rate'] input", "0")
    page.fill("[data-path='completion.redirect_url'] input", PROLIFIC_DONE)
    page.fill("[data-path='stop.answers'] input", str(STOP_AFTER))
    page.click("#save-plan")
    error = page.locator("[data-path='strategies.1.params.n_landmarks'] .field-error")
    error.wait_for()
    assert "exceeds the 12 objects" in error.text_content()
    walk.shoot(page, "09-plan-refused")
    second.locator("[data-path='strategies.1.params.n_landmarks'] input").fill("4")
    page.click("#plan-json-view summary")  # the JSON, one click away, in step with the form
    shown = json.loads(page.input_value("#plan-json"))
    assert shown["strategies"][1] == {"kind": "landmark_k1", "params": {"n_landmarks": 4}}
    assert shown["stop"] == {"answers": STOP_AFTER} and shown["status"] == "draft"
    walk.shoot(page, "10-plan-json")
    with page.expect_navigation():
        page.click("#save-plan")
    assert page.get_attribute("#study-status", "data-status") == "draft"
    plan = walk.api.get(f"/api/projects/{SLUG}/plan").json()
    assert plan["queries_per_session"] == PER_SESSION and plan["stop"]["answers"] == STOP_AFTER

    # 4. Preview as a worker, in a new tab: answers counted nowhere.
    with context.expect_page() as opened:
        page.click("#preview-plan")
    tab = opened.value
    tab.wait_for_selector("#study-preview-note:not([hidden])")
    assert "I agree" in tab.text_content("#start")
    tab.click("#start")
    _answer_on_page(tab, 3)
    walk.shoot(tab, "11-preview")
    tab.close()
    assert walk.api.get(f"/api/projects/{SLUG}/answers").json() == []

    # 5. The launch checklist, the links, and launch.
    page.click("#tab-launch")
    checks = {
        li.get_attribute("data-item"): li.get_attribute("class")
        for li in page.locator(".checklist li").all()
    }
    assert checks["Preview"] == "check-ok" and checks["Completion"] == "check-ok"
    assert checks["Objects"] == checks["Plan"] == checks["Consent"] == "check-ok"
    assert "3 questions answered in previews" in page.text_content("[data-item=Preview]")
    assert "PROLIFIC_PID" in page.input_value("#link-prolific")
    assert "ExternalQuestion" in page.input_value("#link-mturk")
    assert "my answers are kept" in page.text_content("#shown-consent")
    walk.shoot(page, "12-launch-checklist")
    with page.expect_navigation():
        page.click("#launch-study")
    assert page.get_attribute("#study-status", "data-status") == "running"
    walk.shoot(page, "13-launched")

    # 6. A worker on the worker page (paused and resumed on the way), one through the API.
    worker_context = context.browser.new_context(viewport={"width": 390, "height": 844})
    worker_context.route("https://app.prolific.com/**", lambda r: r.fulfill(body="Prolific"))
    worker = worker_context.new_page()
    worker.goto(f"{url}/w/{SLUG}?participant=alice")
    worker.click("#start")
    _answer_on_page(worker, 2)
    page.click("#pause-study")
    page.wait_for_selector("#study-status[data-status=paused]")
    _answer_on_page(worker, 1)  # the question on screen still counts; then it says paused
    worker.wait_for_selector("#done:not([hidden])")
    assert worker.text_content("#done-title") == "Paused"
    assert "come back later" in worker.text_content("#done-message")
    walk.shoot(worker, "14-worker-paused")
    page.click("#resume-study")
    page.wait_for_selector("#study-status[data-status=running]")
    worker.click("#retry")
    _answer_on_page(worker, PER_SESSION - 3)
    worker.wait_for_selector("#done:not([hidden])")
    assert worker.text_content("#done-title") == "All done"
    walk.shoot(worker, "15-worker-done")
    worker_context.close()

    # 7. Monitor: the answers, and the adviser's estimate of when the stop rule stops it.
    page.click("#tab-monitor")
    assert page.text_content("#project-tiles .tile-value") == str(PER_SESSION)  # no preview
    estimate = page.text_content("#stop-estimate")
    assert f"Stops in about {STOP_AFTER - PER_SESSION} more answers" in estimate
    walk.shoot(page, "16-monitor")
    bob = _answer_by_api(url, "bob")
    assert STOP_AFTER - PER_SESSION <= bob <= PER_SESSION
    deadline = time.monotonic() + 60
    while walk.study()["status"] != "stopped":  # the job runner checks the rule every 5 s
        assert time.monotonic() < deadline, walk.study()
        time.sleep(0.5)
    page.reload()
    assert page.get_attribute("#study-status", "data-status") == "stopped"
    assert "Stop rule met" in page.text_content("#stop-estimate")
    walk.shoot(page, "17-stopped")
    public = httpx.get(f"{url}/api/w/{SLUG}", timeout=10).json()
    assert public["status"] == "stopped" and public["accepting"] is False

    # 8. The study bundle.
    with page.expect_download() as download:
        page.click("#monitor-bundle")
    archive = zipfile.ZipFile(download.value.path())
    names = set(archive.namelist())
    assert f"{SLUG}/dataset_description.json" in names
    description = json.loads(archive.read(f"{SLUG}/dataset_description.json"))
    assert description["@type"] == "Dataset" and description["name"] == "Shapes and words"
    data = f"{SLUG}/data/study-shapesandwords_data.csv"
    rows = list(csv.DictReader(io.StringIO(archive.read(data).decode())))
    assert len(rows) == PER_SESSION + bob  # alice's and bob's; the preview's 3 are not there
    assert {r["source"] for r in rows} == {"crowd"}
    assert sum(n.startswith(f"{SLUG}/materials/images/") for n in names) == 8
    objects_csv = archive.read(f"{SLUG}/materials/objects.csv").decode()
    objects = list(csv.DictReader(io.StringIO(objects_csv)))
    assert len(objects) == 12 and objects[9]["label"] == "night sky"
    assert json.loads(archive.read(f"{SLUG}/plan.json"))["stop"]["answers"] == STOP_AFTER
    page.click("#tab-launch")
    walk.shoot(page, "18-bundle")
    assert len(walk.shots) == 36

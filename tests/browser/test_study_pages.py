"""The study pages the walk (test_study_walk.py) passes by: the home page's new project, a
project's details (edited), its deletion (which names what is lost), and a study that cannot
be launched yet. Screenshots at 1280 and 390 px into ``test-artifacts/study-*.png``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.support import plan

pytestmark = pytest.mark.browser

WIDEST = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > 392)
  .slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id)"""


def shoot(page: Any, artifacts: Path, name: str) -> None:
    for width, height in ((1280, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.evaluate("() => window.scrollTo(0, 0)")
        if width == 390:
            scroll = page.evaluate("() => document.documentElement.scrollWidth")
            assert scroll <= 390, f"{name} is {scroll} px wide: {page.evaluate(WIDEST)}"
        page.screenshot(path=str(artifacts / f"study-{name}-{width}.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def sign_in(page: Any, server: Any) -> None:
    key = server.api.headers["Authorization"].split(" ", 1)[1]
    page.goto(f"{server.url}/dashboard")
    page.fill("#api_key", key)
    page.click("#signin")
    page.wait_for_selector("#signout")


def _answer_one(server: Any, slug: str) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        opened = client.post(f"/api/w/{slug}/sessions", json={"participant": "ann"}).json()
        headers = {"Authorization": f"Bearer {opened['session_token']}"}
        query = client.get(f"/api/w/sessions/{opened['session_id']}/next", headers=headers)
        shown = query.json()["query"]
        body = {"token": shown["token"], "choice": shown["objects"][1]["index"]}
        client.post(
            f"/api/w/sessions/{opened['session_id']}/answers", json=body, headers=headers
        ).raise_for_status()


def test_details_are_edited_and_deletion_names_what_is_lost(server, page, artifacts):
    objects = [{"name": f"word {i}", "text": f"Word {i}"} for i in range(5)]
    slug = server.project(objects, plan=plan(), prefix="details", name="Words <b>bold</b>")
    _answer_one(server, slug)
    sign_in(page, server)
    assert page.is_visible("#new-project")
    row = page.locator("#projects-table tr", has_text="Words <b>bold</b>")
    assert row.locator(".badge.status-running").count() == 1
    shoot(page, artifacts, "home")

    page.goto(f"{server.url}/dashboard/projects/{slug}/details")
    page.fill("#f-instructions", "Pick the closer word.\n\nTake your time.")
    page.fill("#f-name", "")
    page.click("#save-details")
    page.locator("[data-path='name'] .field-error").wait_for()  # refused beside the name
    page.fill("#f-name", "Words, renamed")
    with page.expect_navigation():
        page.click("#save-details")
    project = server.api.get(f"/api/projects/{slug}").json()
    assert project["name"] == "Words, renamed"
    assert project["instructions"] == "Pick the closer word.\n\nTake your time."
    lost = page.text_content("#lost")
    assert "1 answer " in " ".join(lost.split()) and "5 objects" in " ".join(lost.split())
    assert page.is_disabled("#delete-project")
    page.fill("#f-confirm", "not-the-slug")
    assert page.is_disabled("#delete-project")
    page.fill("#f-confirm", slug)
    assert page.is_enabled("#delete-project")
    shoot(page, artifacts, "details")
    with page.expect_navigation(url=f"{server.url}/dashboard"):
        page.click("#delete-project")
    assert server.api.get(f"/api/projects/{slug}").status_code == 404
    assert page.locator("#projects-table tr", has_text="Words, renamed").count() == 0


def test_a_study_without_objects_or_plan_cannot_launch(server, page, artifacts):
    slug = server.project(None, prefix="empty", name="Nothing yet")
    sign_in(page, server)
    page.goto(f"{server.url}/dashboard/projects/{slug}/launch")
    states = {
        li.get_attribute("data-item"): li.get_attribute("class")
        for li in page.locator(".checklist li").all()
    }
    assert states["Objects"] == "check-todo" and states["Plan"] == "check-todo"
    assert page.locator("#launch-study").count() == 0  # no plan: nothing to launch
    assert page.get_attribute("#study-status", "data-status") == "no_plan"
    shoot(page, artifacts, "launch-empty")
    page.goto(f"{server.url}/dashboard/projects/{slug}/plan")
    page.wait_for_selector("#strategy-list .strategy-card")
    assert page.is_hidden("#preview-plan")  # nothing to preview before a plan
    page.goto(f"{server.url}/w/{slug}")
    page.wait_for_selector("#closed-note:not([hidden])")
    assert "not accepting" in page.text_content("#closed-note")


def test_json_objects_are_uploaded_and_a_refusal_is_listed(server, page, artifacts):
    slug = server.project(None, prefix="json", name="From JSON")
    sign_in(page, server)
    page.goto(f"{server.url}/dashboard/projects/{slug}/objects")
    bad = b'[{"name": "ok"}, {"name": "", "label": "x"}]'
    page.set_input_files(
        "#upload-file", {"name": "objects.json", "mimeType": "application/json", "buffer": bad}
    )
    page.wait_for_selector("#upload-error:not([hidden])")
    refusal = page.text_content("#upload-error")
    assert "name" in refusal and "1" in refusal  # which object, which field
    assert server.api.get(f"/api/projects/{slug}").json()["n_objects"] == 0
    good = b'[{"name": "cat", "text": "A cat", "label": "animal"}]'
    page.set_input_files(
        "#upload-file", {"name": "objects.json", "mimeType": "application/json", "buffer": good}
    )
    page.wait_for_selector("#upload-done:not([hidden])")
    assert page.text_content("#upload-done") == "Added 1 object from objects.json."
    page.wait_for_function("() => document.querySelectorAll('#object-grid li').length === 1")
    shoot(page, artifacts, "objects-json")

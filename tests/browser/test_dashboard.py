"""The dashboard in Chromium against a live server filled by a simulated crowd.

The server is ``tripletlab serve`` on a fresh SQLite file. Two projects are filled through
the worker API by ``app.simulate`` (real answers, recorded as simulated) and trained twice
in-process with the real training code, so every figure has data: the digits (images,
labels, a third of them hidden for TripletBoost to predict) and a ranking project of pairs
with ties for SVMcompare. Object names, texts, the project name and its instructions carry
XSS payloads, which must show as text on every page.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.db.migrate import upgrade
from app.db.models import Job, Object, Project
from app.db.session import make_engine
from app.services.auth import create_key
from app.simulate import simulate
from app.training.jobs import claim_job, create_job
from app.training.run import run_training
from tests import servers
from tests.browser.conftest import REPO, SERVER_START_TIMEOUT

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # the fixture fills and trains: ~1 min

XSS = '<img src=x onerror="window.__xss=1">'
SCRIPT = "<script>window.__xss=2</script>"
DIGITS = "digits-demo"
RANKED = "ranked"
PAIR_PLAN = {
    "strategies": [{"kind": "pairs", "weight": 1}],
    "queries_per_session": 20,
    "redundancy": 3,
    "repeat_rate": 0,
}


@dataclass
class Filled:
    url: str
    admin_key: str
    researcher_key: str
    database_url: str
    api: httpx.Client

    def train_all(self, engine: Any) -> None:
        with Session(engine) as db:
            for slug, kind, params in (
                (DIGITS, "tripletboost", {"n_estimators": 2000, "cv_folds": 3}),
                (DIGITS, "kernel", {}),
                (DIGITS, "embedding", {}),
                (RANKED, "svmcompare", {"solver": "dual"}),
                (DIGITS, "reliability", {}),
            ):
                project = db.query(Project).filter_by(slug=slug).one()
                job = create_job(db, project, kind, params, trigger="cli")
                claim_job(db, job.id)
                status = run_training(db, job.id)
                db.rollback()  # a new transaction: what the requests committed since
                assert status == "succeeded", f"{kind}: {db.get(Job, job.id).error}"

    def crowd(self, slug: str, answers: int, seed: int, **options: Any) -> None:
        result = simulate(
            self.url, slug, self.admin_key, workers=3, answers=answers, seed=seed, **options
        )
        assert not result.errors, result.errors[:3]


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Filled]:
    root = tmp_path_factory.mktemp("dashboard-server")
    database_url = f"sqlite:///{root / 'tripletlab.db'}"
    env = {
        **os.environ,
        "TRIPLETLAB_DATABASE_URL": database_url,
        "TRIPLETLAB_DATA_DIR": str(root / "data"),
        "TRIPLETLAB_DEMO": "false",
        "TRIPLETLAB_RUN_JOBS": "false",
        "TRIPLETLAB_PUBLIC_URL": "",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    engine = make_engine(database_url)
    upgrade(engine)
    with Session(engine) as db:
        _, admin_key = create_key(db, "admin", "Ops admin")
        _, researcher_key = create_key(db, "researcher", f"Researcher {XSS}")
    # The digits demo, made in-process by the server's own code (its media go to data_dir).
    script = (
        "from sqlalchemy.orm import Session\n"
        "from app.db.session import make_engine\n"
        "from app.services.demo import create_demo\n"
        f"with Session(make_engine({database_url!r})) as db: create_demo(db, n_objects=60)\n"
    )
    subprocess.run([sys.executable, "-c", script], env=env, cwd=root, check=True, timeout=120)
    with Session(engine) as db:
        db.execute(
            update(Project)
            .where(Project.slug == DIGITS)
            .values(name=f"Digits {XSS}", instructions=f"Compare the digits. {SCRIPT}")
        )
        # Hide a third of the labels: TripletBoost predicts them, the gallery shows them.
        project_id = db.query(Project.id).filter_by(slug=DIGITS).scalar()
        db.execute(
            update(Object)
            .where(Object.project_id == project_id, Object.index % 3 == 0)
            .values(label=None)
        )
        db.execute(
            update(Object)
            .where(Object.project_id == project_id, Object.index == 1)
            .values(name=f"digit {XSS}", text=SCRIPT)
        )
        db.commit()
    served = servers.Server(database_url, root / "data", {"TRIPLETLAB_PUBLIC_URL": ""}).start(
        timeout=SERVER_START_TIMEOUT
    )
    url = served.base
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin_key}"}, timeout=60)
    server = Filled(url, admin_key, researcher_key, database_url, api)
    try:
        # A ranking project of pairs, owned by the researcher, with XSS in names and texts.
        researcher = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {researcher_key}"}, timeout=60
        )
        researcher.post(
            "/api/projects", json={"slug": RANKED, "name": f"Ranked {SCRIPT}"}
        ).raise_for_status()
        rng = np.random.default_rng(0)
        objects = [
            {
                "name": f"item {i} {XSS if i == 0 else ''}".strip(),
                "text": f"text {i} {SCRIPT if i == 0 else ''}".strip(),
                "features": rng.normal(size=3).round(4).tolist(),
                "target": float(i),
            }
            for i in range(24)
        ]
        researcher.post(f"/api/projects/{RANKED}/objects", json=objects).raise_for_status()
        researcher.put(f"/api/projects/{RANKED}/plan", json=PAIR_PLAN).raise_for_status()
        researcher.close()
        server.crowd(DIGITS, 400, seed=1)
        server.crowd(RANKED, 200, seed=1, tie_margin=0.8)
        server.train_all(engine)
        server.crowd(DIGITS, 400, seed=2)
        server.crowd(RANKED, 200, seed=2, tie_margin=0.8)
        server.train_all(engine)
        yield server
    finally:
        api.close()
        engine.dispose()
        served.stop()


def sign_in(page: Any, url: str, key: str) -> None:
    page.goto(f"{url}/dashboard")
    page.fill("#api_key", key)
    page.click("#signin")
    page.wait_for_selector("#signout")


WIDEST = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > 392)
  .slice(0, 5).map(e => e.tagName + '.' + e.className + '#' + e.id)"""


def no_xss(page: Any) -> None:
    assert page.evaluate("() => window.__xss") is None
    assert page.dialogs == []


def shoot(page: Any, artifacts: Path, name: str) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    page.screenshot(path=str(artifacts / f"dashboard-{name}-1280.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    # Usable at 390 px: nothing makes the page itself scroll sideways (tables scroll inside).
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390, f"{name} is {width} px wide at 390 px: {page.evaluate(WIDEST)}"
    page.screenshot(path=str(artifacts / f"dashboard-{name}-390.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 900})


def test_sign_in_page_and_wrong_key(filled, page, artifacts):
    page.goto(f"{filled.url}/dashboard")
    assert page.is_visible("#api_key")
    shoot(page, artifacts, "signin")
    page.fill("#api_key", "tl_not-a-key")
    page.click("#signin")
    assert "Unknown or revoked API key" in page.text_content("#signin-error")


def test_home_lists_projects_with_todays_answers(filled, page, artifacts):
    sign_in(page, filled.url, filled.admin_key)
    table = page.locator("#projects-table")
    assert table.locator("tbody tr").count() == 2
    digits = table.locator("tr", has_text="Digits")
    assert "Digits " + XSS in digits.text_content()  # the payload shows as text
    cells = digits.locator("td")
    assert int(cells.nth(3).text_content().replace(",", "")) == 800  # answers in total
    assert 0 < int(cells.nth(2).text_content().replace(",", "")) <= 800  # today (UTC)
    assert cells.nth(4).locator("svg.spark polyline").count() == 1  # the last hour
    assert int(cells.nth(5).text_content()) >= 1  # participants active in the last 10 min
    no_xss(page)
    shoot(page, artifacts, "home")


def test_project_page_renders_every_figure(filled, page, artifacts):
    sign_in(page, filled.url, filled.admin_key)
    page.goto(f"{filled.url}/dashboard/projects/{DIGITS}")
    assert page.text_content("#project-name") == f"Digits {XSS}"
    activity = page.locator("#activity")
    assert activity.locator("svg.chart").count() == 3  # per minute, client and server times
    assert activity.locator("rect.bar").count() >= 1
    assert activity.locator("rect.bar.alt").count() >= 3
    assert page.locator("#participants-table tbody tr").count() >= 3
    # The reliability learned from the answers, with its interval, beside the rules' figures.
    assert "Reliability" in page.text_content("#participants-table thead")
    cells = page.locator("#participants-table tbody tr td:nth-child(7)").all_text_contents()
    shown = r"\s*[01]\.\d\d\s*[01]\.\d\d–[01]\.\d\d\s*"  # value, then its interval
    assert sum(bool(re.fullmatch(shown, c)) for c in cells) >= 3, cells
    assert all(re.fullmatch(shown, c) or c.strip() == "—" for c in cells), cells
    # A learning curve per kind, each with the two trainings as points (not the reliability's).
    figures = page.locator("#models figure")
    assert figures.count() == 3
    for i in range(3):
        assert figures.nth(i).locator("circle.dot").count() >= 2
    # The latest kernel PCA or embedding: one thumbnail per object, hover names it.
    scatter = page.locator("#scatter")
    assert scatter.locator("image").count() == 60
    titles = scatter.locator("g.point title").all_text_contents()
    assert f"digit {XSS}" in " ".join(titles)
    # TripletBoost predictions for the 20 hidden labels.
    assert page.locator("#gallery li").count() == 20
    assert page.locator("#gallery img").count() == 20
    # The plan with its budgets and the worker links with copy buttons.
    strategies = page.locator("#plan-progress tbody tr td:first-child").all_text_contents()
    assert strategies[:2] == ["random", "landmark_k1"]  # then the gold checks of gold_rate
    assert page.input_value("#link-worker").endswith(f"/w/{DIGITS}")
    assert "PROLIFIC_PID" in page.input_value("#link-prolific")
    assert "ExternalQuestion" in page.input_value("#link-mturk")
    assert page.locator("#jobs-table tbody tr").count() == 8
    no_xss(page)
    shoot(page, artifacts, "project")


def test_ranking_project_shows_svmcompare_ranking_to_its_researcher(filled, page, artifacts):
    sign_in(page, filled.url, filled.researcher_key)
    assert page.locator("#projects-table tbody tr").count() == 1  # only their own
    assert page.text_content(".who-name") == f"Researcher {XSS}"
    page.goto(f"{filled.url}/dashboard/projects/{RANKED}")
    assert page.text_content("#project-name") == f"Ranked {SCRIPT}"
    ranking = page.locator("#ranking li")
    assert ranking.count() == 24
    assert f"item 0 {XSS}" in page.locator("#ranking").text_content()
    assert page.locator("#models figure").count() == 1  # svmcompare's learning curve
    # The plan's JSON (on the plan page) shows a refusal beside it and keeps what was typed.
    page.goto(f"{filled.url}/dashboard/projects/{RANKED}/plan")
    page.click("#plan-json-view summary")
    page.fill("#plan-json", '{"strategies": [{"kind": "pairs", "weight": -1}]}')
    page.click("#plan-form button[type=submit]")
    assert "weight" in page.text_content("#plan-error")
    assert '"weight": -1' in page.input_value("#plan-json")
    assert filled.api.get(f"/api/projects/{RANKED}/plan").json()["strategies"][0]["weight"] == 1
    # Another's project answers 404, and the admin page does not exist for a researcher.
    assert page.goto(f"{filled.url}/dashboard/projects/{DIGITS}").status == 404
    assert page.goto(f"{filled.url}/dashboard/admin").status == 404
    page.goto(f"{filled.url}/dashboard/projects/{RANKED}")
    no_xss(page)
    shoot(page, artifacts, "ranking")


def test_flagging_from_the_table_shows_in_the_api(filled, page):
    sign_in(page, filled.url, filled.admin_key)
    page.goto(f"{filled.url}/dashboard/projects/{DIGITS}#participants")
    rows = filled.api.get(f"/api/projects/{DIGITS}/participants").json()["data"]
    target = next(r for r in rows if not r["flagged"])
    page.click(f"button[data-participant='{target['id']}']")
    row = page.locator(f"#participant-{target['id']}")
    row.locator(".badge.flagged").wait_for()
    after = filled.api.get(f"/api/projects/{DIGITS}/participants").json()["data"]
    flagged = next(r for r in after if r["id"] == target["id"])
    assert flagged["flagged"] and flagged["flag_manual"]
    assert flagged["flag_reason"] == "flagged by a researcher"
    page.click(f"button[data-participant='{target['id']}']")
    row.locator(".badge.ok").wait_for()
    back = filled.api.get(f"/api/projects/{DIGITS}/participants").json()["data"]
    assert not next(r for r in back if r["id"] == target["id"])["flagged"]


def test_figures_refresh_while_workers_answer(filled, page):
    sign_in(page, filled.url, filled.admin_key)
    page.goto(f"{filled.url}/dashboard/projects/{DIGITS}")
    tile = page.locator("#project-tiles .tile-value").first
    before = int(tile.text_content().replace(",", ""))
    worker = threading.Thread(target=filled.crowd, args=(DIGITS, 30), kwargs={"seed": 3})
    worker.start()
    worker.join()
    page.wait_for_function(
        "n => Number(document.querySelector('#project-tiles .tile-value')"
        ".textContent.replace(/,/g, '')) === n",
        arg=before + 30,
        timeout=30_000,
    )
    assert page.evaluate("() => performance.getEntriesByType('navigation').length") == 1


def test_admin_page_keys_queue_and_revoke_ends_the_session(filled, page, browser, artifacts):
    sign_in(page, filled.url, filled.admin_key)
    page.goto(f"{filled.url}/dashboard/admin")
    assert page.title() == "Admin · Triplet Lab"
    assert page.locator("#timings").count() == 1
    assert page.locator("#queue-table tbody tr").count() == 10  # 5 jobs per training round
    # Per-endpoint timings of the live server, including the worker API the crowd used.
    endpoints = page.locator("#timings-table tbody tr").all_text_contents()
    assert any("/api/w/sessions/{session_id}/answers" in row for row in endpoints)
    assert page.text_content("#database-size").strip().endswith(("kB", "MB"))
    keys = page.locator("#keys-table tbody tr")
    assert keys.count() == 2
    assert f"Researcher {XSS}" in keys.all_text_contents()[0] + keys.all_text_contents()[1]
    # Create a key, sign in with it elsewhere, revoke it here: the other session ends.
    page.fill("#key-name", "Temp <i>helper</i>")
    page.select_option("#key-role", "researcher")
    page.click("#create-key button[type=submit]")
    secret = page.input_value("#new-secret")
    assert secret.startswith("tl_")
    shoot(page, artifacts, "admin")
    other = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        other_page = other.new_page()
        sign_in(other_page, filled.url, secret)
        assert filled.api.get("/api/projects").status_code == 200
        page.goto(f"{filled.url}/dashboard/admin")
        row = page.locator("#keys-table tr", has_text="Temp <i>helper</i>")
        page.evaluate("() => { window.confirm = () => true; }")  # the fixture dismisses dialogs
        row.locator("button", has_text="Revoke").click()
        row.locator(".badge.cancelled").wait_for()
        # The other browser's next refresh finds no session and goes to the sign-in page.
        other_page.wait_for_selector("#api_key", timeout=30_000)
        assert other_page.url.endswith("/dashboard")
        status = httpx.get(
            f"{filled.url}/api/projects", headers={"Authorization": f"Bearer {secret}"}
        ).status_code
        assert status == 401
    finally:
        other.close()
    no_xss(page)


def test_post_without_csrf_token_is_refused(filled, page):
    sign_in(page, filled.url, filled.admin_key)
    rows = filled.api.get(f"/api/projects/{DIGITS}/participants").json()["data"]
    target = next(r for r in rows if not r["flagged"])
    url = f"{filled.url}/dashboard/projects/{DIGITS}/participants/{target['id']}/flag"
    response = page.request.post(url, form={"reason": "no token"})
    assert response.status == 403
    response = page.request.post(url, form={"reason": "bad", "csrf": "0" * 40})
    assert response.status == 403
    after = filled.api.get(f"/api/projects/{DIGITS}/participants").json()["data"]
    assert not next(r for r in after if r["id"] == target["id"])["flagged"]

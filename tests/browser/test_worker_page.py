"""The worker page in a real browser against a real server: answers land exactly once."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.browser.support import COLORS, SHOWN, Server, plan, png, progress, start, wait_ready

pytestmark = pytest.mark.browser

XSS = "<img src=x onerror=alert(1)>"
WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen"]
TEXT_OBJECTS = [{"name": f"word {i}", "text": word} for i, word in enumerate(WORDS)]

IMAGES = [(f"shape-{i}.png", png(COLORS[i % 5], i)) for i in range(6)]


def test_worker_answers_triplets_by_keyboard_and_pairs_by_click(server: Server, page: Any):
    rng = random.Random(5)
    triplets = server.project(TEXT_OBJECTS, plan=plan("random", 20))
    asked = []  # GET …/next: once on load; then each answer's reply carries the next question
    page.on("request", lambda r: asked.append(r.url) if r.url.endswith("/next") else None)
    shown = start(page, server.page_url(triplets, "participant=kb-worker"))
    chosen = []
    for number in range(1, 21):
        assert shown is not None and shown["kind"] == "triplet"
        assert progress(page) == (number - 1, 20)
        anchor, left, right = shown["indices"]
        if rng.random() < 0.5:
            page.keyboard.press("ArrowLeft")
            chosen.append((anchor, left, right))
        else:
            page.keyboard.press("ArrowRight")
            chosen.append((anchor, right, left))
        shown = wait_ready(page, shown["token"])
    assert shown is None, "the session should be finished after 20 answers"
    assert len(asked) == 1, asked
    code = page.text_content("#completion-code").strip()
    assert code and page.is_visible("#completion-code")
    assert progress(page) == (20, 20)

    rows = server.answers(triplets)
    assert len(rows) == 20
    assert {row["kind"] for row in rows} == {"triplet"}
    assert Counter((r["a"], r["b"], r["c"]) for r in rows) == Counter(chosen)
    assert len({row["session_id"] for row in rows}) == 1
    assert all(row["client_ms"] is not None and row["client_ms"] >= 0 for row in rows)

    # Reloading a finished session shows the same completion code and asks nothing more.
    page.reload()
    page.wait_for_selector("#done:not([hidden])")
    assert page.text_content("#completion-code").strip() == code
    assert len(server.answers(triplets)) == 20

    pairs = server.project(TEXT_OBJECTS[:6], plan=plan("pairs", 10))
    shown = start(page, server.page_url(pairs, "participant=click-worker"))
    clicked = []
    for _ in range(10):
        assert shown is not None and shown["kind"] == "pair"
        left, right = shown["indices"]
        slot, outcome = rng.choice([("left", -1), ("same", 0), ("right", 1)])
        page.click(f'#question button[data-slot="{slot}"]')
        clicked.append((left, right, outcome))
        shown = wait_ready(page, shown["token"])
    assert shown is None
    assert page.text_content("#completion-code").strip()

    rows = server.answers(pairs)
    assert len(rows) == 10
    assert {row["kind"] for row in rows} == {"pair"}
    stored = Counter()
    for row in rows:  # stored as (a, b, outcome); accept either orientation, mirrored
        if (row["a"], row["b"]) in {(left, right) for left, right, _ in clicked}:
            stored[(row["a"], row["b"], row["outcome"])] += 1
        else:
            stored[(row["b"], row["a"], -row["outcome"])] += 1
    assert stored == Counter(clicked)


def test_object_text_is_never_markup(server: Server, page: Any):
    objects = [
        {"name": XSS, "text": XSS},
        {"name": "<script>alert(2)</script>", "text": "<script>alert(2)</script>"},
        {"name": "b & c", "text": '"quoted" & <b>not bold</b>'},
    ]
    slug = server.project(
        objects,
        plan=plan("random", 3),
        name=XSS,
        instructions=f"Read this: {XSS}",
        question=f"Which? {XSS}",
    )
    html = httpx.get(server.page_url(slug)).text
    assert XSS not in html and "<script>alert" not in html

    page.goto(server.page_url(slug, "participant=xss"))
    assert page.text_content(".project-name") == XSS
    assert XSS in page.text_content("#intro")
    page.click("#start")
    wait_ready(page)
    assert page.text_content("#question-wording") == f"Which? {XSS}"
    texts = page.eval_on_selector_all("#question .card .text", "els => els.map(e => e.textContent)")
    assert sorted(texts) == sorted(o["text"] for o in objects)
    labels = page.eval_on_selector_all(
        "#question .choice", "els => els.map(e => e.getAttribute('aria-label'))"
    )
    assert all(label.startswith(("Left: ", "Right: ")) for label in labels)
    assert page.locator("#question img").count() == 0
    assert page.locator("#question script, #question b").count() == 0
    # The token shown before the answer: read after it, it could already be the next one's.
    answered = page.get_attribute("#question", "data-token")
    page.keyboard.press("ArrowLeft")
    wait_ready(page, answered)
    page.wait_for_timeout(200)
    assert page.dialogs == []


def slow(route: Any) -> None:
    time.sleep(0.15)
    route.continue_()


def test_layout_at_360_px_and_images_never_half_loaded(
    server: Server, context: Any, page: Any, artifacts: Path
):
    slug = server.project(images=IMAGES, plan=plan("random", 4), prefix="shapes")
    pair_slug = server.project(images=IMAGES, plan=plan("pairs", 2), prefix="shape-pairs")

    page.goto(server.page_url(slug, "participant=desk"))
    page.screenshot(path=str(artifacts / "worker-intro-desktop.png"), full_page=True)
    page.click("#start")
    wait_ready(page)
    page.screenshot(path=str(artifacts / "worker-triplet-desktop.png"), full_page=True)

    page.set_viewport_size({"width": 360, "height": 740})
    for step, url in enumerate(
        [server.page_url(slug, "participant=phone"), server.page_url(pair_slug, "participant=p")]
    ):
        # Images arrive slowly; record, at every change of the question, whether all its
        # images were complete at the moment it appeared.
        context.route("**/media/**", slow)
        page.goto(url)
        page.evaluate(
            """() => {
              window.__halfLoaded = [];
              const q = document.getElementById('question');
              new MutationObserver(() => {
                for (const img of q.querySelectorAll('img')) {
                  if (!img.complete || img.naturalWidth === 0) window.__halfLoaded.push(img.src);
                }
              }).observe(q, {childList: true, subtree: true});
            }"""
        )
        page.click("#start")
        shown = wait_ready(page)
        assert page.locator("#question img").count() == len(shown["indices"])
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 360, f"horizontal scrolling at 360 px: {width} px"
        for box in [el.bounding_box() for el in page.query_selector_all("#question .choice")]:
            assert box["x"] >= 0 and box["x"] + box["width"] <= 360
            assert box["height"] >= 44, "touch targets are at least 44 px tall"
        name = "worker-360-triplet.png" if step == 0 else "worker-360-pair.png"
        page.screenshot(path=str(artifacts / name), full_page=True)
        page.keyboard.press("ArrowRight" if step == 0 else "ArrowDown")
        wait_ready(page, shown["token"])
        assert page.evaluate("window.__halfLoaded") == []
        context.unroute("**/media/**")
    assert [row["outcome"] for row in server.answers(pair_slug)] == [0]  # ↓: about the same


def test_reload_resumes_the_same_session_and_question(server: Server, page: Any):
    slug = server.project(TEXT_OBJECTS, plan=plan("random", 5))
    shown = start(page, server.page_url(slug))  # anonymous: the id lives in localStorage
    for _ in range(2):
        page.keyboard.press("ArrowLeft")
        shown = wait_ready(page, shown["token"])
    page.reload()
    again = wait_ready(page)
    assert again == shown
    assert progress(page) == (2, 5)
    while again is not None:
        page.keyboard.press("ArrowRight")
        again = wait_ready(page, again["token"])
    rows = server.answers(slug)
    assert len(rows) == 5
    assert len({row["session_id"] for row in rows}) == 1
    assert len({row["participant"] for row in rows}) == 1


def test_a_second_tab_takes_over_and_the_first_can_continue(
    server: Server, context: Any, page: Any
):
    slug = server.project(TEXT_OBJECTS, plan=plan("random", 3))
    url = server.page_url(slug, "participant=two-tabs")
    first = start(page, url)
    other = context.new_page()
    other.goto(url)  # this browser started already: it resumes at once, with a new token
    second = wait_ready(other)
    assert second == first
    page.keyboard.press("ArrowLeft")
    page.wait_for_selector("#problem:not([hidden])")
    assert "another tab" in page.text_content("#problem-text")
    assert server.answers(slug) == []
    page.click("#problem-action")
    assert wait_ready(page) == first  # the same open question, now answerable here
    page.keyboard.press("ArrowLeft")
    wait_ready(page, first["token"])
    rows = server.answers(slug)
    assert [(row["a"], row["b"]) for row in rows] == [tuple(first["indices"][:2])]
    other.close()


def test_lost_connection_retries_and_counts_once(server: Server, context: Any, page: Any):
    slug = server.project(TEXT_OBJECTS, plan=plan("random", 3))
    shown = start(page, server.page_url(slug, "participant=flaky"))
    anchor, left, _ = shown["indices"]

    # The answer reaches the server but the reply is lost; then the line stays down.
    attempts = []
    failing = [True]

    def flaky(route: Any) -> None:
        attempts.append(route.request.post_data_json)
        if len(attempts) == 1:
            route.fetch()  # delivered and stored...
            route.abort("connectionreset")  # ...but the page never hears back
        elif failing[0]:
            route.abort("internetdisconnected")
        else:
            route.continue_()

    page.route("**/answers", flaky)
    page.keyboard.press("ArrowLeft")
    page.wait_for_function(
        "() => document.getElementById('status').textContent.includes('Connection lost')"
    )
    for key in ("ArrowRight", "ArrowRight", "ArrowLeft"):  # ignored while in flight
        page.keyboard.press(key)
    failing[0] = False
    shown = wait_ready(page, shown["token"])
    page.unroute("**/answers")
    assert len(attempts) >= 2
    assert {a["token"] for a in attempts} == {attempts[0]["token"]}
    assert {a["choice"] for a in attempts} == {left}
    assert progress(page) == (1, 3)

    # Offline in the browser: the answer waits, then goes through once the line is back.
    context.set_offline(True)
    page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "() => document.getElementById('status').textContent.includes('Connection lost')"
    )
    context.set_offline(False)
    shown = wait_ready(page, shown["token"])
    assert progress(page) == (2, 3)

    rows = server.answers(slug)
    assert len(rows) == 2
    assert (rows[0]["a"], rows[0]["b"]) == (anchor, left)


def test_mturk_preview_issues_nothing_and_accepted_hit_submits(
    server: Server, page: Any, artifacts: Path
):
    slug = server.project(TEXT_OBJECTS, plan=plan("random", 2), consent="I agree to take part.")
    calls = []
    page.on("request", lambda request: calls.append((request.method, request.url)))
    page.goto(
        server.page_url(
            slug,
            "assignmentId=ASSIGNMENT_ID_NOT_AVAILABLE&hitId=H1&turkSubmitTo=https://workersandbox.mturk.com",
        )
    )
    page.wait_for_timeout(500)
    assert page.is_visible("#preview-note")
    assert "Accept the HIT" in page.text_content("#preview-note")
    assert page.is_visible("#consent")
    assert not page.is_visible("#start")
    assert [url for _, url in calls if "/api/" in url] == []
    page.screenshot(path=str(artifacts / "worker-mturk-preview.png"), full_page=True)

    submitted = []

    def mturk(route: Any) -> None:
        submitted.append(route.request.post_data)
        route.fulfill(status=200, content_type="text/html", body="<p>submitted</p>")

    page.route("https://workersandbox.mturk.com/**", mturk)
    page.goto(
        server.page_url(
            slug,
            "workerId=W1&assignmentId=A1&hitId=H1&turkSubmitTo=https://workersandbox.mturk.com",
        )
    )
    assert page.text_content("#start").strip() == "I agree — start"
    page.click("#start")
    shown = wait_ready(page)
    while shown is not None:
        page.keyboard.press("ArrowLeft")
        shown = wait_ready(page, shown["token"])
    code = page.text_content("#completion-code").strip()
    page.wait_for_url("https://workersandbox.mturk.com/mturk/externalSubmit")
    assert len(submitted) == 1
    assert "assignmentId=A1" in submitted[0]
    assert f"completion_code={code}" in submitted[0]


def test_completion_redirects_to_the_platform(server: Server, page: Any, artifacts: Path):
    slug = server.project(
        TEXT_OBJECTS,
        plan=plan("random", 2, "https://app.prolific.test/submissions/complete?cc={code}"),
    )
    page.route(
        "https://app.prolific.test/**",
        lambda route: route.fulfill(status=200, content_type="text/html", body="<p>back</p>"),
    )
    shown = start(page, server.page_url(slug, "PROLIFIC_PID=pp1&STUDY_ID=s1&SESSION_ID=x1"))
    while shown is not None:
        page.keyboard.press("ArrowRight")
        shown = wait_ready(page, shown["token"])
    code = page.text_content("#completion-code").strip()
    assert page.is_visible("#redirect-note")
    page.screenshot(path=str(artifacts / "worker-done.png"), full_page=True)
    assert page.get_attribute("#redirect-link", "href").endswith(f"cc={code}")
    page.wait_for_url(f"https://app.prolific.test/submissions/complete?cc={code}")


def test_unknown_project_is_a_plain_404_page_and_pages_carry_a_csp(server: Server):
    missing = httpx.get(server.page_url("no-such-project"))
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("text/html")
    assert "Not found" in missing.text
    slug = server.project(TEXT_OBJECTS[:3])
    found = httpx.get(server.page_url(slug))
    assert found.status_code == 200
    policy = found.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "object-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy  # no plan says Mechanical Turk
    assert "<script>" not in found.text  # no inline script: only the JSON data block


def test_project_without_a_plan_says_it_is_closed(server: Server, page: Any):
    slug = server.project(TEXT_OBJECTS[:3])
    page.goto(server.page_url(slug, "participant=early"))
    page.wait_for_selector("#closed-note:not([hidden])")
    assert not page.is_visible("#start")


def test_a_worker_waits_while_the_trees_need_others_answers(
    server: Server, page: Any, artifacts: Path
):
    """A comprf study whose only questions this worker has answered, while they still need
    another worker's: the page says the next question is being prepared (not the end) and
    asks again by itself; once the other answers split the tree, the session ends with its
    code."""
    comprf = {
        "strategies": [{"kind": "comprf", "params": {"n_trees": 1, "redundancy": 2}}],
        "queries_per_session": 10,
        "repeat_rate": 0,
    }
    slug = server.project(TEXT_OBJECTS[:4], plan=comprf)
    shown = start(page, server.page_url(slug, "participant=waiting-worker"))
    while shown is not None and not page.is_visible("#loading-detail"):
        page.keyboard.press("ArrowLeft")
        page.wait_for_function(
            "t => document.getElementById('question').dataset.token !== t"
            " || !document.getElementById('loading-detail').hidden",
            arg=shown["token"],
        )
        shown = None if page.is_visible("#loading-detail") else page.evaluate(SHOWN)
    page.wait_for_selector("#loading-detail:not([hidden])")
    assert "prepared" in page.text_content("#loading-text") or page.text_content("#loading-text")
    assert not page.is_visible("#done")
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 800})
        page.screenshot(path=str(artifacts / f"worker-wait-{width}.png"), full_page=True)
    # Other workers answer what the tree needs beside this worker's answers, agreeing with
    # them (a disagreement would ask one more worker); this worker answers what comes back to
    # it (a split can ask it about the new nodes), until the tree is complete and its session
    # ends with its code.
    token = page.evaluate("document.getElementById('question').dataset.token")
    for round_ in range(8):
        nearer = {
            (row["a"], frozenset((row["b"], row["c"]))): row["b"] for row in server.answers(slug)
        }
        answer_as_other(server, slug, f"other-{round_}", nearer)
        page.wait_for_function(
            "t => !document.getElementById('done').hidden"
            " || document.getElementById('question').dataset.token !== t",
            arg=token,
            timeout=30_000,
        )
        while not page.is_visible("#done") and page.is_visible("#question"):
            token = page.evaluate(SHOWN)["token"]
            page.keyboard.press("ArrowLeft")
            page.wait_for_function(
                "t => document.getElementById('question').dataset.token !== t"
                " || !document.getElementById('loading-detail').hidden"
                " || !document.getElementById('done').hidden",
                arg=token,
            )
        if page.is_visible("#done"):
            break
    page.wait_for_selector("#done:not([hidden])", timeout=30_000)
    assert page.text_content("#completion-code").strip()


def answer_as_other(server: Server, slug: str, participant: str, nearer: dict) -> None:
    """A session of ``participant`` through the API, answering every question it is given:
    as ``nearer`` says where it knows, else the first candidate."""
    opened = server.api.post(f"/api/w/{slug}/sessions", json={"participant": participant})
    auth = {"Authorization": f"Bearer {opened.json()['session_token']}"}
    path = f"/api/w/sessions/{opened.json()['session_id']}"
    body = server.api.get(f"{path}/next", headers=auth).json()
    while body.get("query"):
        query = body["query"]
        anchor, *candidates = (o["index"] for o in query["objects"])
        choice = nearer.get((anchor, frozenset(candidates)), candidates[0])
        reply = server.api.post(
            f"{path}/answers", json={"token": query["token"], "choice": choice}, headers=auth
        )
        assert reply.status_code == 201, reply.text
        body = reply.json()["next"]

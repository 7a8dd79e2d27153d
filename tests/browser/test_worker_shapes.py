"""Questions of every shape on the worker page (issue 34): odd-one-out as three tiles, ranked
grids picked in order, at phone and desktop widths, answered by mouse and by keys.

Each test runs twice: against the real server (``served``: the plan asks for the shape, the
stored answers are read back from the researcher API) and against the worker API's contract
played by the page's own routes (``stubbed``: the exact questions are fixed, so the layout of
every case is seen, and the page is tested apart from the server).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import watched
from tests.browser.support import COLORS, Server, plan, png, start, wait_ready

pytestmark = pytest.mark.browser

IMAGES = [(f"tile-{i:02d}.png", png(COLORS[i % 5], i)) for i in range(12)]
WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay", "koala", "lynx"]
TEXTS = [{"name": f"word {i}", "text": word} for i, word in enumerate(WORDS)]
LONG_TEXTS = [
    {"name": f"phrase {i}", "text": text}
    for i, text in enumerate(
        [
            "a quiet harbour at dawn",
            "the smell of rain on hot stone",
            "Donaudampfschifffahrtsgesellschaftskapitän",
            "an old map of a city that no longer exists",
            "seven",
            "a violin left out in the snow",
        ]
    )
]

NO_SIDEWAYS_SCROLL = "document.documentElement.scrollWidth <= window.innerWidth"
PHONE = 600  # narrower than this, a test's page is a phone's: touch, no mouse, no hover


@pytest.fixture
def width() -> int:
    return 1280


@pytest.fixture
def page(browser: Any, width: int) -> Iterator[Any]:
    """A page ``width`` px wide; below ``PHONE`` a touch screen, as a phone's browser is."""
    phone = width < PHONE
    context = browser.new_context(
        viewport={"width": width, "height": (740 if width < 380 else 844) if phone else 900},
        is_mobile=phone,
        has_touch=phone,
    )
    context.set_default_timeout(20_000)
    with watched(context) as page:
        page.phone = phone
        yield page
    context.close()


def tap(page: Any, selector: str, **kwargs: Any) -> None:
    """A tap on a phone, a click with the mouse elsewhere."""
    (page.tap if page.phone else page.click)(selector, **kwargs)


def shot(page: Any, path: Path) -> None:
    """A screenshot once the short transitions (a pick's colours) have ended."""
    page.wait_for_timeout(300)
    page.screenshot(path=str(path), full_page=True)
    if page.phone:  # what the participant sees first, without scrolling
        page.screenshot(path=str(path.with_name(path.stem + "-screen.png")))


class Stub:
    """The worker API's shaped questions, played by the page's routes: ``questions`` are
    ``(kind, object indices, k)``, shown in order; the answers the page sends are kept."""

    def __init__(self, server: Server, slug: str, questions: list[tuple[str, list[int], int]]):
        data = server.api.get(f"/api/projects/{slug}/objects").json()["data"]
        fields = ("index", "name", "text", "image_url")
        self.objects = {o["index"]: {f: o[f] for f in fields} for o in data}
        self.questions = questions
        self.sent: list[dict[str, Any]] = []

    def next_body(self) -> dict[str, Any]:
        i = len(self.sent)
        if i >= len(self.questions):
            return {"done": True, "completion_code": "STUB-CODE"}
        kind, indices, k = self.questions[i]
        query = {
            "token": f"stub-{i}",
            "kind": kind,
            "objects": [self.objects[j] for j in indices],
            "position": i + 1,
            "total": len(self.questions),
        }
        if kind == "rank":
            query["k"] = k
        return {"query": query}

    def install(self, page: Any) -> None:
        def answers(route: Any) -> None:
            self.sent.append(route.request.post_data_json)
            n, total = len(self.sent), len(self.questions)
            reply = {"answered": n, "total": total, "done": n >= total, "next": self.next_body()}
            route.fulfill(status=201, json=reply)

        page.route("**/api/w/sessions/*/next", lambda route: route.fulfill(json=self.next_body()))
        page.route("**/api/w/sessions/*/answers", answers)


def shape_project(
    server: Server, objects: str, shape: dict[str, Any] | None, count: int, prefix: str
) -> str:
    """A project of ``objects`` (images, texts, long texts) asking ``shape`` (None: the
    stub asks it, the server's plan asks plain triplets)."""
    kwargs: dict[str, Any] = {"images": IMAGES} if objects == "images" else {}
    if objects == "texts":
        kwargs["objects"] = TEXTS
    elif objects == "long":
        kwargs["objects"] = LONG_TEXTS
    return server.project(plan=plan("random", count, shape=shape), prefix=prefix, **kwargs)


def stored(server: Server, slug: str) -> list[tuple[str, list[int], Any]]:
    """The answers the server stored: (shape, objects as shown, choice), oldest first."""
    rows = server.answers(slug)
    return [(row["kind"], list(row["objects"]), row["choice"]) for row in rows]


def fits(page: Any, width: int) -> None:
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert page.evaluate(NO_SIDEWAYS_SCROLL), f"horizontal scrolling at {width} px: {scroll_width}"
    for box in [el.bounding_box() for el in page.query_selector_all("#question button")]:
        assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, box
        assert box["height"] >= 44, "touch targets are at least 44 px tall"


# ---- odd-one-out ----------------------------------------------------------------------


@pytest.mark.parametrize("width", [390, 1280])
@pytest.mark.parametrize("backend", ["stubbed", "served"])
def test_odd_one_out_three_equal_tiles_by_mouse_and_keys(
    server: Server, page: Any, artifacts: Path, width: int, backend: str
):
    questions = [("odd_one_out", [0, 1, 2], 0), ("odd_one_out", [3, 4, 5], 0)]
    questions += [("odd_one_out", [6, 7, 8], 0), ("odd_one_out", [9, 10, 11], 0)]
    shape = {"type": "odd_one_out"} if backend == "served" else None
    slug = shape_project(server, "images", shape, 4, "odd")
    stub = Stub(server, slug, questions) if backend == "stubbed" else None
    if stub:
        stub.install(page)
    shown = start(page, server.page_url(slug, f"participant=odd-{backend}-{width}"))
    answers = []  # (objects as shown, the odd one)
    for number, how in enumerate(["click 2", "key 3", "click 1", "key 1"]):
        assert shown is not None and shown["kind"] == "odd_one_out"
        assert page.text_content("#question-wording") == "Which one does not belong?"
        tiles = page.query_selector_all("#question .odd-tiles button.choice")
        assert [int(t.get_attribute("data-index")) for t in tiles] == shown["indices"]
        assert len(tiles) == 3 and page.locator("#question img").count() == 3
        boxes = [t.bounding_box() for t in tiles]
        assert max(b["width"] for b in boxes) - min(b["width"] for b in boxes) < 1, boxes
        assert max(b["height"] for b in boxes) - min(b["height"] for b in boxes) < 1, boxes
        if page.phone:
            assert len({round(b["x"]) for b in boxes}) == 1, "one above the other on a phone"
        else:
            assert len({round(b["y"]) for b in boxes}) == 1, "the three tiles stand in one row"
        labels = [t.get_attribute("aria-label") for t in tiles]
        assert [label.split(":")[0] for label in labels] == ["1 of 3", "2 of 3", "3 of 3"]
        fits(page, width)
        if number == 0:
            shot(page, artifacts / f"worker-odd-{width}.png")
        verb, slot = how.split()
        if verb == "click":
            tap(page, f'#question .odd-tiles button[data-slot="{slot}"]')
        else:
            page.keyboard.press(slot)
        answers.append((shown["indices"], shown["indices"][int(slot) - 1]))
        shown = wait_ready(page, shown["token"])
    assert shown is None
    if stub:
        assert [a["choice"] for a in stub.sent] == [odd for _, odd in answers]
        assert all(a["client_ms"] >= 0 for a in stub.sent)
    else:
        assert stored(server, slug) == [("odd_one_out", objs, odd) for objs, odd in answers]


# ---- ranked grid ----------------------------------------------------------------------

PICKS = """() => [...document.querySelectorAll('#question .rank-choice')].map(b => ({
  slot: Number(b.dataset.slot),
  index: Number(b.dataset.choice),
  pressed: b.getAttribute('aria-pressed'),
  badge: b.querySelector('.rank-badge').textContent,
  label: b.getAttribute('aria-label'),
}))"""


def picked(page: Any) -> list[int]:
    """The slots picked, in rank order, as the tiles show them (and say so to screen readers)."""
    tiles = page.evaluate(PICKS)
    ranks = {}
    for tile in tiles:
        if tile["pressed"] == "true":
            ranks[int(tile["badge"])] = tile["slot"]
            ordinal = {1: "1st", 2: "2nd", 3: "3rd"}.get(int(tile["badge"]), f"{tile['badge']}th")
            assert tile["label"].endswith(f"your {ordinal} pick"), tile
        else:
            assert tile["badge"] == "" and "pick" not in tile["label"], tile
    assert sorted(ranks) == list(range(1, len(ranks) + 1)), tiles
    return [ranks[r] for r in sorted(ranks)]


def columns(page: Any) -> int:
    xs = page.eval_on_selector_all(
        "#question .rank-choice", "els => els.map(e => Math.round(e.getBoundingClientRect().x))"
    )
    return len(set(xs))


def submit_state(page: Any) -> tuple[str, str]:
    submit = page.locator("#rank-submit")
    return submit.get_attribute("aria-disabled"), submit.text_content()


@pytest.mark.parametrize("width", [360, 390, 1280])
@pytest.mark.parametrize("backend", ["stubbed", "served"])
def test_ranked_grid_picks_in_order_undoes_and_submits(
    server: Server, page: Any, artifacts: Path, width: int, backend: str
):
    phone = page.phone
    questions = [("rank", [0, 1, 2, 3, 4, 5, 6, 7, 8], 2), ("rank", [9, 8, 7, 6, 5, 4, 3, 2, 1], 2)]
    questions.append(("rank", [10, 11, 0, 1, 2, 3, 4, 5, 6], 2))
    shape = {"type": "rank", "n": 8, "k": 2} if backend == "served" else None
    slug = shape_project(server, "images", shape, 3, "grid")
    stub = Stub(server, slug, questions) if backend == "stubbed" else None
    if stub:
        stub.install(page)
    shown = start(page, server.page_url(slug, f"participant=grid-{backend}-{width}"))
    expected = []  # (objects as shown, the chosen candidates' indices in order)

    # 1. By mouse: pick 3 then 5; undo 3 (5 becomes the first); pick 7; submit.
    assert shown is not None and shown["kind"] == "rank" and len(shown["indices"]) == 9
    wording = page.text_content("#question-wording")
    assert wording == "Pick the 2 most similar to the top one, in order"
    assert page.locator("#question img").count() == 9
    assert columns(page) == (2 if phone else 4)
    fits(page, width)
    # Screen-reader order: the question, the anchor, the candidates 1 … 8, then Submit.
    order = page.eval_on_selector_all(
        "#question .card, #question #rank-submit",
        "els => els.map(e => e.dataset.slot)",
    )
    assert order == ["anchor", *[str(i) for i in range(1, 9)], "submit"]
    assert submit_state(page) == ("true", "Pick 2 more")
    shot(page, artifacts / f"worker-grid-{width}-fresh.png")
    tile = '#question .rank-choice[data-slot="{}"]'.format
    tap(page, tile(3))
    tap(page, tile(5))
    assert picked(page) == [3, 5]
    assert submit_state(page) == ("false", "Submit")
    tap(page, tile(1))  # a third pick is refused while two are chosen
    assert picked(page) == [3, 5]
    tap(page, tile(3))
    assert picked(page) == [5]
    assert submit_state(page) == ("true", "Pick 1 more")
    tap(page, "#rank-submit", force=True)  # not yet (aria-disabled): nothing is sent
    tap(page, tile(7))
    assert picked(page) == [5, 7]
    shot(page, artifacts / f"worker-grid-{width}-picked.png")
    if stub:
        assert stub.sent == []
    tap(page, "#rank-submit")
    expected.append((shown["indices"], [shown["indices"][5], shown["indices"][7]]))
    shown = wait_ready(page, shown["token"])

    # 2. By keys: 2, 4; 4 again undoes it; 1; Backspace undoes 1; 8; Enter sends [2, 8].
    assert shown is not None and shown["kind"] == "rank"
    page.locator("#question-wording").click()  # focus on the page, on no button
    for key in ["2", "4"]:
        page.keyboard.press(key)
    assert picked(page) == [2, 4]
    page.keyboard.press("4")
    assert picked(page) == [2]
    page.keyboard.press("Enter")  # one short: nothing is sent
    page.keyboard.press("1")
    assert picked(page) == [2, 1]
    page.keyboard.press("Backspace")
    assert picked(page) == [2]
    page.keyboard.press("9")  # there is no ninth candidate
    page.keyboard.press("8")
    assert picked(page) == [2, 8]
    page.keyboard.press("Enter")
    expected.append((shown["indices"], [shown["indices"][2], shown["indices"][8]]))
    shown = wait_ready(page, shown["token"])

    # 3. Mouse picks, then Enter: the last pick handed focus to Submit.
    assert shown is not None
    tap(page, tile(8))
    tap(page, tile(6))
    assert page.evaluate("document.activeElement.id") == "rank-submit"
    page.keyboard.press("Enter")
    expected.append((shown["indices"], [shown["indices"][8], shown["indices"][6]]))
    assert wait_ready(page, shown["token"]) is None

    if stub:
        assert [a["choice"] for a in stub.sent] == [choice for _, choice in expected]
        assert all(a["client_ms"] >= 0 for a in stub.sent)
    else:
        assert stored(server, slug) == [("rank", objs, choice) for objs, choice in expected]


@pytest.mark.parametrize("width", [360, 1280])
def test_ranked_grid_of_texts_and_a_short_grid(
    server: Server, page: Any, artifacts: Path, width: int
):
    """Text objects (a long word among them) in a 5-rank-3 grid and in a 3-rank-1 grid."""
    slug = shape_project(server, "long", None, 2, "textgrid")
    stub = Stub(server, slug, [("rank", [0, 1, 2, 3, 4, 5], 3), ("rank", [5, 2, 3, 4], 1)])
    stub.install(page)
    shown = start(page, server.page_url(slug, f"participant=texts-{width}"))
    assert page.locator("#question img").count() == 0
    assert columns(page) == (2 if page.phone else 3)  # five: 3 + 2 rather than 4 + 1
    fits(page, width)
    for key in ["5", "3", "1"]:
        page.keyboard.press(key)
    assert picked(page) == [5, 3, 1]
    shot(page, artifacts / f"worker-grid-texts-{width}.png")
    page.keyboard.press("Enter")
    shown = wait_ready(page, shown["token"])
    assert page.text_content("#question-wording") == "Which one is most similar to the top one?"
    assert columns(page) == (2 if page.phone else 3)
    fits(page, width)
    tap(page, '#question .rank-choice[data-slot="2"]')
    shot(page, artifacts / f"worker-grid-3-rank-1-{width}.png")
    tap(page, "#rank-submit")
    assert wait_ready(page, shown["token"]) is None
    assert [a["choice"] for a in stub.sent] == [[5, 3, 1], [3]]


@pytest.mark.parametrize("width", [360])
def test_odd_one_out_of_texts_at_360(server: Server, page: Any, artifacts: Path):
    slug = shape_project(server, "long", None, 2, "oddtext")
    stub = Stub(server, slug, [("odd_one_out", [0, 2, 3], 0), ("odd_one_out", [1, 4, 5], 0)])
    stub.install(page)
    shown = start(page, server.page_url(slug, "participant=odd-texts"))
    fits(page, 360)
    shot(page, artifacts / "worker-odd-texts-360.png")
    page.keyboard.press("2")
    shown = wait_ready(page, shown["token"])
    tap(page, '#question .odd-tiles button[data-slot="3"]')
    assert wait_ready(page, shown["token"]) is None
    assert [a["choice"] for a in stub.sent] == [2, 5]

"""Questions of every shape on the worker page (issue 34): odd-one-out as three tiles, ranked
grids picked in order, at phone and desktop widths, answered by tap/click and by keys, against
the real server: the plan asks for the shape, and the answers it stored are read back."""

from __future__ import annotations

import time
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


def shape_project(
    server: Server, objects: str, shape: dict[str, Any], count: int, prefix: str
) -> str:
    """A project of ``objects`` (images, texts, long texts) asking ``count`` of ``shape``."""
    kwargs: dict[str, Any] = {"images": IMAGES} if objects == "images" else {}
    if objects == "texts":
        kwargs["objects"] = TEXTS
    elif objects == "long":
        kwargs["objects"] = LONG_TEXTS
    return server.project(plan=plan("random", count, shape=shape), prefix=prefix, **kwargs)


def stored(server: Server, slug: str) -> list[tuple[str, list[int], Any]]:
    """The answers the server stored: (shape, objects as shown, choice), oldest first."""
    rows = server.answers(slug)
    assert all(row["client_ms"] is not None and row["client_ms"] >= 0 for row in rows)
    return [(row["kind"], list(row["objects"]), row["choice"]) for row in rows]


def fits(page: Any, width: int) -> None:
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert page.evaluate(NO_SIDEWAYS_SCROLL), f"horizontal scrolling at {width} px: {scroll_width}"
    for box in [el.bounding_box() for el in page.query_selector_all("#question button")]:
        assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, box
        assert box["height"] >= 44, "touch targets are at least 44 px tall"


# ---- odd-one-out ----------------------------------------------------------------------


@pytest.mark.parametrize("width", [390, 1280])
def test_odd_one_out_three_equal_tiles_by_mouse_and_keys(
    server: Server, page: Any, artifacts: Path, width: int
):
    slug = shape_project(server, "images", {"type": "odd_one_out"}, 4, "odd")
    shown = start(page, server.page_url(slug, f"participant=odd-{width}"))
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
def test_ranked_grid_picks_in_order_undoes_and_submits(
    server: Server, page: Any, artifacts: Path, width: int
):
    phone = page.phone
    slug = shape_project(server, "images", {"type": "rank", "n": 8, "k": 2}, 3, "grid")
    shown = start(page, server.page_url(slug, f"participant=grid-{width}"))
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
    page.wait_for_function(  # said to a screen reader, too
        "() => document.getElementById('announce').textContent.startsWith('2nd: ')"
        " && document.getElementById('announce').textContent.includes('All picked')"
    )
    hints = page.locator("#question .key-hint").first
    assert hints.is_visible() != phone, "key hints on a desktop, none on a touch screen"
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
    assert server.answers(slug) == []
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

    assert stored(server, slug) == [("rank", objs, choice) for objs, choice in expected]


@pytest.mark.parametrize("width", [360, 1280])
def test_ranked_grids_of_texts_5_rank_3_and_3_rank_1(
    server: Server, page: Any, artifacts: Path, width: int
):
    """Text objects (a long word among them) in a 5-rank-3 grid, then in a 3-rank-1 grid."""
    slug = shape_project(server, "long", {"type": "rank", "n": 5, "k": 3}, 1, "textgrid")
    shown = start(page, server.page_url(slug, f"participant=texts-{width}"))
    assert shown is not None and len(shown["indices"]) == 6
    assert page.locator("#question img").count() == 0
    assert columns(page) == (2 if page.phone else 3)  # five: 3 + 2 rather than 4 + 1
    fits(page, width)
    for key in ["5", "3", "1"]:
        page.keyboard.press(key)
    assert picked(page) == [5, 3, 1]
    shot(page, artifacts / f"worker-grid-texts-{width}.png")
    page.keyboard.press("Enter")
    assert wait_ready(page, shown["token"]) is None
    picks = [shown["indices"][slot] for slot in (5, 3, 1)]
    assert stored(server, slug) == [("rank", shown["indices"], picks)]

    slug = shape_project(server, "long", {"type": "rank", "n": 3, "k": 1}, 1, "textgrid")
    shown = start(page, server.page_url(slug, f"participant=short-{width}"))
    assert shown is not None and len(shown["indices"]) == 4
    assert page.text_content("#question-wording") == "Which one is most similar to the top one?"
    assert columns(page) == (2 if page.phone else 3)
    fits(page, width)
    tap(page, '#question .rank-choice[data-slot="2"]')
    shot(page, artifacts / f"worker-grid-3-rank-1-{width}.png")
    tap(page, "#rank-submit")
    assert wait_ready(page, shown["token"]) is None
    assert stored(server, slug) == [("rank", shown["indices"], [shown["indices"][2]])]


@pytest.mark.parametrize("width", [360])
def test_odd_one_out_of_texts_at_360(server: Server, page: Any, artifacts: Path):
    slug = shape_project(server, "long", {"type": "odd_one_out"}, 2, "oddtext")
    shown = start(page, server.page_url(slug, "participant=odd-texts"))
    assert shown is not None
    fits(page, 360)
    shot(page, artifacts / "worker-odd-texts-360.png")
    answers = [(shown["indices"], shown["indices"][1])]
    page.keyboard.press("2")
    shown = wait_ready(page, shown["token"])
    assert shown is not None
    answers.append((shown["indices"], shown["indices"][2]))
    tap(page, '#question .odd-tiles button[data-slot="3"]')
    assert wait_ready(page, shown["token"]) is None
    assert stored(server, slug) == [("odd_one_out", objs, odd) for objs, odd in answers]


@pytest.mark.parametrize("width", [1280])
def test_answer_time_runs_from_the_last_image_loaded(server: Server, page: Any, width: int):
    """One image of a grid arrives 2 s late: the question appears with it, and the time of the
    answer given at once is counted from then, not from when the question was asked."""
    slug = shape_project(server, "images", {"type": "rank", "n": 8, "k": 2}, 1, "timing")
    late = []

    def one_late(route: Any) -> None:
        if not late:
            late.append(route.request.url)
            time.sleep(2.0)
        route.continue_()

    page.context.route("**/media/**", one_late)
    page.goto(server.page_url(slug, "participant=timing"))
    asked = time.monotonic()
    page.click("#start")
    shown = wait_ready(page)
    assert shown is not None and page.evaluate(
        "[...document.querySelectorAll('#question img')].every(i => i.complete && i.naturalWidth)"
    )
    for key in ["1", "2", "Enter"]:
        page.keyboard.press(key)
    assert wait_ready(page, shown["token"]) is None
    waited_ms = (time.monotonic() - asked) * 1000
    (row,) = server.answers(slug)
    assert waited_ms > 2000 and row["client_ms"] < 1000, (waited_ms, row["client_ms"])


@pytest.mark.parametrize("width", [360, 1280])
def test_nine_candidates_9_rank_4_by_keys(server: Server, page: Any, artifacts: Path, width: int):
    """The largest grid: nine candidates (3 × 3 on a desktop), key 9 included; a reload
    halfway (a phone's pull-to-refresh) keeps the picks made."""
    slug = shape_project(server, "texts", {"type": "rank", "n": 9, "k": 4}, 1, "nine")
    shown = start(page, server.page_url(slug, f"participant=nine-{width}"))
    assert shown is not None and len(shown["indices"]) == 10
    assert columns(page) == (2 if page.phone else 3)
    fits(page, width)
    for key in ["9", "1"]:
        page.keyboard.press(key)
    page.reload()
    assert wait_ready(page) == shown
    assert picked(page) == [9, 1]
    assert submit_state(page) == ("true", "Pick 2 more")
    for key in ["5", "7"]:
        page.keyboard.press(key)
    assert picked(page) == [9, 1, 5, 7]
    shot(page, artifacts / f"worker-grid-9-rank-4-{width}.png")
    page.keyboard.press("Enter")
    assert wait_ready(page, shown["token"]) is None
    picks = [shown["indices"][slot] for slot in (9, 1, 5, 7)]
    assert stored(server, slug) == [("rank", shown["indices"], picks)]

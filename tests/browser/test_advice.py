"""The budget adviser beside each learning curve, in Chromium against a live server.

A project of 60 objects in two clusters is fed true triplets (their Euclidean answers) in
three batches through the researcher API; after each batch the server trains TripletBoost
and the triplet kernel with its own job pool, so each kind has three models at three answer
counts: a real learning curve for the adviser to fit.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from tests.browser.support import Server

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # three rounds of training: ~1 min

N_OBJECTS = 60
BATCHES = (300, 600, 1200)  # triplets added before each training round: 300, 900, 2,100
KINDS = {"tripletboost": {"n_estimators": 300, "cv_folds": 3}, "kernel": {}}


def true_triplets(X: np.ndarray, m: int, rng: np.random.Generator) -> list[list[int]]:
    rows = []
    while len(rows) < m:
        a, b, c = (int(i) for i in rng.choice(len(X), 3, replace=False))
        near, far = (b, c) if np.sum((X[a] - X[b]) ** 2) < np.sum((X[a] - X[c]) ** 2) else (c, b)
        rows.append([a, near, far])
    return rows


def wait_for_jobs(server: Server, slug: str, count: int, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = server.api.get(f"/api/projects/{slug}/jobs").json()["data"]
        failed = [j for j in jobs if j["status"] == "failed"]
        assert not failed, failed[0].get("error")
        if sum(j["status"] == "succeeded" for j in jobs) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"{count} training jobs did not finish in {timeout:.0f} s")


@pytest.fixture(scope="module")
def curved(server: Server) -> str:
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(0, 1, (30, 2)), rng.normal(4, 1, (30, 2))])
    objects = [
        {
            "name": f"point {i}",
            "features": X[i].round(4).tolist(),
            **({"label": "AB"[i // 30]} if i % 3 else {}),  # a third left for TripletBoost
        }
        for i in range(N_OBJECTS)
    ]
    slug = server.project(objects, prefix="advice", name="Two clusters")
    done = 0
    for batch in BATCHES:
        triplets = true_triplets(X, batch, rng)
        response = server.api.post(f"/api/projects/{slug}/answers", json={"triplets": triplets})
        assert response.status_code == 201, response.text
        for kind, params in KINDS.items():
            response = server.api.post(
                f"/api/projects/{slug}/models", json={"kind": kind, "params": params}
            )
            assert response.status_code == 202, response.text
        done += len(KINDS)
        wait_for_jobs(server, slug, done)
    return slug


def sign_in(page: Any, server: Server) -> None:
    key = server.api.headers["Authorization"].removeprefix("Bearer ")
    page.goto(f"{server.url}/dashboard")
    page.fill("#api_key", key)
    page.click("#signin")
    page.wait_for_selector("#signout")


def number(text: str) -> float:
    return float(text.strip().lstrip("≈ ").replace(",", ""))


def test_the_adviser_shows_real_numbers_beside_each_curve(server, curved, page, artifacts):
    sign_in(page, server)
    page.goto(f"{server.url}/dashboard/projects/{curved}?target=0.95")
    assert page.input_value("#advice-target") == "0.95"
    for kind in KINDS:
        row = page.locator(f"#curve-{kind}")
        panel = row.locator(".advice")
        status = panel.get_attribute("data-status")
        assert status in ("reachable", "reached", "not_reachable"), panel.text_content()
        # The fitted curve with its band and the target line are drawn on the chart.
        chart = row.locator("svg.chart")
        assert chart.locator("polygon.band").count() == 1
        assert chart.locator("polyline.fit").count() == 1
        assert chart.locator("line.target").count() == 1
        assert chart.locator("circle.dot").count() >= 3
        plateau = panel.locator(".advice-figures dd").first.text_content().split()[0]
        assert 0 < float(plateau) <= 1
        if status == "reachable":
            assert int(panel.locator(".advice-further").get_attribute("data-value")) > 0
        elif status == "not_reachable":
            assert "Not reachable at this rate" in panel.text_content()
    # TripletBoost's reference: ⌈60·√60⌉ = 465 random triplets, drawn as a line on its chart.
    boost = page.locator("#curve-tripletboost")
    assert number(boost.locator(".advice-reference").text_content()) == 465
    assert boost.locator("line.mark.reference").count() == 1
    # A lower target changes the advice; the page keeps it across its live refresh.
    page.fill("#advice-target", "0.5")
    page.click(".target-form button[type=submit]")
    page.wait_for_url("**?target=0.5")
    assert page.locator("#curve-kernel .advice").get_attribute("data-status") == "reached"
    assert page.get_attribute("body", "data-refresh").endswith("?target=0.5")
    page.goto(f"{server.url}/dashboard/projects/{curved}?target=0.95")
    for width, height in ((1280, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        assert page.evaluate("() => document.documentElement.scrollWidth") <= width
        page.screenshot(path=str(artifacts / f"dashboard-advice-{width}.png"), full_page=True)

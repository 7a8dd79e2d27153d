"""Helpers of the browser tests: the running server and its researcher API."""

from __future__ import annotations

import io
import itertools
import zipfile
from dataclasses import dataclass
from typing import Any

import httpx
from PIL import Image, ImageDraw

_slugs = itertools.count(1)

READY = """token => {
  const q = document.getElementById('question');
  const done = document.getElementById('done');
  if (!done.hidden) return true;
  if (!document.getElementById('problem').hidden) return true;
  if (!document.getElementById('intro-error').hidden) return true;
  return !q.hidden && q.dataset.token !== token && q.getAttribute('aria-busy') === 'false';
}"""

SHOWN = """() => {
  const q = document.getElementById('question');
  return {
    token: q.dataset.token,
    kind: q.dataset.kind,
    indices: [...q.querySelectorAll('.card')].map(c => Number(c.dataset.index)),
  };
}"""


def wait_ready(page: Any, previous: str | None = None) -> dict[str, Any] | None:
    """Wait until a new question is fully shown (or the session is done); describe it."""
    page.wait_for_function(READY, arg=previous or "")
    for trouble in ("#problem", "#intro-error"):
        assert not page.is_visible(trouble), page.text_content(trouble)
    if page.is_visible("#done"):
        return None
    return page.evaluate(SHOWN)


def start(page: Any, url: str) -> dict[str, Any] | None:
    page.goto(url)
    page.click("#start")
    return wait_ready(page)


def progress(page: Any) -> tuple[int, int]:
    bar = page.locator("#progressbar")
    return int(bar.get_attribute("aria-valuenow")), int(bar.get_attribute("aria-valuemax"))


def png(color: tuple[int, int, int], shape: int) -> bytes:
    image = Image.new("RGB", (160, 120), (250, 250, 248))
    draw = ImageDraw.Draw(image)
    box = (30, 15, 130, 105)
    [draw.ellipse, draw.rectangle, draw.polygon][shape % 3](
        box if shape % 3 < 2 else [(80, 10), (135, 108), (25, 108)], fill=color
    )
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


COLORS = [(220, 80, 60), (60, 130, 210), (70, 170, 100), (230, 180, 40), (140, 90, 200)]


def plan(
    kind: str = "random",
    queries: int = 20,
    redirect_url: str | None = None,
    shape: dict[str, Any] | None = None,
) -> dict[str, Any]:
    strategy: dict[str, Any] = {"kind": kind, "weight": 1}
    if shape is not None:
        strategy["shape"] = shape
    return {
        "strategies": [strategy],
        "queries_per_session": queries,
        "redundancy": 1,
        "gold_rate": 0,
        "min_answer_ms": 0,
        "completion": {"redirect_url": redirect_url},
    }


@dataclass
class Server:
    """A running Triplet Lab and an admin client for its researcher API."""

    url: str
    api: httpx.Client

    def project(
        self,
        objects: list[dict[str, Any]] | None = None,
        *,
        images: list[tuple[str, bytes]] | None = None,
        plan: dict[str, Any] | None = None,
        **fields: Any,
    ) -> str:
        """Create a project with ``objects`` (JSON) or ``images`` (a ZIP), and a plan."""
        slug = f"{fields.pop('prefix', 'p')}-{next(_slugs)}"
        body = {"slug": slug, "name": fields.pop("name", f"Project {slug}"), **fields}
        self.api.post("/api/projects", json=body).raise_for_status()
        if objects is not None:
            self.api.post(f"/api/projects/{slug}/objects", json=objects).raise_for_status()
        if images is not None:
            buffer = io.BytesIO()
            with zipfile.ZipFile(buffer, "w") as archive:
                for name, content in images:
                    archive.writestr(name, content)
            files = {"file": ("images.zip", buffer.getvalue(), "application/zip")}
            self.api.post(f"/api/projects/{slug}/objects", files=files).raise_for_status()
        if plan is not None:
            self.api.put(f"/api/projects/{slug}/plan", json=plan).raise_for_status()
        return slug

    def answers(self, slug: str) -> list[dict[str, Any]]:
        response = self.api.get(f"/api/projects/{slug}/answers", params={"format": "json"})
        response.raise_for_status()
        return response.json()

    def page_url(self, slug: str, query: str = "") -> str:
        return f"{self.url}/w/{slug}" + (f"?{query}" if query else "")

"""Helpers of the browser tests: the running server and its researcher API."""

from __future__ import annotations

import io
import itertools
import zipfile
from dataclasses import dataclass
from typing import Any

import httpx

_slugs = itertools.count(1)


def plan(
    kind: str = "random",
    queries: int = 20,
    redirect_url: str | None = None,
) -> dict[str, Any]:
    return {
        "strategies": [{"kind": kind, "weight": 1}],
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

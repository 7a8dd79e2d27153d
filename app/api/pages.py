"""HTML pages: the crowd worker's comparison page.

The page is a server-rendered template (Jinja2, autoescaped) plus one static script and
one stylesheet; everything dynamic goes through the worker API (``/api/w/...``). Responses
carry a strict Content-Security-Policy: no inline script or style, nothing from other
origins except images (projects may point objects at images hosted elsewhere).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader

from app.api.deps import SessionDep
from app.errors import NotFound
from app.services.projects import get_project

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"
# Autoescape everything: project texts are researcher input and must never become markup.
templates = Jinja2Templates(
    env=Environment(loader=FileSystemLoader(FRONTEND / "templates"), autoescape=True)
)

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data: https: http:; style-src 'self'; "
    "script-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
# Mechanical Turk shows an ExternalQuestion's page in an iframe on these hosts; only a
# project whose plan says it runs there lets them (and nobody else) frame its page.
MTURK_FRAME_ANCESTORS = (
    "https://www.mturk.com https://worker.mturk.com https://workersandbox.mturk.com"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    # Platform ids travel in the page's query string: never leak them to image hosts.
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}

router = APIRouter(tags=["pages"])


@lru_cache
def static_version(name: str) -> str:
    """A short content hash of a static file, appended to its URL to bust caches."""
    return hashlib.sha256((FRONTEND / "static" / name).read_bytes()).hexdigest()[:10]


def paragraphs(text: str) -> list[str]:
    """Plain text split on blank lines; the template escapes each paragraph."""
    blocks = [block.strip() for block in text.replace("\r\n", "\n").split("\n\n")]
    return [block for block in blocks if block]


@router.api_route(
    "/w/{slug}", methods=["GET", "HEAD"], response_class=HTMLResponse, include_in_schema=False
)
def read_worker_page(request: Request, slug: str, db: SessionDep) -> HTMLResponse:
    """The comparison page of project ``slug``; an unknown slug gets a plain 404 page."""
    try:
        project = get_project(db, slug) if len(slug) <= 64 else None
    except NotFound:
        project = None
    if project is None:
        return templates.TemplateResponse(
            request, "not_found.html", {}, status_code=404, headers=PAGE_HEADERS
        )
    config = {
        "slug": project.slug,
        "question": project.question,
        "pair_question": project.pair_question,
        "api": f"/api/w/{project.slug}",
        "sessions_api": "/api/w/sessions",
    }
    context = {
        "project": project,
        "instructions": paragraphs(project.instructions),
        "consent": paragraphs(project.consent),
        "config": config,
        "css_version": static_version("worker.css"),
        "js_version": static_version("worker.js"),
    }
    headers = PAGE_HEADERS
    if (project.plan or {}).get("mturk"):
        policy = CONTENT_SECURITY_POLICY.replace(
            "frame-ancestors 'none'", f"frame-ancestors {MTURK_FRAME_ANCESTORS}"
        )
        headers = {**PAGE_HEADERS, "Content-Security-Policy": policy}
    return templates.TemplateResponse(request, "worker.html", context, headers=headers)

"""Browser-test fixtures: a real server in a subprocess, Debian's Chromium through Playwright.

The server is ``tripletlab serve`` (``tests/servers.py``) on a free port, on a fresh
SQLite database in a temporary directory, migrated and given an admin key beforehand.
Projects are set up through the researcher REST API, answers read back from it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from app.db.migrate import upgrade
from app.db.session import make_engine
from app.services.auth import create_key
from tests import servers
from tests.browser.support import Server

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
SERVER_START_TIMEOUT = 120.0  # seconds; the shared test machine can be slow to import


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("browser-server")
    database_url = f"sqlite:///{root / 'tripletlab.db'}"
    # Migrate and create the admin key in-process (the CLI would do the same, slower).
    engine = make_engine(database_url)
    upgrade(engine)
    with Session(engine) as db:
        _, key = create_key(db, "admin", "browser tests")
    engine.dispose()
    served = servers.Server(
        database_url,
        root / "data",
        {"TRIPLETLAB_RUN_JOBS": "true", "TRIPLETLAB_PUBLIC_URL": ""},
    ).start(timeout=SERVER_START_TIMEOUT)
    api = httpx.Client(base_url=served.base, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    try:
        yield Server(url=served.base, api=api)
    finally:
        api.close()
        served.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: install Debian's chromium (`make browser`)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def context(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    yield context
    context.close()


@contextmanager
def watched(context: Any) -> Iterator[Any]:
    """A new page of ``context`` that records dialogs (dismissing them), script errors and
    CSP violations, and fails the test if there were errors or violations."""
    page = context.new_page()
    page.dialogs = []
    page.errors = []

    def on_dialog(dialog: Any) -> None:
        page.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on("pageerror", lambda error: page.errors.append(str(error)))

    def on_console(message: Any) -> None:
        if "Content Security Policy" in message.text:
            page.errors.append(message.text)

    page.on("console", on_console)
    yield page
    assert page.errors == [], f"script errors or CSP violations on the page: {page.errors}"


@pytest.fixture
def page(context: Any) -> Iterator[Any]:
    """A page that records dialogs (dismissing them), script errors and CSP violations."""
    with watched(context) as page:
        yield page


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS

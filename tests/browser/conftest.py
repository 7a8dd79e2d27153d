"""Browser-test fixtures: a real server in a subprocess, Debian's Chromium through Playwright.

The server is ``tripletlab serve`` (``python -m app.cli serve``) on a free port, on a fresh
SQLite database in a temporary directory, migrated and given an admin key beforehand.
Projects are set up through the researcher REST API, answers read back from it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from app.db.migrate import upgrade
from app.db.session import make_engine
from app.services.auth import create_key
from tests.browser.support import Server, free_port

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
SERVER_START_TIMEOUT = 120.0  # seconds; the shared test machine can be slow to import


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("browser-server")
    port = free_port()
    env = {
        **os.environ,
        "TRIPLETLAB_DATABASE_URL": f"sqlite:///{root / 'tripletlab.db'}",
        "TRIPLETLAB_DATA_DIR": str(root / "data"),
        "TRIPLETLAB_DEMO": "false",
        "TRIPLETLAB_PUBLIC_URL": "",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    # Migrate and create the admin key in-process (the CLI would do the same, slower).
    engine = make_engine(env["TRIPLETLAB_DATABASE_URL"])
    upgrade(engine)
    with Session(engine) as db:
        _, key = create_key(db, "admin", "browser tests")
    engine.dispose()
    log = (root / "server.log").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=root,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while True:
        if process.poll() is not None:
            log.close()
            pytest.fail(f"the server exited: {(root / 'server.log').read_text()[-3000:]}")
        try:
            if api.get("/api/projects").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.terminate()
            pytest.fail(f"the server did not start in {SERVER_START_TIMEOUT:.0f} s")
        time.sleep(0.2)
    try:
        yield Server(url=url, api=api)
    finally:
        api.close()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


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


@pytest.fixture
def page(context: Any) -> Iterator[Any]:
    """A page that records dialogs (dismissing them), script errors and CSP violations."""
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


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS

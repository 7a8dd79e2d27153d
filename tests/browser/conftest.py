"""Browser-test fixtures: a real server in a subprocess, Debian's Chromium through Playwright.

The server is ``tripletlab serve`` (``python -m app.cli serve``) on a free port, on a fresh
SQLite database in a temporary directory, migrated and given an admin key by the CLI.
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

from tests.browser.support import Server, free_port

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
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
    }
    cli = [sys.executable, "-m", "app.cli"]
    subprocess.run([*cli, "db", "upgrade"], env=env, cwd=root, check=True, capture_output=True)
    created = subprocess.run(
        [*cli, "keys", "create", "--role", "admin", "--name", "browser tests"],
        env=env,
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    )
    key = created.stdout.strip().splitlines()[-1]
    log = (root / "server.log").open("w")
    process = subprocess.Popen(
        [*cli, "serve", "--host", "127.0.0.1", "--port", str(port)],
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
    """A page that records dialogs (and dismisses them) and uncaught script errors."""
    page = context.new_page()
    page.dialogs = []
    page.errors = []

    def on_dialog(dialog: Any) -> None:
        page.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    yield page
    assert page.errors == [], f"script errors on the page: {page.errors}"


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS

"""Overload, made to order: the SQLite database of a real `tripletlab serve` is held by
another writer, so the first session open waits for it in the process's one database turn
and every later request waits in line on the event loop.

- A request that waits longer than `TRIPLETLAB_QUEUE_SECONDS` gets a JSON 503 with
  `Retry-After` and nothing is stored for it.
- A request whose client gives up while it waits is skipped when its turn comes: no
  session is stored for it.
"""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from app.db.session import make_engine
from tests.servers import Server, sqlite_url

pytestmark = pytest.mark.slow


def start(tmp_path: Path, queue_seconds: str) -> tuple[Server, str]:
    url = sqlite_url(tmp_path)
    extra = {"TRIPLETLAB_WEB_WORKERS": "1", "TRIPLETLAB_QUEUE_SECONDS": queue_seconds}
    server = Server(url, tmp_path / "data", env_extra=extra).start()
    headers = {"Authorization": f"Bearer {server.admin_key()}"}
    with httpx.Client(base_url=server.base, timeout=60, headers=headers) as client:
        assert client.post("/api/projects", json={"slug": "busy", "name": "B"}).is_success
        objects = [{"name": f"o{i}"} for i in range(10)]
        assert client.post("/api/projects/busy/objects", json=objects).is_success
        plan = {"strategies": [{"kind": "random"}], "queries_per_session": 5}
        assert client.put("/api/projects/busy/plan", json=plan).is_success
    return server, url


def hold_database(url: str) -> sqlite3.Connection:
    """Another writer holding the database (as a long transaction of another program)."""
    holder = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def stored_participants(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            query = text(
                "SELECT participants.external_id FROM sessions "
                "JOIN participants ON participants.id = sessions.participant_id"
            )
            return {row[0] for row in connection.execute(query)}
    finally:
        engine.dispose()


def open_in_background(
    base: str, name: str, results: dict[str, httpx.Response]
) -> threading.Thread:
    def run() -> None:
        with httpx.Client(base_url=base, timeout=60) as client:
            results[name] = client.post("/api/w/busy/sessions", json={"participant": name})

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_request_that_waits_too_long_gets_a_json_503(tmp_path: Path):
    server, url = start(tmp_path, queue_seconds="0.5")
    try:
        holder = hold_database(url)
        results: dict[str, httpx.Response] = {}
        first = open_in_background(server.base, "first", results)
        time.sleep(0.5)  # the first holds the turn, waiting for the database
        waiting = [open_in_background(server.base, f"later{i}", results) for i in range(5)]
        for thread in waiting:
            thread.join(timeout=30)
        holder.rollback()
        holder.close()
        first.join(timeout=60)
    finally:
        server.stop()
    assert results["first"].status_code == 201, results["first"].text
    for i in range(5):
        refused = results[f"later{i}"]
        assert refused.status_code == 503, refused.text
        assert refused.headers["content-type"].startswith("application/json")
        assert "busy" in refused.json()["detail"]
        assert int(refused.headers["retry-after"]) >= 1
    assert stored_participants(url) == {"first"}


def test_a_request_whose_client_left_opens_nothing(tmp_path: Path):
    server, url = start(tmp_path, queue_seconds="60")
    try:
        holder = hold_database(url)
        results: dict[str, httpx.Response] = {}
        first = open_in_background(server.base, "first", results)
        time.sleep(0.5)  # the first holds the turn, waiting for the database
        body = b'{"participant": "gone"}'
        request = (
            b"POST /api/w/busy/sessions HTTP/1.1\r\nHost: test\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        with socket.create_connection(("127.0.0.1", server.port)) as gone:
            gone.sendall(request)
            time.sleep(0.5)  # read by the server, waiting in line
        holder.rollback()
        holder.close()
        first.join(timeout=60)
        # A request after it is served: the line moved past the one that left.
        last = open_in_background(server.base, "last", results)
        last.join(timeout=60)
    finally:
        server.stop()
    assert results["first"].status_code == 201
    assert results["last"].status_code == 201
    assert stored_participants(url) == {"first", "last"}

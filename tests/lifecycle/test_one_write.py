"""`tripletlab serve` sends a response in one write (app.internals): its status line,
headers and body reach the socket together, not in a write each; and nothing of a response
is lost when the connection closes after it."""

from __future__ import annotations

from pathlib import Path

import httpx
import psutil

from tests.servers import Server, sqlite_url

REQUESTS = 200


def _writes(pid: int) -> int:
    """The write system calls process ``pid`` has made so far (``/proc/PID/io``'s syscw)."""
    return psutil.Process(pid).io_counters().write_count


def test_a_response_is_one_write(tmp_path: Path):
    server = Server(
        sqlite_url(tmp_path),
        tmp_path / "data",
        env_extra={
            "TRIPLETLAB_WEB_WORKERS": "1",  # the supervisor's own process serves
            "TRIPLETLAB_WORKER_RATE_ADDRESS": "0",
            "TRIPLETLAB_WORKER_RATE_SESSION": "0",
        },
    ).start()
    try:
        assert server.process is not None
        # A path no route takes: its 404 is answered on the event loop, so the process makes
        # no other write meanwhile (a route run in the thread pool wakes the loop with one).
        with httpx.Client(base_url=server.base, timeout=30) as client:  # one connection
            client.get("/api/no-such-route")
            before = _writes(server.process.pid)
            responses = [client.get("/api/no-such-route") for _ in range(REQUESTS)]
            after = _writes(server.process.pid)
            # The server closes the connection after this response: written before the close.
            closing = client.get("/api/no-such-route", headers={"Connection": "close"})
    finally:
        server.stop()
    # Every response whole: status, headers and the JSON body.
    assert all(r.status_code == 404 and r.json()["detail"] for r in [*responses, closing])
    # uvicorn alone writes the headers and the body apart: 2 per response. A little room for
    # a write of something else meanwhile (none is expected: SQLite only reads here).
    assert after - before <= REQUESTS * 1.1, after - before

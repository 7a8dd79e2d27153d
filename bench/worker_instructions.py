"""Instructions per worker round trip, in process, counted by callgrind: a repeatable A/B.

CPU time per round trip (``worker_throughput.py``) moves by 10-30 % with the load of a
shared 2-core machine; instruction counts do not. This drives the ASGI app directly (no
socket, no uvicorn): it opens ``--sessions`` worker sessions on a fresh database, answers
``--trips`` questions (``POST …/answers``, whose 201 carries the next question) after a
warm-up, and reports the instructions executed per round trip by the event loop's thread
(HTTP handling: middlewares, routing, dependencies, serialisation, the thread hop) and by the
other threads (the database work). With one session each answer is its own group commit;
with more, answers arriving together share one.

    .venv/bin/python bench/worker_instructions.py [--trips 60] [--sessions 1]
        [--postgres URL]        # default: a fresh SQLite file

It runs itself under ``valgrind --tool=callgrind`` (about 90 s; instrumentation starts after
the warm-up). Compare two checkouts by running it from each (``PYTHONPATH=<checkout>``).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WARM_UP = 50


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trips", type=int, default=60, help="round trips counted")
    parser.add_argument("--sessions", type=int, default=1, help="sessions answering at once")
    parser.add_argument("--postgres", help="PostgreSQL URL (its schema is dropped and recreated)")
    parser.add_argument("--inner", type=Path, help=argparse.SUPPRESS)  # the run under valgrind
    args = parser.parse_args()
    if args.inner:
        drive(args)
    else:
        count(args)


def count(args: argparse.Namespace) -> None:
    """Run this script under callgrind, instrumented from the end of the warm-up on."""
    with tempfile.TemporaryDirectory(prefix="worker-instructions-") as tmp:
        go, out = Path(tmp) / "go", Path(tmp) / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            "--separate-threads=yes",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            f"--trips={args.trips}",
            f"--sessions={args.sessions}",
            f"--inner={go}",
            *([f"--postgres={args.postgres}"] if args.postgres else []),
        ]
        log = Path(tmp) / "log"
        with log.open("w") as sink:
            process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        while "READY" not in log.read_text():
            if process.poll() is not None:
                raise RuntimeError(log.read_text())
            time.sleep(0.5)
        subprocess.run(["callgrind_control", "-i", "on", str(process.pid)], check=True,
                       capture_output=True)  # fmt: skip
        go.touch()
        if process.wait() != 0:
            raise RuntimeError(log.read_text())
        trips = int(log.read_text().split("TRIPS ")[1].split()[0])
        counts = [_instructions(path) for path in glob.glob(f"{out}-*")]
    loop = sum(n for thread, n in counts if thread == 1)  # the main thread runs the loop
    others = sum(n for thread, n in counts if thread != 1)
    print(
        f"{trips} round trips, {args.sessions} session(s), "
        f"{'PostgreSQL' if args.postgres else 'SQLite'}: instructions per round trip "
        f"{(loop + others) / trips / 1000:,.0f} k = event loop thread {loop / trips / 1000:,.0f} k"
        f" + other threads {others / trips / 1000:,.0f} k"
    )


def _instructions(path: str) -> tuple[int, int]:
    """(thread number, instructions) of one callgrind output file (``…-01``: thread 1)."""
    thread = int(Path(path).name.rsplit("-", 1)[1])
    with open(path) as lines:
        for line in lines:
            if line.startswith(("summary:", "totals:")):
                return thread, int(line.split()[1])
    return thread, 0


def drive(args: argparse.Namespace) -> None:
    """Under valgrind: set up, warm up, say READY, wait for ``go``, answer, say TRIPS."""
    tmp = args.inner.parent  # the outer run's temporary directory, removed by it
    url = args.postgres or f"sqlite:///{tmp}/bench.db"
    os.environ.update(
        {
            "TRIPLETLAB_DATABASE_URL": url,
            "TRIPLETLAB_DATA_DIR": f"{tmp}/data",
            "TRIPLETLAB_DEMO": "false",
            "TRIPLETLAB_RUN_JOBS": "false",
            "TRIPLETLAB_WORKER_RATE_SESSION": "0",
            "TRIPLETLAB_WORKER_RATE_ADDRESS": "0",
        }
    )
    if args.postgres:
        sys.path.insert(0, str(ROOT / "bench"))
        from _server import reset_postgres

        reset_postgres(url)
    from fastapi.testclient import TestClient

    from app.cli import _engine, _session
    from app.db.migrate import upgrade
    from app.main import create_app
    from app.services.auth import ensure_admin_key

    upgrade(_engine())
    with _session() as db:
        key = ensure_admin_key(db)
    app = create_app()
    headers = {"Authorization": f"Bearer {key}"}
    plan = {
        "strategies": [{"kind": "random", "weight": 1}],
        "queries_per_session": 5000,
        "gold_rate": 0.05,
        "repeat_rate": 0.05,
    }
    with TestClient(app) as client:
        client.post("/api/projects", json={"slug": "bench", "name": "bench"}, headers=headers)
        objects = [{"name": f"o{i}"} for i in range(1000)]
        client.post("/api/projects/bench/objects", json=objects, headers=headers)
        assert client.put("/api/projects/bench/plan", json=plan, headers=headers).is_success
        opened = [
            client.post("/api/w/bench/sessions", json={"participant": f"w{i}"}).json()
            for i in range(args.sessions)
        ]
    sessions = [(o["session_id"], o["session_token"]) for o in opened]
    try:  # the event loop `tripletlab serve` runs on (uvicorn picks uvloop when installed)
        import uvloop

        uvloop.run(_answer(app, sessions, args.trips, args.inner))
    except ImportError:
        asyncio.run(_answer(app, sessions, args.trips, args.inner))


async def _answer(app, sessions: list[tuple[str, str]], trips: int, go: Path) -> None:  # type: ignore[no-untyped-def]
    shown: dict[str, dict] = {}
    for session_id, token in sessions:
        status, body = await _call(app, "GET", f"/api/w/sessions/{session_id}/next", token)
        assert status == 200, body
        shown[session_id] = json.loads(body)

    async def worker(session_id: str, token: str, n: int) -> None:
        for _ in range(n):
            query = shown[session_id]["query"]
            answer = {"token": query["token"], "choice": query["objects"][1]["index"]}
            answer["client_ms"] = 1000
            path = f"/api/w/sessions/{session_id}/answers"
            status, body = await _call(app, "POST", path, token, json.dumps(answer).encode())
            assert status == 201, body
            shown[session_id] = json.loads(body)["next"]

    async def answer_all(n: int) -> int:
        each = max(1, n // len(sessions))
        await asyncio.gather(*(worker(s, t, each) for s, t in sessions))
        return each * len(sessions)

    await answer_all(WARM_UP)
    print("READY", flush=True)
    while not go.exists():
        await asyncio.sleep(0.05)
    done = await answer_all(trips)
    print(f"TRIPS {done}", flush=True)
    os._exit(0)  # no teardown inside the count


async def _call(app, method: str, path: str, token: str, body: bytes = b"") -> tuple[int, bytes]:  # type: ignore[no-untyped-def]
    """One HTTP request straight into the ASGI app."""
    headers = [(b"host", b"bench"), (b"authorization", f"Bearer {token}".encode())]
    if body:
        headers += [(b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())]  # fmt: skip
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    status, chunks = 0, []

    async def receive() -> dict:
        if messages:
            return messages.pop()
        await asyncio.Event().wait()  # no disconnect: wait until cancelled
        raise AssertionError

    async def send(message: dict) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


if __name__ == "__main__":
    main()

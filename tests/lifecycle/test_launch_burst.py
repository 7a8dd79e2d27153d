"""A study's launch: 200 participants open their sessions at once on a real `tripletlab
serve`, then each answers 3 questions. Every open gets a 201 or a JSON 503 with
`Retry-After` (never a 500 or a plain-text error), every 201 names a stored session and no
session is stored for an open that got none, every participant that waits as told gets its
session, and every acknowledged answer is stored.
(The full-size run, 1,000 opens on PostgreSQL and 500 on SQLite with latencies, is
`bench/launch_burst.py`.)"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from app.db.session import make_engine
from tests.servers import Server, database_url

pytestmark = pytest.mark.slow
PARTICIPANTS = 200
ANSWERS = 3
OPEN_FOR = 240  # seconds a participant keeps trying to open its session


async def participant(client: httpx.AsyncClient, i: int, go: asyncio.Event) -> dict:
    """Opens a session as a participant's page does: a 503 is waited out as its
    ``Retry-After`` says, then the open is sent again (until ``OPEN_FOR`` seconds)."""
    await go.wait()
    result: dict = {"refusals": [], "answers": 0}
    deadline = time.monotonic() + OPEN_FOR
    while True:
        opened = await client.post("/api/w/launch/sessions", json={"participant": f"p{i}"})
        result["status"] = opened.status_code
        if opened.status_code == 201 or time.monotonic() > deadline:
            break
        is_json = opened.headers.get("content-type", "").startswith("application/json")
        result["refusals"].append((opened.status_code, is_json, opened.headers.get("retry-after")))
        if opened.status_code != 503 or opened.headers.get("retry-after") is None:
            return result
        await asyncio.sleep(float(opened.headers["retry-after"]))
    if opened.status_code != 201:
        return result
    body = opened.json()
    result["session_id"] = body["session_id"]
    auth = {"Authorization": f"Bearer {body['session_token']}"}
    path = f"/api/w/sessions/{body['session_id']}"
    shown = (await client.get(f"{path}/next", headers=auth)).json()
    for _ in range(ANSWERS):
        query = shown["query"]
        answer = {"token": query["token"], "choice": query["objects"][1]["index"]}
        reply = await client.post(f"{path}/answers", json=answer, headers=auth)
        assert reply.status_code == 201, reply.text
        result["answers"] += 1
        shown = reply.json()["next"]
    return result


async def burst(base: str) -> list[dict]:
    limits = httpx.Limits(max_connections=PARTICIPANTS)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:
        go = asyncio.Event()
        tasks = [asyncio.create_task(participant(client, i, go)) for i in range(PARTICIPANTS)]
        await asyncio.sleep(0.2)
        go.set()
        return await asyncio.gather(*tasks)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_launch_burst(kind: str, tmp_path: Path):
    url = database_url(kind, tmp_path, "burst")
    server = Server(url, tmp_path / "data").start()
    try:
        headers = {"Authorization": f"Bearer {server.admin_key()}"}
        with httpx.Client(base_url=server.base, timeout=60, headers=headers) as client:
            assert client.post("/api/projects", json={"slug": "launch", "name": "L"}).is_success
            objects = [{"name": f"o{i}"} for i in range(300)]
            assert client.post("/api/projects/launch/objects", json=objects).is_success
            plan = {"strategies": [{"kind": "random"}], "queries_per_session": 40}
            assert client.put("/api/projects/launch/plan", json=plan).is_success
        results: list[dict] = []
        # A loop of its own, in a thread: the suite's browser tests leave one running here.
        runner = threading.Thread(target=lambda: results.extend(asyncio.run(burst(server.base))))
        runner.start()
        runner.join()
    finally:
        server.stop()
    # Every refusal was the JSON 503 with Retry-After (never a 500 or plain text), and every
    # participant got a session, at once or after waiting as told.
    refusals = Counter(refusal for r in results for refusal in r["refusals"])
    assert all(status == 503 and is_json and after for status, is_json, after in refusals), refusals
    statuses = Counter(r["status"] for r in results)
    assert statuses == {201: PARTICIPANTS}, statuses
    opened = {r["session_id"] for r in results}
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            stored = {row[0] for row in connection.execute(text("SELECT id FROM sessions"))}
            answers = connection.execute(text("SELECT count(*) FROM answers")).scalar_one()
    finally:
        engine.dispose()
    assert stored == opened  # no session for an open that got no 201
    assert answers == sum(r["answers"] for r in results) == ANSWERS * len(opened)

"""A study's launch: hundreds of participants open their sessions at once, then answer.

Each simulated participant opens a session (``POST /api/w/{slug}/sessions``), gets its first
question and answers ``--answers`` questions, all at the same moment as the others, against
a real ``tripletlab serve`` (2 processes, as by default). Reported: the status of every open
(201, JSON 503 with ``Retry-After``, anything else), the open's latency (p50, p99, max), the
share of 201s within 10 s, the answers stored, and orphans: sessions stored for which no
client got a 201 (a client that gave up, say).

    .venv/bin/python bench/launch_burst.py --participants 1000 \
        --postgres postgresql+psycopg://postgres@127.0.0.1:5432/tripletlab_bench
    .venv/bin/python bench/launch_burst.py --participants 500          # SQLite
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _server import reset_postgres, running_server


@dataclass
class Tally:
    opens: Counter[str] = field(default_factory=Counter)
    open_seconds: list[float] = field(default_factory=list)
    opened_within_10s: int = 0
    answers: int = 0
    answer_errors: Counter[str] = field(default_factory=Counter)
    created: set[str] = field(default_factory=set)


def setup(base: str, key: str, n_objects: int = 1000) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, timeout=120, headers=headers) as client:
        assert client.post("/api/projects", json={"slug": "launch", "name": "Launch"}).is_success
        objects = [{"name": f"o{i}"} for i in range(n_objects)]
        assert client.post("/api/projects/launch/objects", json=objects).is_success
        plan = {"strategies": [{"kind": "random"}], "queries_per_session": 40}
        assert client.put("/api/projects/launch/plan", json=plan).is_success


def describe(response: httpx.Response) -> str:
    """The kind of an open's reply: 201, 503 (JSON, with Retry-After), or what else."""
    if response.status_code == 201:
        return "201"
    json_body = response.headers.get("content-type", "").startswith("application/json")
    if response.status_code == 503 and json_body and "retry-after" in response.headers:
        return "503 json+retry-after"
    return f"{response.status_code} {'json' if json_body else 'other'}"


async def participant(
    client: httpx.AsyncClient, i: int, answers: int, go: asyncio.Event, tally: Tally
) -> None:
    await go.wait()
    started = time.monotonic()
    try:
        response = await client.post("/api/w/launch/sessions", json={"participant": f"p{i}"})
    except httpx.TimeoutException:
        tally.opens["client timeout"] += 1
        return
    except httpx.TransportError as error:
        tally.opens[f"transport error {type(error).__name__}"] += 1
        return
    seconds = time.monotonic() - started
    kind = describe(response)
    tally.opens[kind] += 1
    if kind != "201":
        return
    tally.open_seconds.append(seconds)
    tally.opened_within_10s += seconds <= 10
    opened = response.json()
    tally.created.add(opened["session_id"])
    auth = {"Authorization": f"Bearer {opened['session_token']}"}
    path = f"/api/w/sessions/{opened['session_id']}"
    try:
        shown = (await client.get(f"{path}/next", headers=auth)).json()
        for _ in range(answers):
            query = shown["query"]
            choice = query["objects"][1]["index"] if query["kind"] == "triplet" else -1
            body = {"token": query["token"], "choice": choice, "client_ms": 500}
            reply = await client.post(f"{path}/answers", json=body, headers=auth)
            if reply.status_code != 201:
                tally.answer_errors[str(reply.status_code)] += 1
                return
            tally.answers += 1
            shown = reply.json()["next"]
    except (httpx.TransportError, KeyError, TypeError) as error:
        tally.answer_errors[type(error).__name__] += 1


async def burst(base: str, n: int, answers: int, timeout: float) -> tuple[Tally, float]:
    tally = Tally()
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits) as client:
        go = asyncio.Event()
        tasks = [asyncio.create_task(participant(client, i, answers, go, tally)) for i in range(n)]
        await asyncio.sleep(0.5)  # every task waiting at the start line
        started = time.monotonic()
        go.set()
        await asyncio.gather(*tasks)
    return tally, time.monotonic() - started


def stored(database_url: str) -> tuple[set[str], int]:
    engine = create_engine(database_url)
    with engine.connect() as connection:
        sessions = {row[0] for row in connection.execute(text("SELECT id FROM sessions"))}
        n_answers = connection.execute(text("SELECT count(*) FROM answers")).scalar_one()
    engine.dispose()
    return sessions, n_answers


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--participants", type=int, default=500)
    parser.add_argument("--answers", type=int, default=3)
    parser.add_argument("--postgres", help="PostgreSQL URL (its schema is emptied)")
    parser.add_argument("--timeout", type=float, default=60.0, help="client timeout, seconds")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    if args.postgres:
        reset_postgres(args.postgres)
    settings = {"run_jobs": "false", "web_workers": str(args.processes)}
    with running_server(args.postgres, **settings) as server:
        setup(server.base, server.key)
        tally, seconds = asyncio.run(
            burst(server.base, args.participants, args.answers, args.timeout)
        )
        time.sleep(1)  # requests the server is still finishing
        sessions, n_answers = stored(server.env["TRIPLETLAB_DATABASE_URL"])
        report(args, tally, seconds, sessions, n_answers)


def report(
    args: argparse.Namespace, tally: Tally, seconds: float, sessions: set[str], n_answers: int
) -> None:
    database = "PostgreSQL" if args.postgres else "SQLite"
    n = args.participants
    print(
        f"{database}, {args.processes} server processes: {n} participants open at once, "
        f"then answer {args.answers} questions each ({seconds:.1f} s in all)"
    )
    for kind, count in sorted(tally.opens.items()):
        print(f"  opens {kind}: {count}")
    opens = tally.open_seconds
    print(
        f"  201 within 10 s: {tally.opened_within_10s} of {n} "
        f"({100 * tally.opened_within_10s / n:.1f} %)"
    )
    print(
        f"  open latency (201s): p50 {1000 * percentile(opens, 50):.0f} ms, "
        f"p99 {1000 * percentile(opens, 99):.0f} ms, max {1000 * max(opens, default=0):.0f} ms"
    )
    print(
        f"  answers acknowledged {tally.answers}, stored {n_answers}; "
        f"answer errors {dict(tally.answer_errors) or 'none'}"
    )
    orphans = sessions - tally.created
    print(f"  sessions stored {len(sessions)}, of which orphans (no 201 received) {len(orphans)}")


if __name__ == "__main__":
    main()

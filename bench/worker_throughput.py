"""Worker round trips per second: GET next + POST answer, against a real server.

Ours (`tripletlab serve`, one process, SQLite and PostgreSQL) side by side with the
ceiling of the same stack: a bare FastAPI app under the same uvicorn whose two routes
return constant JSON, driven by the same client. The ratio says what Triplet Lab's own
work (auth, issuance under a lock, exactly-once answer, quality checks) costs.
Salmon's reported figure (about 90 round trips/s on a comparable machine) is printed
for reference only: it was not measured here.

    .venv/bin/python bench/worker_throughput.py [--quick] [--postgres URL]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time

import httpx

sys.path.insert(0, __import__("os").path.dirname(__file__))
from _server import free_port, reset_postgres, running_server

SALMON_REPORTED = 90.0
BARE_APP = """
from fastapi import FastAPI
app = FastAPI()
@app.get("/api/w/sessions/{sid}/next")
def next_(sid: str):
    objects = [{"index": 0}, {"index": 1}, {"index": 2}]
    return {"query": {"token": "t", "kind": "triplet", "objects": objects}}
@app.post("/api/w/sessions/{sid}/answers", status_code=201)
def answer(sid: str, body: dict):
    return {"answered": 1, "total": 10, "done": False}
"""


async def drive(
    base: str, sessions: list[tuple[str, str]], seconds: float
) -> tuple[int, list[float]]:
    """Each session loops next → answer for ``seconds``; returns (round trips, latencies ms)."""
    latencies: list[float] = []
    stop = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=len(sessions), max_keepalive_connections=len(sessions))
    async with httpx.AsyncClient(base_url=base, timeout=30, limits=limits) as client:

        async def worker(session_id: str, token: str) -> None:
            headers = {"Authorization": f"Bearer {token}"}
            while time.monotonic() < stop:
                started = time.perf_counter()
                nxt = (
                    await client.get(f"/api/w/sessions/{session_id}/next", headers=headers)
                ).json()
                if nxt.get("done"):
                    return
                query = nxt["query"]
                choice = query["objects"][1]["index"]
                response = await client.post(
                    f"/api/w/sessions/{session_id}/answers",
                    json={"token": query["token"], "choice": choice, "client_ms": 1000},
                    headers=headers,
                )
                assert response.status_code == 201, response.text
                latencies.append((time.perf_counter() - started) * 1000)

        await asyncio.gather(*(worker(s, t) for s, t in sessions))
    return len(latencies), latencies


def setup_project(base: str, key: str, n_workers: int) -> list[tuple[str, str]]:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, timeout=60) as client:
        client.post("/api/projects", json={"slug": "bench", "name": "bench"}, headers=headers)
        objects = [{"name": f"o{i}"} for i in range(1000)]
        client.post("/api/projects/bench/objects", json=objects, headers=headers)
        plan = {
            "strategies": [{"kind": "random", "weight": 1}],
            "queries_per_session": 5000,
            "gold_rate": 0.05,
            "repeat_rate": 0.05,
        }
        assert client.put("/api/projects/bench/plan", json=plan, headers=headers).status_code == 200
        sessions = []
        for i in range(n_workers):
            body = client.post("/api/w/bench/sessions", json={"participant": f"w{i}"}).json()
            sessions.append((body["session_id"], body["session_token"]))
    return sessions


def measure_ours(
    database_url: str | None, workers: int, seconds: float, processes: int = 1
) -> tuple[float, list[float]]:
    settings = {"run_jobs": "false", "web_workers": str(processes)}
    with running_server(database_url, **settings) as (base, key, _):
        sessions = setup_project(base, key, workers)
        asyncio.run(drive(base, sessions, 2.0))  # warm up
        started = time.perf_counter()
        count, latencies = asyncio.run(drive(base, sessions, seconds))
        return count / (time.perf_counter() - started), latencies


def measure_bare(workers: int, seconds: float) -> tuple[float, list[float]]:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "bare_app.py").write_text(BARE_APP)
        port = free_port()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "bare_app:app",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=tmp,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(100):
                try:
                    httpx.get(f"{base}/docs", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.2)
            sessions = [(f"s{i}", "t") for i in range(workers)]
            asyncio.run(drive(base, sessions, 2.0))
            started = time.perf_counter()
            count, latencies = asyncio.run(drive(base, sessions, seconds))
            return count / (time.perf_counter() - started), latencies
        finally:
            process.terminate()
            process.wait(timeout=30)


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 2 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="5 s per run instead of 20 s")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    seconds = 5.0 if args.quick else 20.0

    rows = []
    bare_rate, bare_lat = measure_bare(args.workers, seconds)
    rows.append(("bare FastAPI ceiling (constant JSON)", bare_rate, bare_lat))
    rate, lat = measure_ours(None, args.workers, seconds)
    rows.append(("Triplet Lab, SQLite", rate, lat))
    rate, lat = measure_ours(None, args.workers, seconds, processes=2)
    rows.append(("Triplet Lab, SQLite, 2 server processes", rate, lat))
    if args.postgres:
        reset_postgres(args.postgres)
        rate, lat = measure_ours(args.postgres, args.workers, seconds)
        rows.append(("Triplet Lab, PostgreSQL", rate, lat))

    print(
        f"\nworker round trips (GET next + POST answer), {args.workers} concurrent workers, "
        f"{seconds:.0f} s per run, 1 uvicorn process unless said, client on the same machine"
    )
    header = ("server", "round trips/s", "p50 ms", "p99 ms", "vs ceiling", "vs Salmon*")
    print("{:40s} {:>14s} {:>8s} {:>8s} {:>11s} {:>11s}".format(*header))
    for name, rate, latencies in rows:
        p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
        print(
            f"{name:40s} {rate:14.1f} {p50:8.1f} {p99:8.1f} "
            f"{rate / bare_rate:10.2f}x {rate / SALMON_REPORTED:10.1f}x"
        )
    print(
        f"* Salmon: {SALMON_REPORTED:.0f} round trips/s as reported for a comparable machine, "
        "not measured in this run."
    )


if __name__ == "__main__":
    main()

"""Worker round trips per second: GET next + POST answer, against a real server.

Ours (`tripletlab serve`, one process, SQLite and PostgreSQL) side by side with the
ceiling of the same stack: a bare FastAPI app under the same uvicorn whose two routes
return constant JSON, driven by the same client. The ratio says what Triplet Lab's own
work (auth, issuance under a lock, exactly-once answer, quality checks) costs. The client
is a few lines of raw asyncio HTTP/1.1 so that it leaves the CPU to the server; the CPU
columns say how the two cores were shared.
Salmon's reported figure (about 90 round trips/s on a comparable machine) is printed
for reference only: it was not measured here.

    .venv/bin/python bench/worker_throughput.py [--quick] [--postgres URL] [--runs ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import numpy as np

sys.path.insert(0, __import__("os").path.dirname(__file__))
from _server import cpu_seconds, free_port, reset_postgres, running_server

try:  # the client's event loop: uvloop (installed with uvicorn[standard]) is the lighter one
    import uvloop

    run_loop = uvloop.run
except ImportError:
    run_loop = asyncio.run

SALMON_REPORTED = 90.0
RUNS = ("bare", "sqlite", "sqlite2", "postgres")
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


class Connection:
    """A minimal HTTP/1.1 keep-alive client: one request at a time on one socket.

    httpx spends about a millisecond of CPU per request: with the client and the server on
    the same 2 cores it measured its own ceiling (124 round trips/s against constant JSON).
    This client writes the request bytes and reads the status line, headers and
    ``content-length`` body, and nothing more, so the server is what is measured.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(
        self, method: str, path: str, token: str, body: bytes = b""
    ) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\nhost: {self.host}\r\n"
        head += f"authorization: Bearer {token}\r\n"
        if body:
            head += f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        header = await self.reader.readuntil(b"\r\n\r\n")
        status = int(header[9:12])
        length = 0
        for line in header.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def drive(
    base: str, sessions: list[tuple[str, str]], seconds: float
) -> tuple[int, list[float]]:
    """Each session loops next → answer on its own keep-alive connection for ``seconds``;
    returns (round trips, latencies ms)."""
    host, port = base.removeprefix("http://").split(":")
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    async def worker(session_id: str, token: str) -> None:
        connection = Connection(host, int(port))
        try:
            while time.monotonic() < stop:
                started = time.perf_counter()
                status, body = await connection.request(
                    "GET", f"/api/w/sessions/{session_id}/next", token
                )
                assert status == 200, body
                nxt = json.loads(body)
                if nxt.get("done"):
                    return
                query = nxt["query"]
                answer = {"token": query["token"], "choice": query["objects"][1]["index"]}
                status, body = await connection.request(
                    "POST",
                    f"/api/w/sessions/{session_id}/answers",
                    token,
                    json.dumps({**answer, "client_ms": 1000}).encode(),
                )
                assert status == 201, body
                latencies.append((time.perf_counter() - started) * 1000)
        finally:
            connection.close()

    await asyncio.gather(*(worker(s, t) for s, t in sessions))
    return len(latencies), latencies


@dataclass
class Run:
    """One timed run: round trips per second, latencies, and CPU seconds per round trip."""

    rate: float
    latencies: list[float]
    server_cpu_ms: float  # server processes' CPU per round trip
    client_cpu_ms: float  # this process's CPU per round trip


def timed(base: str, sessions: list[tuple[str, str]], seconds: float, server_pid: int) -> Run:
    run_loop(drive(base, sessions, 2.0))  # warm up
    server_before, client_before = cpu_seconds(server_pid), time.process_time()
    started = time.perf_counter()
    count, latencies = run_loop(drive(base, sessions, seconds))
    elapsed = time.perf_counter() - started
    server_cpu = cpu_seconds(server_pid) - server_before
    client_cpu = time.process_time() - client_before
    return Run(count / elapsed, latencies, server_cpu * 1000 / count, client_cpu * 1000 / count)


# --strategy adaptive (issue 12): the plan's one strategy is `adaptive` (t-STE, refit every
# ADAPTIVE_REFRESH answers); the run starts once the first model has landed and its batch is
# stored, and the server's job runner keeps refitting during the run, as in production.
ADAPTIVE_REFRESH = 100


def wait_for_adaptive_batch(client: httpx.Client, headers: dict[str, str]) -> None:
    triplets = np.random.default_rng(0).permuted(
        np.tile(np.arange(1000), (ADAPTIVE_REFRESH, 1)), axis=1
    )[:, :3]
    response = client.post(
        "/api/projects/bench/answers", json={"triplets": triplets.tolist()}, headers=headers
    )
    assert response.status_code == 201, response.text
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        jobs = client.get("/api/projects/bench/jobs", headers=headers).json()
        if any(j["status"] == "succeeded" for j in jobs):
            time.sleep(2.0)  # the job stores the batch right after the model
            return
        time.sleep(0.5)
    raise RuntimeError(f"no adaptive model landed: {jobs}")


def setup_project(
    base: str, key: str, n_workers: int, strategy: str = "random"
) -> list[tuple[str, str]]:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, timeout=60) as client:
        client.post("/api/projects", json={"slug": "bench", "name": "bench"}, headers=headers)
        objects = [{"name": f"o{i}"} for i in range(1000)]
        client.post("/api/projects/bench/objects", json=objects, headers=headers)
        spec = {"kind": strategy, "weight": 1}
        if strategy == "adaptive":
            spec["params"] = {"refresh_every": ADAPTIVE_REFRESH}
        plan = {
            "strategies": [spec],
            "queries_per_session": 5000,
            "gold_rate": 0.05,
            "repeat_rate": 0.05,
        }
        assert client.put("/api/projects/bench/plan", json=plan, headers=headers).status_code == 200
        if strategy == "adaptive":
            wait_for_adaptive_batch(client, headers)
        sessions = []
        for i in range(n_workers):
            body = client.post("/api/w/bench/sessions", json={"participant": f"w{i}"}).json()
            sessions.append((body["session_id"], body["session_token"]))
    return sessions


def measure_ours(
    database_url: str | None,
    workers: int,
    seconds: float,
    processes: int = 1,
    strategy: str = "random",
) -> Run:
    run_jobs = "true" if strategy == "adaptive" else "false"
    settings = {"run_jobs": run_jobs, "web_workers": str(processes)}
    with running_server(database_url, **settings) as server:
        sessions = setup_project(server.base, server.key, workers, strategy)
        return timed(server.base, sessions, seconds, server.process.pid)


def measure_bare(workers: int, seconds: float) -> Run:
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
            return timed(base, sessions, seconds, process.pid)
        finally:
            process.terminate()
            process.wait(timeout=30)


def pool(runs: list[Run]) -> Run:
    """One row from repeated runs: mean rate and CPU, latencies pooled."""
    return Run(
        statistics.fmean(r.rate for r in runs),
        [ms for r in runs for ms in r.latencies],
        statistics.fmean(r.server_cpu_ms for r in runs),
        statistics.fmean(r.client_cpu_ms for r in runs),
    )


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 2 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="5 s per run instead of 20 s")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument(
        "--postgres",
        # Its own database (created if missing), so a run never empties the tests' one.
        default="postgresql+psycopg://postgres@127.0.0.1:5432/tripletlab_bench",
        help="PostgreSQL URL; its schema is dropped and recreated",
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        choices=RUNS,
        default=list(RUNS),
        help="which rows to measure (default: all; without 'bare' the ratio column is blank)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of each row (rates: mean ± sd; the rest pooled)",
    )
    parser.add_argument(
        "--strategy",
        choices=("random", "adaptive"),
        default="random",
        help="the plan's strategy (adaptive: see ADAPTIVE_REFRESH; the job runner is on)",
    )
    args = parser.parse_args()
    seconds = 5.0 if args.quick else 20.0

    measures: list[tuple[str, Callable[[], Run]]] = []
    if "bare" in args.runs:
        measures.append(
            ("bare FastAPI ceiling (constant JSON)", lambda: measure_bare(args.workers, seconds))
        )
    if "sqlite" in args.runs:
        measures.append(
            (
                "Triplet Lab, SQLite",
                lambda: measure_ours(None, args.workers, seconds, strategy=args.strategy),
            )
        )
    if "sqlite2" in args.runs:
        measures.append(
            (
                "Triplet Lab, SQLite, 2 server processes",
                lambda: measure_ours(
                    None, args.workers, seconds, processes=2, strategy=args.strategy
                ),
            )
        )
    if "postgres" in args.runs and args.postgres:

        def postgres() -> Run:
            reset_postgres(args.postgres)
            return measure_ours(args.postgres, args.workers, seconds, strategy=args.strategy)

        measures.append(("Triplet Lab, PostgreSQL", postgres))
    # Rows take turns run after run, so a slow spell of the machine hits every row alike.
    runs: dict[str, list[Run]] = {name: [] for name, _ in measures}
    for _ in range(args.repeats):
        for name, measure in measures:
            runs[name].append(measure())
    rows = [(name, pool(done)) for name, done in runs.items()]
    ceiling = rows[0][1].rate if "bare" in args.runs else float("nan")

    print(
        f"\nworker round trips (GET next + POST answer), {args.workers} concurrent workers, "
        f"{seconds:.0f} s per run, {args.repeats} run(s) of each row, 1 uvicorn process unless "
        "said, client on the same machine (raw asyncio HTTP/1.1 keep-alive, one connection per "
        "worker)"
    )
    header = ("server", "round trips/s", "p50 ms", "p99 ms", "vs ceiling", "vs Salmon*")
    header += ("server CPU", "client CPU")
    print("{:40s} {:>18s} {:>8s} {:>8s} {:>11s} {:>11s} {:>11s} {:>11s}".format(*header))
    for name, run in rows:
        p50, p99 = percentile(run.latencies, 50), percentile(run.latencies, 99)
        rates = [r.rate for r in runs[name]]
        spread = f"{run.rate:.1f} ± {statistics.pstdev(rates):.1f}"
        print(
            f"{name:40s} {spread:>18s} {p50:8.1f} {p99:8.1f} "
            f"{run.rate / ceiling:10.2f}x {run.rate / SALMON_REPORTED:10.1f}x "
            f"{run.server_cpu_ms:8.2f} ms {run.client_cpu_ms:8.2f} ms"
        )
    if args.repeats > 1:
        print("round trips/s: mean ± sd over runs; latencies pooled over runs; CPU: mean of runs.")
    print(
        "CPU columns: CPU time per round trip of the server's processes and of this client "
        "(2 cores = 2,000 ms of CPU per second between them)."
    )
    print(
        f"* Salmon: {SALMON_REPORTED:.0f} round trips/s as reported for a comparable machine, "
        "not measured in this run."
    )


if __name__ == "__main__":
    main()

"""Worker round trips per second against real servers: Salmon, the bare ceiling and ours.

One interleaved run measures, with the same client and at 1, 10 and 50 concurrent workers:

* **Salmon 1.0.3** (Redis + RedisJSON, 4 gunicorn workers, Dask), the closest public system,
  started from a directory made by ``../shared/tools/salmon-bench/setup.sh DIR`` (``--salmon
  DIR``, default ``bench/.salmon``, gitignored; nothing of Salmon is committed). A worker there
  is ``GET /query`` then ``POST /answer``. Its Dask workers are stopped (SIGSTOP) while the
  other rows run, so they do not take CPU from them.
* **the bare ceiling**: a FastAPI app under the same uvicorn, with the same HTTP protocol
  (``app.internals``: a response in one write) and settings, whose routes (coroutines,
  answered on the event loop: FastAPI's cheapest) return constant JSON in our protocol, so
  the ratio says what Triplet Lab's own work costs.
* **Triplet Lab** (`tripletlab serve`): SQLite, SQLite with 2 server processes, PostgreSQL,
  PostgreSQL with 2 server processes. A worker gets its first question with ``GET …/next``,
  then each answer's 201 carries the next question (``"next"``), as the worker page does.

A round trip is one question answered (for Salmon: a query fetched and answered). The client
is a few lines of raw asyncio HTTP/1.1 keep-alive (one connection per worker, no think time)
so that it leaves the CPU to the servers; "server CPU" is the CPU time of every process of the
system measured (for Salmon: redis, backend, frontend and Dask) per round trip, and "db CPU",
for rows on PostgreSQL, that of the PostgreSQL server's own processes (all of them on the
machine: run it with nothing else using that server).
A measurement is the steady state: the workers run 2 s before its window opens, and keep their
connections and questions across it (``timed``).
Rows take turns, repeat after repeat, so a slow spell of the shared machine hits them alike.

    ../shared/tools/salmon-bench/setup.sh bench/.salmon      # once, ~2-10 min
    .venv/bin/python bench/worker_throughput.py [--quick] [--repeats 3] [--salmon DIR]
        [--postgres URL] [--rows ...] [--workers 1 10 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(__file__))
from _server import (
    cpu_seconds,
    free_port,
    postgres_cpu_seconds,
    processes,
    reset_postgres,
    running_server,
    stop_with_parent,
)

try:  # the client's event loop: uvloop (installed with uvicorn[standard]) is the lighter one
    import uvloop

    run_loop = uvloop.run
except ImportError:
    run_loop = asyncio.run

ROOT = Path(__file__).resolve().parent.parent
ROWS = ("salmon", "bare", "sqlite", "sqlite2", "postgres", "postgres2")
LABELS = {
    "salmon": "Salmon 1.0.3 (Redis, 4 gunicorn workers)",
    "bare": "bare FastAPI, constant JSON (ceiling)",
    "sqlite": "Triplet Lab, SQLite",
    "sqlite2": "Triplet Lab, SQLite, 2 processes",
    "postgres": "Triplet Lab, PostgreSQL",
    "postgres2": "Triplet Lab, PostgreSQL, 2 processes",
}
BARE_APP = """
from fastapi import FastAPI
app = FastAPI()
QUERY = {"token": "t", "kind": "triplet", "objects": [{"index": 0}, {"index": 1}, {"index": 2}]}
@app.get("/api/w/sessions/{sid}/next")
async def next_(sid: str):
    return {"query": QUERY}
@app.post("/api/w/sessions/{sid}/answers", status_code=201)
async def answer(sid: str, body: dict):
    return {"answered": 1, "total": 10, "done": False, "next": {"query": QUERY}}
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
        self, method: str, path: str, token: str = "", body: bytes = b""
    ) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\nhost: {self.host}\r\n"
        if token:
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


@dataclass
class Tally:
    # perf_counter time the measured window opens at (set when the warm-up ends): round
    # trips that end before it are the warm-up's and are not counted
    measure_from: float = float("inf")
    latencies: list[float] = field(default_factory=list)  # ms per round trip
    errors: int = 0
    first_error: str = ""
    waits: int = 0  # "wait" replies: nothing to ask right now

    def record(self, started: float) -> None:
        ended = time.perf_counter()
        if ended >= self.measure_from:
            self.latencies.append((ended - started) * 1000)

    def error(self, status: int, body: bytes) -> None:
        self.errors += 1
        self.first_error = self.first_error or f"{status} {body[:200]!r}"


_opened = iter(range(10**9))  # participants of the sessions workers open as they go


async def ours_worker(
    connection: Connection, session: tuple[str, str], stop: float, tally: Tally
) -> None:
    """GET next once, then answer; each 201 carries the next question (or GET it if not).
    A session that ends is followed by a new one (``POST …/sessions``, then ``GET …/next``),
    as a study's next participant would: its cost is part of that question's round trip. A
    ``wait`` reply (nothing to ask right now) is counted, and asked again after 50 ms."""
    session_id, token = session
    nxt: dict | None = None
    while time.monotonic() < stop:
        started = time.perf_counter()
        if nxt is None:
            status, body = await connection.request(
                "GET", f"/api/w/sessions/{session_id}/next", token
            )
            if status != 200:
                tally.error(status, body)
                return
            nxt = json.loads(body)
        if nxt.get("wait"):
            tally.waits += 1
            nxt = None
            await asyncio.sleep(0.05)
            continue
        if nxt.get("done"):
            participant = json.dumps({"participant": f"next-{next(_opened)}"}).encode()
            status, body = await connection.request(
                "POST", "/api/w/bench/sessions", body=participant
            )
            if status != 201:
                tally.error(status, body)
                return
            opened = json.loads(body)
            session_id, token, nxt = opened["session_id"], opened["session_token"], None
            status, body = await connection.request(
                "GET", f"/api/w/sessions/{session_id}/next", token
            )
            if status != 200:
                tally.error(status, body)
                return
            nxt = json.loads(body)
            if nxt.get("done") or nxt.get("wait"):
                continue
        query = nxt["query"]
        # A triplet's left candidate; a pair's "about the same" (--strategy adaptive_pairs).
        choice = query["objects"][1]["index"] if query["kind"] == "triplet" else 0
        answer = {"token": query["token"], "choice": choice}
        status, body = await connection.request(
            "POST",
            f"/api/w/sessions/{session_id}/answers",
            token,
            json.dumps({**answer, "client_ms": 1000}).encode(),
        )
        if status != 201:
            tally.error(status, body)
            return
        nxt = json.loads(body).get("next")
        tally.record(started)


async def salmon_worker(
    connection: Connection, session: tuple[str, str], stop: float, tally: Tally
) -> None:
    """Salmon's worker page: GET /query, then POST /answer with the query and the winner."""
    puid = session[0]
    while time.monotonic() < stop:
        started = time.perf_counter()
        status, body = await connection.request("GET", f"/query?puid={puid}")
        if status != 200:
            tally.error(status, body)
            return
        query = json.loads(body)
        answer = {
            **{k: query[k] for k in ("head", "left", "right", "sampler", "score")},
            "winner": query["left"],
            "puid": puid,
            "response_time": 1.0,
            "network_latency": 0.0,
        }
        status, body = await connection.request("POST", "/answer", body=json.dumps(answer).encode())
        if status != 200:
            tally.error(status, body)
            return
        tally.record(started)


Worker = Callable[[Connection, tuple[str, str], float, Tally], object]


async def drive(
    base: str, sessions: list[tuple[str, str]], seconds: float, worker: Worker, tally: Tally
) -> None:
    host, port = base.removeprefix("http://").split(":")
    stop = time.monotonic() + seconds

    async def one(session: tuple[str, str]) -> None:
        connection = Connection(host, int(port))
        try:
            await worker(connection, session, stop, tally)  # type: ignore[misc]
        except (OSError, asyncio.IncompleteReadError) as error:
            tally.error(0, repr(error).encode())
        finally:
            connection.close()

    await asyncio.gather(*(one(s) for s in sessions))


@dataclass
class Run:
    """One timed run: round trips per second, latencies, errors, CPU ms per round trip."""

    rate: float
    latencies: list[float]
    errors: int
    waits: int
    server_cpu_ms: float  # the system's processes' CPU per round trip
    client_cpu_ms: float  # this process's CPU per round trip
    database_cpu_ms: float | None  # PostgreSQL's own processes' CPU per round trip, if used
    connections: str = "-"  # the client's connections per server process ("44/6")


@dataclass
class System:
    """A running system: where to reach it, its sessions, its processes and its client."""

    base: str
    sessions: list[tuple[str, str]]
    pids: list[int]
    worker: Worker
    on_postgres: bool = False  # its database is the PostgreSQL server (its CPU counted apart)


WARM_UP = 2.0  # seconds the workers run before the measured window opens


def timed(system: System, n_workers: int, seconds: float) -> Run:
    """``n_workers`` workers run for :data:`WARM_UP` + ``seconds``; what is counted, round
    trips and CPU, is the last ``seconds``: the steady state. The workers keep their
    connections and questions across the start of the window, so it does not open on 50
    workers connecting and asking their first question at once (a burst that, counted, made
    most of the round trips over p99 at 50 workers: all in its first 200 ms)."""
    sessions = system.sessions[:n_workers]
    port = int(system.base.rsplit(":", 1)[1])
    tally = Tally()
    marks: list[tuple[float, float, float, float]] = []  # time, server, database, client CPU

    def mark() -> None:  # one look at /proc: the client's loop waits while it is taken
        now, running = time.perf_counter(), processes()
        marks.append(
            (
                now,
                sum(cpu_seconds(p, running) for p in system.pids),
                postgres_cpu_seconds(running) if system.on_postgres else 0.0,
                time.process_time(),
            )
        )

    def open_window() -> None:
        mark()
        tally.measure_from = marks[0][0]

    # The connections are counted in the warm-up (the window keeps them): counting reads
    # every socket of the system's processes, and in the window it stalled the client for
    # long enough to make a burst of round trips over p99.
    split: list[str] = []
    counter = threading.Timer(WARM_UP * 3 / 4, lambda: split.append(connection_split(system, port)))
    opener = threading.Timer(WARM_UP, open_window)
    opener.start()
    counter.start()
    run_loop(drive(system.base, sessions, WARM_UP + seconds, system.worker, tally))
    mark()
    opener.join()
    counter.join()
    (started, server_before, database_before, client_before), end = marks
    elapsed = end[0] - started
    server_cpu = end[1] - server_before
    database_cpu = end[2] - database_before if system.on_postgres else None
    client_cpu = end[3] - client_before
    if tally.errors:
        print(f"  {tally.errors} errors, first: {tally.first_error}", file=sys.stderr)
    count = max(len(tally.latencies), 1)
    return Run(
        len(tally.latencies) / elapsed,
        tally.latencies,
        tally.errors,
        tally.waits,
        server_cpu * 1000 / count,
        client_cpu * 1000 / count,
        None if database_cpu is None else database_cpu * 1000 / count,
        split[0] if split else "-",
    )


def connection_split(system: System, port: int) -> str:
    """How many of the client's connections each process of ``system`` holds now, most
    first ("44/6"): processes that share one listening socket need not share the load."""
    counts = []
    for root in system.pids:
        for pid in process_tree(root):
            with suppress(psutil.Error):
                sockets = psutil.Process(pid).net_connections("tcp")
                held = sum(
                    1
                    for c in sockets
                    if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port
                )
                if held:
                    counts.append(held)
    return "/".join(str(n) for n in sorted(counts, reverse=True)) or "-"


# --strategy adaptive (issue 12): the plan's one strategy is `adaptive` (t-STE, refit every
# ADAPTIVE_REFRESH answers); the run starts once the first model has landed and its batch is
# stored, and the server's job runner keeps refitting during the run, as in production.
ADAPTIVE_REFRESH = 100


def wait_for_adaptive_batch(
    client: httpx.Client, headers: dict[str, str], pairs: bool = False
) -> None:
    rows = np.random.default_rng(0).permuted(
        np.tile(np.arange(1000), (ADAPTIVE_REFRESH, 1)), axis=1
    )[:, :3]
    if pairs:  # (left, right, outcome): a third each of -1, 0, 1
        rows[:, 2] = np.arange(len(rows)) % 3 - 1
    response = client.post(
        "/api/projects/bench/answers",
        json={"pairs" if pairs else "triplets": rows.tolist()},
        headers=headers,
    )
    assert response.status_code == 201, response.text
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        jobs = client.get("/api/projects/bench/jobs", headers=headers).json()["data"]
        if any(j["status"] == "succeeded" for j in jobs):
            time.sleep(2.0)  # the job stores the batch right after the model
            return
        time.sleep(0.5)
    raise RuntimeError(f"no adaptive model landed: {jobs}")


def setup_project(
    base: str, key: str, n_workers: int, strategy: str = "random", session_length: int = 5000
) -> list[tuple[str, str]]:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, timeout=120) as client:
        client.post("/api/projects", json={"slug": "bench", "name": "bench"}, headers=headers)
        if strategy == "comprf":  # digits: 1,797 objects, their labels (supervised pivots)
            from sklearn.datasets import load_digits

            labels = load_digits().target
            objects = [{"name": f"d{i}", "label": str(y)} for i, y in enumerate(labels)]
        else:
            objects = [{"name": f"o{i}"} for i in range(1000)]
        client.post("/api/projects/bench/objects", json=objects, headers=headers)
        spec: dict = {"kind": strategy, "weight": 1}
        if strategy == "adaptive":
            spec["params"] = {"refresh_every": ADAPTIVE_REFRESH}
        if strategy == "comprf":
            spec["params"] = {"n_trees": 10, "redundancy": 3}
        if strategy == "adaptive_pairs":  # issue 33: Bradley-Terry refits, pairs from the batch
            spec = {"kind": "adaptive", "weight": 1}
            spec["params"] = {"kind": "pairs", "refresh_every": ADAPTIVE_REFRESH}
        plan = {
            "strategies": [spec],
            "queries_per_session": session_length,
            "gold_rate": 0.05,
            "repeat_rate": 0.05,
            # The crowd's reliability (issue 33) is off here, so that the rates stay
            # comparable with the runs before it: its EM job would share the cores.
            "quality": {"reliability_every": 0},
        }
        assert client.put("/api/projects/bench/plan", json=plan, headers=headers).status_code == 200
        if strategy.startswith("adaptive"):
            wait_for_adaptive_batch(client, headers, pairs=strategy == "adaptive_pairs")
        sessions = []
        for i in range(n_workers):
            body = client.post("/api/w/bench/sessions", json={"participant": f"w{i}"}).json()
            sessions.append((body["session_id"], body["session_token"]))
    return sessions


@contextmanager
def ours(
    database_url: str | None,
    n_sessions: int,
    processes: int,
    strategy: str = "random",
    session_length: int = 5000,
) -> Iterator[System]:
    if database_url:
        reset_postgres(database_url)
    # adaptive needs the job runner: its refits run there, as in production.
    run_jobs = "true" if strategy.startswith("adaptive") else "false"
    settings = {"run_jobs": run_jobs, "web_workers": str(processes)}
    with running_server(database_url, **settings) as server:
        sessions = setup_project(server.base, server.key, n_sessions, strategy, session_length)
        yield System(
            server.base, sessions, [server.process.pid], ours_worker, database_url is not None
        )


# Served as `tripletlab serve` serves ours: uvicorn with the same protocol and settings.
BARE_SERVE = """
import sys, uvicorn
from app.internals import OneWriteHttpToolsProtocol
uvicorn.run("bare_app:app", port=int(sys.argv[1]), log_level="warning", access_log=False,
            http=OneWriteHttpToolsProtocol)
"""


@contextmanager
def bare(n_sessions: int) -> Iterator[System]:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "bare_app.py").write_text(BARE_APP)
        port = free_port()
        command = [sys.executable, "-c", BARE_SERVE, str(port)]
        process = subprocess.Popen(command, cwd=tmp, preexec_fn=stop_with_parent)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_for(f"{base}/docs")
            sessions = [(f"s{i}", "t") for i in range(n_sessions)]
            yield System(base, sessions, [process.pid], ours_worker)
        finally:
            process.terminate()
            process.wait(timeout=30)


def wait_for(url: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {seconds:.0f} s")
        time.sleep(0.3)


def salmon_launcher() -> Path | None:
    """``launch.sh`` of ``shared/tools/salmon-bench`` beside the checkout (or one level up)."""
    for parent in ROOT.parents:
        candidate = parent / "shared" / "tools" / "salmon-bench" / "launch.sh"
        if candidate.exists():
            return candidate
    return None


class Salmon:
    """Salmon 1.0.3 started by its bench launcher for the whole run, stopped at the end."""

    def __init__(self, directory: Path, launcher: Path) -> None:
        self.directory, self.launcher = directory, launcher
        self.pids: dict[str, int] = {}

    def start(self, attempts: int = 3) -> None:
        """Launch Salmon; again, up to ``attempts`` times, if its frontend does not answer:
        the frontend asks its backend for the experiment at startup and fails to boot if
        the backend does not listen yet (a race of the launcher, seen on this machine)."""
        for attempt in range(1, attempts + 1):
            self._launch()
            try:
                wait_for("http://127.0.0.1:8241/query", seconds=60)
            except RuntimeError:
                self.stop()
                if attempt == attempts:
                    raise
                print(f"Salmon did not start (attempt {attempt}); launching it again")
                continue
            self.pause()
            return

    def _launch(self) -> None:
        # A fresh Redis each run, as our rows get fresh databases; and with a saved
        # experiment Salmon's frontend asks its backend to restore it at startup, before
        # launch.sh's backend is up under load, and fails to boot (seen on this machine).
        for saved in (self.directory / "run" / "redis-data").glob("*.rdb"):
            saved.unlink()
        self.pids = {}
        try:
            subprocess.run(
                ["bash", str(self.launcher), str(self.directory)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        finally:  # what it started, even if it then failed, so that stop() ends it
            for line in (self.directory / "run" / "pids").read_text().splitlines():
                name, pid = line.split()
                self.pids[name] = int(pid)

    def _dask(self) -> list[int]:
        """The Dask processes (scheduler, workers and their children)."""
        roots = [self.pids[n] for n in ("dask-scheduler", "dask-worker") if n in self.pids]
        return [p for root in roots for p in process_tree(root)]

    def pause(self) -> None:
        for pid in self._dask():
            os.kill(pid, signal.SIGSTOP)

    def resume(self) -> None:
        for pid in self._dask():
            os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        """End every Salmon process, and wait (up to 30 s) until they are gone and their
        fixed ports are free for the next run."""
        self.resume()
        pids = [p for root in self.pids.values() for p in process_tree(root)]
        for pid in reversed(pids):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while any(Path(f"/proc/{p}").exists() for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)

    @contextmanager
    def running(self, n_sessions: int) -> Iterator[System]:
        self.resume()
        try:
            time.sleep(2)  # Dask's heartbeats catch up
            sessions = [(f"w{i}", "") for i in range(n_sessions)]
            yield System("http://127.0.0.1:8241", sessions, list(self.pids.values()), salmon_worker)
        finally:
            self.pause()


def process_tree(root: int) -> list[int]:
    """``root`` and its descendants, parents first (Linux /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree = [root]
    for pid in tree:
        tree.extend(child for child, ppid in parents.items() if ppid == pid and child not in tree)
    return [p for p in tree if Path(f"/proc/{p}").exists()]


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 2 else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="4 s per measurement instead of 10 s")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--repeats", type=int, default=1, help="runs of each row (mean ± sd)")
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument(
        "--salmon",
        type=Path,
        default=ROOT / "bench" / ".salmon",
        help="directory set up by shared/tools/salmon-bench/setup.sh (default bench/.salmon)",
    )
    parser.add_argument(
        "--postgres",
        # Its own database (created if missing), so a run never empties the tests' one.
        default="postgresql+psycopg://postgres@127.0.0.1:5432/tripletlab_bench",
        help="PostgreSQL URL; its schema is dropped and recreated",
    )
    parser.add_argument(
        "--strategy",
        nargs="+",
        choices=("random", "adaptive", "adaptive_pairs", "comprf"),
        default=["random"],
        help="the plan's strategy; several: each of our rows runs with each, side by side in "
        "turns (adaptive: see ADAPTIVE_REFRESH; adaptive_pairs: adaptive with kind pairs; the "
        "job runner is on for both; comprf: 10 trees, redundancy 3, on the 1,797 digits)",
    )
    parser.add_argument(
        "--session-length",
        type=int,
        default=5000,
        help="questions per session; a worker whose session ends opens the next (40: a real "
        "study's sessions)",
    )
    args = parser.parse_args()
    seconds = 4.0 if args.quick else 10.0
    n_sessions = max(args.workers)

    salmon: Salmon | None = None
    rows = list(args.rows)
    if "salmon" in rows:
        launcher = salmon_launcher()
        if launcher is None or not (args.salmon / "salmon-venv").exists():
            print(
                f"Salmon is not set up in {args.salmon}: run shared/tools/salmon-bench/setup.sh "
                f"{args.salmon} first (or pass --salmon DIR); measuring the other rows.",
                file=sys.stderr,
            )
            rows.remove("salmon")
        else:
            salmon = Salmon(args.salmon.resolve(), launcher)

    # Our rows, once per strategy: "postgres2" (the first strategy), "postgres2+comprf", …
    rows = [
        f"{row}+{strategy}" if i and row not in ("salmon", "bare") else row
        for row in rows
        for i, strategy in enumerate(args.strategy)
        if i == 0 or row not in ("salmon", "bare")
    ]
    for row in rows:
        base, _, strategy = row.partition("+")
        LABELS.setdefault(row, f"{LABELS[base]}, {strategy}")

    def system(row: str):  # type: ignore[no-untyped-def]
        if row == "salmon":
            assert salmon is not None
            return salmon.running(n_sessions)
        if row == "bare":
            return bare(n_sessions)
        base, _, strategy = row.partition("+")
        url = args.postgres if base.startswith("postgres") else None
        processes = 2 if base.endswith("2") else 1
        strategy = strategy or args.strategy[0]
        return ours(url, n_sessions, processes, strategy, args.session_length)

    runs: dict[tuple[str, int], list[Run]] = {(r, w): [] for r in rows for w in args.workers}
    load_before = os.getloadavg()
    try:
        if salmon is not None:
            salmon.start()
        for repeat in range(args.repeats):
            for row in rows:
                with system(row) as running:
                    for n_workers in args.workers:
                        run = timed(running, n_workers, seconds)
                        runs[row, n_workers].append(run)
                        print(
                            f"[{repeat + 1}/{args.repeats}] {LABELS[row]:42s} {n_workers:3d} "
                            f"workers: {run.rate:8.1f}/s",
                            file=sys.stderr,
                        )
    finally:
        if salmon is not None:
            salmon.stop()
    print(
        f"\nplan: {args.strategy[0]} (the rows without a strategy named), sessions of "
        f"{args.session_length} questions (a session that ends is followed by a new one)"
    )
    report(runs, rows, args.workers, seconds, args.repeats, load_before)


def report(
    runs: dict[tuple[str, int], list[Run]],
    rows: list[str],
    workers: list[int],
    seconds: float,
    repeats: int,
    load_before: tuple[float, float, float],
) -> None:
    def rate(row: str, n: int) -> float:
        return statistics.fmean(r.rate for r in runs[row, n]) if (row, n) in runs else float("nan")

    print(
        f"\nworker round trips (a question answered), {seconds:.0f} s per measurement "
        f"after {WARM_UP:.0f} s of warm-up on the same connections, "
        f"{repeats} run(s) of each, client on the same machine (raw asyncio HTTP/1.1 "
        "keep-alive, one connection per worker, no think time); load average (1, 5, 15 min) "
        + "before: {:.1f} {:.1f} {:.1f}, after: {:.1f} {:.1f} {:.1f}".format(
            *load_before, *os.getloadavg()
        )
    )
    header = ("system", "workers", "round trips/s", "p50 ms", "p99 ms", "errors/waits")
    header += ("vs ceiling", "vs Salmon", "server CPU", "db CPU", "client CPU", "connections")
    line = "{:42s} {:>7s} {:>16s} {:>8s} {:>8s} {:>12s} {:>10s} {:>9s} {:>10s} {:>10s} {:>10s}  {}"
    print(line.format(*header))
    for row in rows:
        for n in workers:
            done = runs[row, n]
            mean = statistics.fmean(r.rate for r in done)
            spread = f"{mean:.0f} ± {statistics.pstdev([r.rate for r in done]):.0f}"
            latencies = [ms for r in done for ms in r.latencies]
            server = statistics.fmean(r.server_cpu_ms for r in done)
            client = statistics.fmean(r.client_cpu_ms for r in done)
            database = [r.database_cpu_ms for r in done if r.database_cpu_ms is not None]
            print(
                line.format(
                    LABELS[row],
                    str(n),
                    spread,
                    f"{percentile(latencies, 50):.1f}",
                    f"{percentile(latencies, 99):.1f}",
                    f"{sum(r.errors for r in done)}/{sum(r.waits for r in done)}",
                    f"{mean / rate('bare', n):.2f}",
                    f"{mean / rate('salmon', n):.2f}x",
                    f"{server:.2f} ms",
                    f"{statistics.fmean(database):.2f} ms" if database else "-",
                    f"{client:.2f} ms",
                    " ".join(r.connections for r in done),
                )
            )
    print(
        "round trips/s: mean ± sd over runs; latencies pooled; CPU per round trip, mean of runs "
        "(2 cores = 2,000 ms of CPU per second); db CPU: the PostgreSQL server's own processes "
        "(every one on the machine). Ours and the ceiling: one POST per question "
        "(its 201 carries the next question); Salmon: GET /query + POST /answer. "
        "connections: the client's connections held by each server process, counted in the "
        "warm-up, one figure per run."
    )


if __name__ == "__main__":
    main()

"""Worker API latency while a researcher uploads 40 MiB, beside the same load idle.

A real `tripletlab serve` serves a project ``load`` of 500 objects with a random plan. A
fixed-rate load of simulated workers (open loop: a round trip GET next + POST answer starts
every 1/rate seconds whatever the server does) is measured idle, then while a researcher
uploads, into another project ``bulk``:

* a 40 MiB objects CSV (name, text, label, target, f0..f9; ~250,000 rows), then
* a 40 MiB answers CSV (kind, a, b, c, outcome; ~1.5 million triplets),

each as a multipart upload, sent from a process of its own. The issue's complaint: every
worker request waited 6-8 s while such an upload was parsed on the event loop. The load runs
from when the upload starts to when its response arrives; the round trips are also split by
the part of the upload they started in (its body being sent, the server at work, its reply
arriving), and the slowest are printed with when they started.

    .venv/bin/python bench/upload_stall.py [--rate 20] [--idle-seconds 15] [--mib 40]
        [--database-url postgresql+psycopg://...]   # default: a fresh SQLite file

To measure another version of the app (e.g. before a change), run the same script with
``PYTHONPATH=<a checkout of that version>`` *from that checkout's directory*: the server
inherits both, and its parsing processes (``python -c``) import ``app`` from the working
directory first (run from another checkout, they load the other version's parser and the
upload fails with 500).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection

import httpx
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from _server import reset_postgres, running_server
from serving_latency import summary

from app.config import Settings


def objects_csv(mib: float) -> bytes:
    """An objects CSV of about ``mib`` MiB."""
    rng = np.random.default_rng(0)
    out = io.StringIO()
    out.write("name,text,label,target," + ",".join(f"f{i}" for i in range(10)) + "\n")
    i = 0
    while out.tell() < mib * 2**20:
        features = ",".join(f"{v:.5f}" for v in rng.normal(size=10))
        out.write(f"object {i},a short description of object {i},c{i % 7},{i / 3:.3f},{features}\n")
        i += 1
    return out.getvalue().encode()


def answers_csv(mib: float, n_objects: int) -> bytes:
    """An answers CSV of about ``mib`` MiB: distinct random triplets over ``n_objects``."""
    rng = np.random.default_rng(1)
    lines = ["kind,a,b,c,outcome\n"]
    size = len(lines[0])
    while size < mib * 2**20:
        rows = rng.integers(0, n_objects, size=(100_000, 3))
        rows = rows[
            (rows[:, 0] != rows[:, 1]) & (rows[:, 0] != rows[:, 2]) & (rows[:, 1] != rows[:, 2])
        ]
        chunk = "".join(f"triplet,{a},{b},{c},\n" for a, b, c in rows.tolist())
        lines.append(chunk)
        size += len(chunk)
    return "".join(lines).encode()


def setup(base: str, key: str) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, timeout=600, headers=headers) as client:
        for slug in ("load", "bulk"):
            assert client.post("/api/projects", json={"slug": slug, "name": slug}).is_success
        objects = [{"name": f"o{i}"} for i in range(500)]
        assert client.post("/api/projects/load/objects", json=objects).status_code == 201
        plan = {"strategies": [{"kind": "random"}], "queries_per_session": 5000, "repeat_rate": 0.0}
        assert client.put("/api/projects/load/plan", json=plan).status_code == 200


async def open_sessions(client: httpx.AsyncClient, label: str, n: int) -> asyncio.Queue:
    free: asyncio.Queue = asyncio.Queue()
    for i in range(n):
        opened = await client.post(
            "/api/w/load/sessions", json={"participant": f"{label}-{i}", "simulated": True}
        )
        body = opened.json()
        free.put_nowait((body["session_id"], {"Authorization": f"Bearer {body['session_token']}"}))
    return free


async def load_while(
    base: str, rate: float, label: str, work: Callable[[], object] | None, seconds: float = 0.0
) -> tuple[list[float], object]:
    """Open-loop worker round trips at ``rate`` per second while ``work`` runs in a thread
    (or for ``seconds`` when there is none); their latencies (ms) and what ``work`` returned."""
    latencies: list[float] = []
    STARTS.setdefault(label, [])
    async with httpx.AsyncClient(base_url=base, timeout=120) as client:
        failures = FAILURES.setdefault(label, [])
        free = await open_sessions(client, label, 32)

        async def one() -> None:
            session_id, headers = await free.get()
            started = time.perf_counter()
            try:
                nxt = await client.get(f"/api/w/sessions/{session_id}/next", headers=headers)
                query = nxt.json()["query"]
                posted = await client.post(
                    f"/api/w/sessions/{session_id}/answers",
                    json={
                        "token": query["token"],
                        "choice": query["objects"][1]["index"],
                        "client_ms": 1500,
                    },
                    headers=headers,
                )
                posted.raise_for_status()
                latencies.append((time.perf_counter() - started) * 1000)
                STARTS[label].append((started, latencies[-1]))
            except (httpx.HTTPError, KeyError, TypeError, ValueError) as error:
                failures.append(f"{type(error).__name__}: {str(error)[:120]}")
            finally:
                free.put_nowait((session_id, headers))

        job = asyncio.create_task(asyncio.to_thread(work)) if work else None
        tasks = []
        begin = time.perf_counter()
        i = 0
        while (job is not None and not job.done()) or (job is None and i < rate * seconds):
            delay = begin + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
            i += 1
        await asyncio.gather(*tasks)
        result = await job if job else None
    return latencies, result


FAILURES: dict[str, list[str]] = {}  # by phase: round trips that failed (error, not timing)
STARTS: dict[str, list[tuple[float, float]]] = {}  # by phase: (perf_counter at start, ms)
BOUNDARY = b"tripletlab-bench-upload"


def uploader(base: str, key: str, path: str, content: bytes) -> Callable[[], Upload]:
    """A multipart upload of ``content`` (field ``file``), sent 256 KiB at a time from a
    process of its own (in a thread of this one it would hold the interpreter lock that the
    measured round trips need, and count the client's delays as the server's); when its body
    was sent, its reply's headers arrived, and its reply's last byte arrived (monotonic
    clock, shared by the processes)."""
    head = (
        b"--" + BOUNDARY + b'\r\nContent-Disposition: form-data; name="file"; '
        b'filename="upload.csv"\r\nContent-Type: text/csv\r\n\r\n'
    )
    body = head + content + b"\r\n--" + BOUNDARY + b"--\r\n"

    def upload(results: Connection) -> None:
        times: dict[str, float] = {"start": time.perf_counter()}

        def chunks() -> Iterator[bytes]:
            for start in range(0, len(body), 2**18):
                yield body[start : start + 2**18]
            times["sent"] = time.perf_counter()

        headers = {
            "Authorization": f"Bearer {key}",
            "Content-Type": f"multipart/form-data; boundary={BOUNDARY.decode()}",
            "Content-Length": str(len(body)),
        }
        with (
            httpx.Client(base_url=base, timeout=900) as client,
            client.stream("POST", path, content=chunks(), headers=headers) as response,
        ):
            times["headers"] = time.perf_counter()
            reply = response.read()
            times["end"] = time.perf_counter()
        if not response.is_success:
            print(reply[:400])
        results.send(Upload(response.status_code, times))

    def send() -> Upload:
        # Forked: the body is inherited, not pickled.
        receiving, sending = multiprocessing.get_context("fork").Pipe(duplex=False)
        process = multiprocessing.get_context("fork").Process(target=upload, args=(sending,))
        process.start()
        result = receiving.recv()
        process.join()
        return result

    return send


@dataclass
class Upload:
    status: int
    times: dict[str, float]  # perf_counter at start, sent, headers, end

    @property
    def seconds(self) -> float:
        return self.times["end"] - self.times["start"]

    def phases(self) -> list[tuple[str, float, float]]:
        """(name, start, end): sending the body, the server's work, receiving the reply."""
        t = self.times
        return [
            ("sending the body", t["start"], t["sent"]),
            ("server at work", t["sent"], t["headers"]),
            ("receiving the reply", t["headers"], t["end"]),
        ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=20.0, help="round trips per second")
    parser.add_argument("--idle-seconds", type=float, default=15.0)
    parser.add_argument("--mib", type=float, default=40.0, help="size of each upload")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    if args.database_url:
        reset_postgres(args.database_url)

    phases: list[tuple[str, list[tuple[float, float]], Upload]] = []
    objects = objects_csv(args.mib)
    answers = answers_csv(args.mib, objects.count(b"\n") - 1)
    rows: list[tuple[str, list[float], Upload | None]] = []
    with running_server(args.database_url) as (base, key, _):
        setup(base, key)
        asyncio.run(load_while(base, args.rate, "warm", None, 3.0))
        idle, _ = asyncio.run(load_while(base, args.rate, "idle", None, args.idle_seconds))
        rows.append(("idle", idle, None))
        for what, path, content in [
            ("objects", "/api/projects/bulk/objects", objects),
            ("answers", "/api/projects/bulk/answers", answers),
        ]:
            send = uploader(base, key, path, content)
            latencies, upload = asyncio.run(load_while(base, args.rate, what, send))
            assert isinstance(upload, Upload)
            label = f"during {len(content) / 2**20:.0f} MiB {what} CSV"
            rows.append((label, latencies, upload))
            phases.append((label, STARTS[what], upload))

    database = "PostgreSQL" if args.database_url else "SQLite"
    # As `tripletlab serve` decides, from the environment the server is started with.
    processes = Settings().server_processes()
    print(
        f"\nworker round trips (GET next + POST answer) at {args.rate:.0f}/s; {database}; "
        f"{processes} server process(es), the upload in one of them; load average "
        f"{os.getloadavg()[0]:.1f} at the end"
    )
    print(f"{'':32s} {'n':>6s} {'p50 ms':>8s} {'p99 ms':>8s} {'max ms':>8s} {'upload':>14s}")
    idle_p99 = summary(rows[0][1])[1]
    for label, latencies, upload in rows:
        p50, p99 = summary(latencies)
        took = f"{upload.status} in {upload.seconds:.1f} s" if upload else ""
        worst = max(latencies)
        print(f"{label:32s} {len(latencies):6d} {p50:8.1f} {p99:8.1f} {worst:8.1f} {took:>14s}")
    for label, latencies, _ in rows[1:]:
        print(f"p99 {label} / idle: {summary(latencies)[1] / idle_p99:.2f}")
    print("\nround trips by the part of the upload they started in (p99 of few is their max)")
    for label, starts, upload in phases:
        for name, begin, end in upload.phases():
            during = [ms for started, ms in starts if begin <= started < end]
            p50, p99 = summary(during) if len(during) > 1 else (max([*during, 0]),) * 2
            print(
                f"{label:28s} {name:20s} {end - begin:6.1f} s  n {len(during):4d}  "
                f"p50 {p50:7.1f}  p99 {p99:7.1f}  max {max([*during, 0]):7.1f} ms"
            )
        slowest = sorted(starts, key=lambda s: -s[1])[:5]
        begin = upload.times["start"]
        print(
            f"{label:28s} slowest started at (s after the upload began): "
            + ", ".join(f"{started - begin:.1f} ({ms:.0f} ms)" for started, ms in slowest)
        )
    for phase, failures in FAILURES.items():
        if failures:
            print(f"{len(failures)} failed round trips during {phase}, e.g. {failures[0]}")


if __name__ == "__main__":
    main()

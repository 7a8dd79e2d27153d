"""Hostile clients against a real `tripletlab serve` (issue 31, items 2 and 3).

1. **Large worker bodies**: 20 concurrent 40 MB bodies posted to a worker route
   (``POST /api/w/sessions/<no such session>/answers``), once announced with
   ``Content-Length`` and once streamed (chunked). The server's resident memory (every
   process of the server, summed, sampled every 20 ms) is compared with before, and every
   reply's status counted. The bar: growth < 50 MB, all refused.
2. **Slow headers**: 500 connections each send a request line and then one byte of a header
   a second, never ending it. Each connection's time until the server closes it is
   measured (the client gives up after 40 s). The bar: all closed within the header
   timeout (``TRIPLETLAB_HEADER_TIMEOUT_SECONDS``, 10 s by default).
3. **Workers alongside**: an open-loop load of simulated workers (GET next + POST answer,
   ``bench/serving_latency.py``'s) for a while before, during and after the slow
   connections: their p50 and p99. The bar: p99 unchanged within noise.

A server of another checkout can be measured with ``--tripletlab`` (its
``.venv/bin/tripletlab``): how ``main`` did before this change.

    .venv/bin/python bench/hostile_clients.py [--tripletlab PATH] [--rate 20] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, os.path.dirname(__file__))
import _server
from _server import processes, running_server
from serving_latency import setup, steady_load, summary

BODY_BYTES = 40_000_000
CONCURRENT_BODIES = 20
SLOW_CONNECTIONS = 500
GIVE_UP_S = 40.0  # a slow connection the server has not closed by then is counted open


def server_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, in MB (10^6 bytes)."""
    snapshot = processes()
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, process in snapshot.items():
            if process.ppid == parent and child not in tree:
                tree.add(child)
                frontier.append(child)
    total_kb = 0
    for member in tree:
        try:
            status = Path(f"/proc/{member}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total_kb += int(line.split()[1])
    return total_kb * 1024 / 1e6


class PeakSampler:
    """The largest :func:`server_rss_mb` seen while it runs, sampled every 20 ms."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, server_rss_mb(self.pid))
            self._stop.wait(0.02)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


async def post_large_bodies(base: str, chunked: bool) -> Counter:
    """20 concurrent 40 MB posts to a worker route; the replies' statuses (or errors)."""
    body = b"x" * BODY_BYTES
    path = f"/api/w/sessions/{uuid.uuid4()}/answers"

    async def pieces():  # type: ignore[no-untyped-def]
        for start in range(0, BODY_BYTES, 2**20):
            yield body[start : start + 2**20]

    async def one(client: httpx.AsyncClient) -> str:
        try:
            response = await client.post(
                path,
                content=pieces() if chunked else body,
                headers={"content-type": "application/json", "authorization": "Bearer x"},
            )
        except httpx.HTTPError as error:
            return type(error).__name__
        return str(response.status_code)

    limits = httpx.Limits(max_connections=CONCURRENT_BODIES)
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits) as client:
        return Counter(await asyncio.gather(*(one(client) for _ in range(CONCURRENT_BODIES))))


async def slow_header(host: str, port: int, opened: list[float], closed: list[float]) -> None:
    """One connection sending its headers a byte a second; when the server closed it."""
    reader, writer = await asyncio.open_connection(host, port)
    start = time.monotonic()
    opened.append(start)
    writer.write(b"GET /api/w/none HTTP/1.1\r\nHost: bench\r\nX-Slow: ")
    try:
        while time.monotonic() - start < GIVE_UP_S:
            try:
                reply = await asyncio.wait_for(reader.read(65536), timeout=1.0)
            except TimeoutError:
                writer.write(b"x")  # one more byte, never the end of the headers
                await writer.drain()
                continue
            if not reply or reader.at_eof():  # a 408 then EOF, or EOF alone
                closed.append(time.monotonic() - start)
                return
            rest = await reader.read()  # the 408's remainder, up to the close
            del rest
            closed.append(time.monotonic() - start)
            return
    except (ConnectionError, OSError):
        closed.append(time.monotonic() - start)
    finally:
        writer.close()


async def slow_clients_and_workers(
    base: str, rate: float, seconds: float
) -> tuple[list[float], list[float], int]:
    """The slow connections, and the workers' round trips once they are all open."""
    url = httpx.URL(base)
    opened: list[float] = []
    closed: list[float] = []
    slow = [
        asyncio.create_task(slow_header(url.host, url.port, opened, closed))
        for _ in range(SLOW_CONNECTIONS)
    ]
    while len(opened) < SLOW_CONNECTIONS:
        await asyncio.sleep(0.05)
    latencies = await steady_load(base, rate, seconds, f"slow-{uuid.uuid4().hex[:6]}")
    await asyncio.gather(*slow)
    return closed, latencies, SLOW_CONNECTIONS - len(closed)


def show_latency(label: str, latencies: list[float]) -> None:
    p50, p99 = summary(latencies)
    print(f"  {label:<34} {len(latencies):>5} round trips   p50 {p50:6.1f} ms   p99 {p99:6.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tripletlab", help="the tripletlab command to run (another checkout)")
    parser.add_argument("--rate", type=float, default=20.0, help="worker round trips per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="each latency phase")
    args = parser.parse_args()
    if args.tripletlab:
        _server.TRIPLETLAB = args.tripletlab
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))

    print(f"server: {_server.TRIPLETLAB} serve (SQLite, 2 processes)")
    print("load average (1, 5, 15 min) at the start: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))
    with running_server(None) as server:
        base, key, _ = server
        setup(base, key, 200, 1000)
        pid = server.process.pid

        size = f"{BODY_BYTES / 1e6:.0f} MB"
        print(f"\n{CONCURRENT_BODIES} concurrent {size} bodies to a worker route")
        for chunked in (False, True):
            before = server_rss_mb(pid)
            with PeakSampler(pid) as sampler:
                statuses = asyncio.run(post_large_bodies(base, chunked))
            time.sleep(1.0)
            after = server_rss_mb(pid)
            how = "streamed (chunked)" if chunked else "announced (Content-Length)"
            print(
                f"  {how:<27} RSS {before:6.0f} MB before, peak {sampler.peak:6.0f} MB "
                f"(+{sampler.peak - before:.0f}), {after:6.0f} MB after;  replies {dict(statuses)}"
            )

        print(f"\nworkers at {args.rate:g} round trips/s; {SLOW_CONNECTIONS} slow-header clients")
        show_latency("before", asyncio.run(steady_load(base, args.rate, args.seconds, "before")))
        closed, during, still_open = asyncio.run(
            slow_clients_and_workers(base, args.rate, args.seconds)
        )
        show_latency("while the slow connections hang", during)
        show_latency("after", asyncio.run(steady_load(base, args.rate, args.seconds, "after")))
        if closed:
            ordered = sorted(closed)
            print(
                f"  slow connections closed by the server: {len(closed)} of {SLOW_CONNECTIONS}, "
                f"after {ordered[0]:.1f} s (first) / {ordered[len(ordered) // 2]:.1f} s "
                f"(median) / {ordered[-1]:.1f} s (last)"
            )
        print(f"  still open after {GIVE_UP_S:.0f} s (closed by the client): {still_open}")
    print("load average (1, 5, 15 min) at the end: {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()

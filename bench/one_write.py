"""A response in one write or two: uvicorn's httptools protocol against ours
(``app.internals``), side by side, on the bare FastAPI app of the throughput benchmark.

Each round starts the bare app under uvicorn with one protocol, then the other, and sends
``--requests`` POSTs from ``--workers`` keep-alive connections (raw asyncio, no think time);
it prints requests per second and the server's CPU per request (user + system, from
``/proc``), and the write system calls per request (``/proc/PID/io``). ``--routes async``
(the throughput benchmark's) has its routes answered on the event loop, as PostgreSQL's
round trip is; ``sync`` makes them plain functions, run in the thread pool.

    .venv/bin/python bench/one_write.py [--routes sync|async] [--rounds 3] [--workers 50]
        [--requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _server import cpu_seconds, free_port, stop_with_parent
from worker_throughput import BARE_APP, wait_for

SERVE = """
import sys, uvicorn
from app.internals import OneWriteHttpToolsProtocol
http = OneWriteHttpToolsProtocol if sys.argv[2] == "one" else "httptools"
uvicorn.run("bare_app:app", port=int(sys.argv[1]), log_level="warning", access_log=False,
            http=http)
"""
BODY = b'{"token": "t", "choice": 1}'
REQUEST = (
    b"POST /api/w/sessions/s0/answers HTTP/1.1\r\nhost: bench\r\n"
    b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


async def _connection(port: int, n: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(n):
        writer.write(REQUEST)
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )
        await reader.readexactly(length)
    writer.close()


async def _load(port: int, workers: int, requests: int) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(_connection(port, requests // workers) for _ in range(workers)))
    return time.perf_counter() - started


def _writes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("syscw:"):
            return int(line.split()[1])
    raise RuntimeError("no syscw in /proc/PID/io")


def measure(protocol: str, routes: str, workers: int, requests: int) -> tuple[float, float, float]:
    """Requests/s, server CPU ms and writes per request, for ``protocol`` ("one" or "two")."""
    with tempfile.TemporaryDirectory() as tmp:
        app = BARE_APP if routes == "async" else BARE_APP.replace("async def ", "def ")
        Path(tmp, "bare_app.py").write_text(app)
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(port), protocol],
            cwd=tmp,
            preexec_fn=stop_with_parent,
        )
        try:
            wait_for(f"http://127.0.0.1:{port}/docs")
            asyncio.run(_load(port, workers, workers * 20))  # warm up
            cpu, writes = cpu_seconds(process.pid), _writes(process.pid)
            seconds = asyncio.run(_load(port, workers, requests))
            done = requests // workers * workers
            cpu = cpu_seconds(process.pid) - cpu
            writes = _writes(process.pid) - writes
        finally:
            process.terminate()
            process.wait(timeout=30)
    return done / seconds, 1000 * cpu / done, writes / done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routes", choices=("sync", "async"), default="async")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args()
    print(
        f"bare FastAPI app ({args.routes} routes), {args.workers} keep-alive connections,"
        f" {args.requests} POSTs in all"
    )
    print(f"{'protocol':<34} {'requests/s':>11} {'server CPU':>11} {'writes':>7}")
    names = {"two": "uvicorn httptools (two writes)", "one": "app.internals (one write)"}
    for _ in range(args.rounds):
        for protocol in ("two", "one"):
            rate, cpu_ms, writes = measure(protocol, args.routes, args.workers, args.requests)
            print(f"{names[protocol]:<34} {rate:>11.0f} {cpu_ms:>8.3f} ms {writes:>7.2f}")


if __name__ == "__main__":
    main()

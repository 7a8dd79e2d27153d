"""The benchmarks' server (``bench/_server.py``) stops when the benchmark that started it
dies, even killed: a killed benchmark used to leave its ``tripletlab serve`` serving."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.lifecycle.test_supervisor import alive

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = """
import sys, time
sys.path.insert(0, "bench")
from _server import running_server

with running_server() as server:
    print(server.process.pid, flush=True)
    time.sleep(600)
"""


def test_a_killed_benchmark_leaves_no_server(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # its temporary directory, removed here
    benchmark = subprocess.Popen(
        [sys.executable, "-c", BENCHMARK], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    server: set[int] = set()
    try:
        assert benchmark.stdout is not None
        supervisor = int(benchmark.stdout.readline())  # the server is up
        server = {supervisor, *(c.pid for c in psutil.Process(supervisor).children())}
        assert alive(server) == server
        benchmark.send_signal(signal.SIGKILL)
        benchmark.wait(timeout=10)
        deadline = time.monotonic() + 30
        while alive(server) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive(server) == set(), f"still serving: {alive(server)}"
    finally:
        benchmark.kill()
        benchmark.wait(timeout=10)
        for pid in alive(server):  # if this failed: not left serving after the test
            os.kill(pid, signal.SIGTERM)

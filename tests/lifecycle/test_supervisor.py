"""`tripletlab serve` starts two server processes by default, each listening on a socket of its
own (SO_REUSEPORT): connections spread evenly, a second server on the port is refused, a dead
process is replaced; killed outright, the supervisor takes them along, so a restart on the
same port serves again."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.servers import TRIPLETLAB, Server, database_url, sqlite_url

pytestmark = pytest.mark.slow


def alive(pids: set[int]) -> set[int]:
    running = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.add(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def test_postgresql_serves_from_two_processes_that_stop_with_their_supervisor(
    tmp_path: Path,
) -> None:
    server = Server(database_url("postgresql", tmp_path, "supervisor"), tmp_path / "data")
    server.start()
    workers: set[int] = set()
    try:
        workers = {
            child.pid
            for child in server.children()
            if "multiprocessing" in " ".join(child.cmdline())
            and "resource_tracker" not in " ".join(child.cmdline())
        }
        assert len(workers) == 2, [c.cmdline() for c in server.children()]

        server.kill()  # SIGKILL to the supervisor alone: no shutdown code of its runs
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and alive(workers):
            time.sleep(0.2)
        assert not alive(workers), "worker processes outlived their supervisor"

        server.start()  # the same port is free again
        assert httpx.get(f"{server.base}/api/w/-", timeout=10).status_code == 404
    finally:
        server.close()
        for pid in alive(workers):
            psutil.Process(pid).kill()


ELECT = """
import sys, time
from pathlib import Path
from app.supervisor import runs_jobs_here
print(runs_jobs_here(Path(sys.argv[1])), flush=True)
time.sleep(60)
"""


def test_one_worker_process_runs_the_job_runner_and_a_replacement_takes_over(
    tmp_path: Path,
) -> None:
    """Worker processes of one supervisor (here: this test) elect one job runner by a lock
    file; when the elected one dies, the next worker started takes it over."""
    import os
    import subprocess
    import sys

    from app.supervisor import SUPERVISOR_PID

    env = {**os.environ, SUPERVISOR_PID: str(os.getpid())}

    def worker() -> tuple[subprocess.Popen, bool]:
        process = subprocess.Popen(
            [sys.executable, "-c", ELECT, str(tmp_path)], env=env, stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert process.stdout is not None
        return process, process.stdout.readline().strip() == "True"

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=10)
    stale = tmp_path / f".job-runner-{gone.pid}.lock"  # left by a supervisor that is gone
    stale.touch()
    first, second = worker(), worker()
    try:
        assert not stale.exists()
        assert (tmp_path / f".job-runner-{os.getpid()}.lock").exists()
        assert [first[1], second[1]] == [True, False]
        first[0].kill()
        first[0].wait(timeout=10)
        third = worker()
        third[0].kill()
        assert third[1] is True  # the lock went with the dead worker
    finally:
        for process, _ in (first, second):
            process.kill()
            process.wait(timeout=10)


ORPHAN = """
import time
from app.supervisor import stop_with_supervisor
stop_with_supervisor()
print("still running", flush=True)
time.sleep(60)
"""


def test_a_worker_whose_supervisor_died_before_it_started_stops_at_once() -> None:
    """A worker still importing when its supervisor was killed finds its parent gone already:
    asking for a signal on the parent's death would be too late, so it stops itself."""
    import os
    import subprocess
    import sys

    from app.supervisor import SUPERVISOR_PID

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=10)  # a supervisor pid that is no longer this worker's parent
    process = subprocess.run(
        [sys.executable, "-c", ORPHAN], env={**os.environ, SUPERVISOR_PID: str(dead.pid)},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert process.returncode == -15, (process.returncode, process.stdout, process.stderr)
    assert "still running" not in process.stdout


def _worker_processes(server: Server) -> list[psutil.Process]:
    workers = []
    for child in server.children():
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                workers.append(child)
        except psutil.Error:  # exited (a zombie until its parent waits for it)
            pass
    return workers


def _listens(worker: psutil.Process) -> bool:
    return any(c.status == psutil.CONN_LISTEN for c in worker.net_connections("tcp"))


def _held(workers: list[psutil.Process], port: int) -> list[int]:
    """How many established connections to ``port`` each of ``workers`` holds."""
    return [
        sum(
            1
            for c in w.net_connections("tcp")
            if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
        )
        for w in workers
    ]


def _open_connections(port: int, count: int) -> list[socket.socket]:
    """``count`` keep-alive connections opened together, each used for one request (so the
    server process that holds it has accepted it)."""
    connections = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(count)]
    for connection in connections:
        connection.sendall(b"GET /api/w/- HTTP/1.1\r\nHost: test\r\n\r\n")
    for connection in connections:
        assert connection.recv(65536).startswith(b"HTTP/1.1 404")
    return connections


def test_each_server_process_listens_on_its_own_socket_and_connections_spread_evenly(
    tmp_path: Path,
) -> None:
    """64 connections opened together split about evenly over the two processes: with one
    shared listening socket the process that woke first took most of them (44/6 of 50 in
    bench/worker_throughput.py). Each process's share is binomial(64, 1/2) when the kernel
    hashes connections over per-process sockets: under 16 has a chance of ~3e-5."""
    server = Server(sqlite_url(tmp_path), tmp_path / "data").start()
    connections: list[socket.socket] = []
    try:
        workers = _worker_processes(server)
        assert len(workers) == 2
        deadline = time.monotonic() + 60  # the first process may serve before the second
        while time.monotonic() < deadline and not all(_listens(w) for w in workers):
            time.sleep(0.2)
        listening = [
            {c.fd for c in w.net_connections("tcp") if c.status == psutil.CONN_LISTEN}
            for w in workers
        ]
        assert all(len(sockets) == 1 for sockets in listening), listening

        connections = _open_connections(server.port, 64)
        held = _held(workers, server.port)
        assert sum(held) == 64
        assert min(held) >= 16, held
    finally:
        for connection in connections:
            connection.close()
        server.close()


def test_a_second_server_on_the_same_port_is_refused(tmp_path: Path) -> None:
    """Sockets with SO_REUSEPORT would let a second server bind beside the first and take
    half of its connections without a word: the second refuses to start instead."""
    first = Server(sqlite_url(tmp_path), tmp_path / "data").start()
    try:
        second = subprocess.run(
            [TRIPLETLAB, "serve", "--port", str(first.port)], env=first.env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert second.returncode == 1, second.stdout + second.stderr
        assert f"cannot listen on 127.0.0.1:{first.port}" in second.stderr
        assert len(_worker_processes(first)) == 2
        assert httpx.get(f"{first.base}/api/w/-", timeout=10).status_code == 404
    finally:
        first.close()


def test_a_server_process_that_dies_is_replaced(tmp_path: Path) -> None:
    server = Server(sqlite_url(tmp_path), tmp_path / "data").start()
    try:
        before = _worker_processes(server)
        assert len(before) == 2
        before[0].kill()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            after = _worker_processes(server)
            if len(after) == 2 and before[0].pid not in {p.pid for p in after}:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"no replacement: {[p.pid for p in _worker_processes(server)]}")
        # The replacement listens and takes its share of new connections.
        while time.monotonic() < deadline and not all(_listens(w) for w in after):
            time.sleep(0.2)
        connections = _open_connections(server.port, 64)
        held = _held(after, server.port)
        for connection in connections:
            connection.close()
        assert min(held) >= 16, held
    finally:
        server.close()


def _runs_jobs(worker: psutil.Process) -> bool:
    try:
        return any(".job-runner-" in f.path for f in worker.open_files())
    except psutil.Error:
        return False


def test_sighup_replaces_every_process_and_one_new_process_takes_over_the_job_runner(
    tmp_path: Path,
) -> None:
    """SIGHUP (new code, no downtime) replaces the processes one by one, each once its
    replacement serves, as uvicorn's supervisor did; the job runner moves to a new process
    even when its old holder stops after both new ones have started."""
    server = Server(
        sqlite_url(tmp_path), tmp_path / "data", env_extra={"TRIPLETLAB_RUN_JOBS": "true"}
    ).start()
    try:
        old = _worker_processes(server)
        assert len(old) == 2
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(map(_runs_jobs, old)) != 1:
            time.sleep(0.2)
        assert [_runs_jobs(w) for w in old].count(True) == 1

        assert server.process is not None
        server.process.send_signal(signal.SIGHUP)
        old_pids = {w.pid for w in old}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            new = _worker_processes(server)
            if len(new) == 2 and not old_pids & {w.pid for w in new} and not alive(old_pids):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"not replaced: {[w.pid for w in _worker_processes(server)]}")
        assert server.process.poll() is None  # the supervisor goes on
        while time.monotonic() < deadline and sum(map(_runs_jobs, new)) != 1:
            time.sleep(0.2)
        assert [_runs_jobs(w) for w in new].count(True) == 1
        assert httpx.get(f"{server.base}/api/w/-", timeout=10).status_code == 404
    finally:
        server.close()

"""`tripletlab serve` on PostgreSQL starts two server processes by default; killed outright,
its supervisor takes them along, so a restart on the same port serves again."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.servers import Server, database_url

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

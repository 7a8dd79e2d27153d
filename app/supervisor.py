"""The worker processes of a multi-process `tripletlab serve`: they stop with their
supervisor, and one of them runs the job runner.

uvicorn's supervisor stops its workers when it is stopped politely (SIGTERM, SIGINT), but a
supervisor killed outright (``kill -9``, the OOM killer) leaves them serving on its socket,
where a restarted server cannot bind. Each worker therefore asks Linux for SIGTERM when its
parent dies (``prctl(PR_SET_PDEATHSIG)``) and shuts down as on a polite stop: requests
finish, the job runner stops, its running jobs are re-queued.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import os
import signal
import sys
from pathlib import Path

# Set by `tripletlab serve` for its worker processes: the supervisor's pid.
SUPERVISOR_PID = "TRIPLETLAB_SUPERVISOR_PID"
_PR_SET_PDEATHSIG = 1


_supervisor: str | None = None  # the supervisor's pid, in one of its worker processes


def _supervisor_pid() -> str | None:
    """The supervisor's pid in a worker process of `tripletlab serve --workers N`, else None.

    The variable is taken out of the environment at the first look, so that the worker's own
    children (a training pool) never take themselves for workers; a process that holds it is
    therefore a worker, whoever its parent is now."""
    global _supervisor
    if _supervisor is None:
        _supervisor = os.environ.pop(SUPERVISOR_PID, "") or None
    return _supervisor


def stop_with_supervisor() -> None:
    """In a worker process of `tripletlab serve --workers N`: SIGTERM when the supervisor
    dies, also when it died before this worker got here. Elsewhere nothing."""
    supervisor = _supervisor_pid()
    if not supervisor or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if str(os.getppid()) != supervisor:  # orphaned already: the request came too late
        os.kill(os.getpid(), signal.SIGTERM)


_job_runner_lock: int | None = None  # the open lock file, held for the process's life


def runs_jobs_here(data_dir: Path) -> bool:
    """Whether this process runs the job runner: always, but in a worker process of a
    multi-process `tripletlab serve`, where only the worker holding the supervisor's lock
    file does — one training pool per server, as with one process, so that two trainings do
    not take both cores from the worker API. The lock goes with its holder: a worker the
    supervisor starts in place of a dead one takes it over."""
    global _job_runner_lock
    supervisor = _supervisor_pid()
    if not supervisor:
        return True
    data_dir.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(data_dir / f".job-runner-{supervisor}.lock", os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        return False
    _job_runner_lock = descriptor
    _remove_stale_locks(data_dir)
    return True


def _remove_stale_locks(data_dir: Path) -> None:
    """Remove the lock files of supervisors that are gone (one is left per multi-process
    start); a live supervisor's, another server's on the same directory, stays."""
    for lock in data_dir.glob(".job-runner-*.lock"):
        pid = lock.name.removeprefix(".job-runner-").removesuffix(".lock")
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            lock.unlink(missing_ok=True)
        except PermissionError:
            pass  # alive, another user's

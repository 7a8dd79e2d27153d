"""The multi-process `tripletlab serve`: its supervisor, and how its worker processes stop
with it and elect one job runner.

Each worker process listens on a socket of its own, bound to the same port with
``SO_REUSEPORT``, so that the kernel spreads new connections over the processes evenly (by a
hash of each connection's addresses). uvicorn's own supervisor hands every worker one shared
socket, and whichever worker wakes first accepts every connection waiting: the benchmark's 50
connections, opened together, split 42/8 or 44/6, leaving one process with most of the work
and its requests with a queue twice as long (bench/worker_throughput.py counts the split).

SIGHUP replaces the workers one by one, each once its replacement serves, as uvicorn's
supervisor did. The supervisor stops its workers when it is stopped politely (SIGTERM,
SIGINT), but one killed outright (``kill -9``, the OOM killer) would leave them serving on
its port, where a restarted server cannot bind. Each worker therefore asks Linux for SIGTERM
when its parent dies (``prctl(PR_SET_PDEATHSIG)``) and shuts down as on a polite stop:
requests finish, the job runner stops, its running jobs are re-queued.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import fcntl
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from app.internals import STARTUP_FAILURE

logger = logging.getLogger("uvicorn.error")

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
    supervisor starts in place of a dead one takes it over, and the others look again now and
    then (``app.main._take_over_jobs``)."""
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


class PortInUse(Exception):
    """Another program listens on the port the server was asked to bind."""


def serve_processes(config: dict[str, Any], processes: int) -> int:
    """Serve ``config`` (the keyword arguments of :class:`uvicorn.Config`) from
    ``processes`` worker processes, each with a listening socket of its own on the same
    port, until SIGINT or SIGTERM; the exit status. A worker that dies is replaced; one that
    fails to start (the app, the database) stops the server, as it would fail again. SIGHUP
    replaces the workers one by one, each once its replacement serves (new code, no
    downtime), as uvicorn's supervisor did.

    Raises :class:`PortInUse` if the port is taken: ``SO_REUSEPORT`` would let a second
    server of this user bind beside a running one and silently take half its connections.
    """
    address = _free_address(config["host"], config["port"])
    uvicorn.Config(**config).configure_logging()
    return _Supervisor(config, address).run(processes)


class _Supervisor:
    def __init__(self, config: dict[str, Any], address: tuple[Any, ...]) -> None:
        self.config = config
        self.address = address
        self.context = multiprocessing.get_context("spawn")  # as uvicorn: nothing forked
        self.stop = threading.Event()
        self.restart = threading.Event()

    def start(self) -> tuple[multiprocessing.process.BaseProcess, Any]:
        """A worker process, and the event it sets once it serves."""
        serving = self.context.Event()
        worker = self.context.Process(target=_serve_one, args=(self.config, self.address, serving))
        worker.start()
        return worker, serving

    def run(self, processes: int) -> int:
        handlers = {sig: (lambda *_: self.stop.set()) for sig in STOP_SIGNALS}
        handlers[signal.SIGHUP] = lambda *_: self.restart.set()
        previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
        workers = [self.start() for _ in range(processes)]
        status = 0
        try:
            while not self.stop.wait(0.5):
                if self.restart.is_set():
                    self.restart.clear()
                    self.replace_all(workers)
                for index, (worker, _) in enumerate(workers):
                    if worker.is_alive():
                        continue
                    worker.join()
                    if worker.exitcode == STARTUP_FAILURE:
                        logger.error("A server process failed to start; stopping the server.")
                        status = STARTUP_FAILURE
                        self.stop.set()
                        break
                    logger.warning(
                        "Server process %s exited (status %s); starting another.",
                        worker.pid,
                        worker.exitcode,
                    )
                    workers[index] = self.start()
        finally:
            for worker, _ in workers:
                _terminate(worker)  # each shuts down as on a polite stop
            for worker, _ in workers:
                worker.join()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return status

    def replace_all(self, workers: list[tuple[multiprocessing.process.BaseProcess, Any]]) -> None:
        """Replace each worker by a new one, stopping the old once the new one serves."""
        for index, (old, _) in enumerate(workers):
            new, serving = self.start()
            deadline = time.monotonic() + REPLACEMENT_WAIT_S
            while not serving.wait(0.2):
                if not new.is_alive() or self.stop.is_set() or time.monotonic() > deadline:
                    logger.error("A new server process did not start; keeping the old ones.")
                    _terminate(new)
                    new.join()
                    return
            _terminate(old)
            old.join()
            workers[index] = (new, serving)


REPLACEMENT_WAIT_S = 120.0  # the longest a restart waits for a new process to serve


def _terminate(worker: multiprocessing.process.BaseProcess) -> None:
    if worker.is_alive() and worker.pid is not None:
        os.kill(worker.pid, signal.SIGTERM)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _free_address(host: str, port: int) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    """The family and address to bind for ``host:port``, checked free: a bind without
    ``SO_REUSEPORT`` fails where any socket listens (a second server, another program),
    while ``SO_REUSEADDR`` lets it pass over connections of a stopped server in TIME_WAIT."""
    family, kind, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            raise PortInUse(f"cannot listen on {host}:{port}: {error.strerror}") from error
    return family, address


def _serve_one(
    config: dict[str, Any], bound: tuple[socket.AddressFamily, tuple], serving: Any
) -> None:
    """A worker process: uvicorn's server on a socket of its own (``SO_REUSEPORT``); it
    sets ``serving`` once the server has started."""
    family, address = bound
    server_config = uvicorn.Config(**config)
    server_config.configure_logging()
    listening = socket.socket(family, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        listening.bind(address)
    except OSError as error:  # taken between the supervisor's check and here
        logger.error("cannot listen on %s: %s", address, error.strerror)
        sys.exit(STARTUP_FAILURE)
    server = uvicorn.Server(server_config)
    threading.Thread(target=_tell_when_serving, args=(server, serving), daemon=True).start()
    server.run(sockets=[listening])
    if not server.started:
        sys.exit(STARTUP_FAILURE)


def _tell_when_serving(server: uvicorn.Server, serving: Any) -> None:
    while not server.started:
        if server.should_exit:
            return
        time.sleep(0.05)
    serving.set()

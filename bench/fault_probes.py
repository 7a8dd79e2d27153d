"""Fault probes under load, as an adversarial tester runs them (issue 31): each asserts that
no acknowledged answer is lost, none is stored twice and no question is issued twice.

* ``pg-restart``: one ``tripletlab serve`` (2 processes, its job runner on) on a PostgreSQL
  database of its own, 10 workers answering; the PostgreSQL server is restarted under them
  (``pg_ctlcluster --skip-systemctl-redirect 15 main restart``: **it restarts the machine's
  shared server, for everyone, for a few seconds**). Workers retry a 503 after its
  ``Retry-After`` (capped at 1 s here). Counted: the 503s (JSON? ``Retry-After``?), how
  long they lasted, requests that got no response, and what the server logged (one line
  when the database was lost and one when back; no traceback).
* ``kill9``: two servers on one PostgreSQL database, each worker alternating between them;
  one server is killed with SIGKILL (every process of it at once, as a crash would), the
  workers go on on the other, then it is started again.
* ``disk-full``: a server on a SQLite file on a small tmpfs (needs root to mount it), 10
  workers answering until the filesystem is full; the 503s must say the disk is full and the
  log must name the file once; the filesystem is then enlarged (``mount -o remount``) and
  the same server must go on storing answers without a restart. ``PRAGMA integrity_check``
  at the end.

    .venv/bin/python bench/fault_probes.py [pg-restart] [kill9] [disk-full]   # default: all

PostgreSQL databases are made beside ``TRIPLETLAB_TEST_POSTGRES_URL``'s (``<name>_faults``,
``<name>_kill9``), as the lifecycle tests do.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the lifecycle helpers
from app.db.session import make_engine
from tests.lifecycle.crowd import Worker, acknowledged, check_exactly_once, run_crowd
from tests.servers import Server, postgres_database, sqlite_url
from tests.training.helpers import make_study

N_WORKERS = 10
RETRY_CAP_S = 1.0  # the longest a worker here waits on a Retry-After


@dataclass
class PatientWorker(Worker):
    """A worker that, like the worker page, waits and resends on 503 (``Retry-After``,
    capped at :data:`RETRY_CAP_S`), keeping what each 503 said."""

    unavailable: list[tuple[float, str, str]] = field(default_factory=list)

    def _send(self, method: str, path: str, stop_by: float, **kwargs) -> httpx.Response:  # type: ignore[no-untyped-def]
        while True:
            try:
                response = httpx.request(method, self._base() + path, timeout=10, **kwargs)
            except httpx.TransportError:
                self.statuses["no response"] += 1
                if time.monotonic() > stop_by:
                    raise
                time.sleep(0.1)
                continue
            self.statuses[f"{method} {response.status_code}"] += 1
            if response.status_code == 503 and time.monotonic() < stop_by:
                try:
                    detail = response.json()["detail"]
                except ValueError:
                    detail = f"not JSON: {response.text[:80]!r}"
                retry_after = response.headers.get("retry-after", "")
                self.unavailable.append((time.monotonic(), retry_after, detail))
                time.sleep(min(float(retry_after or RETRY_CAP_S), RETRY_CAP_S))
                continue
            if response.status_code >= 500:
                self.errors.append(f"{method} {path}: {response.status_code} {response.text}")
            return response


def study(server: Server, n_answers: int = 100_000) -> str:
    headers = {"Authorization": f"Bearer {server.admin_key()}"}
    with httpx.Client(base_url=server.base, timeout=60) as client:
        made = make_study(client, headers, n=40, n_triplets=10, n_pairs=2)
        plan = {
            "strategies": [{"kind": "random", "weight": 1, "budget": n_answers}],
            "queries_per_session": 5000,
        }
        response = client.put(f"/api/projects/{made.slug}/plan", json=plan, headers=headers)
        assert response.status_code == 200, response.text
    return made.slug


def wait_for(workers: list[Worker], n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while acknowledged(workers) < n:
        errors = [e for w in workers for e in w.errors]
        assert not errors, errors[:3]
        assert time.monotonic() < deadline, f"{acknowledged(workers)} of {n} answers"
        time.sleep(0.05)


def stop_crowd(stop: threading.Event, threads: list[threading.Thread]) -> None:
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a worker did not stop"


def server_log(data_dir: Path) -> str:
    return "\n".join(path.read_text() for path in sorted(data_dir.glob("serve-*.log")))


def log_summary(text: str) -> dict:
    """What the server logged of the fault: its lines about the database, and how many
    tracebacks (each server process logs its own fault lines)."""
    said = [
        line.strip()
        for line in text.splitlines()
        if re.search(r"database \S+ (lost \(|back after)|out of disk space at ", line)
    ]
    return {"lines": said, "tracebacks": text.count("Traceback")}


def unavailable_summary(workers: list[PatientWorker]) -> dict:
    seen = sorted(u for w in workers for u in w.unavailable)
    if not seen:
        return {"503s": 0}
    return {
        "503s": len(seen),
        "for_s": round(seen[-1][0] - seen[0][0], 1),
        "retry_after": dict(Counter(r for _, r, _ in seen)),
        "details": dict(Counter(d for _, _, d in seen)),
    }


def stored_matches(url: str, slug: str, workers: list[Worker]) -> int:
    engine = make_engine(url)
    try:
        return check_exactly_once(engine, slug, workers)
    finally:
        engine.dispose()


def probe_pg_restart(tmp: Path) -> dict:
    url = postgres_database("faults")
    data_dir = tmp / "pg-restart"
    server = Server(url, data_dir, env_extra={"TRIPLETLAB_RUN_JOBS": "true"}).start()
    try:
        slug = study(server)
        workers = [PatientWorker(f"w{i}", slug, [server.base]) for i in range(N_WORKERS)]
        stop, threads = run_crowd(workers, stop_by=time.monotonic() + 600)
        try:
            wait_for(workers, 500, timeout=300)
            began = time.monotonic()
            subprocess.run(
                ["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main", "restart"],
                check=True,
                capture_output=True,
            )
            restart_s = time.monotonic() - began
            after = acknowledged(workers)
            wait_for(workers, after + 500, timeout=300)  # and on, without a restart of ours
        finally:
            stop_crowd(stop, threads)
        errors = [e for w in workers for e in w.errors]
        assert errors == [], errors[:3]
        stored = stored_matches(url, slug, workers)
        answered = acknowledged(workers)
        assert stored == answered
        time.sleep(3)  # the job runner's next ticks, and the log written
        return {
            "acknowledged": answered,
            "stored": stored,
            "restart_s": round(restart_s, 1),
            "no_response": sum(w.statuses["no response"] for w in workers),
            **unavailable_summary(workers),
            "log": log_summary(server_log(data_dir)),
        }
    finally:
        server.close()


def kill_tree(server: Server) -> int:
    """SIGKILL to every process of the server at once; how many."""
    assert server.process is not None
    everyone = [psutil.Process(server.process.pid), *server.children()]
    for process in everyone:
        process.kill()
    server.process.wait(timeout=30)
    psutil.wait_procs(everyone, timeout=30)
    return len(everyone)


def probe_kill9(tmp: Path) -> dict:
    url = postgres_database("kill9")
    data_dir = tmp / "kill9"
    first = Server(url, data_dir).start()
    second = Server(url, data_dir).start()
    try:
        slug = study(first)
        bases = [first.base, second.base]
        workers = [
            PatientWorker(f"w{i}", slug, bases[i % 2 :] + bases[: i % 2]) for i in range(N_WORKERS)
        ]
        stop, threads = run_crowd(workers, stop_by=time.monotonic() + 600)
        try:
            wait_for(workers, 500, timeout=300)
            killed = kill_tree(first)
            at_kill = acknowledged(workers)
            wait_for(workers, at_kill + 500, timeout=300)  # on the other server alone
            first.start()
            wait_for(workers, acknowledged(workers) + 500, timeout=300)
        finally:
            stop_crowd(stop, threads)
        errors = [e for w in workers for e in w.errors]
        assert errors == [], errors[:3]
        stored = stored_matches(url, slug, workers)
        answered = acknowledged(workers)
        assert stored == answered
        return {
            "acknowledged": answered,
            "stored": stored,
            "processes_killed": killed,
            "no_response": sum(w.statuses["no response"] for w in workers),
            **unavailable_summary(workers),
        }
    finally:
        first.close()
        second.close()


def probe_disk_full(tmp: Path) -> dict:
    if os.geteuid() != 0:
        raise SystemExit("disk-full mounts a tmpfs: run it as root")
    mount = Path(tempfile.mkdtemp(prefix="tripletlab-full-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], check=True)
    data_dir = tmp / "disk-full"
    url = sqlite_url(mount)
    server = Server(url, data_dir).start()
    try:
        slug = study(server)
        workers = [PatientWorker(f"w{i}", slug, [server.base]) for i in range(N_WORKERS)]
        stop, threads = run_crowd(workers, stop_by=time.monotonic() + 600)
        try:
            deadline = time.monotonic() + 600
            while not any(w.unavailable for w in workers):  # the disk fills
                assert time.monotonic() < deadline, "the disk did not fill"
                assert not [e for w in workers for e in w.errors]
                time.sleep(0.1)
            at_full = acknowledged(workers)
            time.sleep(5)  # five seconds of refusals
            during_full = acknowledged(workers) - at_full
            subprocess.run(["mount", "-o", "remount,size=64m", str(mount)], check=True)
            wait_for(workers, acknowledged(workers) + 300, timeout=300)  # the same server
        finally:
            stop_crowd(stop, threads)
        errors = [e for w in workers for e in w.errors]
        assert errors == [], errors[:3]
        stored = stored_matches(url, slug, workers)
        answered = acknowledged(workers)
        assert stored == answered
        database = sqlite_url(mount).removeprefix("sqlite:///")
        with sqlite3.connect(database) as connection:
            (integrity,) = connection.execute("PRAGMA integrity_check").fetchone()
        assert integrity == "ok", integrity
        return {
            "acknowledged": answered,
            "stored": stored,
            "acknowledged_at_full": at_full,
            "acknowledged_while_full_5s": during_full,
            "integrity_check": integrity,
            **unavailable_summary(workers),
            "log": log_summary(server_log(data_dir)),
        }
    finally:
        everyone = server.children() if server.process and server.process.poll() is None else []
        server.stop(timeout=60)
        psutil.wait_procs(everyone, timeout=120)  # its processes hold the file until they end
        for _ in range(300):
            if subprocess.run(["umount", str(mount)], capture_output=True).returncode == 0:
                mount.rmdir()
                break
            time.sleep(0.2)
        else:
            print(f"could not unmount {mount}", file=sys.stderr)


PROBES = {"pg-restart": probe_pg_restart, "kill9": probe_kill9, "disk-full": probe_disk_full}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("probes", nargs="*", help=f"of {', '.join(PROBES)} (default: all)")
    args = parser.parse_args()
    unknown = set(args.probes) - set(PROBES)
    if unknown:
        parser.error(f"no probe {', '.join(sorted(unknown))}; choose from {', '.join(PROBES)}")
    failed = False
    with tempfile.TemporaryDirectory(prefix="tripletlab-faults-") as tmp:
        for name in args.probes or PROBES:
            started = time.monotonic()
            try:
                result = PROBES[name](Path(tmp))
            except (Exception, pytest.fail.Exception):  # a failed check, or a server's start
                failed = True
                print(f"{name}: FAIL", flush=True)
                traceback.print_exc()
                continue
            took = time.monotonic() - started
            print(f"{name}: PASS in {took:.0f} s", flush=True)
            for key, value in result.items():
                print(f"  {key}: {value}", flush=True)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()

"""kill -9 of a real `tripletlab serve` under concurrent workers, twice, on each database:
every acknowledged answer is stored, none twice, and the sessions resume with their tokens."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from app.db.session import make_engine
from tests.lifecycle.crowd import Worker, acknowledged, check_exactly_once, run_crowd
from tests.servers import Server, database_url
from tests.training.helpers import make_study

pytestmark = pytest.mark.slow

N_WORKERS = 10
KILLS = 2
ANSWERS_BETWEEN_KILLS = 30


def wait_for_answers(workers: list[Worker], n: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while acknowledged(workers) < n:
        errors = [e for w in workers for e in w.errors]
        assert not errors, errors
        assert time.monotonic() < deadline, f"{acknowledged(workers)} of {n} answers"
        time.sleep(0.05)


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_kill_9_under_load_loses_no_acknowledged_answer(kind: str, tmp_path: Path):
    url = database_url(kind, tmp_path, "kill9")
    server = Server(url, tmp_path / "data").start()
    try:
        headers = {"Authorization": f"Bearer {server.admin_key()}"}
        with httpx.Client(base_url=server.base, timeout=30) as client:
            study = make_study(client, headers, n=40, n_triplets=10, n_pairs=2)
            plan = {"strategies": [{"kind": "random", "weight": 1}], "queries_per_session": 500}
            response = client.put(f"/api/projects/{study.slug}/plan", json=plan, headers=headers)
            assert response.status_code == 200, response.text
        workers = [Worker(f"w{i}", study.slug, [server.base]) for i in range(N_WORKERS)]
        stop, threads = run_crowd(workers, stop_by=time.monotonic() + 900)
        try:
            for kill in range(1, KILLS + 1):
                wait_for_answers(workers, kill * ANSWERS_BETWEEN_KILLS)
                before = {w.name: len(w.acknowledged) for w in workers}
                server.kill()
                server.start()
                # Every session goes on after the restart, with its token.
                wait_for_answers(workers, acknowledged(workers) + 2 * N_WORKERS)
                deadline = time.monotonic() + 240
                while any(len(w.acknowledged) <= before[w.name] for w in workers):
                    assert time.monotonic() < deadline, "a session did not resume"
                    time.sleep(0.05)
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in threads)
        assert [e for w in workers for e in w.errors] == []
        assert sum(w.statuses["no response"] for w in workers) > 0  # the kills were felt
        engine = make_engine(url)
        try:
            stored = check_exactly_once(engine, study.slug, workers)
        finally:
            engine.dispose()
        assert stored >= KILLS * ANSWERS_BETWEEN_KILLS + 2 * N_WORKERS
    finally:
        server.close()

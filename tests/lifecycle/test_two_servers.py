"""Two `tripletlab serve` processes on one database (PostgreSQL, or one SQLite file), workers
spread over both and switching between them: no question over-issued, every answer stored
exactly once, and each session goes on on either server."""

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
N_WORKERS = 12
ANSWERS = 240


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_two_servers_share_one_database(kind: str, tmp_path: Path):
    url = database_url(kind, tmp_path, "two")
    first = Server(url, tmp_path / "data").start()
    second = Server(url, tmp_path / "data").start()
    try:
        headers = {"Authorization": f"Bearer {first.admin_key()}"}
        with httpx.Client(base_url=first.base, timeout=30) as client:
            study = make_study(client, headers, n=12, n_triplets=10, n_pairs=2)
            # Few questions for many workers: they compete for the last ones of each
            # question's places (redundancy 2), on both servers at once.
            plan = {
                "strategies": [{"kind": "random", "weight": 1, "budget": ANSWERS // 2}],
                "queries_per_session": 40,
                "redundancy": 2,
            }
            response = client.put(f"/api/projects/{study.slug}/plan", json=plan, headers=headers)
            assert response.status_code == 200, response.text
        # Each worker alternates: one request to one server, the next to the other.
        bases = [first.base, second.base]
        workers = [
            Worker(f"w{i}", study.slug, bases[i % 2 :] + bases[: i % 2]) for i in range(N_WORKERS)
        ]
        stop, threads = run_crowd(workers, stop_by=time.monotonic() + 600)
        for thread in threads:
            thread.join(timeout=600)
        stop.set()
        assert [e for w in workers for e in w.errors] == []
        assert all(w.done for w in workers)
        engine = make_engine(url)
        try:
            stored = check_exactly_once(engine, study.slug, workers)
        finally:
            engine.dispose()
        assert stored == acknowledged(workers) > 0
    finally:
        first.close()
        second.close()

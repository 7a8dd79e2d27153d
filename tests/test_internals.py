"""Every shortcut through a library's private API (app/internals.py) can be switched off:
a real `tripletlab serve` with every fallback on (stock uvicorn protocol, only public
SQLAlchemy APIs) serves workers' round trips on both databases, and stores every answer."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

from app.db.session import make_engine
from tests.servers import Server, database_url

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_round_trips_with_every_fallback(kind: str, tmp_path: Path) -> None:
    url = database_url(kind, tmp_path, "stock")
    stock = {"TRIPLETLAB_PRIVATE_CURSOR": "false", "TRIPLETLAB_STOCK_HTTP_PROTOCOL": "true"}
    server = Server(url, tmp_path / "data", env_extra=stock).start()
    try:
        headers = {"Authorization": f"Bearer {server.admin_key()}"}
        with httpx.Client(base_url=server.base, timeout=60) as client:
            assert client.post("/api/projects", json={"slug": "s", "name": "S"}, headers=headers)
            objects = [{"name": f"o{i}"} for i in range(8)]
            assert client.post("/api/projects/s/objects", json=objects, headers=headers)
            plan = {
                "strategies": [{"kind": "random"}, {"kind": "pairs"}],
                "queries_per_session": 12, "repeat_rate": 0.3, "gold_rate": 0.2,
            }  # fmt: skip
            assert client.put("/api/projects/s/plan", json=plan, headers=headers).is_success
            opened = client.post("/api/w/s/sessions", json={"participant": "p"}).json()
            auth = {"Authorization": f"Bearer {opened['session_token']}"}
            path = f"/api/w/sessions/{opened['session_id']}"
            body = client.get(f"{path}/next", headers=auth).json()
            answered = 0
            while not body["done"]:
                query = body["query"]
                choice = query["objects"][1]["index"] if query["kind"] == "triplet" else 0
                reply = client.post(
                    f"{path}/answers",
                    json={"token": query["token"], "choice": choice},
                    headers=auth,
                )
                assert reply.status_code == 201, reply.text
                answered += 1
                body = reply.json()["next"]
            assert body["completion_code"]
    finally:
        server.stop()
    assert answered == 12
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM answers")).scalar_one() == 12
    finally:
        engine.dispose()

"""A server process freezes its startup heap (``app.main.serve_app``); a test's app does not.

Run in a fresh interpreter each: freezing is for the life of the process, and this one's
heap is the test run's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import gc
from fastapi.testclient import TestClient
from app.main import {factory}

app = {factory}()
before = gc.get_freeze_count()
with TestClient(app) as client:
    assert client.get("/openapi.json").status_code == 200
    print(before, gc.get_freeze_count(), len(gc.get_objects()))
"""


def _freeze_counts(factory: str, data_dir: Path) -> tuple[int, int, int]:
    env = {
        **os.environ,
        "TRIPLETLAB_DATA_DIR": str(data_dir),
        "TRIPLETLAB_DATABASE_URL": f"sqlite:///{data_dir / 'heap.db'}",
        "TRIPLETLAB_RUN_JOBS": "false",
        "TRIPLETLAB_DEMO": "false",
    }
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(factory=factory)],
        env=env, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    before, after, tracked = (int(word) for word in out.stdout.split())
    return before, after, tracked


def test_a_served_app_freezes_what_it_holds_once_started(tmp_path: Path) -> None:
    before, frozen, tracked = _freeze_counts("serve_app", tmp_path)
    assert before == 0  # frozen when the server starts, not when the app is made
    # The libraries and the app: what a full collection no longer walks.
    assert frozen > 50_000
    assert tracked < frozen / 5


def test_a_test_app_freezes_nothing(tmp_path: Path) -> None:
    before, frozen, tracked = _freeze_counts("create_app", tmp_path)
    assert before == frozen == 0
    assert tracked > 50_000

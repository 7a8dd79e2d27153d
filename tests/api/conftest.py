"""Fixtures shared by the tests of the known way: ``test_known_sessions`` (one statement per
answer) and ``test_answer_batches`` (the answers that wait together, in one)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from tests.factories import committed_requests


@pytest.fixture
def postgres(engine: Engine) -> Engine:
    """The test database's engine, on PostgreSQL only (the event loop's own connections,
    the pool filled ahead, the answers sent together); skipped on SQLite."""
    if engine.dialect.name != "postgresql":
        pytest.skip("PostgreSQL's own connections and its pool filled ahead")
    return engine


@pytest.fixture
def committed_project(app, engine: Engine) -> Iterator[tuple[TestClient, dict[str, str], str]]:  # type: ignore[no-untyped-def]
    """A client whose requests commit, a researcher's headers, and the slug of a project to
    make (deleted afterwards)."""
    slug = f"known-{uuid.uuid4().hex[:8]}"
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        yield client, headers, slug
        client.delete(f"/api/projects/{slug}?force=true", headers=headers)

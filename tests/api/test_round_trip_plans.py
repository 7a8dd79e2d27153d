"""SQLite's plans of the worker round trip's statements: each table is searched through an
index for the rows it needs, never scanned, and nothing is sorted, so a round trip costs
the same however many questions, queries and answers the project holds. (Before, the claim
of an open question read and sorted all of a project's questions, and storing an answer
read all of its session's queries: CPU per round trip grew from 0.92 to 1.23 ms between a
session's 40th and 1,000th answer, ``bench/round_trip_cpu.py --sessions 5``.) SQLite plans
without statistics, so its plans do not change as the tables grow; PostgreSQL's do, and
``tests/api/test_planner_statistics.py`` keeps its statistics current."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import Engine

from app.db.driver import Statement
from app.db.migrate import upgrade
from app.db.session import make_engine
from app.services import round_trip_sql

# Every parameter any of the statements takes (the values do not matter to a plan).
PARAMETERS = {
    "token": "t",
    "session": "s",
    "now": "2026-01-01 00:00:00.000000",
    "choice": 1,
    "picks": "[1, 2]",
    "objects": "[1, 2, 3]",
    "k": 2,
    "shown": "[1, 2, 3]",
    "project": 1,
    "participant": 1,
    "query": 1,
    "answer": 1,
    "min_ms": 500,
    "client_ms": 900.0,
    "code_hash": "h",
    "source": "crowd",
    "question": 1,
    "kind": "triplet",
    "s1": 1,
    "s2": 2,
    "s3": 3,
    "issued_token": "u",
    "expires": "2026-01-01 00:10:00.000000",
    "rows": "[]",
    "draw": 0,
    "max_views": None,
    "token_hash": "x",
    "answered": 0,
    "plan": "{}",
    "is_repeat": False,
    "n": 1,
}
# What a round trip runs on SQLite (round_trip_sql): the answer's steps, the issue's, and
# the claim of an open question when the answer's statement did not claim one.
GROWING = re.compile(r"\((project_id|session_id|participant_id)=\?\)$")
HOT = (
    "HELD", "CLAIM", "PLACE", "STORE", "SESSION", "COUNTS", "LEASE", "QUERY", "OPEN_QUESTION",
    "OPEN_QUERY", "SHOWN_OBJECTS",
)  # fmt: skip


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{tmp_path}/plans.db")
    upgrade(engine)
    return engine


@pytest.mark.parametrize("name", HOT)
def test_round_trip_statement_searches_indexes(sqlite_engine: Engine, name: str) -> None:
    statement: Statement = getattr(round_trip_sql, name)
    with sqlite_engine.connect() as connection:
        cursor = connection.connection.cursor()
        plan = [
            row[3] for row in cursor.execute(f"EXPLAIN QUERY PLAN {statement.sqlite}", PARAMETERS)
        ]
    print(name, *plan, sep="\n  ")
    # A CTE of the statement's own (claim, first, question) holds a row or none: scanning it
    # is reading that row. A table of the database is only ever searched.
    # So is a ranked grid's own lists (its picks, its query's objects: 10 at most), and
    # counting its distinct picks.
    own = {"claim", "first", "question", "answer", "CONSTANT", "picked", "shown"}
    plan = _without_views_left(plan)
    scans = [step for step in plan if step.startswith("SCAN") and step.split()[1] not in own]
    assert not scans, plan
    temp = [step for step in plan if "TEMP B-TREE" in step and "count(DISTINCT)" not in step]
    assert not temp, plan
    # Nor searched for all of a project's, session's or participant's rows: those grow.
    whole = [step for step in plan if GROWING.search(step)]
    assert not whole, plan


def _without_views_left(plan: list[str]) -> list[str]:
    """``plan`` without the steps of the ``max_object_views`` rule (round_trip_sql.views_left),
    which run only when a plan sets it: they count the participant's views of each object of
    a question, so they read the participant's queries."""
    steps = (
        "SCAN objects_of", "SEARCH viewed USING INDEX uq_queries_participant_question",
        "SCAN listed", "SCAN seen",  # a shaped question's and a viewed query's objects
    )  # fmt: skip
    return [step for step in plan if not step.startswith(steps)]


def test_a_repeat_reads_the_sessions_window_by_index_and_sorts_only_its_candidates(
    sqlite_engine: Engine,
) -> None:
    """A repeat's draw reads the session's last REPEAT_WINDOW answered queries newest first
    through the session's index (no sort of all of the session's queries), looks each
    candidate's question and repeat up by key, and sorts at most the window's candidates."""
    with sqlite_engine.connect() as connection:
        cursor = connection.connection.cursor()
        sql = f"EXPLAIN QUERY PLAN {round_trip_sql.REPEAT.sqlite}"
        plan = [row[3] for row in cursor.execute(sql, PARAMETERS)]
    print(*plan, sep="\n  ")
    assert (
        "SEARCH queries USING INDEX ix_queries_session_status (session_id=? AND status=?)" in plan
    )
    scans = [step for step in _without_views_left(plan) if step.startswith("SCAN")]
    allowed = ("SCAN recent", "SCAN candidates", "SCAN CONSTANT ROW")
    assert scans and all(step in allowed for step in scans), plan
    # One sort: the candidates' (at most REPEAT_WINDOW) into question order; the window
    # itself comes off the index in id order (it ends with the rowid).
    assert [step for step in plan if "TEMP B-TREE" in step] == ["USE TEMP B-TREE FOR ORDER BY"]
    assert plan.index("USE TEMP B-TREE FOR ORDER BY") > plan.index("SCAN candidates")

"""Bytes per row of the tables that grow with a study (rows, indexes and TOAST included),
on PostgreSQL and SQLite: the figures behind docs/scaling.md.

Fills a scratch database, migrated to head, with one project of ``--objects`` objects and
``--answers`` crowd answers (each with its issued query, its question, spread over sessions
of 50), all by set-based SQL, then divides each table's size by its rows.

    .venv/bin/python bench/table_growth.py --postgres postgresql+psycopg://postgres@127.0.0.1:5432/bench_growth
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.db.migrate import upgrade
from app.db.session import make_engine

TABLES = ("objects", "participants", "sessions", "questions", "queries", "answers")

FILL = [
    "INSERT INTO projects (id, slug, name, instructions, consent, question, pair_question, "
    "n_objects, plan_step, seed, created_at, updated_at) VALUES (1, 'growth', 'growth', '', '', "
    "'q', 'q', :objects, 0, 0, :now, :now)",
    'INSERT INTO objects (project_id, "index", name, features, label) SELECT 1, i, '
    "'object ' || i, '[0.123456, -1.234567, 0.5, 2.25]', 'class-' || (i % 10) "
    "FROM {series_objects}",
    "INSERT INTO participants (project_id, platform, external_id, platform_params, flagged, "
    "flag_reason, flag_manual, created_at) SELECT 1, 'prolific', "
    "'5f1d0c2e9b7a4d3c2b1a' || i, '{{\"PROLIFIC_PID\": \"5f1d0c2e9b7a4d3c2b1a\"}}', false, '', "
    "false, :now FROM {series_sessions}",
    "INSERT INTO sessions (id, project_id, participant_id, token_hash, source, total, answered, "
    "created_at) SELECT 's' || i || '-0000-0000-0000-000000000000', 1, i, "
    "'0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef', 'crowd', 50, 50, :now "
    "FROM {series_sessions}",
    "INSERT INTO questions (project_id, key, kind, o1, o2, o3, strategy, strategy_position, "
    "wanted, live, answered, is_open, created_at) SELECT 1, 't:' || i || ':1:2', 'triplet', "
    "i % :objects, (i * 7) % :objects, (i * 13) % :objects, 'random', i, 1, 0, 1, false, :now "
    "FROM {series_answers}",
    "INSERT INTO queries (project_id, question_id, session_id, participant_id, kind, o1, o2, o3, "
    "status, is_repeat, token, issued_at, expires_at, answered_at) SELECT 1, i, "
    "'s' || ((i - 1) / 50 + 1) || '-0000-0000-0000-000000000000', (i - 1) / 50 + 1, 'triplet', "
    "1, 2, 3, 'answered', false, 'tok-' || i || '-abcdefghijklmnopqrstuvwxyz0123456789abcdefgh', "
    ":now, :now, :now FROM {series_answers}",
    "INSERT INTO answers (project_id, query_id, kind, a, b, c, outcome, position, choice, source, "
    "strategy, session_id, participant_id, server_ms, client_ms, created_at) SELECT 1, i, "
    "'triplet', i % :objects, (i * 7) % :objects, (i * 13) % :objects, NULL, -1, 2, 'crowd', "
    "'random', 's' || ((i - 1) / 50 + 1) || '-0000-0000-0000-000000000000', (i - 1) / 50 + 1, "
    "3.5, 1200.0, :now FROM {series_answers}",
]


def series(dialect: str, n: int) -> str:
    if dialect == "postgresql":
        return f"generate_series(1, {n}) AS g(i)"
    recursive = f"WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {n})"
    return f"({recursive} SELECT i FROM s)"


def measure(url: str, n_objects: int, n_answers: int) -> None:
    engine = make_engine(url)
    upgrade(engine)
    dialect = engine.dialect.name
    n_sessions = (n_answers + 49) // 50
    started = time.perf_counter()
    with engine.begin() as connection:
        for statement in FILL:
            sql = statement.format(
                series_objects=series(dialect, n_objects),
                series_sessions=series(dialect, n_sessions),
                series_answers=series(dialect, n_answers),
            )
            connection.execute(text(sql), {"objects": n_objects, "now": "2026-11-23 12:00:00+00"})
    print(f"{dialect}: {n_objects:,} objects, {n_answers:,} answers, filled in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    with engine.connect() as connection:
        if dialect == "postgresql":
            for table in TABLES:
                rows = connection.execute(text(f"SELECT count(*) FROM {table}")).scalar()
                total, heap = connection.execute(
                    text(f"SELECT pg_total_relation_size('{table}'), pg_relation_size('{table}')")
                ).one()
                indexes = (total - heap) / rows
                print(f"  {table:<13} {rows:>10,} rows  {total / rows:7.0f} B/row "
                      f"({heap / rows:.0f} heap + {indexes:.0f} indexes)")  # fmt: skip
        else:
            size = os.path.getsize(make_url(url).database)
            print(f"  database file {size / 2**20:.1f} MiB = {size / n_answers:.0f} B per answer "
                  "(its query, question and share of sessions included)")  # fmt: skip
    engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", help="URL of a scratch PostgreSQL database (emptied)")
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--answers", type=int, default=200_000)
    args = parser.parse_args()
    if args.postgres:
        admin = create_engine(args.postgres, isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        admin.dispose()
        measure(args.postgres, args.objects, args.answers)
    with tempfile.TemporaryDirectory() as tmp:
        measure(f"sqlite:///{tmp}/growth.db", args.objects, args.answers)


if __name__ == "__main__":
    main()

"""CPU of the worker round trip's database layer, in process: no HTTP, no other process.

Calls ``responses.answer_and_next`` (what ``POST …/answers`` runs: the answer stored and the
next question issued, committed) for ``--sessions`` sessions in turn, ``--rounds`` times,
on a fresh SQLite file or an emptied PostgreSQL database, and prints this process's CPU
time per round trip (user and system) and, on PostgreSQL, that of the PostgreSQL server's
processes on this machine. The plan is the throughput benchmark's minus gold and repeats
(the usual round trip): questions are claimed from the pool the plan fills
``issuance.POOL_BATCH`` at a time (``fill_pool``; the fills are counted in, one per batch),
``--redundancy 2`` asks each of them twice. ``--drop-foreign-keys`` (PostgreSQL) drops the
foreign keys of the two tables a round trip inserts into (``answers``, ``queries``: 8 checks
per round trip) before it starts, to measure what their checks cost: an experiment, not a
configuration the app supports.
``--group`` (SQLite) records each round's answers, one per session, in one group commit
(``app.api.worker._record_group``: each answer in a savepoint, one commit), as the server
does with the answers that arrive together.

CPU time is noisy on a shared machine; for figures that do not depend on the load, count
instructions with callgrind, collecting only while the round trips run::

    CALLGRIND=1 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=OUT \\
        .venv/bin/python bench/round_trip_cpu.py --rounds 20
    callgrind_annotate OUT | grep 'PROGRAM TOTALS'

(run it with two ``--rounds`` and take the difference over the extra round trips: the
switching on and off costs a few instructions of its own). To measure another checkout's
code with this script, put that checkout first: ``PYTHONPATH=/path/to/checkout``.

    .venv/bin/python bench/round_trip_cpu.py [--database sqlite|URL] [--sessions 20]
        [--rounds 40] [--redundancy 1] [--group] [--drop-foreign-keys]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import time

from _server import postgres_cpu_seconds

os.environ.setdefault("TRIPLETLAB_DATA_DIR", tempfile.mkdtemp(prefix="round-trip-cpu-"))
os.environ["TRIPLETLAB_DEMO"] = "false"
os.environ["TRIPLETLAB_RUN_JOBS"] = "false"
os.environ["TRIPLETLAB_WORKER_RATE_SESSION"] = "0"
os.environ["TRIPLETLAB_WORKER_RATE_ADDRESS"] = "0"


def _callgrind(option: str) -> None:
    """Switch callgrind's collection on or off (``CALLGRIND=1`` under valgrind): the command
    is served while this process runs code, so it spins until it is."""
    if os.environ.get("CALLGRIND"):
        command = subprocess.Popen(["callgrind_control", option, str(os.getpid())])
        while command.poll() is None:
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database", default="sqlite", help="sqlite, or a PostgreSQL URL")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=40, help="round trips per session")
    parser.add_argument("--redundancy", type=int, default=1)
    parser.add_argument(
        "--drop-foreign-keys",
        action="store_true",
        help="PostgreSQL: drop the foreign keys of answers and queries first (an experiment)",
    )
    parser.add_argument(
        "--group",
        action="store_true",
        help="SQLite: record each round's answers in one group commit (app.api.worker)",
    )
    args = parser.parse_args()

    if args.database == "sqlite":
        os.environ["TRIPLETLAB_DATABASE_URL"] = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    else:
        os.environ["TRIPLETLAB_DATABASE_URL"] = args.database
    # Imported once the settings are in the environment.
    from fastapi.testclient import TestClient
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    from app.api.deps import get_db
    from app.api.worker import _record_group
    from app.config import get_settings
    from app.db.migrate import upgrade
    from app.db.session import make_engine
    from app.main import create_app
    from app.schemas.worker import AnswerCreate
    from app.services import issuance, responses
    from app.services.auth import create_key

    url = os.environ["TRIPLETLAB_DATABASE_URL"]
    engine = make_engine(url)
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            connection.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
            connection.execute(text("CREATE SCHEMA public"))
    upgrade(engine)
    if args.drop_foreign_keys and engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            keys = connection.execute(
                text(
                    "SELECT conrelid::regclass::text, conname FROM pg_constraint "
                    "WHERE contype = 'f' AND conrelid::regclass::text IN ('answers', 'queries')"
                )
            ).all()
            for table, name in keys:
                connection.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT {name}"))

    def session() -> Session:
        return Session(engine, expire_on_commit=False)

    app = create_app(get_settings())
    app.dependency_overrides[get_db] = lambda: (yield from _scoped(session()))
    with session() as db:
        _, key = create_key(db, "researcher", "round trip cpu")
    headers = {"Authorization": f"Bearer {key}"}
    client = TestClient(app)
    client.post("/api/projects", json={"slug": "bench", "name": "bench"}, headers=headers)
    objects = [{"name": f"o{i}"} for i in range(1000)]
    client.post("/api/projects/bench/objects", json=objects, headers=headers)
    plan = {
        "strategies": [{"kind": "random", "weight": 1}],
        "queries_per_session": args.rounds + 5,
        "gold_rate": 0,
        "repeat_rate": 0,
        "redundancy": args.redundancy,
    }
    assert client.put("/api/projects/bench/plan", json=plan, headers=headers).status_code == 200
    workers = []
    for i in range(args.sessions):
        body = client.post("/api/w/bench/sessions", json={"participant": f"w{i}"}).json()
        workers.append((body["session_id"], f"Bearer {body['session_token']}"))

    db = session()  # one per round trip on the server; one here, as in a group commit
    queries = {}
    for session_id, authorization in workers:
        queries[session_id] = issuance.next_for_session(db, session_id, authorization)[2].query

    def rounds(n: int) -> int:
        done = 0
        for _ in range(n):
            if args.group:
                done += group_round()
                continue
            for session_id, authorization in workers:
                query = queries[session_id]
                choice = query.o2 if query.kind == "triplet" else 0
                issued = responses.answer_and_next(
                    db, session_id, authorization, query.token, choice, 900.0
                )[2]
                queries[session_id] = issued.query
                done += 1
        return done

    def group_round() -> int:
        """Every session's answer in one group commit, as the server records the answers
        that arrive together on SQLite (``app.api.worker``)."""
        answers = []
        for session_id, authorization in workers:
            query = queries[session_id]
            if hasattr(query, "o2"):  # the first: a Query row
                token, choice = query.token, query.o2 if query.kind == "triplet" else 0
            else:  # a reply's next question, as shown
                token = query.token
                choice = query.objects[1].index if query.kind == "triplet" else 0
            answers.append(
                (
                    session_id,
                    authorization,
                    AnswerCreate(token=token, choice=choice, client_ms=900.0),
                )
            )
        for (session_id, _), result in zip(workers, _record_group(db, answers), strict=True):
            if isinstance(result, Exception):
                raise result
            queries[session_id] = result.next.query
        return len(answers)

    rounds(2)  # warm: caches, psycopg's prepared statements
    on_postgres = engine.dialect.name == "postgresql"
    _callgrind("--instr=on")
    before, started = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    database_before = postgres_cpu_seconds() if on_postgres else 0.0
    n = rounds(args.rounds - 2)
    database = (postgres_cpu_seconds() - database_before) / n * 1e3 if on_postgres else 0.0
    after, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - started
    _callgrind("--instr=off")
    user = (after.ru_utime - before.ru_utime) / n * 1e3
    system = (after.ru_stime - before.ru_stime) / n * 1e3
    # PostgreSQL's own: every postgres process on this machine (run it with nothing else
    # using that server), as bench/worker_throughput.py counts it.
    own = f", PostgreSQL's CPU {database:.3f} ms each" if on_postgres else ""
    print(
        f"{engine.dialect.name}, redundancy {args.redundancy}"
        f"{', foreign keys of answers and queries dropped' if args.drop_foreign_keys else ''}: "
        f"{n} round trips, "
        f"CPU {user + system:.3f} ms each (user {user:.3f}, system {system:.3f}), "
        f"wall {wall / n * 1e3:.3f} ms{own}"
    )


def _scoped(db):  # type: ignore[no-untyped-def]
    with db:
        yield db


if __name__ == "__main__":
    main()

"""How long the dashboard's figures take on a large project, in-process.

Fills a fresh database (SQLite file by default, or ``--database-url``) with one project of
``--objects`` objects, ``--participants`` participants and ``--answers`` answers spread over
the last ``--hours`` hours (bulk inserts, like a busy crowd would leave them), then times
each figure's query and a whole render of the project page and the home page, signed in
(``TestClient``; the page is rendered as the live refresh fetches it every 5 seconds).

    .venv/bin/python bench/dashboard.py --answers 100000 --participants 1000 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import numpy as np


def timed(label: str, run: Callable[[], object], repeats: int) -> None:
    run()  # warm caches (plans, templates, the statement cache)
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        seconds.append(time.perf_counter() - started)
    mean = statistics.mean(seconds) * 1000
    spread = statistics.stdev(seconds) * 1000 if len(seconds) > 1 else 0.0
    print(f"  {label:<34} {mean:8.1f} ± {spread:5.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default="")
    parser.add_argument("--objects", type=int, default=500)
    parser.add_argument("--participants", type=int, default=1000)
    parser.add_argument("--answers", type=int, default=100_000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    os.environ["TRIPLETLAB_DATA_DIR"] = str(folder)
    os.environ["TRIPLETLAB_RUN_JOBS"] = "false"
    os.environ["TRIPLETLAB_DEMO"] = "false"
    url = args.database_url or f"sqlite:///{folder / 'bench.db'}"
    os.environ["TRIPLETLAB_DATABASE_URL"] = url

    from fastapi.testclient import TestClient
    from sqlalchemy import insert, text
    from sqlalchemy.orm import Session

    from app.db.migrate import upgrade
    from app.db.models import Answer, Object, Participant, Project, utcnow
    from app.db.session import get_engine
    from app.main import create_app
    from app.services import dashboard as figures
    from app.services.auth import create_key

    engine = get_engine(url)
    if engine.dialect.name == "postgresql":
        with engine.begin() as connection:
            connection.execute(text("DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public"))
    upgrade(engine)
    rng = np.random.default_rng(0)
    n, m, p = args.objects, args.answers, args.participants
    plan = {"strategies": [{"kind": "random", "weight": 1, "budget": m}]}
    started = time.perf_counter()
    with Session(engine) as db:
        _, secret = create_key(db, "admin", "bench")
        project = Project(slug="big", name="Big", n_objects=n, plan=plan)
        db.add(project)
        db.flush()
        db.execute(
            insert(Object),
            [{"project_id": project.id, "index": i, "name": f"object {i}"} for i in range(n)],
        )
        db.execute(
            insert(Participant),
            [
                {"project_id": project.id, "platform": "link", "external_id": f"w{i}",
                 "platform_params": {}, "flagged": False, "flag_reason": "", "flag_manual": False}
                for i in range(p)
            ],
        )  # fmt: skip
        first = db.scalar(text("SELECT min(id) FROM participants"))
        now = utcnow()
        ages = np.sort(rng.uniform(0, args.hours * 3600, size=m))[::-1]
        triplets = rng.integers(0, n, size=(m, 3))
        for start in range(0, m, 20_000):
            rows = [
                {
                    "project_id": project.id, "kind": "triplet",
                    "a": int(t[0]), "b": int(t[1]), "c": int(t[2]),
                    "position": int(rng.choice((-1, 1))), "choice": int(t[1]),
                    "source": "simulated", "strategy": "random",
                    "gold_correct": None, "consistent": None,
                    "participant_id": int(first + rng.integers(0, p)),
                    "server_ms": float(rng.lognormal(2.5, 0.5)),
                    "client_ms": float(rng.lognormal(7.3, 0.4)),
                    "created_at": now - timedelta(seconds=float(age)),
                }
                for t, age in zip(
                    triplets[start : start + 20_000], ages[start : start + 20_000], strict=True
                )
            ]  # fmt: skip
            db.execute(insert(Answer), rows)
        db.commit()
    print(
        f"{engine.dialect.name}: {m:,} answers, {p:,} participants, {n:,} objects over "
        f"{args.hours:g} h (filled in {time.perf_counter() - started:.1f} s); "
        f"mean ± sd of {args.repeats} runs"
    )
    with Session(engine) as db:
        project = db.query(Project).filter_by(slug="big").one()
        timed(
            "home row (3 grouped statements)",
            lambda: figures.project_rows(db, [project]),
            args.repeats,
        )
        timed(
            "answers per minute (last day)",
            lambda: figures.answers_timeline(db, project),
            args.repeats,
        )
        timed(
            "client response-time histogram",
            lambda: figures.histogram(db, project, Answer.client_ms, figures.CLIENT_EDGES_MS),
            args.repeats,
        )
        timed("participants' quality", lambda: figures.participants(db, project), args.repeats)
        timed("strategy progress", lambda: figures.strategy_progress(db, project), args.repeats)
        timed(
            "last hour per project", lambda: figures.recent_minutes(db, [project.id]), args.repeats
        )
    client = TestClient(create_app())
    form = client.get("/dashboard")
    token = re.search(r'name="csrf" value="([^"]+)"', form.text).group(1)
    client.post("/dashboard/signin", data={"api_key": secret, "csrf": token})
    assert client.get("/dashboard/projects/big").status_code == 200
    timed("GET /dashboard (home page)", lambda: client.get("/dashboard"), args.repeats)
    timed(
        "GET /dashboard/projects/big", lambda: client.get("/dashboard/projects/big"), args.repeats
    )
    engine.dispose()


if __name__ == "__main__":
    main()

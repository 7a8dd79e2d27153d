"""The first CSV export after a large import, against the same export once analysed
(issue 31, item 4). PostgreSQL only.

On a fresh database, a project of 1,000 objects receives 200,000 imported triplets (the
service's import: a chunk of 2,000 rows per transaction, then the rows shown at once), and
its CSV export is run to the end (``app.services.answers.stream_csv``, the statement and
rows the API streams) right after the import, then again after a plain ``ANALYZE``. A
second project does the same on the now larger tables. The bar: the first export within
2x of the analysed one.

``--without-analyze`` leaves out the ANALYZE the import now runs when it ends
(``app.db.statistics.analyze_after_bulk``): what ``main`` did, where the first export was
planned on the statistics of the tables before the import, until autovacuum came by.

    .venv/bin/python bench/export_after_import.py --database-url URL [--without-analyze]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from sqlalchemy import text
from sqlalchemy.orm import Session

sys.path.insert(0, os.path.dirname(__file__))
from _server import reset_postgres

from app.db.migrate import upgrade
from app.db.models import Project
from app.db.session import make_engine
from app.schemas.objects import ObjectCreate
from app.schemas.projects import ProjectCreate
from app.services import answers, imports, objects
from app.services.objects import add_objects
from app.services.projects import create_project

N_OBJECTS = 1000
N_TRIPLETS = 200_000


def export_seconds(db: Session, project: Project) -> tuple[float, int]:
    """The CSV export run to its end: seconds, bytes."""
    started = time.perf_counter()
    size = sum(len(chunk) for chunk in answers.stream_csv(db, project))
    db.rollback()
    return time.perf_counter() - started, size


def plan_shape(db: Session, project: Project) -> str:
    """The export's plan as the planner sees it now: its join nodes and row estimates."""
    statement = answers._export_statement(project)
    compiled = statement.compile(db.get_bind(), compile_kwargs={"literal_binds": True})
    (plan,) = db.execute(text(f"EXPLAIN (FORMAT JSON) {compiled}")).scalar_one()
    db.rollback()
    joins: list[str] = []

    def walk(node: dict) -> None:
        if "Join" in node["Node Type"] or node["Node Type"] == "Nested Loop":
            joins.append(f"{node['Node Type']} (est. {int(node['Plan Rows']):,} rows)")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return "; ".join(joins[:4])


def counted(db: Session) -> str:
    rows = db.execute(
        text(
            "SELECT relname, reltuples FROM pg_class WHERE relname IN ('answers', 'objects') "
            "AND relnamespace = CAST(current_schema() AS regnamespace) ORDER BY relname"
        )
    ).all()
    db.rollback()
    return ", ".join(f"{name} {max(n, 0):,.0f}" for name, n in rows)


def one_project(db: Session, slug: str, rng: np.random.Generator) -> dict:
    project = create_project(db, ProjectCreate(slug=slug, name=slug), owner=None)
    add_objects(db, project, [ObjectCreate(name=f"object {i}") for i in range(N_OBJECTS)])
    triplets = np.array([rng.choice(N_OBJECTS, 3, replace=False) for _ in range(N_TRIPLETS)])
    started = time.perf_counter()
    imports.run(answers.import_answers(db, project, triplets, []))
    imported = time.perf_counter() - started
    result = {"slug": slug, "import_s": round(imported, 1)}
    result["counted_after_import"] = counted(db)
    result["plan_after_import"] = plan_shape(db, project)
    result["export_after_import_s"], size = export_seconds(db, project)
    db.execute(text("ANALYZE"))
    db.commit()
    result["plan_after_analyze"] = plan_shape(db, project)
    result["export_after_analyze_s"], size_again = export_seconds(db, project)
    assert size == size_again
    result["csv_mb"] = round(size / 1e6, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", required=True, help="a PostgreSQL database to reset")
    parser.add_argument(
        "--without-analyze",
        action="store_true",
        help="leave out the import's own ANALYZE (as main did)",
    )
    args = parser.parse_args()
    if args.without_analyze:
        answers.analyze_after_bulk = objects.analyze_after_bulk = lambda *_, **__: []
    reset_postgres(args.database_url)
    engine = make_engine(args.database_url)
    upgrade(engine)
    rng = np.random.default_rng(0)
    mode = "without" if args.without_analyze else "with"
    print(
        f"{N_TRIPLETS:,} triplets imported into a project of {N_OBJECTS:,} objects, "
        f"{mode} the import's ANALYZE; CSV export to its end right after, then after ANALYZE"
    )
    try:
        with Session(engine, expire_on_commit=False) as db:
            for slug in ("first", "second"):
                result = one_project(db, slug, rng)
                ratio = result["export_after_import_s"] / result["export_after_analyze_s"]
                print(
                    f"  {slug:<7} import {result['import_s']:5.1f} s;  export right after "
                    f"{result['export_after_import_s']:6.1f} s, after ANALYZE "
                    f"{result['export_after_analyze_s']:5.1f} s  ({ratio:.1f}x; "
                    f"{result['csv_mb']} MB of CSV)"
                )
                counts = result["counted_after_import"]
                print(f"          planner's counts after the import: {counts}")
                print(f"          plan right after: {result['plan_after_import']}")
                print(f"          plan after ANALYZE: {result['plan_after_analyze']}")
                print(f"          {json.dumps(result)}")
    finally:
        engine.dispose()


if __name__ == "__main__":
    main()

"""A process reads a project's plan once and keeps it; another process may change it. An
answer checks in its own statement that the plan it was decided with is the project's, and
when it is not the plan is read anew — also when this process read the project before it
had any plan (such answers were refused as "lease just ended", a 410, before)."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.db.models import Project
from app.services import round_trip
from tests.factories import (
    first_choice,
    make_objects,
    make_project,
    next_query,
    open_session,
    set_plan,
)


def test_an_answer_is_stored_when_this_process_saw_the_project_without_a_plan(  # type: ignore[no-untyped-def]
    client, auth_headers, engine
) -> None:
    make_project(client, auth_headers, "elsewhere")
    make_objects(client, auth_headers, "elsewhere", 10)
    plan = set_plan(client, auth_headers, "elsewhere")
    with Session(engine) as db:
        project_id = db.scalar(select(Project.id).where(Project.slug == "elsewhere"))
        stored = db.scalar(select(Project.plan).where(Project.id == project_id))
        # This process reads the project while it has no plan; another process then sets it.
        db.execute(update(Project).where(Project.id == project_id).values(plan=None))
        db.commit()
        round_trip.forget()
        assert round_trip.context(db, project_id).plan is None
        db.execute(update(Project).where(Project.id == project_id).values(plan=stored))
        db.commit()
    assert plan
    session_id, headers = open_session(client, "elsewhere")
    query = next_query(client, session_id, headers)["query"]
    sent = client.post(
        f"/api/w/sessions/{session_id}/answers",
        json={"token": query["token"], "choice": first_choice(query)},
        headers=headers,
    )
    assert sent.status_code == 201, sent.text
    assert sent.json()["answered"] == 1

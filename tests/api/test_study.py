"""Running a study: its status (draft, running, paused, stopped), previews that are counted
nowhere, stop rules, the study bundle, and the dashboard's session calling the API."""

from __future__ import annotations

import csv
import io
import json
import re
import time
import uuid
import zipfile

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.models import Participant, Project, Question
from app.errors import Forbidden
from app.services import preview, study_control
from app.training.data import load_training_data
from tests.api.test_dashboard import sign_in
from tests.factories import (
    answer,
    answer_all,
    first_choice,
    make_objects,
    make_project,
    next_query,
    open_session,
    set_plan,
)


@pytest.fixture
def study(client, auth_headers):
    make_project(client, auth_headers, "study", instructions="Compare.", consent="I agree.")
    make_objects(client, auth_headers, "study", 12)
    set_plan(client, auth_headers, "study", gold_rate=0)
    return "study"


def _status(client, headers, slug="study") -> dict:
    response = client.get(f"/api/projects/{slug}/study", headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def _preview_session(client, headers, slug="study") -> tuple[str, dict[str, str]]:
    link = client.post(f"/api/projects/{slug}/preview", headers=headers)
    assert link.status_code == 200, link.text
    token = link.json()["token"]
    assert link.json()["url"].endswith(f"/w/{slug}?preview={token}")
    return open_session(client, slug, anonymous_id=uuid.uuid4().hex, preview=token)


def test_a_plan_keeps_its_status_unless_a_put_sets_it(client, auth_headers, study):
    assert _status(client, auth_headers)["status"] == "running"  # a first plan runs (as before)
    set_plan(client, auth_headers, study, status="draft")
    assert set_plan(client, auth_headers, study, queries_per_session=7)["status"] == "draft"
    body = _status(client, auth_headers)
    assert body["status"] == "draft" and body["accepting"] is False
    public = client.get(f"/api/w/{study}").json()
    assert public["status"] == "draft" and public["accepting"] is False


def test_a_draft_gives_workers_nothing_but_serves_a_preview(client, auth_headers, study):
    set_plan(client, auth_headers, study, status="draft")
    session, headers = open_session(client, study)
    body = next_query(client, session, headers)
    # Not the end: the session waits for the launch (the page asks again by itself).
    assert body["wait"] and body["paused"] and not body["done"]
    assert body["completion_code"] is None and "not started" in body["message"]
    session, headers = _preview_session(client, auth_headers)
    assert next_query(client, session, headers)["query"]["kind"] == "triplet"


def test_a_preview_token_opens_only_its_own_project_while_it_lives(client, auth_headers, db, study):
    project = db.scalar(select(Project).where(Project.slug == study))
    token, _ = preview.make_token(project)
    preview.check_token(project, token)
    with pytest.raises(Forbidden, match="expired"):
        preview.check_token(project, token, now=time.time() + preview.TOKEN_SECONDS + 5)
    other, _ = preview.make_token(Project(id=project.id + 1000, slug="other"))
    with pytest.raises(Forbidden, match="another project"):
        preview.check_token(project, other)
    forged = token[:-4] + ("0000" if not token.endswith("0000") else "1111")
    response = client.post(f"/api/w/{study}/sessions", json={"preview": forged})
    assert response.status_code == 403 and "preview" in response.json()["detail"]


def test_preview_answers_are_counted_nowhere_and_give_their_places_back(
    client, auth_headers, db, study
):
    session, headers = _preview_session(client, auth_headers)
    answered = answer_all(client, session, headers)
    assert len(answered) == 5  # queries_per_session
    crowd, crowd_headers = open_session(client, study)
    body = next_query(client, crowd, crowd_headers)
    assert answer(client, crowd, crowd_headers, body["query"]["token"], first_choice(body["query"]))
    assert client.get(f"/api/projects/{study}/answers", headers=auth_headers).json().__len__() == 1
    stats = client.get(f"/api/projects/{study}", headers=auth_headers).json()
    assert stats["n_answers"] == 1 and stats["n_participants"] == 1
    people = client.get(f"/api/projects/{study}/participants", headers=auth_headers).json()
    assert [p["platform"] for p in people["data"]] == ["link"]
    project = db.scalar(select(Project).where(Project.slug == study))
    assert load_training_data(db, project).n_answers == 1
    assert _status(client, auth_headers)["stop_check"] is None
    # Their questions' places are given back: asked of workers instead.
    taken = db.scalar(select(Question.answered).where(Question.project_id == project.id).limit(1))
    assert taken is not None
    assert preview.release_places(db, project.id) == 5
    assert preview.release_places(db, project.id) == 0  # never twice
    answered_places = db.scalars(
        select(Question.answered).where(Question.project_id == project.id)
    ).all()
    assert sum(answered_places) == 1  # the worker's answer only


def test_pause_keeps_sessions_and_tells_workers_resume_goes_on(client, auth_headers, study):
    session, headers = open_session(client, study)
    shown = next_query(client, session, headers)["query"]
    paused = client.post(f"/api/projects/{study}/pause", headers=auth_headers)
    assert paused.status_code == 200 and paused.json()["status"] == "paused"
    assert client.post(f"/api/projects/{study}/pause", headers=auth_headers).status_code == 409
    # The question already shown may be answered; no new one is given.
    reply = answer(client, session, headers, shown["token"], first_choice(shown)).json()
    assert reply["next"]["wait"] and reply["next"]["paused"] and not reply["next"]["done"]
    assert "paused" in reply["next"]["message"] and reply["next"]["completion_code"] is None
    assert client.get(f"/api/w/{study}").json()["accepting"] is False
    resumed = client.post(f"/api/projects/{study}/resume", headers=auth_headers)
    assert resumed.json()["status"] == "running"
    assert next_query(client, session, headers)["query"] is not None


def test_a_stop_rule_on_answers_stops_the_study_and_ends_sessions(client, auth_headers, db, study):
    set_plan(client, auth_headers, study, stop={"answers": 4}, queries_per_session=10)
    session, headers = open_session(client, study)
    for _ in range(3):
        query = next_query(client, session, headers)["query"]
        answer(client, session, headers, query["token"], first_choice(query))
    check = _status(client, auth_headers)["stop_check"]
    assert check["answers_left"] == 1 and check["further_answers"] == 1 and not check["reached"]
    assert check["summary"].startswith("Stops in about 1 more answer,")
    assert study_control.check_stop_rules(db) == []
    query = next_query(client, session, headers)["query"]
    answer(client, session, headers, query["token"], first_choice(query))
    assert study_control.check_stop_rules(db) == [study]
    body = _status(client, auth_headers)
    assert body["status"] == "stopped" and body["stop_check"]["reached"]
    # The question given before it stopped may still be answered; then the session ends.
    query = next_query(client, session, headers)["query"]
    done = answer(client, session, headers, query["token"], first_choice(query)).json()["next"]
    assert done["done"] and not done["paused"] and done["completion_code"]
    assert "has ended" in done["message"]
    refused = client.post(f"/api/projects/{study}/resume", headers=auth_headers)
    assert refused.status_code == 409 and "stop rule is met" in refused.json()["detail"]
    set_plan(client, auth_headers, study, stop={"answers": 10}, queries_per_session=10)
    assert client.post(f"/api/projects/{study}/resume", headers=auth_headers).status_code == 200


@pytest.mark.parametrize(
    ("stop", "loc"),
    [
        ({"kind": "psychic", "target": 0.9}, ["body", "stop", "kind"]),
        ({"kind": "tripletboost", "target": 2}, ["body", "stop", "target"]),
        ({"kind": "tripletboost"}, ["body", "stop"]),
    ],
)
def test_a_stop_rule_the_adviser_cannot_follow_is_refused_beside_its_field(
    client, auth_headers, study, stop, loc
):
    plan = {"strategies": [{"kind": "random"}], "stop": stop}
    response = client.put(f"/api/projects/{study}/plan", json=plan, headers=auth_headers)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == loc
    assert "stop" not in client.get(f"/api/projects/{study}/plan", headers=auth_headers).json() or (
        client.get(f"/api/projects/{study}/plan", headers=auth_headers).json()["stop"] is None
    )


def test_a_strategy_the_project_cannot_run_is_refused_beside_its_param(client, auth_headers, study):
    plan = {
        "strategies": [
            {"kind": "random"},
            {"kind": "landmark_k1", "params": {"n_landmarks": 50}},
        ]
    }
    response = client.put(f"/api/projects/{study}/plan", json=plan, headers=auth_headers)
    assert response.status_code == 422
    body = response.json()
    assert "exceeds the 12 objects" in body["detail"]
    assert body["errors"][0]["loc"] == ["body", "strategies", 1, "params", "n_landmarks"]
    plan["strategies"][1] = {"kind": "tarot"}
    body = client.put(f"/api/projects/{study}/plan", json=plan, headers=auth_headers).json()
    assert body["errors"][0]["loc"] == ["body", "strategies", 1, "kind"]


def test_the_strategies_and_their_params_are_listed(client, auth_headers):
    body = client.get("/api/strategies", headers=auth_headers).json()
    kinds = {s["kind"]: s for s in body["data"]}
    assert {"random", "landmark_k1", "pairs", "gold", "adaptive", "comprf"} <= set(kinds)
    dims = next(p for p in kinds["adaptive"]["params"] if p["name"] == "dims")
    assert (dims["kind"], dims["default"], dims["low"], dims["high"]) == ("int", 2, 1, 50)
    assert kinds["gold"]["redundant"] is False


def _bundle(client, headers, slug="study") -> zipfile.ZipFile:
    response = client.get(f"/api/projects/{slug}/bundle.zip", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/zip"
    return zipfile.ZipFile(io.BytesIO(response.content))


def test_the_bundle_holds_the_study_without_previews(client, auth_headers, db, study):
    set_plan(client, auth_headers, study, gold_rate=0, stop={"answers": 100}, seed=7)
    session, headers = _preview_session(client, auth_headers)
    answer_all(client, session, headers)
    for name in ("ann", "bob"):
        session, headers = open_session(client, study, participant=name)
        answer_all(client, session, headers)
    project = db.scalar(select(Project).where(Project.slug == study))
    bob = db.scalar(select(Participant).where(Participant.external_id == "bob"))
    bob.flagged, bob.flag_reason = True, "gold accuracy 40% < 70%"
    db.commit()

    archive = _bundle(client, auth_headers)
    names = set(archive.namelist())
    data_name = "study/data/study-study_data.csv"
    for name in ("dataset_description.json", "plan.json", "seeds.json", "software.json",
                 "exclusions.csv", "models.json", "study.json", "README.md",
                 "materials/objects.csv"):  # fmt: skip
        assert f"study/{name}" in names
    assert data_name in names
    assert re.fullmatch(
        r"([a-z]+-[a-zA-Z0-9]+)(_[a-z]+-[a-zA-Z0-9]+)*_data\.csv", data_name.rsplit("/", 1)[1]
    )  # Psych-DS's rule for a data file's name
    description = json.loads(archive.read("study/dataset_description.json"))
    assert description["@context"] == "https://schema.org/"
    assert description["@type"] == "Dataset"
    assert description["name"] == "Study" and description["description"]
    rows = list(csv.DictReader(io.StringIO(archive.read(data_name).decode())))
    measured = [v["name"] for v in description["variableMeasured"]]
    assert list(rows[0]) == measured  # every column described, in order
    assert len(rows) == 10  # ann's 5 and bob's 5: the preview's 5 are not there
    assert {r["source"] for r in rows} == {"crowd"}
    assert all(r["participant"] != "bob" for r in rows)  # numbers, not platform ids
    flagged = [r for r in rows if r["participant"] == str(bob.id)]
    assert len(flagged) == 5 and all(r["excluded"] == "True" for r in flagged)
    assert "gold accuracy 40%" in flagged[0]["exclusion_reason"]
    exclusions = list(csv.DictReader(io.StringIO(archive.read("study/exclusions.csv").decode())))
    assert exclusions == [
        {"participant": str(bob.id), "platform": "link", "answers": "5",
         "flagged_by": "automatic quality check", "reason": "gold accuracy 40% < 70%"}
    ]  # fmt: skip
    plan = json.loads(archive.read("study/plan.json"))
    assert plan["stop"]["answers"] == 100 and plan["seed"] == 7
    seeds = json.loads(archive.read("study/seeds.json"))
    assert seeds["plan_seed"] == 7 and len(seeds["strategies"]) == 1
    assert json.loads(archive.read("study/software.json"))["tripletlab"]
    objects = archive.read("study/materials/objects.csv").decode().splitlines()[1:]
    assert len(objects) == project.n_objects == 12


def test_the_dashboard_session_calls_the_api_with_its_csrf_token(client, db):
    from app.services.auth import create_key

    _, secret = create_key(db, "researcher", "in the browser")
    csrf = sign_in(client, secret)
    assert client.get("/api/projects").status_code == 200  # the session's cookie
    body = {"slug": "from-page", "name": "From the page"}
    refused = client.post("/api/projects", json=body)
    assert refused.status_code == 403 and "X-CSRF-Token" in refused.json()["detail"]
    wrong = client.post("/api/projects", json=body, headers={"X-CSRF-Token": "0" * 40})
    assert wrong.status_code == 403
    made = client.post("/api/projects", json=body, headers={"X-CSRF-Token": csrf})
    assert made.status_code == 201
    client.cookies.clear()
    assert client.get("/api/projects").status_code == 401


def test_pausing_stops_new_questions_of_sessions_under_way(app, engine):
    """A session under way (its next answer taken with the next question in one statement)
    gets no new question once the study is paused: the plan the statement decided with has
    changed."""
    from fastapi.testclient import TestClient

    from tests.factories import committed_requests

    slug = f"paused-{uuid.uuid4().hex[:8]}"
    with committed_requests(app, engine) as headers, TestClient(app) as client:
        try:
            make_project(client, headers, slug)
            make_objects(client, headers, slug, 12)
            set_plan(client, headers, slug, queries_per_session=10, gold_rate=0)
            session, worker = open_session(client, slug)
            query = next_query(client, session, worker)["query"]
            reply = answer(client, session, worker, query["token"], first_choice(query)).json()
            query = reply["next"]["query"]  # remembered now: its next answer is known
            assert client.post(f"/api/projects/{slug}/pause", headers=headers).status_code == 200
            # Asked again after the pause: the question shown is still its own to answer,
            # and the process must not remember the session under the paused plan.
            assert next_query(client, session, worker)["query"]["token"] == query["token"]
            reply = answer(client, session, worker, query["token"], first_choice(query)).json()
            assert reply["answered"] == 2
            assert reply["next"]["wait"] and reply["next"]["paused"]
            with Session(engine) as db:
                project = db.scalar(select(Project).where(Project.slug == slug))
                leased = select(Question.live).where(
                    Question.project_id == project.id, Question.live > 0
                )
                issued = db.scalar(leased)
            assert issued is None  # no question is leased to anyone
        finally:
            client.delete(f"/api/projects/{slug}?force=true", headers=headers)


def _models(db, project, points: list[tuple[int, float]], first_version: int = 1) -> None:
    """Kernel models as if trained at these (answers, held-out accuracy)."""
    from app.db.models import Model

    for version, (n_answers, value) in enumerate(points, start=first_version):
        db.add(
            Model(
                project_id=project.id, kind="kernel", version=version, params={},
                n_answers=n_answers, metrics={"heldout_triplet_accuracy": value},
                training_seconds=1.0, artifact=b"",
            )
        )  # fmt: skip
    db.commit()


def test_a_stop_rule_on_a_model_follows_the_budget_adviser(client, auth_headers, db, study):
    set_plan(client, auth_headers, study, stop={"kind": "kernel", "target": 0.9})
    project = db.scalar(select(Project).where(Project.slug == study))
    check = _status(client, auth_headers)["stop_check"]
    assert check["further_answers"] is None and "No estimate yet" in check["summary"]
    # A rising curve below the target: the adviser's estimate of when the rule stops it.
    _models(db, project, [(100, 0.62), (200, 0.71), (400, 0.78), (800, 0.83)])
    check = _status(client, auth_headers)["stop_check"]
    assert check["advice"]["status"] == "reachable" and not check["reached"]
    assert check["further_answers"] == check["advice"]["further_answers"] > 0
    assert "90% interval" in check["summary"]
    assert study_control.check_stop_rules(db) == []
    # A model at the target: the rule is met and the runner stops the study.
    _models(db, project, [(1600, 0.91)], first_version=5)
    check = _status(client, auth_headers)["stop_check"]
    assert check["reached"] and "kernel reached" in check["reason"]
    assert study_control.check_stop_rules(db) == [study]
    assert _status(client, auth_headers)["status"] == "stopped"
